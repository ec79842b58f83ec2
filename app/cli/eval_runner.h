// The replay loop shared by `trimkv eval` and `trimkv eval-sweep`: every turn of every world
// conversation answered by a ChatEngine, with the gold or the model's own answers kept as history;
// a conversation that fails (a missing image, a bad turn) is counted and named, the rest go on.
#pragma once
#include <atomic>
#include <ostream>
#include <string>
#include <vector>

#include "args.h"
#include "trimkv/core/generation_types.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::cli {

struct EvalRunOptions {
  std::string data;  // the JSONL path, for failure messages
  GenerationParams params;
  bool gold_history = true;  // false: the model's own answers stay in the conversation
  vision::world::AnswerMatch match = vision::world::AnswerMatch::Exact;  // --match
  bool progress = true;      // "\r<label>: i/n conversations" on stderr
  std::string label = "eval";
  std::ostream* records_out = nullptr;  // one JSON line per turn
  const std::atomic<bool>* cancel = nullptr;
};

struct EvalRunResult {
  std::vector<vision::world::EvalRecord> records;
  vision::world::EvalSummary summary;  // failures included
  std::vector<std::string> failures;   // "FILE:LINE (id): message"
  int64_t eviction_events = 0;
  bool cancelled = false;  // stopped early: records cover the finished conversations only
};

// The options eval and eval-sweep share, validated (UsageError naming the option): --history,
// --match, --quiet, --max-new-tokens. `data` is the JSONL path.
EvalRunOptions eval_run_options(const Args& args, const std::string& data);
// --limit: -1 when absent; UsageError when not positive.
int eval_limit(const Args& args);

// `read_failures`: messages from read_world_jsonl(…, errors) (counted as failures too).
EvalRunResult run_world_eval(vision::ChatEngine& engine, const std::vector<vision::world::WorldRecord>& conversations,
                             const std::vector<std::string>& read_failures, const EvalRunOptions& options);

}  // namespace trimkv::cli
