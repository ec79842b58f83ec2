// The Evictor runs a policy on a KvCache (METHOD.md §4 "Inference eviction"): it owns the policy,
// decides when to compress, applies the plan (compaction; freed blocks return to the pool) and
// records the trace. TextRunner calls it after every forward; the decoder hands it the attention
// data the policy asked for (AttentionObserver).
//
// Trigger (note "when to compress"), counted over all (layer, KV head) entries:
//  - budgeted policies: after a forward, when entries > M_global + slack·L·H_kv, compress down to
//    the budget. Inside a chunked prefill (another chunk of the same prompt follows) the slack is
//    0, and a prefill chunk that starts above the budget compresses first (before_forward), so
//    the peak during a prefill stays <= M_global + one chunk·L·H_kv; during decode it is
//    M_global + slack·L·H_kv + L·H_kv. With whole_prompt, nothing is compressed until the last
//    chunk of a prompt (the reference behaviour: whole prompt, then evict).
//  - policies without a budget (full, fastv, visionzip, dbtrimkv threshold mode) are asked
//    (wants_to_plan) after every forward that may compress.
// New entries are always appended and attended before any compression, so a token is never
// evicted before it was attended to.
#pragma once
#include <memory>
#include <string>

#include "trimkv/core/attention_observer.h"
#include "trimkv/core/eviction_policy.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/snapshot.h"
#include "trimkv/core/trace.h"

namespace trimkv {

class KvCache;

class Evictor final : public AttentionObserver {
 public:
  // Validates the settings and builds the policy for geometry g (Error{Input} before any work).
  // bytes_per_value: of the cache's K/V storage (a MiB budget's unit).
  Evictor(const EvictionSettings& settings, const KvGeometry& g, int bytes_per_value = 4);
  ~Evictor() override;

  // Error{Input} "policy X needs retention gates" when the policy needs log β and has_gates is
  // false. TextRunner calls it when the evictor is attached.
  void require_gates(bool has_gates, const std::string& model) const;

  // AttentionObserver
  bool observes() const override { return m_observes; }
  bool wants_attention_sum() const override { return m_needs.attention_sum; }
  void on_layer(const LayerObservation& obs) override;

  // Before a forward of n_new tokens: a multi-token forward (prefill chunk) that starts above the
  // budget (after decode steps the cache may hold up to budget + slack) compresses first, so the
  // peak of a prefill never exceeds budget + one chunk. Old entries were all attended already.
  // Not in whole-prompt mode. Returns true if it compressed.
  bool before_forward(KvCache& cache, int64_t n_new);
  // After a forward of n_new tokens; more_chunks: another chunk of the same prefill follows.
  // Compresses when the trigger fires; returns true if it did.
  bool after_forward(KvCache& cache, int64_t n_new, bool more_chunks);
  // Runs the policy now regardless of the trigger (tests, "compress now" in the GUI).
  void compress(KvCache& cache, const std::string& phase);

  // Records a token-stream change made before the decoder (visionzip).
  void record_token_merge(TokenMerge merge);

  KvSnapshot snapshot(const KvCache& cache) const;
  const Trace& trace() const { return m_trace; }
  const EvictionPolicy& policy() const { return *m_policy; }
  EvictionPolicy& policy() { return *m_policy; }
  const PolicyNeeds& needs() const { return m_needs; }
  int64_t budget_global() const { return m_budget_global; }
  int64_t budget_per_head() const { return m_budget_per_head; }
  int64_t n_events() const { return static_cast<int64_t>(m_trace.events.size()); }
  int64_t step() const { return m_step; }
  // Largest number of entries the cache held after any forward (before compressing).
  int64_t peak_entries() const { return m_peak_entries; }

 private:
  PolicyContext context(const KvCache& cache) const;

  EvictionSettings m_settings;
  KvGeometry m_geometry;
  std::unique_ptr<EvictionPolicy> m_policy;
  PolicyNeeds m_needs;
  bool m_observes = false;
  int64_t m_budget_global = -1, m_budget_per_head = -1;
  int64_t m_slack_global = 0;
  int64_t m_step = 0;
  int64_t m_entries_at_last_plan = 0;
  int64_t m_peak_entries = 0;
  Trace m_trace;
};

}  // namespace trimkv
