// `trimkv make-world` and `trimkv train-tokenizer` as a user runs them: files, determinism,
// error messages naming the option.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "test_util.h"
#include "trimkv/core/tokenizer.h"

namespace {

using WorldRun = trimkv::test::CliRun;
WorldRun run_world_cli(const std::vector<std::string>& args) { return trimkv::test::run_cli(args); }
const auto& require_error_naming = trimkv::test::require_clean_error;

}  // namespace

TEST_CASE("trimkv make-world writes a reproducible split and train-tokenizer trains on it", "[cli][world]") {
  trimkv::test::ScratchDir a("mw-a"), b("mw-b");
  for (const auto* dir : {&a, &b}) {
    const WorldRun r = run_world_cli({"make-world", "--out", dir->path(), "--n", "5", "--seed", "9", "--split", "val",
                                      "--max-images", "3", "--image-size", "80", "--quiet"});
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("5 conversations"));
  }
  const std::string jsonl = trimkv::test::read_bytes(a.file("val.jsonl"));
  CHECK(jsonl == trimkv::test::read_bytes(b.file("val.jsonl")));
  CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 5);
  CHECK(std::filesystem::is_regular_file(a.file("images/val/000000_1.png")));
  CHECK_THAT(jsonl, Catch::Contains("\"size\":80"));
  // A range: every side within it, drawn per image.
  const WorldRun ranged = run_world_cli({"make-world", "--out", a.file("ranged"), "--n", "20", "--seed", "9",
                                         "--image-size", "60-70", "--quiet"});
  REQUIRE(ranged.code == 0);
  std::set<int> sides;
  std::istringstream lines(trimkv::test::read_bytes(a.file("ranged/train.jsonl")));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json c = nlohmann::json::parse(line);
    for (const auto& s : c.at("scenes")) sides.insert(s.at("size").get<int>());
  }
  REQUIRE(!sides.empty());
  CHECK(*sides.begin() >= 60);
  CHECK(*sides.rbegin() <= 70);
  CHECK(sides.size() >= 5);

  const WorldRun t = run_world_cli({"train-tokenizer", "--data", a.file("val.jsonl"), b.file("val.jsonl"),
                                    "--vocab-size", "400", "--out", a.file("tokenizer.json")});
  CAPTURE(t.err);
  REQUIRE(t.code == 0);
  REQUIRE_THAT(t.out, Catch::Contains("from 10 texts"));
  const trimkv::Tokenizer tok = trimkv::Tokenizer::from_file(a.file("tokenizer.json"));
  CHECK(tok.token_to_id("<image>") >= 0);
  CHECK(tok.token_to_id("<row_6_col_6>") >= 0);
}

TEST_CASE("trimkv make-world and train-tokenizer reject bad input naming the option", "[cli][world]") {
  trimkv::test::ScratchDir dir("mw-bad");
  const std::string out = dir.file("w");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "0", "--seed", "1"}), "--n");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "-3", "--seed", "1"}), "--n");
  for (const char* bad : {"20", "300-100", "64-2000", "abc", "64-", ""})
    require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--image-size", bad}),
                         "--image-size");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--max-images", "9"}),
                       "--max-images");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "-1"}), "--seed");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--split", "dev"}),
                       "--split");
  trimkv::test::write_text(dir.file("a-file"), "x");
  require_error_naming(run_world_cli({"make-world", "--out", dir.file("a-file") + "/sub", "--n", "2", "--seed", "1"}),
                       "--out");

  trimkv::test::write_text(dir.file("empty.jsonl"), "");
  trimkv::test::write_text(dir.file("one.jsonl"), "{\"text\": \"hello world\"}\n");
  require_error_naming(run_world_cli({"train-tokenizer", "--data", dir.file("missing.jsonl"), "--vocab-size", "400",
                                      "--out", dir.file("t.json")}),
                       "missing.jsonl");
  require_error_naming(run_world_cli({"train-tokenizer", "--data", dir.file("empty.jsonl"), "--vocab-size", "400",
                                      "--out", dir.file("t.json")}),
                       "empty");
  const WorldRun small = run_world_cli({"train-tokenizer", "--data", dir.file("one.jsonl"), "--vocab-size", "100",
                                        "--out", dir.file("t.json")});
  require_error_naming(small, "--vocab-size");
  REQUIRE_THAT(small.err, Catch::Contains("299"));
  require_error_naming(run_world_cli({"train-tokenizer", "--vocab-size", "400", "--out", dir.file("t.json")}), "--data");
}

