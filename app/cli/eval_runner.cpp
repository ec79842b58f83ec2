#include "eval_runner.h"

#include <chrono>
#include <filesystem>
#include <iostream>

#include "trimkv/core/error.h"

namespace trimkv::cli {

EvalRunResult run_world_eval(vision::ChatEngine& engine, const std::vector<vision::world::WorldRecord>& conversations,
                             const std::vector<std::string>& read_failures, const EvalRunOptions& options) {
  namespace w = vision::world;
  EvalRunResult out;
  out.failures = read_failures;
  auto cancelled = [&] { return options.cancel && options.cancel->load(); };
  for (size_t c = 0; c < conversations.size(); ++c) {
    if (cancelled()) {
      out.cancelled = true;
      break;
    }
    const w::WorldRecord& conv = conversations[c];
    const std::string where = options.data + ":" + std::to_string(conv.line) + " (" + conv.id + ")";
    std::vector<w::EvalRecord> recs;
    try {
      for (const w::WorldTurn& turn : conv.turns)  // before any work on the conversation
        for (const std::string& image : turn.images)
          TRIMKV_CHECK(std::filesystem::is_regular_file(image), Io, "image file ", image, " not found");
      engine.reset();
      for (size_t t = 0; t < conv.turns.size(); ++t) {
        const w::WorldTurn& turn = conv.turns[t];
        const auto t0 = std::chrono::steady_clock::now();
        if (turn.score_last > 0) {  // a scoring turn: perplexity of the text's end, nothing generated
          const ContinuationScore sc = engine.score_text(turn.text, turn.score_last, options.cancel);
          w::EvalRecord r;
          r.id = conv.id;
          r.type = turn.type;
          r.n_images = conv.n_images;
          r.kv_entries = sc.kv_entries;
          r.kv_bytes = sc.kv_bytes;
          r.peak_kv_entries = sc.peak_kv_entries;
          r.scored_tokens = sc.scored_tokens;
          r.nll = sc.nll;
          r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          out.eviction_events += sc.eviction_events;
          recs.push_back(std::move(r));
          continue;
        }
        engine.add_user_turn(turn.text, turn.images, options.cancel);
        const GenerationResult result = options.gold_history
                                            ? engine.respond_then_give(turn.answer, options.params, {}, options.cancel)
                                            : engine.respond(options.params, {}, options.cancel);
        if (cancelled()) break;
        const vision::ConversationState st = engine.state();
        w::EvalRecord r;
        r.id = conv.id;
        r.turn = static_cast<int>(t);
        r.type = turn.type;
        r.expected = turn.answer;
        r.generated = result.text;
        r.correct = w::answer_correct(turn.answer, result.text, options.match);
        r.images_since = turn.images_since;
        r.turns_since = turn.turns_since;
        r.n_images = conv.n_images;
        r.kv_entries = st.kv_entries;
        r.kv_bytes = st.kv_bytes;
        r.peak_kv_entries = std::max(result.peak_kv_entries, st.kv_entries);
        r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        recs.push_back(std::move(r));
      }
      if (cancelled()) {
        out.cancelled = true;
        break;
      }
      out.eviction_events += engine.state().eviction_events;
    } catch (const Error& e) {
      if (cancelled()) {
        out.cancelled = true;
        break;
      }
      out.failures.push_back(where + ": " + e.what());
      continue;
    }
    for (w::EvalRecord& r : recs) {
      if (options.records_out) *options.records_out << w::record_json(r) << '\n';
      out.records.push_back(std::move(r));
    }
    if (options.progress)
      std::cerr << "\r" << options.label << ": " << c + 1 << "/" << conversations.size() << " conversations"
                << std::flush;
  }
  if (options.progress) std::cerr << "\n";
  out.summary = w::summarize(out.records);
  out.summary.failures = static_cast<int64_t>(out.failures.size());
  return out;
}

EvalRunOptions eval_run_options(const Args& args, const std::string& data) {
  const std::string history = args.get("history", "gold");
  if (history != "gold" && history != "model")
    throw UsageError("option '--history' must be 'gold' or 'model', got '" + history + "'");
  EvalRunOptions run;
  run.data = data;
  run.gold_history = history == "gold";
  const std::string match = args.get("match", "exact");
  const auto m = vision::world::answer_match_named(match);
  if (!m) throw UsageError("option '--match' must be 'exact' or 'contains', got '" + match + "'");
  run.match = *m;
  run.progress = !args.flag("quiet");
  run.params.max_new_tokens = args.get_int("max-new-tokens", 8);
  if (run.params.max_new_tokens <= 0)
    throw UsageError("option '--max-new-tokens' must be positive, got " + std::to_string(run.params.max_new_tokens));
  return run;
}

int eval_limit(const Args& args) {
  const int limit = args.get_int("limit", -1);
  if (args.has("limit") && limit <= 0) throw UsageError("option '--limit' must be positive, got " + std::to_string(limit));
  return limit;
}

}  // namespace trimkv::cli
