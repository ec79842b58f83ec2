// Plain-value eviction settings (eviction_settings.h): validation without a model.
#include "trimkv/core/error.h"
#include "trimkv/core/eviction_policy.h"
#include "trimkv/core/eviction_settings.h"

namespace trimkv {

Budget budget_of(const EvictionSettings& s) {
  TRIMKV_CHECK(!(s.budget_per_head && s.budget_global), Input,
               "give either a per-head budget or a global budget, not both");
  if (s.budget_per_head) return Budget::per_head(*s.budget_per_head);
  if (s.budget_global) return Budget::global(*s.budget_global);
  return Budget::unlimited();
}

void validate_eviction_settings(const EvictionSettings& s) {
  validate_policy_options(s.policy, parse_policy_options(s.options));
  budget_of(s);
  TRIMKV_CHECK(s.slack >= 0, Input, "slack must be >= 0 entries per head, got ", s.slack);
}

std::vector<PolicyDescription> describe_policies() {
  std::vector<PolicyDescription> out;
  for (const PolicyInfo& p : policy_infos()) {
    PolicyDescription d;
    d.name = p.name;
    d.summary = p.summary;
    d.needs_gates = p.needs_gates;
    d.uses_budget = p.uses_budget;
    for (const auto& o : p.options)
      d.options.push_back(o.name + "=" + o.default_value + ": " + o.help);
    d.option_infos = p.options;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace trimkv