TEST_CASE("trimkv eval replays world conversations through a VLM and scores every turn", "[cli][world][eval]") {
  trimkv::test::ScratchDir dir("eval");
  REQUIRE(run_world_cli({"make-world", "--out", dir.path(), "--n", "2", "--seed", "3", "--split", "test",
                         "--max-images", "3", "--max-turns", "3", "--quiet"})
              .code == 0);
  const std::string model = trimkv::test::data_dir() + "/vlm/smolvlm";  // tiny random weights
  const WorldRun r = run_world_cli({"eval", "--model", model, "--data", dir.file("test.jsonl"), "--quiet",
                                    "--out", dir.file("summary.json"), "--records", dir.file("records.jsonl")});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("accuracy"));
  const auto summary = trimkv::test::read_json(dir.file("summary.json"));
  const std::string records = trimkv::test::read_bytes(dir.file("records.jsonl"));
  CHECK(summary.at("n").get<int64_t>() == std::count(records.begin(), records.end(), '\n'));
  CHECK(summary.at("n").get<int64_t>() >= 2);
  CHECK(summary.at("kv_entries").at("max").get<int64_t>() > 0);

  require_error_naming(run_world_cli({"eval", "--model", model, "--data", dir.file("test.jsonl"), "--limit", "0"}),
                       "--limit");
  require_error_naming(run_world_cli({"eval", "--model", model, "--data", dir.file("missing.jsonl")}),
                       "missing.jsonl");
}

TEST_CASE("trimkv eval: gold vs model history, --json keys, failures counted", "[cli][world][eval]") {
  trimkv::test::ScratchDir dir("eval-hist");
  REQUIRE(run_world_cli({"make-world", "--out", dir.path(), "--n", "3", "--seed", "3", "--split", "test",
                         "--max-images", "3", "--max-turns", "3", "--quiet"})
              .code == 0);
  const std::string model = trimkv::test::data_dir() + "/vlm/smolvlm";  // tiny random weights
  const std::string data = dir.file("test.jsonl");
  const WorldRun gold = run_world_cli({"eval", "--model", model, "--data", data, "--quiet", "--json", "--records",
                                       dir.file("gold.jsonl")});
  CAPTURE(gold.out, gold.err);
  REQUIRE(gold.code == 0);
  const auto j = nlohmann::json::parse(gold.out);
  for (const char* key : {"accuracy", "by_type", "n", "kv_peak_entries", "kv_mean_entries", "kv_peak_bytes",
                          "by_n_images", "failures", "seconds"})
    CHECK(j.contains(key));
  CHECK(j.at("history") == "gold");
  CHECK(j.at("failures") == 0);
  CHECK(j.at("kv_peak_entries").get<int64_t>() > 0);
  const WorldRun own = run_world_cli({"eval", "--model", model, "--data", data, "--quiet", "--history", "model",
                                      "--json", "--records", dir.file("model.jsonl")});
  CAPTURE(own.out, own.err);
  REQUIRE(own.code == 0);
  CHECK(nlohmann::json::parse(own.out).at("n") == j.at("n"));
  // The random model answers wrong, so the kept answers (and with them the cache) differ.
  auto lines = [](const std::string& path) {
    std::vector<nlohmann::json> out;
    std::istringstream in(trimkv::test::read_bytes(path));
    for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
    return out;
  };
  const auto g = lines(dir.file("gold.jsonl")), m = lines(dir.file("model.jsonl"));
  REQUIRE(g.size() == m.size());
  REQUIRE(!g.empty());
  CHECK(g[0].at("generated") == m[0].at("generated"));  // same first prompt
  bool differs = false;
  for (size_t i = 0; i < g.size(); ++i) differs |= g[i].at("kv_entries") != m[i].at("kv_entries");
  CHECK(differs);
  CHECK(g[0].at("correct") == false);

  // A missing image and a turn with more placeholders than images: named, counted, the rest go on.
  std::filesystem::remove(dir.file("images/test/000001_1.png"));
  {
    std::ofstream f(data, std::ios::app);
    f << "{\"id\":\"bad\",\"images\":[\"images/test/000000_1.png\"],\"turns\":[{\"text\":\"<image><image>Hi?\","
         "\"answer\":\"no\"}]}\n";
  }
  const WorldRun r = run_world_cli({"eval", "--model", model, "--data", data, "--quiet", "--json"});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  const auto k = nlohmann::json::parse(r.out);
  CHECK(k.at("failures") == 2);
  CHECK(k.at("n").get<int64_t>() > 0);
  CHECK(k.at("n").get<int64_t>() < j.at("n").get<int64_t>());
  CHECK_THAT(r.err, Catch::Contains("000001_1.png") && Catch::Contains("test.jsonl:2"));
  CHECK_THAT(r.err, Catch::Contains("test.jsonl:4") && Catch::Contains("placeholders"));
  require_error_naming(run_world_cli({"eval", "--model", model, "--data", data, "--history", "mine"}), "--history");
}

