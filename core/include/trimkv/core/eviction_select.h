// Retention scores (METHOD.md §4) and the selection rules every policy is built from: global
// top-k (optionally with a per-head floor), per-head top-k, threshold. Plain C++, no tensors:
// tested exhaustively against brute-force references (tests/core/test_eviction_select.cpp).
//
// Scores are per (layer, KV head) stream, in that stream's cache order: scores[il * n_kv_head + h]
// has length kv.length(il, h). Higher is better. +inf means "always keep" (log β == 0, protected
// entries); NaN is not allowed.
//
// Deterministic order (note "tie-break"): entry a ranks before entry b when
//   a.score > b.score, or equal scores and a is newer (larger token_index), or equal scores and
//   equal token_index (the same token in two heads) and a's stream index is smaller.
// This is a strict total order over the entries of a cache, so every selection below has exactly
// one answer, independent of the algorithm (nth_element, sorting) that computes it.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "trimkv/core/eviction_plan.h"
#include "trimkv/core/kv_bookkeeping.h"

namespace trimkv {

using StreamScores = std::vector<std::vector<float>>;  // [n_streams] -> [length(stream)]

// log(1 - e^x) for x < 0, stable over the whole range (Mächler 2012): log(-expm1(x)) near 0,
// log1p(-exp(x)) far from it. x == 0 gives -inf.
inline float log1mexp(float x) {
  return x > -0.6931472f ? std::log(-std::expm1(x)) : std::log1p(-std::exp(x));
}

// Log retention score of an entry created at sequential position `pos` with log β = log_beta,
// when `q` = (tokens seen so far) + 1, looking ahead `lookahead` steps (METHOD.md §4):
//   n = 1:  (q - pos) · log β
//   n > 1:  log Σ_{s=q+1}^{q+n} β^(s-pos) = (q+1-pos)·log β + log(1 - β^n) - log(1 - β)
// in fp32; log β == 0 exactly gives +inf (never forgotten).
// n = 2: log(1 - β²) - log(1 - β) = log(1 + β) exactly; one exp + log1p instead of two log1mexp
// (the default lookahead, on the eviction hot path), and a per-entry constant: EntryMeta keeps it
// (log1p_beta_of, kv_types.h).
inline float lookahead2_score(float log_beta, float log1p_beta, int64_t q, int32_t pos) {
  return static_cast<float>(q + 1 - pos) * log_beta + log1p_beta;
}

inline float retention_log_score(float log_beta, int64_t q, int32_t pos, int lookahead) {
  if (log_beta == 0.0f) return std::numeric_limits<float>::infinity();
  if (lookahead <= 1) return static_cast<float>(q - pos) * log_beta;
  if (lookahead == 2) return lookahead2_score(log_beta, log1p_beta_of(log_beta), q, pos);
  const float n = static_cast<float>(lookahead);
  return static_cast<float>(q + 1 - pos) * log_beta + log1mexp(n * log_beta) - log1mexp(log_beta);
}

// Retention scores of every entry of kv (q = kv.n_tokens() + 1).
StreamScores retention_scores(const KvBookkeeping& kv, int lookahead);

// True when entry (score_a, token_a, stream_a) ranks strictly before (score_b, token_b, stream_b)
// in the deterministic order above.
inline bool ranks_before(float score_a, int32_t token_a, int stream_a, float score_b,
                         int32_t token_b, int stream_b) {
  if (score_a != score_b) return score_a > score_b;
  if (token_a != token_b) return token_a > token_b;
  return stream_a < stream_b;
}

// Sets the score of every entry whose token_index >= first_protected to +inf (a protected
// recent window).
void protect_recent(const KvBookkeeping& kv, int32_t first_protected, StreamScores& scores);

// Sets the score of every entry whose token_index < n_first to +inf (the first tokens of the
// stream, "attention sinks", kept whatever their score).
void protect_first(const KvBookkeeping& kv, int32_t n_first, StreamScores& scores);

// Keeps, over the streams listed in `streams` (stream = il * n_kv_head + h), the k best entries
// in the deterministic order. With floor_per_head > 0 (the authors' floor rule): the top
// k - floor·|streams| entries are chosen jointly, then every stream additionally keeps its next
// `floor_per_head` best entries (capped at its length), so each stream keeps at least
// min(floor, length) entries and the total stays <= k. Requires floor·|streams| <= k. Streams not
// listed are left as they are in `plan`; listed ones are overwritten.
void select_top_k_joint(const KvBookkeeping& kv, const StreamScores& scores,
                        const std::vector<int>& streams, int64_t k, int64_t floor_per_head,
                        EvictionPlan& plan);

// DBTrimKV's selection: one top-k over every stream (select_top_k_joint over all of them).
EvictionPlan select_global_top_k(const KvBookkeeping& kv, const StreamScores& scores, int64_t k,
                                 int64_t floor_per_head = 0);

// Keeps the k_per_stream[s] best entries of each stream s (all of them when k >= length).
EvictionPlan select_per_head_top_k(const KvBookkeeping& kv, const StreamScores& scores,
                                   const std::vector<int64_t>& k_per_stream);

// Keeps every entry whose score is >= threshold (DBTrimKV threshold mode: threshold = log α).
EvictionPlan select_threshold(const KvBookkeeping& kv, const StreamScores& scores, float threshold);

// Sorted keep indices of the best k entries of one stream (deterministic order; stream index
// irrelevant inside one stream).
std::vector<int32_t> top_k_of_stream(const std::vector<EntryMeta>& entries,
                                     const std::vector<float>& scores, int64_t k);

}  // namespace trimkv
