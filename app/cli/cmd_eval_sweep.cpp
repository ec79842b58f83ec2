// `trimkv eval-sweep`: `trimkv eval` for every policy × KV budget, one row per cell in a CSV file
// and a Markdown table (the full cache as reference row); beside it sweep-types.csv, one row per
// cell and question type (task and length, e.g. needle@1k), and a per-type table in the
// Markdown. Cells are appended as they finish, so Ctrl-C keeps the finished ones and a rerun skips
// the cells already in the CSV.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "args.h"
#include "commands.h"
#include "eval_runner.h"
#include "interrupts.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/file_fingerprint.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/world_eval.h"
#ifdef TRIMKV_QT_CHARTS
#include "budget_chart.h"
#endif

namespace trimkv::cli {
namespace {

const char* const kCsvHeader =
    "policy,budget,budget_entries,accuracy,n,correct,failures,kv_peak_entries,kv_mean_entries,kv_peak_bytes,"
    "kv_mean_bytes,perplexity,seconds";

const char* const kTypesCsvHeader = "policy,budget,type,n,correct,accuracy,perplexity";

struct Budget {
  std::string spec;  // as given: "0.25" (a fraction of the full cache's peak) or "512" (entries)
  double fraction = 0;   // > 0: a fraction
  int64_t entries = 0;   // > 0: absolute
};

Budget parse_budget(const std::string& s) {
  Budget b;
  b.spec = s;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(v > 0))
    throw UsageError("option '--budgets': '" + s + "' is neither a fraction in (0, 1] nor a positive entry count");
  if (s.find_first_of(".eE") != std::string::npos) {
    if (v > 1) throw UsageError("option '--budgets': fraction '" + s + "' is above 1");
    b.fraction = v;
  } else {
    b.entries = static_cast<int64_t>(v);
  }
  return b;
}

struct Row {
  std::string policy, budget;
  std::vector<std::string> cells;  // every column, as written
};

// The lines of a CSV file after its header, split at commas (none when the file is absent).
std::vector<std::vector<std::string>> csv_lines(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in.good() || !std::getline(in, line)) return out;
  while (std::getline(in, line)) out.push_back(split_list(line, ',', true));
  return out;
}

std::vector<Row> read_csv(const std::string& path) {
  std::vector<Row> rows;
  for (std::vector<std::string>& cells : csv_lines(path)) {
    Row r;
    r.cells = std::move(cells);
    if (r.cells.size() == 12) r.cells.insert(r.cells.begin() + 11, "");  // written before the perplexity column
    if (r.cells.size() != 13 || r.cells[12].empty()) continue;  // a torn last line (killed mid-write): recomputed
    r.policy = r.cells[0];
    r.budget = r.cells[1];
    rows.push_back(std::move(r));
  }
  return rows;
}

// sweep-types.csv rows of the cells in `rows` only (a line written for a cell whose main row was
// torn off is dropped: the cell is recomputed).
std::vector<std::vector<std::string>> read_types_csv(const std::string& path, const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> out;
  for (std::vector<std::string>& c : csv_lines(path)) {
    if (c.size() != 7) continue;
    if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.policy == c[0] && r.budget == c[1]; }))
      out.push_back(std::move(c));
  }
  return out;
}

std::string csv_text(const char* header, const std::vector<std::vector<std::string>>& lines) {
  std::ostringstream csv;
  csv << header << '\n';
  for (const auto& cells : lines) {
    for (size_t i = 0; i < cells.size(); ++i) csv << (i ? "," : "") << cells[i];
    csv << '\n';
  }
  return csv.str();
}

// The per-type lines of one finished cell: questions (n, correct, accuracy) and scoring turns
// (perplexity), one line per type.
std::vector<std::vector<std::string>> type_lines(const std::string& policy, const std::string& budget,
                                                 const vision::world::EvalSummary& s) {
  std::vector<std::vector<std::string>> out;
  auto number = [](double v) {
    std::ostringstream o;
    o << std::setprecision(6) << v;
    return o.str();
  };
  for (const auto& [type, t] : s.by_type)
    out.push_back({policy, budget, type, std::to_string(t.n), std::to_string(t.correct), number(t.accuracy()), ""});
  for (const auto& [type, nll] : s.scored_by_type)
    if (nll.tokens > 0) out.push_back({policy, budget, type, "0", "0", "", number(nll.perplexity())});
  return out;
}

