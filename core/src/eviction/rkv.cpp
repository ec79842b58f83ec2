// rkv (R-KV, Cai et al. 2025): decode-time compression for long generations. Importance: the
// attention the last `window` queries give each entry (pooled as in SnapKV, normalised to sum 1
// per head); redundancy: each key's mean cosine similarity to the other keys of its head,
// softmax-normalised. Score = lambda · importance - (1 - lambda) · redundancy; the window is kept.
// Evicts when the cache reaches budget + buffer (the Evictor's slack).
#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class RkvPolicy final : public EvictionPolicy {
 public:
  RkvPolicy(int window, int kernel, double lambda)
      : m_queries(window), m_kernel(kernel), m_lambda(lambda) {}
  std::string name() const override { return "rkv"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.query_rows = true;
    n.keys = true;
    return n;
  }
  void observe_layer(const LayerObservation& obs) override { m_queries.push(obs.il, *obs.q); }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const StreamScores scores = entry_scores(ctx);
    return select_per_head_top_k(
        *ctx.kv, scores,
        std::vector<int64_t>(static_cast<size_t>(ctx.kv->geometry().n_streams()),
                             ctx.budget_per_head));
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override {
    TRIMKV_CHECK(ctx.cache != nullptr, Internal, "rkv needs the cache's tensors");
    const KvGeometry& g = ctx.kv->geometry();
    StreamScores scores(static_cast<size_t>(g.n_streams()));
    for (int il = 0; il < g.n_layer; ++il) {
      auto layer = snapkv_layer_scores(*ctx.cache, il, m_queries.rows(il), m_kernel, "max");
      for (int h = 0; h < g.n_kv_head; ++h) {
        std::vector<float>& sc = layer[static_cast<size_t>(h)];
        const int64_t w = m_queries.rows(il).size(0);
        const int64_t prefix = static_cast<int64_t>(sc.size()) - w;
        if (prefix > 0) score_prefix(ctx.cache->keys(il, h).narrow(0, 0, prefix), sc);
        scores[static_cast<size_t>(il * g.n_kv_head + h)] = std::move(sc);
      }
    }
    return scores;
  }

 private:
  // sc[0, prefix): attention votes in, final scores out.
  void score_prefix(const at::Tensor& keys /* [prefix, head_dim] */, std::vector<float>& sc) const {
    const int64_t n = keys.size(0);
    double total = 0;
    for (int64_t e = 0; e < n; ++e) total += sc[static_cast<size_t>(e)];
    const at::Tensor kn = keys / keys.norm(2, {1}, true).clamp_min(1e-12);
    at::Tensor sim = at::matmul(kn, kn.t());  // [n, n] cosine similarities
    sim.fill_diagonal_(0.0);
    const at::Tensor red = n > 1 ? at::softmax(sim.sum(1) / static_cast<double>(n - 1), 0)
                                 : at::ones({1}, keys.options());
    const at::Tensor r = red.contiguous();
    const float* pr = r.data_ptr<float>();
    for (int64_t e = 0; e < n; ++e) {
      const double importance = total > 0 ? sc[static_cast<size_t>(e)] / total : 0.0;
      sc[static_cast<size_t>(e)] =
          static_cast<float>(m_lambda * importance - (1.0 - m_lambda) * pr[e]);
    }
  }

  QueryWindow m_queries;
  int m_kernel;
  double m_lambda;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "rkv");
  const int64_t window = o.get_int("window");
  TRIMKV_CHECK(o.get_int("kernel") % 2 == 1, Input, "policy rkv: kernel must be odd, got ",
               o.get_int("kernel"));
  b.require_per_head_at_least(g, window + 1, "policy rkv (window " + std::to_string(window) + ")");
  return std::make_unique<RkvPolicy>(static_cast<int>(window),
                                     static_cast<int>(o.get_int("kernel")), o.get_double("lambda"));
}

}  // namespace

const PolicyEntry& rkv_policy_entry() {
  static const PolicyEntry kEntry{
      {"rkv",
       "R-KV: attention importance minus key redundancy (cosine similarity), per head",
       {int_option("window", "8", 1, 1 << 16, "observation window: the newest alpha queries"),
        int_option("kernel", "7", 1, 1 << 10, "1-D max-pooling kernel of the votes (odd)"),
        double_option("lambda", "0.1", 0.0, 1.0,
                      "score = lambda*importance - (1-lambda)*redundancy")},
       false,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
