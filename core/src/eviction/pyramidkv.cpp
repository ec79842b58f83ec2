// pyramidkv (Cai et al. 2024): SnapKV scores, top-k per head, with layer budgets that decrease
// linearly with depth and add up to the same total (L · M per KV head). Following the reference:
// with B = M - window, the first layer gets 2B - B/beta, the last B/beta (beta = 20), linear in
// between; the window is kept on top of each layer's share. Integer shares are floored and the
// remainder handed out one entry at a time from the first layer, so the total is exact.
#include <cmath>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

std::vector<int64_t> layer_budgets(int n_layer, int64_t m, int64_t window, double beta) {
  const double b = static_cast<double>(m - window);
  std::vector<int64_t> out(static_cast<size_t>(n_layer));
  if (n_layer == 1) {
    out[0] = m;
    return out;
  }
  const double lo = b / beta, hi = 2.0 * b - lo, step = (hi - lo) / (n_layer - 1);
  int64_t sum = 0;
  for (int il = 0; il < n_layer; ++il) {
    out[static_cast<size_t>(il)] = static_cast<int64_t>(std::floor(hi - step * il)) + window;
    sum += out[static_cast<size_t>(il)];
  }
  for (int il = 0; sum < m * n_layer; il = (il + 1) % n_layer, ++sum)
    ++out[static_cast<size_t>(il)];
  return out;
}

class PyramidKvPolicy final : public EvictionPolicy {
 public:
  PyramidKvPolicy(int window, int kernel, std::string pooling, double beta)
      : m_queries(window), m_kernel(kernel), m_pooling(std::move(pooling)), m_beta(beta) {}
  std::string name() const override { return "pyramidkv"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.query_rows = true;
    return n;
  }
  void observe_layer(const LayerObservation& obs) override { m_queries.push(obs.il, *obs.q); }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvGeometry& g = ctx.kv->geometry();
    const StreamScores scores = entry_scores(ctx);
    const std::vector<int64_t> per_layer =
        layer_budgets(g.n_layer, ctx.budget_per_head, m_queries.window(), m_beta);
    std::vector<int64_t> k(static_cast<size_t>(g.n_streams()));
    for (int s = 0; s < g.n_streams(); ++s)
      k[static_cast<size_t>(s)] = per_layer[static_cast<size_t>(s / g.n_kv_head)];
    return select_per_head_top_k(*ctx.kv, scores, k);
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override {
    TRIMKV_CHECK(ctx.cache != nullptr, Internal, "pyramidkv needs the cache's tensors");
    const KvGeometry& g = ctx.kv->geometry();
    StreamScores scores(static_cast<size_t>(g.n_streams()));
    for (int il = 0; il < g.n_layer; ++il) {
      auto layer = snapkv_layer_scores(*ctx.cache, il, m_queries.rows(il), m_kernel, m_pooling);
      for (int h = 0; h < g.n_kv_head; ++h)
        scores[static_cast<size_t>(il * g.n_kv_head + h)] =
            std::move(layer[static_cast<size_t>(h)]);
    }
    return scores;
  }

 private:
  QueryWindow m_queries;
  int m_kernel;
  std::string m_pooling;
  double m_beta;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "pyramidkv");
  const int64_t window = o.get_int("window");
  TRIMKV_CHECK(o.get_int("kernel") % 2 == 1, Input, "policy pyramidkv: kernel must be odd, got ",
               o.get_int("kernel"));
  b.require_per_head_at_least(g, window + 1,
                              "policy pyramidkv (window " + std::to_string(window) + ")");
  return std::make_unique<PyramidKvPolicy>(static_cast<int>(window),
                                           static_cast<int>(o.get_int("kernel")),
                                           o.get_choice("pooling"), o.get_double("beta"));
}

}  // namespace

std::vector<int64_t> pyramidkv_layer_budgets(int n_layer, int64_t m, int64_t window, double beta) {
  return layer_budgets(n_layer, m, window, beta);
}

const PolicyEntry& pyramidkv_policy_entry() {
  static const PolicyEntry kEntry{
      [] {
        PolicyInfo info{"pyramidkv",
                        "SnapKV scores with per-layer budgets decreasing linearly with depth "
                        "(same total)",
                        snapkv_family_options(), false, true};
        info.options.push_back(
            double_option("beta", "20", 1.0, 1e6, "last layer's share = (M - window) / beta"));
        return info;
      }(),
      make};
  return kEntry;
}

}  // namespace trimkv