// What the cells of one folder must share: a rerun that resumes them with other data or scoring
// would mix two experiments in one table. The model and the data are compared by content (the
// model's checkpoint_fingerprint: its weight and gate files; the data file's sample hash), so a
// model retrained in place is not resumed with the old one's cells, and a folder moved, committed
// or read from another checkout resumes where it stopped. Their paths are kept too, relative to
// the folder, for whoever reads the file; they are not compared. A --gates file is not in it:
// each learned policy may be run with its own gates file (`--policies dbtrimkv --gates a`, then
// `--policies trimkv --gates b`), which is how a sweep with per-head and global gates is made.
std::vector<std::pair<std::string, std::string>> sweep_settings(const Args& args, const EvalRunOptions& run,
                                                                const std::string& model, int limit,
                                                                const std::string& out_dir) {
  auto from_folder = [&out_dir](const std::string& p) {
    std::error_code ec;
    const std::filesystem::path r = std::filesystem::relative(p, out_dir, ec);
    return ec || r.empty() ? p : r.generic_string();
  };
  return {{"model", from_folder(model)},
          {"model-files", checkpoint_fingerprint(model)},
          {"data", from_folder(run.data)},
          {"data-file", file_sample_hash(run.data)},
          {"limit", limit < 0 ? "all" : std::to_string(limit)},
          {"match", vision::world::answer_match_name(run.match)},
          {"history", run.gold_history ? "gold" : "model"},
          {"max-new-tokens", std::to_string(run.params.max_new_tokens)},
          {"weights", args.get("weights", "default")},
          {"kv-dtype", args.get("kv-dtype", "default")},
          {"image-size", args.get("image-size", "default")}};
}

std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string out;
  for (const auto& [k, v] : settings) out += k + "=" + v + "\n";
  return out;
}

// sweep-settings.txt beside the CSV: written with the first cells; a rerun that would add cells
// to a folder made with other settings is refused, naming each difference, and so is one into a
// folder whose cells have no settings file (what they were computed with is unknown). Settings a
// file from an older build lacks are not compared.
void check_sweep_settings(const std::string& path, const std::string& out_dir, size_t n_rows,
                          const std::vector<std::pair<std::string, std::string>>& settings) {
  if (n_rows == 0) return;  // nothing computed yet: the settings are this run's
  std::ifstream in(path, std::ios::binary);
  if (!in.good())
    throw UsageError("option '--out': " + out_dir + " holds " + std::to_string(n_rows) +
                     " cells but no sweep-settings.txt, so what they were computed with is unknown; use another "
                     "--out folder, or delete " + out_dir + "/sweep.csv to compute them again");
  std::map<std::string, std::string> before;
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) before[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::string differences;
  for (const auto& [k, v] : settings) {
    const auto it = before.find(k);
    if (k != "model" && k != "data" && it != before.end() && it->second != v)
      differences += (differences.empty() ? "" : "; ") + k + " was " + it->second + ", now " + v;
  }
  if (!differences.empty())
    throw UsageError("option '--out': " + out_dir + " holds cells computed with other settings (" + differences +
                     "); use another --out folder or the same options");
}

