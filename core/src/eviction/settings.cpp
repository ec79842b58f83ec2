// Plain-value eviction settings (eviction_settings.h): validation without a model.
#include <algorithm>
#include <cmath>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_policy.h"
#include "trimkv/core/eviction_settings.h"

namespace trimkv {

namespace {
void check_budgets(const EvictionSettings& s) {
  TRIMKV_CHECK(int(s.budget_per_head.has_value()) + int(s.budget_global.has_value()) + int(s.budget_mib.has_value()) <= 1,
               Input, "give one budget: per head, global, or in MiB, not several");
  if (s.budget_per_head) (void)Budget::per_head(*s.budget_per_head);
  if (s.budget_global) (void)Budget::global(*s.budget_global);
  if (s.budget_mib)
    TRIMKV_CHECK(*s.budget_mib > 0 && std::isfinite(*s.budget_mib), Input, "a MiB budget must be > 0, got ", *s.budget_mib);
}
}  // namespace

Budget budget_of(const EvictionSettings& s, const KvGeometry& g, int bytes_per_value) {
  check_budgets(s);
  if (s.budget_per_head) return Budget::per_head(*s.budget_per_head);
  if (s.budget_global) return Budget::global(*s.budget_global);
  if (s.budget_mib) {
    const double entries = std::floor(*s.budget_mib * 1048576.0 / static_cast<double>(kv_bytes_per_entry(g, bytes_per_value)));
    return Budget::global(static_cast<int64_t>(std::max(1.0, std::min(entries, 9e18))));
  }
  return Budget::unlimited();
}

void validate_eviction_settings(const EvictionSettings& s) {
  validate_policy_options(s.policy, parse_policy_options(s.options));
  check_budgets(s);
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
