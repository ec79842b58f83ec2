// Pieces shared by the SnapKV family (snapkv, adakv, pyramidkv) and R-KV: the per-layer window of
// recent queries and the pooled "votes" of those queries for each cached entry.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "trimkv/core/cache_attention.h"
#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

namespace trimkv {

void QueryWindow::push(int il, const at::Tensor& q) {
  if (static_cast<int>(m_rows.size()) <= il) m_rows.resize(static_cast<size_t>(il) + 1);
  at::Tensor& rows = m_rows[static_cast<size_t>(il)];
  at::Tensor all = rows.defined() ? at::cat({rows, q}, 0) : q;
  const int64_t n = all.size(0);
  // Own the rows (q is the decoder's temporary).
  rows = all.narrow(0, std::max<int64_t>(0, n - m_window), std::min<int64_t>(n, m_window)).clone();
}

const at::Tensor& QueryWindow::rows(int il) const {
  static const at::Tensor kNone;
  return il < static_cast<int>(m_rows.size()) ? m_rows[static_cast<size_t>(il)] : kNone;
}

void protect_window(const KvBookkeeping& kv, int window, StreamScores& scores) {
  protect_recent(kv, kv.n_tokens() - window, scores);
}

std::vector<std::vector<float>> snapkv_layer_scores(const KvCache& cache, int il,
                                                    const at::Tensor& window_q, int kernel,
                                                    const std::string& pooling) {
  const KvGeometry& g = cache.geometry();
  if (!window_q.defined() || window_q.size(0) == 0) {  // nothing observed yet: no votes
    std::vector<std::vector<float>> zeros(static_cast<size_t>(g.n_kv_head));
    for (int h = 0; h < g.n_kv_head; ++h)
      zeros[static_cast<size_t>(h)].assign(static_cast<size_t>(cache.length(il, h)), 0.0f);
    return zeros;
  }
  const int64_t w = window_q.size(0);
  const int64_t group = window_q.size(1) / g.n_kv_head;
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
  // The window rows are the newest w tokens, which are the last w entries of every head: the
  // kernel's bottom-right causal alignment then gives each window query exactly its causal past.
  const at::Tensor sums = attend_cache_layer(cache, il, window_q, scale, true).attn_sum.contiguous();
  const float* p = sums.data_ptr<float>();
  const int64_t stride = sums.size(1);
  const float inv_group = 1.0f / static_cast<float>(group);
  const int half = kernel / 2;
  std::vector<std::vector<float>> out(static_cast<size_t>(g.n_kv_head));
  for (int h = 0; h < g.n_kv_head; ++h) {
    const int64_t len = cache.length(il, h);
    TRIMKV_ASSERT(len >= w, "layer ", il, " head ", h, " holds ", len, " entries, fewer than the ",
                  w, " window tokens");
    const int64_t prefix = len - w;  // votes are pooled over the entries before the window
    const float* row = p + h * stride;
    std::vector<float>& sc = out[static_cast<size_t>(h)];
    sc.assign(static_cast<size_t>(len), std::numeric_limits<float>::infinity());
    for (int64_t e = 0; e < prefix; ++e) {
      const int64_t lo = std::max<int64_t>(0, e - half),
                    hi = std::min<int64_t>(prefix - 1, e + half);
      float acc = pooling == "max" ? -std::numeric_limits<float>::infinity() : 0.0f;
      for (int64_t j = lo; j <= hi; ++j)
        acc = pooling == "max" ? std::max(acc, row[j]) : acc + row[j];
      // avg_pool1d with zero padding counted (count_include_pad), as the SnapKV reference.
      sc[static_cast<size_t>(e)] =
          (pooling == "max" ? acc : acc / static_cast<float>(kernel)) * inv_group;
    }
  }
  return out;
}

SnapKvFamilyPolicy::SnapKvFamilyPolicy(int window, int kernel, std::string pooling)
    : m_queries(window), m_kernel(kernel), m_pooling(std::move(pooling)) {}

PolicyNeeds SnapKvFamilyPolicy::needs() const {
  PolicyNeeds n;
  n.query_rows = true;
  return n;
}

void SnapKvFamilyPolicy::observe_layer(const LayerObservation& obs) {
  m_queries.push(obs.il, *obs.q);
}

StreamScores SnapKvFamilyPolicy::entry_scores(const PolicyContext& ctx) const {
  TRIMKV_CHECK(ctx.cache != nullptr, Internal, name(), " needs the cache's tensors");
  const KvGeometry& g = ctx.kv->geometry();
  StreamScores scores(static_cast<size_t>(g.n_streams()));
  for (int il = 0; il < g.n_layer; ++il) {
    auto layer = snapkv_layer_scores(*ctx.cache, il, m_queries.rows(il), m_kernel, m_pooling);
    for (int h = 0; h < g.n_kv_head; ++h)
      scores[static_cast<size_t>(il * g.n_kv_head + h)] = std::move(layer[static_cast<size_t>(h)]);
  }
  return scores;
}

}  // namespace trimkv
