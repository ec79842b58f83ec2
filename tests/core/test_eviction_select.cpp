// Retention scores and the selection rules (eviction_select.h), checked against brute-force
// references on random caches with many ties, and the Budget conversions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include "trimkv/core/budget.h"
#include "trimkv/core/error.h"
#include "trimkv/core/eviction_select.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

// A cache with random per-head lengths: tokens appended to every head, then random evictions.
KvBookkeeping random_cache(std::mt19937& rng, bool many_ties) {
  std::uniform_int_distribution<int> nl(1, 4), nh(1, 3), bs(1, 5), nt(1, 40);
  KvGeometry g;
  g.n_layer = nl(rng);
  g.n_kv_head = nh(rng);
  g.head_dim = 4;
  g.block_size = bs(rng);
  KvBookkeeping kv(g);
  const std::vector<float> tie_values = {0.0f, -0.5f, -0.25f, -1.0f};
  std::uniform_real_distribution<float> u(-2.0f, -1e-4f);
  std::uniform_int_distribution<size_t> pick(0, tie_values.size() - 1);
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int round = 0; round < rounds; ++round) {
    const int n = nt(rng);
    std::vector<TokenInfo> infos(static_cast<size_t>(n));
    std::vector<int32_t> idx(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      idx[i] = kv.n_tokens() + i;
      infos[i].token_index = idx[i];
      infos[i].modality = (rng() % 3 == 0) ? Modality::Image : Modality::Text;
    }
    kv.register_tokens(infos);
    for (int il = 0; il < g.n_layer; ++il) {
      std::vector<float> lb(static_cast<size_t>(n * g.n_kv_head));
      for (float& x : lb) x = many_ties ? tie_values[pick(rng)] : u(rng);
      kv.append(il, idx, lb);
    }
    // Random evictions so heads differ in length.
    EvictionPlan plan(g.n_layer, g.n_kv_head);
    std::bernoulli_distribution keep(0.7);
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h)
        for (int32_t e = 0; e < kv.length(il, h); ++e)
          if (keep(rng)) plan.keep(il, h).push_back(e);
    kv.apply(plan);
  }
  return kv;
}

struct Ref {
  float score;
  int32_t token;
  int stream;
  int32_t entry;
};

std::vector<Ref> sorted_refs(const KvBookkeeping& kv, const StreamScores& scores) {
  const KvGeometry& g = kv.geometry();
  std::vector<Ref> all;
  for (int s = 0; s < g.n_streams(); ++s) {
    const auto& entries = kv.entries(s / g.n_kv_head, s % g.n_kv_head);
    for (size_t e = 0; e < entries.size(); ++e)
      all.push_back({scores[s][e], entries[e].token_index, s, static_cast<int32_t>(e)});
  }
  // Full sort with the documented order, written out independently of ranks_before().
  std::sort(all.begin(), all.end(), [](const Ref& a, const Ref& b) {
    return std::make_tuple(-a.score, -a.token, a.stream) <
           std::make_tuple(-b.score, -b.token, b.stream);
  });
  return all;
}

// Brute force: the first k of the full order.
std::vector<std::vector<int32_t>> brute_top_k(const KvBookkeeping& kv, const StreamScores& scores,
                                              int64_t k) {
  const KvGeometry& g = kv.geometry();
  std::vector<std::vector<int32_t>> keep(static_cast<size_t>(g.n_streams()));
  const auto all = sorted_refs(kv, scores);
  for (int64_t i = 0; i < std::min<int64_t>(k, static_cast<int64_t>(all.size())); ++i)
    keep[all[i].stream].push_back(all[i].entry);
  for (auto& v : keep) std::sort(v.begin(), v.end());
  return keep;
}

// Brute force of the floor rule: joint share of the first k - floor*S, then each stream's next
// `floor` entries in its own order.
std::vector<std::vector<int32_t>> brute_top_k_floor(const KvBookkeeping& kv,
                                                    const StreamScores& scores, int64_t k,
                                                    int64_t floor) {
  const KvGeometry& g = kv.geometry();
  const auto all = sorted_refs(kv, scores);
  const int64_t joint = k - floor * g.n_streams();
  std::vector<int64_t> count(static_cast<size_t>(g.n_streams()), 0);
  for (int64_t i = 0; i < std::min<int64_t>(joint, static_cast<int64_t>(all.size())); ++i)
    ++count[all[i].stream];
  std::vector<std::vector<int32_t>> keep(static_cast<size_t>(g.n_streams()));
  std::vector<int64_t> taken(static_cast<size_t>(g.n_streams()), 0);
  for (const Ref& r : all)
    if (taken[r.stream] < count[r.stream] + floor) {
      keep[r.stream].push_back(r.entry);
      ++taken[r.stream];
    }
  for (auto& v : keep) std::sort(v.begin(), v.end());
  return keep;
}

