// Plain-value eviction settings (no tensors): what app/ (CLI, GUI) passes to Engine / Session to
// choose a policy, its options and the budget. Policy names and options: eviction_policy.h
// (`trimkv generate --help` lists them).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trimkv/core/budget.h"

namespace trimkv {

struct EvictionSettings {
  std::string policy = "full";
  std::vector<std::string> options;        // "key=value" items, e.g. "lookahead=2"
  std::optional<int64_t> budget_per_head;  // M (entries per layer and KV head)
  std::optional<int64_t> budget_global;    // M_global (entries over all layers and KV heads)
  // Or bytes: MiB of K and V over all layers and KV heads, at the cache's dtype (--kv-dtype):
  // M_global = floor(MiB · 2^20 / (2 · head_dim · bytes per value)), at least 1.
  std::optional<double> budget_mib;
  int64_t slack = 32;         // per head: compress when entries > budget + slack·L·H_kv
  bool whole_prompt = false;  // evict only after the whole prompt (reference behaviour) instead
                              // of after every prefill chunk
  bool record_evicted_tokens = true;  // trace events list evicted token indices
};

// Checks everything that needs no model: policy name, option keys and values, budget > 0, at most
// one of the three budgets, slack >= 0. Error{Input} with a clear message.
void validate_eviction_settings(const EvictionSettings& settings);
// The budget the settings give for a cache of geometry `g` storing `bytes_per_value` bytes per
// K/V value (unlimited when none is set). Validates the values.
Budget budget_of(const EvictionSettings& settings, const KvGeometry& g, int bytes_per_value = 4);
// One option of a policy (its registry table, eviction_policy.h): kind, default, range, help.
struct PolicyOptionInfo {
  enum class Kind { Int, Double, Choice };
  std::string name;
  Kind kind = Kind::Int;
  std::string default_value;  // as text; "auto" = derived from the budget (see help)
  std::string help;
  double min = 0, max = 0;           // Int / Double: inclusive range
  std::vector<std::string> choices;  // Choice
};

// Name and summary of every policy, and its options as "name=default: help" lines (for --help)
// and as their table entries (option_infos, same order: the GUI builds its form from them).
struct PolicyDescription {
  std::string name, summary;
  std::vector<std::string> options;
  std::vector<PolicyOptionInfo> option_infos;
  bool needs_gates = false;
  bool uses_budget = true;
};
std::vector<PolicyDescription> describe_policies();

}  // namespace trimkv
