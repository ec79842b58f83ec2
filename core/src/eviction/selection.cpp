// Selection rules over per-stream scores (see eviction_select.h for the order and contracts).
#include <algorithm>
#include <numeric>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_select.h"

namespace trimkv {

namespace {

struct Ref {
  float score;
  int32_t token;
  int32_t stream;
  int32_t entry;
};

inline bool before(const Ref& a, const Ref& b) {
  return ranks_before(a.score, a.token, a.stream, b.score, b.token, b.stream);
}

void check_scores(const KvBookkeeping& kv, const StreamScores& scores) {
  const KvGeometry& g = kv.geometry();
  TRIMKV_ASSERT(static_cast<int>(scores.size()) == g.n_streams(), "scores for ", scores.size(),
                " streams, cache has ", g.n_streams());
  for (int s = 0; s < g.n_streams(); ++s) {
    TRIMKV_ASSERT(
        static_cast<int32_t>(scores[s].size()) == kv.length(s / g.n_kv_head, s % g.n_kv_head),
        "stream ", s, ": ", scores[s].size(), " scores for ",
        kv.length(s / g.n_kv_head, s % g.n_kv_head), " entries");
  }
}

}  // namespace

StreamScores retention_scores(const KvBookkeeping& kv, int lookahead) {
  const KvGeometry& g = kv.geometry();
  const int64_t q = static_cast<int64_t>(kv.n_tokens()) + 1;
  StreamScores scores(static_cast<size_t>(g.n_streams()));
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const auto& entries = kv.entries(il, h);
      auto& out = scores[static_cast<size_t>(il * g.n_kv_head + h)];
      out.resize(entries.size());
      for (size_t e = 0; e < entries.size(); ++e)
        out[e] = retention_log_score(entries[e].log_beta, q, entries[e].token_index, lookahead);
    }
  return scores;
}

void protect_recent(const KvBookkeeping& kv, int32_t first_protected, StreamScores& scores) {
  const KvGeometry& g = kv.geometry();
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const auto& entries = kv.entries(il, h);
      auto& sc = scores[static_cast<size_t>(il * g.n_kv_head + h)];
      // Cache order is not assumed sorted: check every entry.
      for (size_t e = 0; e < entries.size(); ++e)
        if (entries[e].token_index >= first_protected)
          sc[e] = std::numeric_limits<float>::infinity();
    }
}

std::vector<int32_t> top_k_of_stream(const std::vector<EntryMeta>& entries,
                                     const std::vector<float>& scores, int64_t k) {
  const int32_t len = static_cast<int32_t>(entries.size());
  std::vector<int32_t> keep;
  if (k >= len) {
    keep.resize(static_cast<size_t>(len));
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  if (k <= 0) return keep;
  keep.resize(static_cast<size_t>(len));
  std::iota(keep.begin(), keep.end(), 0);
  auto cmp = [&](int32_t a, int32_t b) {
    return ranks_before(scores[a], entries[a].token_index, 0, scores[b], entries[b].token_index, 0);
  };
  std::nth_element(keep.begin(), keep.begin() + (k - 1), keep.end(), cmp);
  keep.resize(static_cast<size_t>(k));
  std::sort(keep.begin(), keep.end());
  return keep;
}

void select_top_k_joint(const KvBookkeeping& kv, const StreamScores& scores,
                        const std::vector<int>& streams, int64_t k, int64_t floor_per_head,
                        EvictionPlan& plan) {
  check_scores(kv, scores);
  const KvGeometry& g = kv.geometry();
  TRIMKV_CHECK(k >= 0 && floor_per_head >= 0, Input, "selection: k = ", k,
               " and floor = ", floor_per_head, " must be >= 0");
  TRIMKV_CHECK(floor_per_head * static_cast<int64_t>(streams.size()) <= k, Input,
               "selection: floor ", floor_per_head, " x ", streams.size(),
               " heads exceeds the budget of ", k, " entries");
  int64_t total = 0;
  for (int s : streams) total += static_cast<int64_t>(scores[s].size());
  const int64_t k_joint = k - floor_per_head * static_cast<int64_t>(streams.size());

  // Count per stream of the joint top-k_joint; a stream's share is a prefix of its own ranking.
  std::vector<int64_t> count(static_cast<size_t>(g.n_streams()), 0);
  if (k_joint >= total) {
    for (int s : streams) count[s] = static_cast<int64_t>(scores[s].size());
  } else if (k_joint > 0) {
    std::vector<Ref> all;
    all.reserve(static_cast<size_t>(total));
    for (int s : streams) {
      const auto& entries = kv.entries(s / g.n_kv_head, s % g.n_kv_head);
      for (size_t e = 0; e < entries.size(); ++e)
        all.push_back(Ref{scores[s][e], entries[e].token_index, s, static_cast<int32_t>(e)});
    }
    std::nth_element(all.begin(), all.begin() + (k_joint - 1), all.end(), before);
    for (int64_t i = 0; i < k_joint; ++i) ++count[all[static_cast<size_t>(i)].stream];
    if (floor_per_head == 0) {
      // Fast path: the chosen entries are the answer.
      for (int s : streams) plan.keep(s / g.n_kv_head, s % g.n_kv_head).clear();
      for (int64_t i = 0; i < k_joint; ++i) {
        const Ref& r = all[static_cast<size_t>(i)];
        plan.keep(r.stream / g.n_kv_head, r.stream % g.n_kv_head).push_back(r.entry);
      }
      for (int s : streams) {
        auto& keep = plan.keep(s / g.n_kv_head, s % g.n_kv_head);
        std::sort(keep.begin(), keep.end());
      }
      return;
    }
  }
  for (int s : streams) {
    const int il = s / g.n_kv_head, h = s % g.n_kv_head;
    plan.keep(il, h) = top_k_of_stream(kv.entries(il, h), scores[s], count[s] + floor_per_head);
  }
}

EvictionPlan select_global_top_k(const KvBookkeeping& kv, const StreamScores& scores, int64_t k,
                                 int64_t floor_per_head) {
  const KvGeometry& g = kv.geometry();
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  std::vector<int> streams(static_cast<size_t>(g.n_streams()));
  std::iota(streams.begin(), streams.end(), 0);
  select_top_k_joint(kv, scores, streams, k, floor_per_head, plan);
  return plan;
}

EvictionPlan select_per_head_top_k(const KvBookkeeping& kv, const StreamScores& scores,
                                   const std::vector<int64_t>& k_per_stream) {
  check_scores(kv, scores);
  const KvGeometry& g = kv.geometry();
  TRIMKV_ASSERT(static_cast<int>(k_per_stream.size()) == g.n_streams());
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int s = il * g.n_kv_head + h;
      plan.keep(il, h) = top_k_of_stream(kv.entries(il, h), scores[s], k_per_stream[s]);
    }
  return plan;
}

EvictionPlan select_threshold(const KvBookkeeping& kv, const StreamScores& scores,
                              float threshold) {
  check_scores(kv, scores);
  const KvGeometry& g = kv.geometry();
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const auto& sc = scores[static_cast<size_t>(il * g.n_kv_head + h)];
      auto& keep = plan.keep(il, h);
      for (size_t e = 0; e < sc.size(); ++e)
        if (sc[e] >= threshold) keep.push_back(static_cast<int32_t>(e));
    }
  return plan;
}

}  // namespace trimkv
