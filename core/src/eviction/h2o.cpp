// h2o (Zhang et al. 2023): "heavy hitters" by accumulated attention + a recent window. Every
// forward adds the attention each entry received (summed over the forward's query rows and the
// query heads of its group) to that entry's running total; a plan keeps, per head, the `recent`
// newest tokens and the M - recent entries with the largest totals.
#include <ATen/ATen.h>

#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class H2oPolicy final : public EvictionPolicy {
 public:
  H2oPolicy(int64_t recent, const KvGeometry& g)
      : m_recent(recent), m_n_kv_head(g.n_kv_head), m_acc(static_cast<size_t>(g.n_streams())) {}
  std::string name() const override { return "h2o"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.attention_sum = true;
    return n;
  }
  void observe_layer(const LayerObservation& obs) override {
    TRIMKV_ASSERT(obs.attn_sum != nullptr);
    const at::Tensor sums = obs.attn_sum->contiguous();  // [n_kv_head, max_len]
    const float* p = sums.data_ptr<float>();
    for (int h = 0; h < m_n_kv_head; ++h) {
      std::vector<float>& acc = m_acc[static_cast<size_t>(obs.il * m_n_kv_head + h)];
      const int32_t len = obs.view.lengths[h];
      acc.resize(static_cast<size_t>(len), 0.0f);  // new entries start at 0
      const float* row = p + h * sums.size(1);
      for (int32_t e = 0; e < len; ++e) acc[static_cast<size_t>(e)] += row[e];
    }
  }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const int64_t recent = m_recent >= 0 ? m_recent : ctx.budget_per_head / 2;
    StreamScores scores = accumulated(ctx);
    protect_window(*ctx.kv, static_cast<int>(recent), scores);
    return select_per_head_top_k(
        *ctx.kv, scores,
        std::vector<int64_t>(static_cast<size_t>(ctx.kv->geometry().n_streams()),
                             ctx.budget_per_head));
  }
  void on_applied(const EvictionPlan& plan) override {
    for (size_t s = 0; s < m_acc.size(); ++s) {
      const auto& keep =
          plan.keep(static_cast<int>(s) / m_n_kv_head, static_cast<int>(s) % m_n_kv_head);
      std::vector<float> kept(keep.size());
      for (size_t j = 0; j < keep.size(); ++j)
        kept[j] = static_cast<size_t>(keep[j]) < m_acc[s].size() ? m_acc[s][keep[j]] : 0.0f;
      m_acc[s] = std::move(kept);
    }
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override { return accumulated(ctx); }

 private:
  // The running totals, sized to the cache (entries never observed count 0).
  StreamScores accumulated(const PolicyContext& ctx) const {
    const KvGeometry& g = ctx.kv->geometry();
    StreamScores s = m_acc;
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h)
        s[static_cast<size_t>(il * g.n_kv_head + h)].resize(
            static_cast<size_t>(ctx.kv->length(il, h)), 0.0f);
    return s;
  }

  int64_t m_recent;  // < 0: half the per-head budget
  int m_n_kv_head;
  std::vector<std::vector<float>> m_acc;  // [n_streams] -> [length], in cache order
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "h2o");
  b.require_per_head_at_least(g, 1, "policy h2o");
  const int64_t recent = o.is_set("recent") ? o.get_int("recent") : -1;
  TRIMKV_CHECK(recent <= b.per_head_entries(g), Input, "policy h2o: recent ", recent,
               " exceeds the per-head budget of ", b.per_head_entries(g), " entries");
  return std::make_unique<H2oPolicy>(recent, g);
}

}  // namespace

const PolicyEntry& h2o_policy_entry() {
  static const PolicyEntry kEntry{
      {"h2o",
       "accumulated attention (heavy hitters) + a recent window, per head",
       {int_option("recent", "auto", 0, kMaxOption,
                   "recent tokens always kept (auto: half the per-head budget)")},
       false,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
