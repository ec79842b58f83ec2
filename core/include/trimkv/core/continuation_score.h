// Perplexity under a KV policy (issue 20): how well the model predicts the last tokens of a long
// text when its cache is held under a budget. The context is prefilled in chunks (the evictor
// compresses after each, as for a prompt), then the scored tokens are fed one decode step at a
// time (compressing as during generation), each scored by the logits that preceded it. With the
// full cache this equals the loss of one forward pass over the whole text.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

namespace trimkv {

class TextRunner;

struct ContinuationScore {
  int64_t context_tokens = 0;  // prefilled before the first scored token
  int64_t scored_tokens = 0;
  double nll = 0;              // sum of -ln p(token) over the scored tokens
  int64_t kv_entries = 0, kv_bytes = 0;  // held after the last scored token
  int64_t peak_kv_entries = 0;           // the most held at any point (before compressions)
  int64_t eviction_events = 0;
  double perplexity() const { return scored_tokens > 0 ? std::exp(nll / static_cast<double>(scored_tokens)) : 0.0; }
};

// Appends `context` then `scored` to the runner's stream (see above). Error{Input} when `context`
// or `scored` is empty or the stream would pass max_position_embeddings (checked first);
// Error{Cancelled} when `cancel` is set between steps.
ContinuationScore score_continuation(TextRunner& runner, const std::vector<int32_t>& context,
                                     const std::vector<int32_t>& scored, const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv
