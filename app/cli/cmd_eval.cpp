// `trimkv eval`: replays world conversations through a vision-language model and scores the
// answers (exact match), with breakdowns by question type and by how far back the needed image is.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "policy_options.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::cli {

int cmd_eval(int argc, char** argv, int first) {
  namespace w = vision::world;
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "vision-language checkpoint folder"},
      {"data", "FILE.jsonl", "world conversations (trimkv make-world)"},
      {"limit", "N", "evaluate the first N conversations only"},
      {"max-new-tokens", "N", "answer length limit in tokens (default 8)"},
      {"out", "FILE", "write the summary as JSON"},
      {"records", "FILE", "write one JSON line per turn (expected, generated, correct, ...)"},
      {"threads", "N", "CPU threads (default: the library's)"},
      {"quiet", "", "no progress on stderr"},
      {"gates", "FILE", "retention gates file (default: the model folder's own; 'none' = no gates)"},
      {"help", "", "show this help"},
  };
  add_policy_option_specs(specs);
  Args args("eval", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("eval",
                             "Replay world conversations turn by turn (each answer generated greedily and kept in "
                             "the conversation) and report exact-match accuracy.",
                             specs)
              << policy_help();
    return 0;
  }
  const std::string model = args.require("model");
  const std::string data = args.require("data");
  const int limit = args.get_int("limit", -1);
  if (args.has("limit") && limit <= 0) throw UsageError("option '--limit' must be positive, got " + std::to_string(limit));
  GenerationParams params;
  params.max_new_tokens = args.get_int("max-new-tokens", 8);
  if (params.max_new_tokens <= 0)
    throw UsageError("option '--max-new-tokens' must be positive, got " + std::to_string(params.max_new_tokens));
  const EvictionSettings eviction = parse_policy_settings(args);  // before the model load
  if (args.has("trace") || args.has("trace-csv"))
    throw UsageError("eval runs many conversations: --trace / --trace-csv are for generate and chat");
  EngineOptions options;
  options.threads = args.get_int("threads", 0);
  options.gates = args.get("gates");

  const std::vector<w::WorldRecord> conversations = w::read_world_jsonl(data, limit);
  TRIMKV_CHECK(!conversations.empty(), Input, "--data ", data, ": no conversations");
  std::ofstream records_out;
  if (args.has("records")) {
    records_out.open(args.get("records"), std::ios::binary | std::ios::trunc);
    TRIMKV_CHECK(records_out.good(), Io, "--records ", args.get("records"), ": cannot open for writing");
  }
  auto engine = vision::ChatEngine::load(model, options);
  const bool evict = eviction_requested(args);
  if (evict) engine->set_eviction(eviction);  // checked against the model before any turn
  int64_t eviction_events = 0;

  std::vector<w::EvalRecord> records;
  for (size_t c = 0; c < conversations.size(); ++c) {
    const w::WorldRecord& conv = conversations[c];
    engine->reset();
    for (size_t t = 0; t < conv.turns.size(); ++t) {
      const w::WorldTurn& turn = conv.turns[t];
      engine->add_user_turn(turn.text, turn.images);
      const GenerationResult result = engine->respond(params);
      w::EvalRecord r;
      r.id = conv.id;
      r.turn = static_cast<int>(t);
      r.type = turn.type;
      r.expected = turn.answer;
      r.generated = result.text;
      r.correct = w::answer_correct(turn.answer, result.text);
      r.images_since = turn.images_since;
      r.turns_since = turn.turns_since;
      r.kv_entries = engine->state().kv_entries;
      if (records_out.is_open()) records_out << w::record_json(r) << '\n';
      records.push_back(std::move(r));
    }
    eviction_events += engine->state().eviction_events;
    if (!args.flag("quiet"))
      std::cerr << "\reval: " << c + 1 << "/" << conversations.size() << " conversations" << std::flush;
  }
  if (!args.flag("quiet")) std::cerr << "\n";

  const w::EvalSummary summary = w::summarize(records);
  if (args.has("out")) {
    std::ofstream out(args.get("out"), std::ios::binary | std::ios::trunc);
    TRIMKV_CHECK(out.good(), Io, "--out ", args.get("out"), ": cannot open for writing");
    out << w::summary_json(summary) << '\n';
  }
  std::cout << std::fixed << std::setprecision(3) << "accuracy " << summary.all.accuracy() << " ("
            << summary.all.correct << "/" << summary.all.n << " turns, " << conversations.size()
            << " conversations)\n";
  if (evict) {
    const vision::ConversationState st = engine->state();
    std::cout << "policy " << st.policy << ", budget "
              << (st.budget_global < 0 ? std::string("unlimited") : std::to_string(st.budget_global))
              << " entries, " << eviction_events << " eviction events\n";
  }
  for (const auto& [type, tally] : summary.by_type)
    std::cout << "  " << std::left << std::setw(28) << type << tally.accuracy() << "  (" << tally.n << ")\n";
  std::cout << "by images since the needed one:\n";
  for (const auto& [k, tally] : summary.by_images_since)
    std::cout << "  " << k << "  " << tally.accuracy() << "  (" << tally.n << ")\n";
  return 0;
}

}  // namespace trimkv::cli
