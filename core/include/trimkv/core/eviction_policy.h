// The eviction-policy interface (DESIGN.md "Key objects", STYLE.md §5) and the registry that maps
// the names the CLI and GUI use to implementations (one file per policy in core/src/eviction/).
//
// A policy reads the cache (metadata, scores, optionally keys and attention statistics) and
// returns an EvictionPlan; it never edits the cache. The Evictor (evictor.h) decides when to ask
// (the trigger, METHOD.md §4), applies the plan and records the trace.
//
// Attention statistics cost nothing unless a policy asks: needs() tells the decoder what to
// hand to observe_layer() during each forward.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/attention_observer.h"
#include "trimkv/core/budget.h"
#include "trimkv/core/eviction_plan.h"
#include "trimkv/core/eviction_select.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/kv_bookkeeping.h"
#include "trimkv/kernels/paged_attention.h"

namespace trimkv {

class KvCache;

// What a policy needs from the forward pass and the model.
struct PolicyNeeds {
  bool gates = false;          // log β of every entry (an EntryScorer: retention gates)
  bool attention_sum = false;  // per layer, attn_sum of all query rows of each forward
  bool query_rows = false;     // per layer, the rotated q of each forward (observation windows)
  bool keys = false;           // the cache's K rows at planning time (KvCache, not bookkeeping)
  bool uses_budget = true;     // false: the policy ignores the budget (full, fastv, visionzip,
                               // dbtrimkv threshold mode)
  // true: the policy's scores and state never depend on where an entry sits in its head's cache
  // (only on the entry's own metadata), so compaction may fill holes from a head's tail and
  // leave the cache out of token order (Compaction::kFillFromTail: far fewer row moves).
  bool order_free = false;
};

// What the policy sees when asked for a plan.
struct PolicyContext {
  const KvBookkeeping* kv = nullptr;  // always set
  const KvCache* cache = nullptr;     // set when the cache has tensor storage (null in plain tests)
  int64_t step = 0;                   // forwards run so far (this one included)
  int64_t budget_global = -1;         // M_global in entries; -1 = unlimited
  int64_t budget_per_head = -1;       // M = floor(M_global / (L·H_kv)); -1 = unlimited
  int64_t slack_global = 0;           // trigger slack over all streams (slack · L · H_kv)
  int64_t entries_since_plan = 0;     // entries appended since the last plan (or the start)
  // n_tokens == kv->n_tokens(): q of METHOD.md §4 is n_tokens + 1.
  int64_t n_tokens() const { return kv->n_tokens(); }
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string name() const = 0;
  virtual PolicyNeeds needs() const { return {}; }

  // Called by the decoder once per layer per forward when needs() asks for attention data.
  virtual void observe_layer(const LayerObservation& obs) {}
  // Extra trigger for policies that act without a budget (fastv, threshold mode): true when the
  // policy wants to plan now although the budget trigger did not fire. Default: never.
  virtual bool wants_to_plan(const PolicyContext& ctx) const { return false; }
  // The entries to keep. Contract: for policies with needs().uses_budget, the plan keeps at most
  // ctx.budget_global entries; the entries of the newest token are never required to survive
  // (they were attended before planning).
  virtual EvictionPlan plan(const PolicyContext& ctx) = 0;
  // Called after the Evictor applied `plan` (policies with per-entry state remap it).
  virtual void on_applied(const EvictionPlan& plan) {}
  // Per-entry scores of the current cache for snapshots (higher = kept first); NaN where the
  // policy has no score. Default: all NaN.
  virtual StreamScores entry_scores(const PolicyContext& ctx) const;
};

// --- registry --------------------------------------------------------------------------------

// One option of a policy: PolicyOptionInfo (eviction_settings.h, a plain-value header that app/
// sees too), declared once per policy (STYLE.md §2): the CLI help, the GUI's option form,
// validation and the factory's reads all come from that table.

struct PolicyInfo {
  std::string name;
  std::string summary;
  std::vector<PolicyOptionInfo> options;
  bool needs_gates = false;  // needs log β (retention gates / an EntryScorer)
  bool uses_budget = true;   // false: budget ignored (see needs())
};

// Options as parsed from "key=value" strings.
using PolicyOptions = std::map<std::string, std::string>;

// Every registered policy, in the order the CLI lists them.
const std::vector<PolicyInfo>& policy_infos();
std::vector<std::string> policy_names();
// Error{Input} listing the valid names when `name` is unknown.
const PolicyInfo& policy_info(const std::string& name);
// Parses "key=value" items (Error{Input} on a malformed item or a repeated key).
PolicyOptions parse_policy_options(const std::vector<std::string>& items);
// Error{Input} when the policy is unknown, a key is not one of its options (listing the valid
// ones) or a value does not parse or is out of range. Needs no model: run it before loading.
void validate_policy_options(const std::string& name, const PolicyOptions& options);

// Creates a policy for a cache of geometry g under `budget`. Validates the options (as above) and
// everything that depends on the budget and geometry (missing budget, floor x heads > budget,
// window > budget, ...), before any work starts.
std::unique_ptr<EvictionPolicy> make_policy(const std::string& name, const PolicyOptions& options,
                                            const Budget& budget, const KvGeometry& g);

// Typed, validated access to a policy's options; defaults and ranges come from its PolicyInfo.
class OptionReader {
 public:
  OptionReader(const PolicyInfo& info, const PolicyOptions& options);  // validates everything
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::string get_choice(const std::string& key) const;
  // True when the user gave the option (or its default is not "auto").
  bool is_set(const std::string& key) const;
  const PolicyInfo& info() const { return *m_info; }

 private:
  const PolicyOptionInfo& spec(const std::string& key) const;
  std::string text(const std::string& key) const;

  const PolicyInfo* m_info;
  PolicyOptions m_options;
};

}  // namespace trimkv
