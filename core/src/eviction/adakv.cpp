// adakv (Feng et al. 2024): SnapKV scores; the budget of a layer (M · H_kv) is allocated jointly
// over its KV heads by one top-k, with a per-head floor: a fraction `floor` of M is guaranteed to
// every head (the "safeguard"), the rest goes to the best entries of the layer.
#include <numeric>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class AdaKvPolicy final : public SnapKvFamilyPolicy {
 public:
  AdaKvPolicy(int window, int kernel, std::string pooling, double floor_ratio)
      : SnapKvFamilyPolicy(window, kernel, std::move(pooling)), m_floor_ratio(floor_ratio) {}
  std::string name() const override { return "adakv"; }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvGeometry& g = ctx.kv->geometry();
    const StreamScores scores = entry_scores(ctx);
    const int64_t m = ctx.budget_per_head;
    const int64_t floor = static_cast<int64_t>(m_floor_ratio * static_cast<double>(m));
    EvictionPlan plan(g.n_layer, g.n_kv_head);
    for (int il = 0; il < g.n_layer; ++il) {
      std::vector<int> streams(static_cast<size_t>(g.n_kv_head));
      std::iota(streams.begin(), streams.end(), il * g.n_kv_head);
      select_top_k_joint(*ctx.kv, scores, streams, m * g.n_kv_head, floor, plan);
    }
    return plan;
  }

 private:
  double m_floor_ratio;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "adakv");
  const int64_t window = o.get_int("window");
  TRIMKV_CHECK(o.get_int("kernel") % 2 == 1, Input, "policy adakv: kernel must be odd, got ",
               o.get_int("kernel"));
  const int64_t m = b.per_head_entries(g);
  const int64_t floor = static_cast<int64_t>(o.get_double("floor") * static_cast<double>(m));
  TRIMKV_CHECK(window + floor <= m, Input, "policy adakv: window ", window, " + floor ", floor,
               " entries per head exceed the per-head budget of ", m, " entries");
  return std::make_unique<AdaKvPolicy>(static_cast<int>(window),
                                       static_cast<int>(o.get_int("kernel")),
                                       o.get_choice("pooling"), o.get_double("floor"));
}

}  // namespace

const PolicyEntry& adakv_policy_entry() {
  static const PolicyEntry kEntry{
      [] {
        PolicyInfo info{"adakv",
                        "SnapKV scores, top-k jointly over the KV heads of each layer with a "
                        "per-head floor",
                        snapkv_family_options(), false, true};
        info.options.push_back(double_option(
            "floor", "0.2", 0.0, 1.0, "fraction of the per-head budget guaranteed to every head"));
        return info;
      }(),
      make};
  return kEntry;
}

}  // namespace trimkv
