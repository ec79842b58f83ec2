#include "trimkv/core/evictor.h"

#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"

namespace trimkv {

namespace {

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Evictor::Evictor(const EvictionSettings& settings, const KvGeometry& g, int bytes_per_value)
    : m_settings(settings), m_geometry(g) {
  validate_eviction_settings(settings);
  const Budget budget = budget_of(settings, g, bytes_per_value);
  const PolicyOptions options = parse_policy_options(settings.options);
  m_policy = make_policy(settings.policy, options, budget, g);
  m_needs = m_policy->needs();
  m_observes = m_needs.attention_sum || m_needs.query_rows;
  if (m_needs.uses_budget) {
    m_budget_global = budget.global_entries(g);
    m_budget_per_head = budget.per_head_entries(g);
    TRIMKV_ASSERT(m_budget_global > 0, "budgeted policy without a budget");
  }
  m_slack_global = settings.slack * g.n_streams();
  m_trace.policy = settings.policy;
  m_trace.options = options;
  m_trace.geometry = g;
  m_trace.budget_global = m_budget_global;
  m_trace.budget_per_head = m_budget_per_head;
  m_trace.slack_per_head = settings.slack;
}

Evictor::~Evictor() = default;

void Evictor::require_gates(bool has_gates, const std::string& model) const {
  TRIMKV_CHECK(!m_needs.gates || has_gates, Input, "policy ", m_policy->name(),
               " ranks entries by learned retention (log beta) and needs retention gates, but "
               "model '",
               model,
               "' runs without gates; load gates or choose another policy "
               "(e.g. snapkv, h2o, streamingllm)");
}

void Evictor::on_layer(const LayerObservation& obs) {
  if (m_observes) m_policy->observe_layer(obs);
}

PolicyContext Evictor::context(const KvCache& cache) const {
  PolicyContext ctx;
  ctx.kv = &cache.bookkeeping();
  ctx.cache = &cache;
  ctx.step = m_step;
  ctx.budget_global = m_budget_global;
  ctx.budget_per_head = m_budget_per_head;
  ctx.slack_global = m_slack_global;
  ctx.entries_since_plan =
      std::max<int64_t>(0, cache.bookkeeping().total_entries() - m_entries_at_last_plan);
  return ctx;
}

bool Evictor::before_forward(KvCache& cache, int64_t n_new) {
  if (n_new <= 1 || m_settings.whole_prompt || !m_needs.uses_budget) return false;
  if (cache.bookkeeping().total_entries() <= m_budget_global) return false;
  compress(cache, "prefill");
  return true;
}

bool Evictor::after_forward(KvCache& cache, int64_t n_new, bool more_chunks) {
  ++m_step;
  const int64_t entries = cache.bookkeeping().total_entries();
  m_peak_entries = std::max(m_peak_entries, entries);
  if (more_chunks && m_settings.whole_prompt) return false;
  bool fire = false;
  if (m_needs.uses_budget) {
    const int64_t limit = m_budget_global + (more_chunks ? 0 : m_slack_global);
    fire = entries > limit;
  } else {
    fire = m_policy->wants_to_plan(context(cache));
  }
  if (!fire) {
    // Entries that left since the last plan (a new turn's clear) must not count as growth.
    m_entries_at_last_plan = std::min(m_entries_at_last_plan, entries);
    return false;
  }
  compress(cache, n_new > 1 ? "prefill" : "decode");
  return true;
}

void Evictor::compress(KvCache& cache, const std::string& phase) {
  const KvBookkeeping& kv = cache.bookkeeping();
  const KvGeometry& g = kv.geometry();
  const auto t0 = std::chrono::steady_clock::now();
  const EvictionPlan plan = m_policy->plan(context(cache));
  const auto t1 = std::chrono::steady_clock::now();

  EvictionEvent ev;
  ev.index = static_cast<int64_t>(m_trace.events.size());
  ev.step = m_step;
  ev.n_tokens = kv.n_tokens();
  ev.phase = phase;
  ev.entries_before = kv.total_entries();
  ev.heads.resize(static_cast<size_t>(g.n_streams()));
  const std::vector<TokenInfo>& tokens = kv.tokens();  // every entry's token is registered
  // Each head's accounting runs on the thread that compacts it, just before (cache.apply
  // validates the plan first: nothing is counted for a plan it refuses).
  const auto account = [&](int64_t si) {
    const int il = static_cast<int>(si / g.n_kv_head), h = static_cast<int>(si % g.n_kv_head);
    HeadEviction& he = ev.heads[static_cast<size_t>(si)];
    const auto& entries = kv.entries(il, h);
    const auto& keep = plan.keep(il, h);
    size_t j = 0;
    for (size_t e = 0; e < entries.size(); ++e) {
      const Modality m = tokens[static_cast<size_t>(entries[e].token_index)].modality;
      if (j < keep.size() && keep[j] == static_cast<int32_t>(e)) {
        he.kept.add(m);
        ++j;
      } else {
        he.evicted.add(m);
        if (m_settings.record_evicted_tokens) he.evicted_tokens.push_back(entries[e].token_index);
      }
    }
    std::sort(he.evicted_tokens.begin(), he.evicted_tokens.end());
  };

  const ApplyResult applied =
      cache.apply(plan, account, m_needs.order_free ? Compaction::kFillFromTail : Compaction::kPreserveOrder);
  m_policy->on_applied(plan);
  const auto t2 = std::chrono::steady_clock::now();
  ev.entries_after = kv.total_entries();
  ev.blocks_freed = applied.n_blocks_freed;
  ev.select_ms = ms_between(t0, t1);
  ev.apply_ms = ms_between(t1, t2);
  m_entries_at_last_plan = ev.entries_after;
  if (m_needs.uses_budget)
    TRIMKV_ASSERT(ev.entries_after <= m_budget_global, "policy ", m_policy->name(), " kept ",
                  ev.entries_after, " entries over the budget of ", m_budget_global);
  m_trace.events.push_back(std::move(ev));
}

void Evictor::record_token_merge(TokenMerge merge) {
  m_trace.token_merges.push_back(std::move(merge));
}

KvSnapshot Evictor::snapshot(const KvCache& cache) const {
  const StreamScores scores = m_policy->entry_scores(context(cache));
  KvSnapshot s = make_snapshot(
      cache.bookkeeping(), scores,
      kv_bytes_per_entry(m_geometry, static_cast<int>(cache.k_pool().element_size())));
  s.step = m_step;
  s.policy = m_policy->name();
  s.budget_global = m_budget_global;
  s.n_events = n_events();
  return s;
}

}  // namespace trimkv
