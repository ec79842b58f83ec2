// DBTrimKV's and TrimKV's selection on the GPU that holds the cache (kernels/cuda: retention
// scores, protected sinks and recent window, one global top-k with its per-head floor, the
// threshold, or a top-k per head), in core's
// order (eviction_select.h), so the plan is the one the host computes: each entry's log β,
// log(1 + β) and token go up once, the keep flags come back. Used for lookahead 2 (the default,
// scored bit for bit as on the host); other lookaheads, CPU pools and builds without the CUDA
// runtime get nullopt and the host selects.
#pragma once
#include <cstdint>
#include <optional>

#include "trimkv/core/eviction_plan.h"

namespace trimkv {

class KvCache;

struct LearnedSelection {
  int lookahead = 2;
  int64_t window = 0, sinks = 0;     // protected recent tokens / first tokens
  int64_t k = 0, floor_per_head = 0;  // global top-k (select_global_top_k)
  std::optional<float> threshold;    // instead: keep score >= threshold (select_threshold)
  std::optional<int64_t> per_head;   // instead: top-k per (layer, KV head) (TrimKV: select_per_head_top_k)
};

std::optional<EvictionPlan> learned_plan_on_device(const KvCache& cache, const LearnedSelection& s);

}  // namespace trimkv