std::vector<std::vector<int32_t>> keeps_of(const EvictionPlan& plan) {
  std::vector<std::vector<int32_t>> out;
  for (int il = 0; il < plan.n_layer(); ++il)
    for (int h = 0; h < plan.n_kv_head(); ++h) out.push_back(plan.keep(il, h));
  return out;
}

}  // namespace

TEST_CASE("retention_log_score follows METHOD.md §4 for lookahead 1 and n", "[eviction][score]") {
  // n = 1: (q - pos) * log beta.
  REQUIRE(retention_log_score(-0.5f, 11, 3, 1) == Approx(8 * -0.5f));
  // log beta == 0 exactly: +inf for every lookahead.
  REQUIRE(std::isinf(retention_log_score(0.0f, 100, 3, 1)));
  REQUIRE(retention_log_score(0.0f, 100, 3, 2) > 0);
  REQUIRE(std::isinf(retention_log_score(0.0f, 100, 3, 4)));
  // n > 1 against the plain sum in double precision.
  for (float lb : {-1e-6f, -1e-3f, -0.1f, -0.7f, -3.0f, -20.0f})
    for (int n : {2, 3, 8}) {
      const int64_t q = 50;
      const int32_t pos = 7;
      // log-sum-exp in double, relative to the largest term (s = q + 1).
      const double top = static_cast<double>(lb) * (q + 1 - pos);
      double sum = 0;
      for (int64_t s = q + 1; s <= q + n; ++s)
        sum += std::exp(static_cast<double>(lb) * (s - pos) - top);
      const float got = retention_log_score(lb, q, pos, n);
      INFO("log beta " << lb << " n " << n);
      REQUIRE(std::isfinite(got));
      REQUIRE(got == Approx(top + std::log(sum)).epsilon(1e-5).margin(1e-4));
    }
  // Stable where the naive formula loses everything: beta^n underflows / 1 - beta rounds to 0.
  REQUIRE(std::isfinite(retention_log_score(-1e-30f, 10, 0, 2)));
  REQUIRE(retention_log_score(-1e-30f, 10, 0, 2) == Approx(std::log(2.0)).margin(1e-5));
  REQUIRE(retention_log_score(-80.0f, 10, 0, 2) == Approx(11 * -80.0).epsilon(1e-5));
  // Monotone: older entries (smaller pos) score lower at the same beta.
  REQUIRE(retention_log_score(-0.2f, 30, 5, 2) < retention_log_score(-0.2f, 30, 6, 2));
}

TEST_CASE("retention_scores uses q = tokens seen + 1 and each entry's own position",
          "[eviction][score]") {
  KvGeometry g{1, 2, 4, 4};
  KvBookkeeping kv(g);
  std::vector<TokenInfo> infos(3);
  for (int i = 0; i < 3; ++i) infos[i].token_index = i;
  kv.register_tokens(infos);
  kv.append(0, {0, 1, 2}, {-0.1f, -0.2f, -0.3f, 0.0f, -0.5f, -0.6f});
  const StreamScores s = retention_scores(kv, 1);
  // q = 4: head 0 has log beta -0.1, -0.3, -0.5 at positions 0, 1, 2.
  REQUIRE(s[0][0] == Approx(4 * -0.1f));
  REQUIRE(s[0][1] == Approx(3 * -0.3f));
  REQUIRE(s[0][2] == Approx(2 * -0.5f));
  REQUIRE(s[1][0] == Approx(4 * -0.2f));
  REQUIRE(std::isinf(s[1][1]));
  REQUIRE(s[1][2] == Approx(2 * -0.6f));
}

