#include "trimkv/core/continuation_score.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"

namespace trimkv {

namespace {
// -ln softmax(logits)[target], in double.
double token_nll(const at::Tensor& logits, int32_t target) {
  const at::Tensor l = logits.to(at::kFloat).contiguous();
  const float* p = l.data_ptr<float>();
  const int64_t n = l.numel();
  TRIMKV_CHECK(target >= 0 && target < n, Input, "token id ", target, " is outside the vocabulary (", n, ")");
  const float top = *std::max_element(p, p + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(p[i]) - top);
  return std::log(sum) + top - static_cast<double>(p[target]);
}
}  // namespace

ContinuationScore score_continuation(TextRunner& runner, const std::vector<int32_t>& context,
                                     const std::vector<int32_t>& scored, const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(!context.empty(), Input, "scoring needs at least one token of context");
  TRIMKV_CHECK(!scored.empty(), Input, "nothing to score");
  const int64_t limit = runner.model().config.max_position_embeddings;
  const int64_t total = runner.n_tokens() + static_cast<int64_t>(context.size() + scored.size()) - 1;
  TRIMKV_CHECK(total <= limit, Input, "scoring ", context.size(), " + ", scored.size(),
               " tokens passes the model's position limit (", limit, ")");
  ContinuationScore s;
  s.context_tokens = static_cast<int64_t>(context.size());
  at::Tensor logits = runner.prefill(context);
  for (size_t i = 0; i < scored.size(); ++i) {
    TRIMKV_CHECK(!(cancel && cancel->load()), Cancelled, "scoring cancelled after ", i, " tokens");
    s.nll += token_nll(logits, scored[i]);
    ++s.scored_tokens;
    if (i + 1 < scored.size()) logits = runner.step(scored[i]);  // the last token is never a context
  }
  GenerationResult kv;
  fill_kv_stats(runner.cache(), kv);
  s.kv_entries = kv.kv_entries;
  s.kv_bytes = kv.kv_bytes;
  s.peak_kv_entries = kv.peak_kv_entries;
  if (const Evictor* ev = runner.evictor()) {
    s.eviction_events = ev->n_events();
    s.peak_kv_entries = std::max(ev->peak_entries(), s.peak_kv_entries);
  }
  return s;
}

}  // namespace trimkv