TEST_CASE("trimkv eval-sweep writes every policy x budget cell and resumes", "[cli][world][eval]") {
  trimkv::test::ScratchDir dir("eval-sweep");
  REQUIRE(run_world_cli({"make-world", "--out", dir.path(), "--n", "2", "--seed", "5", "--split", "test",
                         "--max-images", "2", "--max-turns", "2", "--quiet"})
              .code == 0);
  const std::string model = trimkv::test::data_dir() + "/vlm/smolvlm";
  const std::vector<std::string> args = {"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"),
                                         "--policies", "streamingllm,h2o", "--budgets", "0.5,64", "--out",
                                         dir.file("sweep"), "--max-new-tokens", "4"};
  const WorldRun r = run_world_cli(args);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("5 computed now"));
  const std::string csv = trimkv::test::read_bytes(dir.file("sweep/sweep.csv"));
  const std::string md = trimkv::test::read_bytes(dir.file("sweep/sweep.md"));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 6);  // header, full cache, 2 x 2 cells
  for (const char* cell : {"streamingllm,0.5,", "streamingllm,64,64,", "h2o,0.5,", "h2o,64,64,", "full,full,0,"})
    CHECK_THAT(csv, Catch::Contains(cell));
  // header, rule, 5 rows; a blank line; the per-type table: header, rule, 5 rows
  CHECK(std::count(md.begin(), md.end(), '\n') == 15);
  CHECK_THAT(md, Catch::Contains("| h2o | 0.5 |"));
  // sweep-types.csv: each cell's per-type counts add up to its row in sweep.csv.
  const std::string types = trimkv::test::read_bytes(dir.file("sweep/sweep-types.csv"));
  // A CSV text's header and its lines split at commas.
  const auto split_csv = [](const std::string& text) {
    std::istringstream in(text);
    std::string header;
    std::getline(in, header);
    std::vector<std::vector<std::string>> lines;
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> c;
      std::istringstream fields(line);
      for (std::string f; std::getline(fields, f, ',');) c.push_back(f);
      lines.push_back(c);
    }
    return std::pair{header, lines};
  };
  std::map<std::string, std::pair<int, int>> sums;  // "policy,budget" -> (n, correct)
  const auto [types_header, type_lines] = split_csv(types);
  CHECK(types_header == "policy,budget,type,n,correct,accuracy,perplexity");
  for (const auto& c : type_lines) {
    REQUIRE(c.size() >= 6);
    sums[c[0] + "," + c[1]].first += std::stoi(c[3]);
    sums[c[0] + "," + c[1]].second += std::stoi(c[4]);
  }
  const auto cell_lines = split_csv(csv).second;
  for (const auto& c : cell_lines) {
    REQUIRE(c.size() >= 6);
    INFO(c[0] << "," << c[1]);
    CHECK(sums[c[0] + "," + c[1]] == std::make_pair(std::stoi(c[4]), std::stoi(c[5])));
  }
  CHECK(cell_lines.size() == 5);
  CHECK(sums.size() == 5);
  CHECK(std::filesystem::file_size(dir.file("sweep/sweep.png")) > 1000);
  CHECK(trimkv::test::read_bytes(dir.file("sweep/sweep.png")).substr(1, 3) == "PNG");

  const WorldRun again = run_world_cli(args);  // resumes: nothing left to compute
  CAPTURE(again.out, again.err);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.out, Catch::Contains("0 computed now"));
  CHECK(trimkv::test::read_bytes(dir.file("sweep/sweep.csv")) == csv);
  CHECK(trimkv::test::read_bytes(dir.file("sweep/sweep-types.csv")) == types);

  // A cell whose main row was lost (killed between the two files): its type lines are dropped
  // and the cell recomputed, to the same per-type lines.
  trimkv::test::write_text(dir.file("sweep/sweep.csv"), csv.substr(0, csv.rfind('\n', csv.size() - 2) + 1));
  const WorldRun third = run_world_cli(args);
  CAPTURE(third.out, third.err);
  REQUIRE(third.code == 0);
  CHECK_THAT(third.out, Catch::Contains("1 computed now"));
  const auto without_seconds = [](const std::string& text) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out += line.substr(0, line.rfind(',')) + "\n";
    return out;
  };
  CHECK(without_seconds(trimkv::test::read_bytes(dir.file("sweep/sweep.csv"))) == without_seconds(csv));
  CHECK(trimkv::test::read_bytes(dir.file("sweep/sweep-types.csv")) == types);

  // Resuming those cells with other scoring would mix two experiments in one table: refused,
  // naming --out and the difference; the files stay as they were.
  std::vector<std::string> other = args;
  other.insert(other.end(), {"--match", "contains"});
  const WorldRun refused = run_world_cli(other);
  require_error_naming(refused, "--out");
  CHECK_THAT(refused.err, Catch::Contains("match was exact, now contains"));
  CHECK(without_seconds(trimkv::test::read_bytes(dir.file("sweep/sweep.csv"))) == without_seconds(csv));

  // A model retrained in place (same folder, other weights) is refused too: its cells would be
  // mixed with the old model's.
  trimkv::test::ScratchDir copy("eval-sweep-model");
  for (const auto& e : std::filesystem::directory_iterator(model))
    std::filesystem::copy_file(e.path(), std::filesystem::path(copy.path()) / e.path().filename());
  std::vector<std::string> on_copy = args;
  on_copy[2] = copy.path();
  on_copy[on_copy.size() - 3] = dir.file("sweep-copy");
  const WorldRun first = run_world_cli(on_copy);
  CAPTURE(first.out, first.err);
  REQUIRE(first.code == 0);
  const std::string copied_csv = trimkv::test::read_bytes(dir.file("sweep-copy/sweep.csv"));
  {
    // One byte of the first tensor's data changed: the file still loads, as a retrained one would.
    std::fstream f(copy.file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    REQUIRE(8 + header + 16 < 65536);  // inside the sample hash's first 64 KiB
    f.seekg(static_cast<std::streamoff>(8 + header + 16));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(8 + header + 16));
    f.write(&c, 1);
  }
  const WorldRun retrained = run_world_cli(on_copy);
  require_error_naming(retrained, "--out");
  CHECK_THAT(retrained.err, Catch::Contains("model-files was"));
  CHECK(trimkv::test::read_bytes(dir.file("sweep-copy/sweep.csv")) == copied_csv);

  // The settings name no absolute path: a folder moved elsewhere (committed, another checkout)
  // resumes with the same model and data, computing nothing again.
  const std::string settings = "\n" + trimkv::test::read_bytes(dir.file("sweep/sweep-settings.txt"));
  CAPTURE(settings);
  CHECK_THAT(settings, Catch::Contains("\nmodel=../") && Catch::Contains("\ndata=../test.jsonl\n") &&
                           Catch::Contains("\ndata-file="));
  CHECK_THAT(settings, !Catch::Contains("=/"));
  trimkv::test::ScratchDir elsewhere("eval-sweep-moved");
  std::filesystem::create_directories(elsewhere.file("deeper"));
  std::filesystem::copy(dir.file("sweep"), elsewhere.file("deeper/sweep"), std::filesystem::copy_options::recursive);
  const std::string moved_csv = trimkv::test::read_bytes(elsewhere.file("deeper/sweep/sweep.csv"));
  std::vector<std::string> moved = args;
  moved[moved.size() - 3] = elsewhere.file("deeper/sweep");
  const WorldRun resumed = run_world_cli(moved);
  CAPTURE(resumed.out, resumed.err);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.out, Catch::Contains("0 computed now"));
  // Other data under the same name is other data: refused.
  trimkv::test::write_text(dir.file("other.jsonl"), trimkv::test::read_bytes(dir.file("test.jsonl")) + "\n");
  std::vector<std::string> other_data = moved;
  other_data[4] = dir.file("other.jsonl");
  const WorldRun refused_data = run_world_cli(other_data);
  require_error_naming(refused_data, "--out");
  CHECK_THAT(refused_data.err, Catch::Contains("data-file was"));
  // Cells without a settings file (a folder from before it existed, or one it was deleted from)
  // are not resumed blindly: what they were computed with is unknown.
  std::filesystem::remove(elsewhere.file("deeper/sweep/sweep-settings.txt"));
  const WorldRun unknown = run_world_cli(moved);
  require_error_naming(unknown, "--out");
  CHECK_THAT(unknown.err, Catch::Contains("5 cells but no sweep-settings.txt"));
  CHECK(trimkv::test::read_bytes(elsewhere.file("deeper/sweep/sweep.csv")) == moved_csv);

  require_error_naming(run_world_cli({"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"), "--policies",
                                      "nope", "--budgets", "0.5"}),
                       "--policies");
  require_error_naming(run_world_cli({"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"), "--policies",
                                      "h2o", "--budgets", "1.5"}),
                       "--budgets");

  // An entry may carry the policy's options after colons; the entry names its rows. StreamingLLM
  // with 1 sink + a window of 2 holds fewer entries than with its default window (budget - 4).
  const WorldRun opts = run_world_cli({"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"), "--policies",
                                       "streamingllm,streamingllm:sinks=1:window=2", "--budgets", "64", "--out",
                                       dir.file("sweep-opts"), "--max-new-tokens", "4"});
  CAPTURE(opts.out, opts.err);
  REQUIRE(opts.code == 0);
  const auto opt_lines = split_csv(trimkv::test::read_bytes(dir.file("sweep-opts/sweep.csv"))).second;
  REQUIRE(opt_lines.size() == 3);
  CHECK(opt_lines[1][0] == "streamingllm");
  CHECK(opt_lines[2][0] == "streamingllm:sinks=1:window=2");
  CHECK(opt_lines[2][1] == "64");
  CHECK(std::stod(opt_lines[2][8]) < std::stod(opt_lines[1][8]));  // kv_mean_entries
  CHECK_THAT(trimkv::test::read_bytes(dir.file("sweep-opts/sweep.md")), Catch::Contains("| streamingllm:sinks=1:window=2 | 64 |"));
  const WorldRun bad_opt = run_world_cli({"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"), "--policies",
                                          "h2o:recnt=3", "--budgets", "0.5"});
  require_error_naming(bad_opt, "h2o:recnt=3");
  CHECK_THAT(bad_opt.err, Catch::Contains("recent"));
}