TEST_CASE("retention_scores at lookahead 2 (each entry's stored log(1 + beta)) equals retention_log_score bit for bit",
          "[eviction][score]") {
  std::mt19937 rng(5);
  KvGeometry g{2, 3, 4, 4};
  KvBookkeeping kv(g);
  const int n = 200;
  std::vector<TokenInfo> infos(n);
  for (int i = 0; i < n; ++i) infos[i].token_index = i;
  kv.register_tokens(infos);
  std::uniform_real_distribution<float> lb(-30.0f, 0.0f);
  for (int il = 0; il < 2; ++il) {
    std::vector<int32_t> tokens(n);
    std::vector<float> betas(static_cast<size_t>(n) * 3);
    for (int i = 0; i < n; ++i) tokens[i] = i;
    for (auto& b : betas) b = rng() % 7 == 0 ? 0.0f : (rng() % 5 == 0 ? -1e-7f : lb(rng));
    kv.append(il, tokens, betas);
  }
  EvictionPlan plan(g.n_layer, g.n_kv_head);  // scattered evictions: entries change places
  for (int il = 0; il < 2; ++il)
    for (int h = 0; h < 3; ++h)
      for (int32_t e = 0; e < n; ++e)
        if (rng() % 3 != 0) plan.keep(il, h).push_back(e);
  kv.apply(plan);
  const StreamScores s = retention_scores(kv, 2);
  const int64_t q = kv.n_tokens() + 1;
  for (int il = 0; il < 2; ++il)
    for (int h = 0; h < 3; ++h) {
      const auto& entries = kv.entries(il, h);
      for (size_t e = 0; e < entries.size(); ++e) {
        const float want = retention_log_score(entries[e].log_beta, q, entries[e].token_index, 2);
        uint32_t a, b;
        std::memcpy(&a, &s[static_cast<size_t>(il * 3 + h)][e], 4);
        std::memcpy(&b, &want, 4);
        REQUIRE(a == b);
      }
    }
}

TEST_CASE("Global top-k equals the brute-force reference on random caches", "[eviction][select]") {
  for (int seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    const bool ties = seed % 2 == 0;
    const KvBookkeeping kv = random_cache(rng, ties);
    StreamScores scores = retention_scores(kv, 1 + seed % 3);
    if (seed % 5 == 0)  // heavy ties: integer scores
      for (auto& v : scores)
        for (float& x : v) x = static_cast<float>(rng() % 3);
    const int64_t total = kv.total_entries();
    for (int64_t k : {int64_t{0}, int64_t{1}, total / 3, total / 2, total - 1, total, total + 5}) {
      if (k < 0) continue;
      INFO("seed " << seed << " k " << k << " total " << total);
      const EvictionPlan plan = select_global_top_k(kv, scores, k);
      plan.validate(kv);
      REQUIRE(plan.n_kept() == std::min(k, total));
      REQUIRE(keeps_of(plan) == brute_top_k(kv, scores, k));
    }
  }
}

TEST_CASE("Global top-k with a per-head floor equals the reference and keeps the floor",
          "[eviction][select]") {
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(1000 + seed);
    const KvBookkeeping kv = random_cache(rng, seed % 2 == 0);
    const StreamScores scores = retention_scores(kv, 2);
    const KvGeometry& g = kv.geometry();
    const int64_t total = kv.total_entries();
    for (int64_t floor : {1, 2, 5}) {
      for (int64_t k : {floor * g.n_streams(), floor * g.n_streams() + total / 4, total}) {
        if (k < floor * g.n_streams()) continue;
        INFO("seed " << seed << " k " << k << " floor " << floor);
        const EvictionPlan plan = select_global_top_k(kv, scores, k, floor);
        plan.validate(kv);
        REQUIRE(plan.n_kept() <= k);
        REQUIRE(keeps_of(plan) == brute_top_k_floor(kv, scores, k, floor));
        for (int il = 0; il < g.n_layer; ++il)
          for (int h = 0; h < g.n_kv_head; ++h)
            REQUIRE(static_cast<int64_t>(plan.keep(il, h).size()) >=
                    std::min<int64_t>(floor, kv.length(il, h)));
      }
    }
  }
}

TEST_CASE("Selection breaks ties deterministically: newer entry, then lower stream",
          "[eviction][select]") {
  KvGeometry g{2, 1, 4, 2};
  KvBookkeeping kv(g);
  std::vector<TokenInfo> infos(4);
  for (int i = 0; i < 4; ++i) infos[i].token_index = i;
  kv.register_tokens(infos);
  kv.append(0, {0, 1, 2, 3});
  kv.append(1, {0, 1, 2, 3});
  StreamScores equal = {{1, 1, 1, 1}, {1, 1, 1, 1}};
  // k = 3 of 8 equal scores: token 3 in both layers (layer 0 first), then token 2 of layer 0.
  EvictionPlan plan = select_global_top_k(kv, equal, 3);
  REQUIRE(plan.keep(0, 0) == std::vector<int32_t>{2, 3});
  REQUIRE(plan.keep(1, 0) == std::vector<int32_t>{3});
  // Same answer however often it is asked.
  for (int i = 0; i < 5; ++i)
    REQUIRE(keeps_of(select_global_top_k(kv, equal, 3)) == keeps_of(plan));
}

