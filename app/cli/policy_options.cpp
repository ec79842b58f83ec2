#include "policy_options.h"

#include <fstream>
#include <sstream>

#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/trace.h"

namespace trimkv::cli {

void add_policy_option_specs(std::vector<OptionSpec>& specs) {
  const std::vector<OptionSpec> mine = {
      {"policy", "NAME", "KV eviction policy (default full; see the list below)"},
      ranged_int("budget", "M",
       "KV budget in entries per layer and KV head (M_global = M x layers x KV heads)", 1, int64_t{1} << 40),
      ranged_int("global-budget", "N",
       "KV budget in entries over all layers and KV heads (instead of --budget)", 1, int64_t{1} << 50),
      ranged_real("budget-mib", "MIB",
       "KV budget in MiB of K and V over all layers and KV heads, at the cache's --kv-dtype (instead of --budget)", 1e-6, 1e9),
      {"policy-opt", "KEY=VALUE", "policy option, e.g. lookahead=2, floor=4", true},
      ranged_int("slack", "S",
       "compress when the cache exceeds the budget by S entries per head (default 32)", 0, int64_t{1} << 30),
      {"whole-prompt-eviction", "",
       "evict only after the whole prompt (reference behaviour) "
       "instead of after every prefill chunk"},
      {"trace", "FILE",
       "write the eviction trace as JSON (schema: core/include/trimkv/core/trace.h)"},
      {"trace-csv", "FILE", "write per-head kept/evicted counts per eviction as CSV"},
  };
  insert_before_help(specs, mine);
}

std::string policy_help() {
  std::ostringstream os;
  os << "\neviction policies (--policy NAME, options with --policy-opt KEY=VALUE):\n";
  for (const PolicyDescription& p : describe_policies()) {
    os << "  " << p.name << ": " << p.summary;
    if (p.needs_gates) os << " [needs retention gates]";
    if (!p.uses_budget) os << " [no budget]";
    os << "\n";
    for (const std::string& o : p.options) os << "      " << o << "\n";
  }
  return os.str();
}

bool eviction_requested(const Args& args) {
  for (const char* name : {"policy", "budget", "global-budget", "budget-mib", "policy-opt", "slack",
                           "whole-prompt-eviction", "trace", "trace-csv"})
    if (args.has(name) && !(std::string(name) == "policy" && args.get(name) == "full")) return true;
  return false;
}

EvictionSettings parse_policy_settings(const Args& args) {
  EvictionSettings s;
  s.policy = args.get("policy", "full");
  s.options = args.all("policy-opt");
  if (args.has("budget")) s.budget_per_head = args.get_int64("budget", 0);
  if (args.has("global-budget")) s.budget_global = args.get_int64("global-budget", 0);
  if (args.has("budget-mib")) s.budget_mib = args.get_double("budget-mib", 0);
  if (int(args.has("budget")) + int(args.has("global-budget")) + int(args.has("budget-mib")) > 1)
    throw UsageError("give one of --budget, --global-budget and --budget-mib");
  if (args.has("slack")) s.slack = args.get_int64("slack", 0);
  s.whole_prompt = args.flag("whole-prompt-eviction");
  validate_eviction_settings(s);
  return s;
}

void write_trace_outputs(const Args& args, const GenerationResult& r) {
  if (!args.has("trace") && !args.has("trace-csv")) return;
  Trace empty;
  const Trace& t = r.trace ? *r.trace : empty;
  if (args.has("trace")) write_file_atomic(args.get("trace"), trace_to_json(t, 1) + "\n");
  if (args.has("trace-csv")) write_file_atomic(args.get("trace-csv"), trace_per_head_csv(t));
}

}  // namespace trimkv::cli
