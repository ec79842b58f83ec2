// snapkv (Li et al. 2024): the attention of the last w prompt queries ("observation window"),
// per KV head averaged over its query group, 1-D pooled along the cache, top-k per head; the
// window itself is always kept.
//
// Note "snapkv at every trigger": the reference compresses once after the prompt. Here the same
// rule runs at every trigger (after the prompt, and during decode whenever the cache exceeds
// budget + slack) with the window being the newest w tokens, so every policy holds the same budget.
// With --whole-prompt-eviction and a large slack the reference behaviour is recovered.
#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class SnapKvPolicy final : public SnapKvFamilyPolicy {
 public:
  SnapKvPolicy(int window, int kernel, std::string pooling)
      : SnapKvFamilyPolicy(window, kernel, std::move(pooling)) {}
  std::string name() const override { return "snapkv"; }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const StreamScores scores = entry_scores(ctx);
    return select_per_head_top_k(
        *ctx.kv, scores,
        std::vector<int64_t>(static_cast<size_t>(ctx.kv->geometry().n_streams()),
                             ctx.budget_per_head));
  }
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "snapkv");
  const int64_t window = o.get_int("window");
  TRIMKV_CHECK(o.get_int("kernel") % 2 == 1, Input, "policy snapkv: kernel must be odd, got ",
               o.get_int("kernel"));
  b.require_per_head_at_least(g, window + 1,
                              "policy snapkv (window " + std::to_string(window) + ")");
  return std::make_unique<SnapKvPolicy>(
      static_cast<int>(window), static_cast<int>(o.get_int("kernel")), o.get_choice("pooling"));
}

}  // namespace

std::vector<PolicyOptionInfo> snapkv_family_options() {
  return {int_option("window", "32", 1, 1 << 16, "observation window: the newest w queries"),
          int_option("kernel", "5", 1, 1 << 10, "1-D pooling kernel size (odd)"),
          choice_option("pooling", "avg", {"avg", "max"}, "pooling of the votes")};
}

const PolicyEntry& snapkv_policy_entry() {
  static const PolicyEntry kEntry{
      {"snapkv", "attention of the last w queries, pooled, top-k per head; the window kept",
       snapkv_family_options(), false, true},
      make};
  return kEntry;
}

}  // namespace trimkv
