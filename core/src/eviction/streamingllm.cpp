// streamingllm (Xiao et al. 2023): the first `sinks` tokens ("attention sinks") plus a window of
// the most recent tokens, per (layer, KV head).
#include <algorithm>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_select.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class StreamingLlmPolicy final : public EvictionPolicy {
 public:
  StreamingLlmPolicy(int64_t sinks, int64_t window) : m_sinks(sinks), m_window(window) {}
  std::string name() const override { return "streamingllm"; }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvGeometry& g = ctx.kv->geometry();
    const int64_t window = m_window >= 0 ? m_window : ctx.budget_per_head - m_sinks;
    const StreamScores scores = entry_scores(ctx);
    // Sinks score +inf, the rest their token index: the top (sinks present + window) entries are
    // exactly the sinks and the newest `window` others.
    EvictionPlan plan(g.n_layer, g.n_kv_head);
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        const auto& entries = ctx.kv->entries(il, h);
        int64_t n_sinks = 0;
        for (const auto& e : entries) n_sinks += e.token_index < m_sinks;
        plan.keep(il, h) = top_k_of_stream(
            entries, scores[static_cast<size_t>(il * g.n_kv_head + h)], n_sinks + window);
      }
    return plan;
  }
  StreamScores entry_scores(const PolicyContext& ctx) const override {
    const KvGeometry& g = ctx.kv->geometry();
    StreamScores s(static_cast<size_t>(g.n_streams()));
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        const auto& entries = ctx.kv->entries(il, h);
        auto& out = s[static_cast<size_t>(il * g.n_kv_head + h)];
        out.resize(entries.size());
        for (size_t e = 0; e < entries.size(); ++e) out[e] = static_cast<float>(entries[e].token_index);
      }
    protect_first(*ctx.kv, static_cast<int32_t>(m_sinks), s);
    return s;
  }

 private:
  int64_t m_sinks, m_window;  // window < 0: budget - sinks
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "streamingllm");
  const int64_t m = b.per_head_entries(g);
  const int64_t sinks = o.get_int("sinks");
  const int64_t window = o.is_set("window") ? o.get_int("window") : -1;
  TRIMKV_CHECK(sinks + std::max<int64_t>(window, 0) <= m && sinks < m, Input,
               "policy streamingllm: sinks ", sinks, (window >= 0 ? " + window " : ""),
               (window >= 0 ? std::to_string(window) : std::string()),
               " must fit in the per-head budget of ", m, " entries (with room for a window)");
  return std::make_unique<StreamingLlmPolicy>(sinks, window);
}

}  // namespace

const PolicyEntry& streamingllm_policy_entry() {
  static const PolicyEntry kEntry{
      {"streamingllm",
       "attention sinks (first tokens) + a recent window, per head",
       {int_option("sinks", "4", 0, kMaxOption, "number of initial tokens always kept"),
        int_option("window", "auto", 1, kMaxOption,
                   "recent tokens kept (auto: per-head budget - sinks)")},
       false,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
