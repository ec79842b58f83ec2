// dbtrimkv: learned retention, ONE top-k over every (layer, KV head) entry of the sequence
// (METHOD.md §4 "Selection"). Scores from log β (retention_log_score), optional per-head floor,
// protected recent window, protected first tokens ("sinks"), or threshold mode (keep score >=
// log α, no fixed budget).
#include <cmath>

#include "eviction/device_selection.h"
#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class DbTrimKvPolicy final : public EvictionPolicy {
 public:
  DbTrimKvPolicy(int lookahead, int64_t floor, int64_t window, int64_t sinks, double alpha)
      : m_lookahead(lookahead), m_floor(floor), m_window(window), m_sinks(sinks), m_alpha(alpha) {}

  std::string name() const override { return "dbtrimkv"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.gates = true;
    n.uses_budget = !threshold_mode();
    n.order_free = true;  // scores from each entry's own log β and token index
    return n;
  }
  // Threshold mode has no budget to trigger on: plan once `slack` new entries per head arrived.
  bool wants_to_plan(const PolicyContext& ctx) const override {
    return threshold_mode() && ctx.entries_since_plan > 0 &&
           ctx.entries_since_plan >= ctx.slack_global;
  }
  EvictionPlan plan(const PolicyContext& ctx) override {
    if (ctx.cache) {  // a cache on the GPU: selected there (device_selection.h), the same plan
      LearnedSelection s{m_lookahead, m_window, m_sinks, ctx.budget_global, m_floor, std::nullopt, std::nullopt};
      if (threshold_mode()) s.threshold = static_cast<float>(std::log(m_alpha));
      if (auto on_device = learned_plan_on_device(*ctx.cache, s)) return std::move(*on_device);
    }
    const StreamScores scores = entry_scores(ctx);
    if (threshold_mode())
      return select_threshold(*ctx.kv, scores, static_cast<float>(std::log(m_alpha)));
    return select_global_top_k(*ctx.kv, scores, ctx.budget_global, m_floor);
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override {
    return learned_retention_scores(*ctx.kv, m_lookahead, m_window, m_sinks);
  }

 private:
  bool threshold_mode() const { return m_alpha > 0; }
  int m_lookahead;
  int64_t m_floor, m_window, m_sinks;
  double m_alpha;  // > 0: threshold mode
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  const int lookahead = static_cast<int>(o.get_int("lookahead"));
  const int64_t floor = o.get_int("floor");
  const int64_t window = o.get_int("window");
  const int64_t sinks = o.get_int("sinks");
  const double alpha = o.is_set("threshold") ? o.get_double("threshold") : 0.0;
  if (alpha > 0) {
    TRIMKV_CHECK(b.is_unlimited(), Input,
                 "policy dbtrimkv: threshold mode keeps every entry with score >= log(threshold) "
                 "and has no fixed budget; drop the budget or the threshold option");
    TRIMKV_CHECK(floor == 0, Input, "policy dbtrimkv: floor cannot be combined with threshold");
  } else {
    const int64_t m_global = require_budget(b, g, "dbtrimkv");
    const int64_t n_streams = g.n_streams();
    TRIMKV_CHECK(floor * n_streams <= m_global, Input, "policy dbtrimkv: floor ", floor, " x ",
                 n_streams, " heads (", g.n_layer, " layers x ", g.n_kv_head,
                 " KV heads) = ", floor * n_streams, " exceeds the budget of ", m_global,
                 " entries");
    TRIMKV_CHECK((floor + window + sinks) * n_streams <= m_global, Input, "policy dbtrimkv: window ",
                 window, " + sinks ", sinks, " + floor ", floor, " per head x ", n_streams,
                 " heads exceeds the budget of ", m_global,
                 " entries (protected entries must fit)");
  }
  return std::make_unique<DbTrimKvPolicy>(lookahead, floor, window, sinks, alpha);
}

}  // namespace

const PolicyEntry& dbtrimkv_policy_entry() {
  static const PolicyEntry kEntry{
      {"dbtrimkv",
       "learned retention (log beta), one global top-k over all layers and KV heads",
       {int_option("lookahead", "2", 1, 1 << 20,
                   "score lookahead n (1: beta^(q-pos); >1: sum of the next n steps)"),
        int_option("floor", "0", 0, kMaxOption, "minimum entries kept per (layer, KV head)"),
        int_option("window", "0", 0, kMaxOption,
                   "protected recent window: the newest N tokens are always kept"),
        int_option("sinks", "0", 0, kMaxOption,
                   "protected first tokens (attention sinks): the first N tokens are always kept"),
        double_option("threshold", "auto", 1e-30, 1.0,
                      "threshold mode: keep every entry with score >= log(threshold), no budget")},
       true,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