void write_markdown(const std::string& path, const std::vector<Row>& rows,
                    const std::vector<std::vector<std::string>>& types) {
  std::ostringstream out;
  const bool ppl = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.cells[11].empty(); });
  out << "| policy | budget | KV entries budget | accuracy | n | failures | KV peak entries | KV mean entries | "
      << (ppl ? "perplexity | " : "") << "seconds |\n|---|---|---:|---:|---:|---:|---:|---:|" << (ppl ? "---:|" : "")
      << "---:|\n";
  for (const Row& r : rows) {
    const auto& c = r.cells;
    out << "| " << c[0] << " | " << c[1] << " | " << c[2] << " | " << c[3] << " | " << c[4] << " | " << c[6]
        << " | " << c[7] << " | " << c[8] << " | ";
    if (ppl) out << c[11] << " | ";
    out << c[12] << " |\n";
  }
  // Per type: correct/n for question types, perplexity for scoring types.
  std::vector<std::string> names;
  for (const auto& t : types)
    if (std::find(names.begin(), names.end(), t[2]) == names.end()) names.push_back(t[2]);
  std::sort(names.begin(), names.end());
  if (!names.empty()) {
    out << "\n| policy | budget |";
    for (const std::string& n : names) out << ' ' << n << " |";
    out << "\n|---|---|";
    for (size_t i = 0; i < names.size(); ++i) out << "---:|";
    out << '\n';
    for (const Row& r : rows) {
      out << "| " << r.policy << " | " << r.budget << " |";
      for (const std::string& n : names) {
        const auto it = std::find_if(types.begin(), types.end(), [&](const auto& t) {
          return t[0] == r.policy && t[1] == r.budget && t[2] == n;
        });
        if (it == types.end()) out << " |";
        else if ((*it)[3] != "0") out << ' ' << (*it)[4] << '/' << (*it)[3] << " |";
        else out << " ppl " << (*it)[6] << " |";
      }
      out << '\n';
    }
  }
  write_file_atomic(path, out.str());
}

// sweep.png: one line per policy (budget entries, accuracy; or perplexity when the data holds
// only scoring turns), the full cache as reference; drawn by the Studio's charting code when the
// build has Qt, else by the OpenCV drawing of the same layout.
void write_plot(const std::string& path, const std::vector<Row>& rows) {
  const bool ppl = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.cells[4] == "0"; }) &&
                   std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.cells[11].empty(); });
  const size_t column = ppl ? 11 : 3;
  double full_value = std::nan(""), full_entries = 0;  // NaN: no full-cache row
  std::vector<vision::world::PlotSeries> series;
  for (const Row& r : rows) {
    if (r.cells[column].empty()) continue;
    if (r.policy == "full") {
      full_value = std::stod(r.cells[column]);
      full_entries = std::stod(r.cells[7]);
      continue;
    }
    vision::world::add_plot_point(series, r.policy, std::stod(r.cells[2]), std::stod(r.cells[column]));
  }
  vision::world::PlotStyle style;
  if (ppl) style = {"perplexity (lower is better)", false};
#ifdef TRIMKV_QT_CHARTS
  const QByteArray png = budget_chart::png(series, full_value, full_entries, style);
  write_file_atomic(path, std::string_view(png.constData(), static_cast<size_t>(png.size())));
#else
  vision::world::write_accuracy_plot(path, series, full_value, full_entries, style);
#endif
}

// One entry of --policies: a policy name, optionally with its options after colons
// ("dbtrimkv:sinks=4:window=8"); the whole entry names the cell's row. Validated as the policy
// options of `generate` are.
EvictionSettings sweep_policy(const std::string& entry) {
  const std::vector<std::string> parts = split_list(entry, ':', true);
  EvictionSettings s;
  s.policy = parts.front();
  s.options.assign(parts.begin() + 1, parts.end());
  s.budget_global = 1;
  try {
    validate_eviction_settings(s);
  } catch (const Error& e) {
    throw UsageError("option '--policies', entry '" + entry + "': " + e.what());
  }
  return s;
}

}  // namespace

