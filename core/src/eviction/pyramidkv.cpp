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

class PyramidKvPolicy final : public SnapKvFamilyPolicy {
 public:
  PyramidKvPolicy(int window, int kernel, std::string pooling, double beta)
      : SnapKvFamilyPolicy(window, kernel, std::move(pooling)), m_beta(beta) {}
  std::string name() const override { return "pyramidkv"; }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvGeometry& g = ctx.kv->geometry();
    const StreamScores scores = entry_scores(ctx);
    const std::vector<int64_t> per_layer =
        layer_budgets(g.n_layer, ctx.budget_per_head, window(), m_beta);
    std::vector<int64_t> k(static_cast<size_t>(g.n_streams()));
    for (int s = 0; s < g.n_streams(); ++s)
      k[static_cast<size_t>(s)] = per_layer[static_cast<size_t>(s / g.n_kv_head)];
    return select_per_head_top_k(*ctx.kv, scores, k);
  }

 private:
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
