// full: the reference, no eviction ("vanilla"). The budget is ignored.
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class FullPolicy final : public EvictionPolicy {
 public:
  std::string name() const override { return "full"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.uses_budget = false;
    return n;
  }
  EvictionPlan plan(const PolicyContext& ctx) override { return EvictionPlan::keep_all(*ctx.kv); }
};

std::unique_ptr<EvictionPolicy> make(const OptionReader&, const Budget&, const KvGeometry&) {
  return std::make_unique<FullPolicy>();
}

}  // namespace

const PolicyEntry& full_policy_entry() {
  static const PolicyEntry kEntry{
      {"full", "no eviction: every entry is kept (the budget is ignored)", {}, false, false}, make};
  return kEntry;
}

}  // namespace trimkv