int cmd_eval_sweep(int argc, char** argv, int first) {
  namespace w = vision::world;
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "vision-language checkpoint folder (default: the embedded demo model)"},
      {"data", "FILE.jsonl", "world conversations (trimkv make-world)"},
      {"policies", "A,B,...", "eviction policies (trimkv generate --help lists them), each optionally with its options after colons, e.g. dbtrimkv:sinks=4 (the entry names its rows)"},
      {"budgets", "B,...", "KV budgets: fractions of the full cache's peak entries (0.25) and/or entries (512)"},
      {"out", "DIR", "output folder: sweep.csv, sweep-types.csv (per task type), sweep.md, sweep.png, sweep-settings.txt (a rerun with other data, scoring or model files, or into cells without that file, is refused) (default: sweep)"},
      ranged_int("limit", "N", "evaluate the first N conversations only", 1, 2147483647),
      {"history", "gold|model", "answers kept in the conversation (default gold)"},
      {"match", "exact|contains", "scoring: the normalized reply equals the expected answer (default), or contains it as whole words (real models answer in sentences)"},
      ranged_int("max-new-tokens", "N", "answer length limit in tokens (default 8)", 0, 1 << 20),
      threads_option("CPU threads (default: the library's)"),
      gates_option(),
      {"quiet", "", "no progress on stderr"},
      {"help", "", "show this help"},
  };
  add_model_load_option_specs(specs);
  Args args("eval-sweep", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("eval-sweep",
                             "Run trimkv eval for every policy x budget (M_global) plus the full cache, appending "
                             "one CSV row per finished cell and rewriting the Markdown table. Ctrl-C keeps the "
                             "finished cells; a rerun skips the cells already in the CSV. sweep.png plots accuracy vs KV budget.",
                             specs);
    return 0;
  }
  const std::string model = args.model_dir();
  const std::string data = args.require("data");
  const std::vector<std::string> policies = split_list(args.require("policies"), ',');
  if (policies.empty()) throw UsageError("option '--policies' names no policy");
  std::vector<Budget> budgets;
  for (const std::string& s : split_list(args.require("budgets"), ',')) budgets.push_back(parse_budget(s));
  if (budgets.empty()) throw UsageError("option '--budgets' gives no budget");
  for (const std::string& p : policies) sweep_policy(p);
  const int limit = eval_limit(args);
  EvalRunOptions run = eval_run_options(args, data);
  std::atomic<bool> cancel{false};  // Ctrl-C, once the cells run
  run.cancel = &cancel;
  const std::string out_dir = args.get("out", "sweep");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  TRIMKV_CHECK(std::filesystem::is_directory(out_dir), Io, "--out ", out_dir, ": cannot create the folder");
  const std::string csv_path = (std::filesystem::path(out_dir) / "sweep.csv").string();
  const std::string md_path = (std::filesystem::path(out_dir) / "sweep.md").string();
  const std::string png_path = (std::filesystem::path(out_dir) / "sweep.png").string();
  const std::string types_path = (std::filesystem::path(out_dir) / "sweep-types.csv").string();
  const std::string settings_path = (std::filesystem::path(out_dir) / "sweep-settings.txt").string();

  std::vector<Row> rows = read_csv(csv_path);
  std::vector<std::vector<std::string>> types = read_types_csv(types_path, rows);
  const auto settings = sweep_settings(args, run, model, limit, out_dir);
  check_sweep_settings(settings_path, out_dir, rows.size(), settings);
  auto find_row = [&](const std::string& policy, const std::string& budget) -> const Row* {
    for (const Row& r : rows)
      if (r.policy == policy && r.budget == budget) return &r;
    return nullptr;
  };
  struct Cell {
    std::string policy;
    Budget budget;
  };
  std::vector<Cell> cells{{"full", Budget{"full", 0, 0}}};
  for (const std::string& p : policies)
    if (p != "full")
      for (const Budget& b : budgets) cells.push_back({p, b});
  size_t todo = 0;
  for (const Cell& c : cells) todo += find_row(c.policy, c.budget.spec) ? 0 : 1;
  if (run.progress)
    std::cerr << "eval-sweep: " << cells.size() << " cells, " << cells.size() - todo << " already in " << csv_path
              << ", " << todo << " to run\n";

  // Rewrite the CSV from the rows kept (drops a torn last line), then append as cells finish.
  {
    std::vector<std::vector<std::string>> lines;
    for (const Row& r : rows) lines.push_back(r.cells);
    write_file_atomic(csv_path, csv_text(kCsvHeader, lines));
  }
  write_file_atomic(types_path, csv_text(kTypesCsvHeader, types));
  write_file_atomic(settings_path, settings_text(settings));
  write_markdown(md_path, rows, types);
  if (!rows.empty()) write_plot(png_path, rows);

  std::unique_ptr<vision::ChatEngine> engine;
  std::vector<w::WorldRecord> conversations;
  std::vector<std::string> read_failures;
  if (todo > 0) {
    conversations = w::read_world_jsonl(data, limit, &read_failures);
    TRIMKV_CHECK(!conversations.empty(), Input, "--data ", data, ": no conversation to evaluate");
    EngineOptions options;
    options.threads = threads_arg(args);
    options.gates = args.get("gates");
    model_load_args(args, options);
    engine = vision::ChatEngine::load(model, options);
  }
  std::optional<InterruptAction> ctrl_c(std::in_place, cancel);
  bool cancelled = false;
  size_t done = 0;
  for (const Cell& c : cells) {
    if (find_row(c.policy, c.budget.spec)) continue;
    int64_t entries = 0;
    if (c.policy != "full") {
      entries = c.budget.entries;
      if (c.budget.fraction > 0) {
        const Row* full = find_row("full", "full");
        TRIMKV_ASSERT(full);
        const int64_t peak = std::stoll(full->cells[7]);
        entries = std::max<int64_t>(1, std::llround(c.budget.fraction * static_cast<double>(peak)));
      }
      EvictionSettings s = sweep_policy(c.policy);
      s.budget_global = entries;
      engine->set_eviction(s);
    }
    run.label = "eval-sweep [" + std::to_string(done + 1) + "/" + std::to_string(todo) + "] " + c.policy + " " +
                c.budget.spec;
    const EvalRunResult result = run_world_eval(*engine, conversations, read_failures, run);
    if (result.cancelled) {
      cancelled = true;
      break;
    }
    const w::EvalSummary& s = result.summary;
    std::ostringstream line;
    line << std::setprecision(6) << c.policy << ',' << c.budget.spec << ',' << entries << ',' << s.all.accuracy()
         << ',' << s.all.n << ',' << s.all.correct << ',' << s.failures << ',' << s.max_kv_entries << ','
         << s.mean_kv_entries << ',' << s.max_kv_bytes << ',' << s.mean_kv_bytes << ',';
    if (s.scored.tokens > 0) line << s.scored.perplexity();  // empty when no turn was scored
    line << ',' << s.seconds;
    Row row;
    row.cells = split_list(line.str(), ',', true);
    row.policy = c.policy;
    row.budget = c.budget.spec;
    rows.push_back(row);
    // The type lines first: a cell whose main row is missing is recomputed, and its type lines
    // dropped on the rerun's read.
    for (auto& t : type_lines(c.policy, c.budget.spec, s)) types.push_back(std::move(t));
    write_file_atomic(types_path, csv_text(kTypesCsvHeader, types));
    {
      std::ofstream csv(csv_path, std::ios::binary | std::ios::app);
      csv << line.str() << '\n';
      TRIMKV_CHECK(csv.good(), Io, csv_path, ": write error");
    }
    write_markdown(md_path, rows, types);
    write_plot(png_path, rows);
    ++done;
    if (run.progress)
      std::cerr << "eval-sweep: " << c.policy << " " << c.budget.spec << " (" << entries << " entries): accuracy "
                << s.all.accuracy() << ", " << s.failures << " failures\n";
  }
  ctrl_c.reset();
  std::cout << "eval-sweep: " << rows.size() << " cells in " << csv_path << ", " << md_path << " and " << png_path
            << " (" << done
            << " computed now)\n";
  if (cancelled) {
    std::cerr << "eval-sweep: cancelled; the finished cells are kept, rerun to resume\n";
    return 130;
  }
  return 0;
}

}  // namespace trimkv::cli
