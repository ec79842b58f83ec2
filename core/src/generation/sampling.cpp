#include "trimkv/core/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "trimkv/core/error.h"

namespace trimkv {

void validate(const SamplingParams& p) {
  TRIMKV_CHECK(p.temperature >= 0 && std::isfinite(p.temperature), Input,
               "temperature must be >= 0, got ", p.temperature);
  TRIMKV_CHECK(p.top_k >= 0, Input, "top-k must be >= 0, got ", p.top_k);
  TRIMKV_CHECK(p.top_p > 0 && p.top_p <= 1, Input, "top-p must be in (0, 1], got ", p.top_p);
  TRIMKV_CHECK(p.repetition_penalty > 0 && std::isfinite(p.repetition_penalty), Input,
               "repetition penalty must be > 0, got ", p.repetition_penalty);
}

Sampler::Sampler(const SamplingParams& params) : m_params(params), m_rng(params.seed) {
  validate(params);
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history) {
  m_work.assign(logits, logits + vocab);
  if (m_params.repetition_penalty != 1.0f) {
    // Each distinct token of the history once: positive logits are divided, negative multiplied.
    std::vector<char> seen(static_cast<size_t>(vocab), 0);
    for (int32_t t : history) {
      if (t < 0 || t >= vocab || seen[t]) continue;
      seen[t] = 1;
      float& l = m_work[t];
      l = l > 0 ? l / m_params.repetition_penalty : l * m_params.repetition_penalty;
    }
  }
  if (m_params.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(m_work.begin(), m_work.end()) - m_work.begin());

  for (float& l : m_work) l /= m_params.temperature;
  m_order.resize(static_cast<size_t>(vocab));
  std::iota(m_order.begin(), m_order.end(), 0);
  // Candidates sorted by logit, descending; ties by id for determinism.
  auto by_logit = [&](int32_t a, int32_t b) {
    return m_work[a] > m_work[b] || (m_work[a] == m_work[b] && a < b);
  };
  int64_t n = vocab;
  if (m_params.top_k > 0 && m_params.top_k < vocab) {
    n = m_params.top_k;
    std::partial_sort(m_order.begin(), m_order.begin() + n, m_order.end(), by_logit);
  } else {
    std::sort(m_order.begin(), m_order.end(), by_logit);
  }
  const float max_logit = m_work[m_order[0]];
  std::vector<double> probs(static_cast<size_t>(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += probs[i] = std::exp(double(m_work[m_order[i]]) - max_logit);
  if (m_params.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (at least one token is always kept).
    double cum = 0;
    int64_t keep = n;
    for (int64_t i = 0; i < n; ++i) {
      cum += probs[i] / total;
      if (cum >= m_params.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    total = 0;
    for (int64_t i = 0; i < n; ++i) total += probs[i];
  }
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(m_rng), acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += probs[i];
    if (r < acc) return m_order[i];
  }
  return m_order[n - 1];
}

}  // namespace trimkv
