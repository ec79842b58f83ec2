// trimkv: learned retention with a per-head budget: the same scores as dbtrimkv, top-M per
// (layer, KV head) (METHOD.md §4 "Selection").
#include "eviction/device_selection.h"
#include "trimkv/core/error.h"
#include "trimkv/core/eviction_select.h"
#include "trimkv/core/policies.h"

namespace trimkv {

StreamScores learned_retention_scores(const KvBookkeeping& kv, int lookahead, int64_t window,
                                      int64_t sinks) {
  StreamScores scores = retention_scores(kv, lookahead);
  if (window > 0) protect_window(kv, static_cast<int>(window), scores);
  if (sinks > 0) protect_first(kv, static_cast<int32_t>(sinks), scores);
  return scores;
}

namespace {

class TrimKvPolicy final : public EvictionPolicy {
 public:
  TrimKvPolicy(int lookahead, int64_t window, int64_t sinks)
      : m_lookahead(lookahead), m_window(window), m_sinks(sinks) {}
  std::string name() const override { return "trimkv"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.gates = true;
    n.order_free = true;  // scores from each entry's own log β and token index
    return n;
  }
  EvictionPlan plan(const PolicyContext& ctx) override {
    if (ctx.cache) {  // a cache on the GPU: selected there (device_selection.h), the same plan
      LearnedSelection s{m_lookahead, m_window, m_sinks, 0, 0, std::nullopt, ctx.budget_per_head};
      if (auto on_device = learned_plan_on_device(*ctx.cache, s)) return std::move(*on_device);
    }
    const StreamScores scores = entry_scores(ctx);
    return select_per_head_top_k(
        *ctx.kv, scores,
        std::vector<int64_t>(static_cast<size_t>(ctx.kv->geometry().n_streams()),
                             ctx.budget_per_head));
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override {
    return learned_retention_scores(*ctx.kv, m_lookahead, m_window, m_sinks);
  }

 private:
  int m_lookahead;
  int64_t m_window, m_sinks;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "trimkv");
  b.require_per_head_at_least(g, 1, "policy trimkv");
  const int64_t window = o.get_int("window"), sinks = o.get_int("sinks");
  TRIMKV_CHECK(window + sinks <= b.per_head_entries(g), Input, "policy trimkv: window ", window,
               " + sinks ", sinks, " exceeds the per-head budget of ", b.per_head_entries(g),
               " entries");
  return std::make_unique<TrimKvPolicy>(static_cast<int>(o.get_int("lookahead")), window, sinks);
}

}  // namespace

const PolicyEntry& trimkv_policy_entry() {
  static const PolicyEntry kEntry{
      {"trimkv",
       "learned retention (log beta), top-M per (layer, KV head)",
       {int_option("lookahead", "2", 1, 1 << 20,
                   "score lookahead n (1: beta^(q-pos); >1: sum of the next n steps)"),
        int_option("window", "0", 0, kMaxOption,
                   "protected recent window: the newest N tokens are always kept"),
        int_option("sinks", "0", 0, kMaxOption,
                   "protected first tokens (attention sinks): the first N tokens are always kept")},
       true,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
