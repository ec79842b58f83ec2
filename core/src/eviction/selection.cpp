// Selection rules over per-stream scores (see eviction_select.h for the order and contracts).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_select.h"

namespace trimkv {

namespace {

// A score as an unsigned key whose ascending order is the score's descending order (higher
// scores first); -0 and +0 map to one key, as they compare equal.
inline uint32_t rank_key(float score) {
  if (score == 0.0f) score = 0.0f;
  uint32_t u;
  std::memcpy(&u, &score, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending in the score
  return ~u;                                       // descending
}

// The k-th smallest of `keys` (k in [1, keys.size()]) and how many keys are smaller: a radix
// select on 11, 11 and 10 bits, the first pass over every key, the others over the keys sharing
// the chosen leading bits.
struct KthKey {
  uint32_t key;
  int64_t below;
};
KthKey kth_smallest_key(const std::vector<uint32_t>& keys, int64_t k) {
  TRIMKV_ASSERT(k >= 1 && k <= static_cast<int64_t>(keys.size()));
  constexpr int kShift[3] = {21, 10, 0}, kWidth[3] = {11, 11, 10};
  std::vector<uint32_t> candidates;
  const uint32_t* d = keys.data();
  size_t n = keys.size();
  uint32_t prefix = 0, mask = 0;
  int64_t below = 0;
  std::vector<int64_t> hist(size_t{1} << 11);
  for (int p = 0; p < 3; ++p) {
    const uint32_t digits = (1u << kWidth[p]) - 1;
    std::fill(hist.begin(), hist.end(), 0);
    for (size_t i = 0; i < n; ++i) hist[(d[i] >> kShift[p]) & digits] += (d[i] & mask) == prefix;
    uint32_t b = 0;
    while (below + hist[b] < k) below += hist[b++];
    prefix |= b << kShift[p];
    mask |= digits << kShift[p];
    if (p == 0) {
      for (size_t i = 0; i < n; ++i)
        if ((d[i] & mask) == prefix) candidates.push_back(d[i]);
      d = candidates.data();
      n = candidates.size();
    }
  }
  return {prefix, below};
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
  // Streams are spread over the threads.
  at::parallel_for(0, g.n_streams(), 4, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const auto& entries = kv.entries(static_cast<int>(s / g.n_kv_head), static_cast<int>(s % g.n_kv_head));
      auto& out = scores[static_cast<size_t>(s)];
      out.resize(entries.size());
      if (lookahead == 2) {  // the default: the entry's own log(1 + β), no exp / log1p here
        for (size_t e = 0; e < entries.size(); ++e)
          out[e] = entries[e].log_beta == 0.0f
                       ? std::numeric_limits<float>::infinity()
                       : lookahead2_score(entries[e].log_beta, entries[e].log1p_beta, q, entries[e].token_index);
      } else {
        for (size_t e = 0; e < entries.size(); ++e)
          out[e] = retention_log_score(entries[e].log_beta, q, entries[e].token_index, lookahead);
      }
    }
  });
  return scores;
}

namespace {

// +inf on every entry whose token index satisfies `is_protected`.
template <typename Pred>
void protect_tokens(const KvBookkeeping& kv, StreamScores& scores, Pred is_protected) {
  const KvGeometry& g = kv.geometry();
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const auto& entries = kv.entries(il, h);
      auto& sc = scores[static_cast<size_t>(il * g.n_kv_head + h)];
      // Cache order is not assumed sorted: check every entry.
      for (size_t e = 0; e < entries.size(); ++e)
        if (is_protected(entries[e].token_index)) sc[e] = std::numeric_limits<float>::infinity();
    }
}

}  // namespace

void protect_recent(const KvBookkeeping& kv, int32_t first_protected, StreamScores& scores) {
  protect_tokens(kv, scores, [first_protected](int32_t t) { return t >= first_protected; });
}

void protect_first(const KvBookkeeping& kv, int32_t n_first, StreamScores& scores) {
  protect_tokens(kv, scores, [n_first](int32_t t) { return t < n_first; });
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
    // The k_joint-th best score's key T (integer keys: a quick nth_element); entries with a key
    // below T are chosen, and of those with key T (equal scores: usually one) the best by the
    // tie-break (newer token, then smaller stream) fill the rest.
    // offset[i]: where stream streams[i]'s keys start in `keys` (stream order, cache order).
    const int64_t n_listed = static_cast<int64_t>(streams.size());
    std::vector<size_t> offset(streams.size() + 1, 0);
    for (size_t i = 0; i < streams.size(); ++i) offset[i + 1] = offset[i] + scores[streams[i]].size();
    std::vector<uint32_t> keys(static_cast<size_t>(total));
    at::parallel_for(0, n_listed, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const std::vector<float>& sc = scores[streams[static_cast<size_t>(i)]];
        uint32_t* out = keys.data() + offset[static_cast<size_t>(i)];
        for (size_t e = 0; e < sc.size(); ++e) out[e] = rank_key(sc[e]);
      }
    });
    const KthKey kth = kth_smallest_key(keys, k_joint);  // (no structured binding: lambdas use t)
    const uint32_t t = kth.key;
    const int64_t below = kth.below;
    struct Tie {
      int32_t token;
      int32_t stream;
      size_t at;  // position in `keys`
    };
    std::vector<Tie> ties;
    size_t at = 0;
    for (int s : streams) {
      const auto& entries = kv.entries(s / g.n_kv_head, s % g.n_kv_head);
      for (size_t e = 0; e < entries.size(); ++e, ++at)
        if (keys[at] == t) ties.push_back(Tie{entries[e].token_index, s, at});
    }
    const size_t n_ties = static_cast<size_t>(k_joint - below);
    std::sort(ties.begin(), ties.end(), [](const Tie& a, const Tie& b) {
      return a.token != b.token ? a.token > b.token : a.stream < b.stream;
    });
    ties.resize(n_ties);
    std::vector<char> tie_kept(static_cast<size_t>(total), 0);
    for (const Tie& x : ties) tie_kept[x.at] = 1;
    // Keep lists come out in cache order, one stream per task.
    at::parallel_for(0, n_listed, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int s = streams[static_cast<size_t>(i)];
        const int il = s / g.n_kv_head, h = s % g.n_kv_head;
        std::vector<int32_t> keep;
        const int32_t len = static_cast<int32_t>(scores[s].size());
        keep.reserve(static_cast<size_t>(len));
        const size_t base = offset[static_cast<size_t>(i)];
        for (int32_t e = 0; e < len; ++e) {
          const size_t a = base + static_cast<size_t>(e);
          if (keys[a] < t || (keys[a] == t && tie_kept[a])) keep.push_back(e);
        }
        count[s] = static_cast<int64_t>(keep.size());
        if (floor_per_head == 0) plan.keep(il, h) = std::move(keep);
      }
    });
    if (floor_per_head == 0) return;
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