TEST_CASE("Per-head top-k and threshold selection", "[eviction][select]") {
  for (int seed = 0; seed < 100; ++seed) {
    std::mt19937 rng(5000 + seed);
    const KvBookkeeping kv = random_cache(rng, true);
    const StreamScores scores = retention_scores(kv, 1);
    const KvGeometry& g = kv.geometry();
    std::vector<int64_t> k(static_cast<size_t>(g.n_streams()));
    for (auto& x : k) x = static_cast<int64_t>(rng() % 12);
    const EvictionPlan plan = select_per_head_top_k(kv, scores, k);
    plan.validate(kv);
    for (int s = 0; s < g.n_streams(); ++s) {
      const int il = s / g.n_kv_head, h = s % g.n_kv_head;
      // Per-head reference: the global order restricted to this stream.
      std::vector<Ref> refs;
      const auto& entries = kv.entries(il, h);
      for (size_t e = 0; e < entries.size(); ++e)
        refs.push_back({scores[s][e], entries[e].token_index, 0, static_cast<int32_t>(e)});
      std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
        return std::make_tuple(-a.score, -a.token) < std::make_tuple(-b.score, -b.token);
      });
      std::vector<int32_t> want;
      for (size_t i = 0; i < std::min<size_t>(static_cast<size_t>(k[s]), refs.size()); ++i)
        want.push_back(refs[i].entry);
      std::sort(want.begin(), want.end());
      REQUIRE(plan.keep(il, h) == want);
    }
    const float thr = -0.6f;
    const EvictionPlan tp = select_threshold(kv, scores, thr);
    for (int s = 0; s < g.n_streams(); ++s)
      for (size_t e = 0; e < scores[s].size(); ++e) {
        const auto& keep = tp.keep(s / g.n_kv_head, s % g.n_kv_head);
        REQUIRE((std::find(keep.begin(), keep.end(), static_cast<int32_t>(e)) != keep.end()) ==
                (scores[s][e] >= thr));
      }
  }
}

TEST_CASE("protect_recent makes the newest tokens win every selection", "[eviction][select]") {
  std::mt19937 rng(7);
  const KvBookkeeping kv = random_cache(rng, false);
  StreamScores scores = retention_scores(kv, 2);
  const int32_t first = kv.n_tokens() - 3;
  protect_recent(kv, first, scores);
  int64_t protected_entries = 0;
  const KvGeometry& g = kv.geometry();
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h)
      for (const auto& e : kv.entries(il, h)) protected_entries += e.token_index >= first;
  const EvictionPlan plan = select_global_top_k(kv, scores, protected_entries);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h)
      for (int32_t e : plan.keep(il, h)) REQUIRE(kv.entries(il, h)[e].token_index >= first);
  REQUIRE(plan.n_kept() == protected_entries);
}

TEST_CASE("Budget converts with M_global = M * L * H_kv everywhere", "[eviction][budget]") {
  KvGeometry g{30, 3, 64, 16};
  const Budget per_head = Budget::per_head(128);
  REQUIRE(per_head.global_entries(g) == 128 * 30 * 3);
  REQUIRE(per_head.per_head_entries(g) == 128);
  REQUIRE(per_head.bytes(g) == 128 * 30 * 3 * 2 * 64 * 4);
  const Budget global = Budget::global(11520);
  REQUIRE(global.per_head_entries(g) == 128);
  REQUIRE(global.global_entries(g) == 11520);
  REQUIRE(Budget::global(11521).per_head_entries(g) == 128);  // floor
  REQUIRE(Budget::unlimited().is_unlimited());
  REQUIRE(Budget::unlimited().global_entries(g) == -1);
  REQUIRE_THROWS_WITH(Budget::per_head(0), Contains("positive"));
  REQUIRE_THROWS_WITH(Budget::per_head(-5), Contains("positive"));
  REQUIRE_THROWS_WITH(Budget::global(0), Contains("positive"));
  REQUIRE_THROWS_WITH(Budget::global(50).require_per_head_at_least(g, 1, "policy trimkv"),
                      Contains("policy trimkv"));
  REQUIRE(per_head.describe(g) == "128 per head (11520 global)");
}
