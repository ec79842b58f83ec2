// `trimkv eval`: replays world conversations through a vision-language model and scores the
// answers (exact match), with breakdowns by question type, by number of images and by how far back
// the needed image is, plus the KV cache held and the time taken.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "eval_runner.h"
#include "policy_options.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::cli {

int cmd_eval(int argc, char** argv, int first) {
  namespace w = vision::world;
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "vision-language checkpoint folder (default: the embedded demo model)"},
      {"data", "FILE.jsonl", "world conversations (trimkv make-world)"},
      ranged_int("limit", "N", "evaluate the first N conversations only", 1, 2147483647),
      {"history", "gold|model", "answers kept in the conversation: the expected ones (default) or the model's"},
      {"match", "exact|contains", "scoring: the normalized reply equals the expected answer (default), or contains it as whole words (real models answer in sentences)"},
      ranged_int("max-new-tokens", "N", "answer length limit in tokens (default 8)", 0, 1 << 20),
      {"json", "", "print the summary as one JSON object on stdout"},
      {"out", "FILE", "write the summary as JSON"},
      {"records", "FILE", "write one JSON line per turn (expected, generated, correct, ...)"},
      threads_option("CPU threads (default: the library's)"),
      {"quiet", "", "no progress on stderr"},
      gates_option(),
      {"help", "", "show this help"},
  };
  add_model_load_option_specs(specs);
  add_policy_option_specs(specs);
  Args args("eval", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("eval",
                             "Replay world conversations turn by turn (each answer generated greedily; the gold "
                             "answer, or with --history model the generated one, is kept in the conversation) and "
                             "report accuracy (exact match, or with --match contains the answer found in the reply). A conversation that cannot be evaluated (a missing "
                             "image, a bad line) is named on stderr and counted; the others go on.",
                             specs)
              << policy_help();
    return 0;
  }
  const std::string model = args.model_dir();
  const std::string data = args.require("data");
  const int limit = eval_limit(args);
  EvalRunOptions run = eval_run_options(args, data);
  const EvictionSettings eviction = parse_policy_settings(args);  // before the model load
  if (args.has("trace") || args.has("trace-csv"))
    throw UsageError("eval runs many conversations: --trace / --trace-csv are for generate and chat");
  EngineOptions options;
  options.threads = threads_arg(args);
  options.gates = args.get("gates");
  model_load_args(args, options);

  std::vector<std::string> read_failures;
  const std::vector<w::WorldRecord> conversations = w::read_world_jsonl(data, limit, &read_failures);
  TRIMKV_CHECK(!conversations.empty() || !read_failures.empty(), Input, "--data ", data, ": no conversations");
  std::ofstream records_out;
  if (args.has("records")) {
    records_out.open(args.get("records"), std::ios::binary | std::ios::trunc);
    TRIMKV_CHECK(records_out.good(), Io, "--records ", args.get("records"), ": cannot open for writing");
    run.records_out = &records_out;
  }
  auto engine = vision::ChatEngine::load(model, options);
  const bool evict = eviction_requested(args);
  if (evict) engine->set_eviction(eviction);  // checked against the model before any turn

  const EvalRunResult result = run_world_eval(*engine, conversations, read_failures, run);
  const w::EvalSummary& summary = result.summary;
  for (const std::string& f : result.failures) std::cerr << "trimkv eval: failed: " << f << "\n";
  TRIMKV_CHECK(!result.records.empty(), Input, "--data ", data, ": no conversation could be evaluated (",
               result.failures.size(), " failures)");

  const vision::ConversationState st = engine->state();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(w::summary_json(summary));
  j["conversations"] = static_cast<int64_t>(conversations.size() + read_failures.size()) - summary.failures;
  j["history"] = run.gold_history ? "gold" : "model";
  j["match"] = vision::world::answer_match_name(run.match);
  j["policy"] = st.policy;
  j["budget"] = st.budget_global;
  j["eviction_events"] = result.eviction_events;
  if (args.has("out")) {
    write_file_atomic(args.get("out"), j.dump(2) + "\n");
  }
  if (args.flag("json")) {
    std::cout << j.dump() << '\n';
    return 0;
  }
  std::cout << std::fixed << std::setprecision(3) << "accuracy " << summary.all.accuracy() << " ("
            << summary.all.correct << "/" << summary.all.n << " turns, " << j["conversations"].get<int64_t>()
            << " conversations, " << summary.failures << " failed; history " << (run.gold_history ? "gold" : "model")
            << ", match " << vision::world::answer_match_name(run.match) << ")\n";
  if (evict)
    std::cout << "policy " << st.policy << ", budget "
              << (st.budget_global < 0 ? std::string("unlimited") : std::to_string(st.budget_global))
              << " entries, " << result.eviction_events << " eviction events\n";
  std::cout << std::setprecision(1) << "KV entries: mean " << summary.mean_kv_entries << ", peak "
            << summary.max_kv_entries << "; KV bytes: mean " << summary.mean_kv_bytes << ", peak "
            << summary.max_kv_bytes << "; time " << std::setprecision(2) << summary.seconds << " s\n"
            << std::setprecision(3);
  if (summary.scored.tokens > 0) {
    std::cout << "perplexity " << summary.scored.perplexity() << " over " << summary.scored.tokens << " scored tokens\n";
    for (const auto& [type, n] : summary.scored_by_type)
      std::cout << "  " << std::left << std::setw(28) << type << n.perplexity() << "  (" << n.tokens << " tokens)\n";
  }
  std::cout << "by question type:\n";
  for (const auto& [type, tally] : summary.by_type)
    std::cout << "  " << std::left << std::setw(28) << type << tally.accuracy() << "  (" << tally.n << ")\n";
  std::cout << "by number of images:\n";
  for (const auto& [k, tally] : summary.by_n_images)
    std::cout << "  " << k << "  " << tally.accuracy() << "  (" << tally.n << ")\n";
  std::cout << "by images since the needed one:\n";
  for (const auto& [k, tally] : summary.by_images_since)
    std::cout << "  " << k << "  " << tally.accuracy() << "  (" << tally.n << ")\n";
  return 0;
}

}  // namespace trimkv::cli
