// Each policy's rule on a small hand-made cache with a known answer, and bad input refused with
// clear errors before any work.
#include <ATen/ATen.h>

#include <algorithm>
#include <random>

#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_policy.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

std::vector<TokenInfo> tokens(int first, int n, Modality m = Modality::Text) {
  std::vector<TokenInfo> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    t[i].token_index = first + i;
    t[i].modality = m;
  }
  return t;
}

std::vector<int32_t> iota(int first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

PolicyContext ctx_of(const KvCache& cache, const std::unique_ptr<EvictionPolicy>& p,
                     const Budget& b) {
  PolicyContext c;
  c.kv = &cache.bookkeeping();
  c.cache = &cache;
  if (p->needs().uses_budget) {
    c.budget_global = b.global_entries(cache.geometry());
    c.budget_per_head = b.per_head_entries(cache.geometry());
  }
  return c;
}

std::vector<int32_t> kept_tokens(const KvBookkeeping& kv, const EvictionPlan& plan, int il, int h) {
  std::vector<int32_t> out;
  for (int32_t e : plan.keep(il, h)) out.push_back(kv.entries(il, h)[e].token_index);
  return out;
}

// A cache whose entries all carry zero K/V (bookkeeping-driven policies) and chosen log β.
KvCache beta_cache(const KvGeometry& g, const std::vector<std::vector<float>>& log_beta_per_layer,
                   int n) {
  KvCache cache(g);
  cache.register_tokens(tokens(0, n));
  const at::Tensor zeros = at::zeros({n, g.n_kv_head, g.head_dim});
  for (int il = 0; il < g.n_layer; ++il)
    cache.append(il, zeros, zeros, iota(0, n), log_beta_per_layer[il]);
  return cache;
}

}  // namespace

TEST_CASE("dbtrimkv keeps the global top-M_global by retention score", "[eviction][policy]") {
  // 2 layers x 2 KV heads, 4 tokens; log β token-major [t * n_kv + h].
  KvGeometry g{2, 2, 2, 2};
  const std::vector<std::vector<float>> lb = {
      {-0.1f, -2.0f, -0.1f, -2.0f, -0.1f, -2.0f, -0.1f, -2.0f},  // layer 0: head 0 remembers
      {-1.0f, 0.0f, -1.0f, -3.0f, -1.0f, -3.0f, -1.0f, -3.0f}};  // layer 1: head 1 keeps token 0
  KvCache cache = beta_cache(g, lb, 4);
  const Budget b = Budget::global(5);
  auto p = make_policy("dbtrimkv", {{"lookahead", "1"}}, b, g);
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  // q = 5. Scores: L0H0 -0.5,-0.4,-0.3,-0.2; L0H1 -10,-8,-6,-4; L1H0 -5,-4,-3,-2; L1H1
  // inf,-12,-9,-6. Top 5: inf (L1H1 t0), -0.2, -0.3, -0.4, -0.5 (all of L0H0).
  const KvBookkeeping& kv = cache.bookkeeping();
  REQUIRE(kept_tokens(kv, plan, 0, 0) == std::vector<int32_t>{0, 1, 2, 3});
  REQUIRE(kept_tokens(kv, plan, 0, 1).empty());  // a head may reach 0
  REQUIRE(kept_tokens(kv, plan, 1, 0).empty());
  REQUIRE(kept_tokens(kv, plan, 1, 1) == std::vector<int32_t>{0});

  // Floor 1: the joint part shrinks to 5 - 4 = 1 (the +inf entry); each head adds its best.
  auto pf = make_policy("dbtrimkv", {{"lookahead", "1"}, {"floor", "1"}}, b, g);
  const EvictionPlan pl2 = pf->plan(ctx_of(cache, pf, b));
  REQUIRE(kept_tokens(kv, pl2, 0, 0) == std::vector<int32_t>{3});
  REQUIRE(kept_tokens(kv, pl2, 0, 1) == std::vector<int32_t>{3});
  REQUIRE(kept_tokens(kv, pl2, 1, 0) == std::vector<int32_t>{3});
  REQUIRE(kept_tokens(kv, pl2, 1, 1) == std::vector<int32_t>{0, 3});

  // Protected window 1: the newest token (3) is kept everywhere (4 entries) + the +inf one.
  auto pw = make_policy("dbtrimkv", {{"lookahead", "1"}, {"window", "1"}}, b, g);
  const EvictionPlan pl3 = pw->plan(ctx_of(cache, pw, b));
  for (int il = 0; il < 2; ++il)
    for (int h = 0; h < 2; ++h) {
      const auto t = kept_tokens(kv, pl3, il, h);
      REQUIRE(std::find(t.begin(), t.end(), 3) != t.end());
    }
  REQUIRE(pl3.n_kept() == 5);

  // Sinks 1: the first token (0) is kept everywhere (4 entries, one already +inf) + the best
  // other entry (L0H0 token 3, -0.2).
  auto ps = make_policy("dbtrimkv", {{"lookahead", "1"}, {"sinks", "1"}}, b, g);
  const EvictionPlan pls = ps->plan(ctx_of(cache, ps, b));
  REQUIRE(kept_tokens(kv, pls, 0, 0) == std::vector<int32_t>{0, 3});
  REQUIRE(kept_tokens(kv, pls, 0, 1) == std::vector<int32_t>{0});
  REQUIRE(kept_tokens(kv, pls, 1, 0) == std::vector<int32_t>{0});
  REQUIRE(kept_tokens(kv, pls, 1, 1) == std::vector<int32_t>{0});
  // Protected entries must fit in the budget: 2 sinks x 4 heads > 5.
  REQUIRE_THROWS_WITH(make_policy("dbtrimkv", {{"sinks", "2"}}, b, g),
                      Contains("sinks 2"));

  // Threshold mode: keep score >= log(alpha), no budget.
  auto pt = make_policy("dbtrimkv", {{"lookahead", "1"}, {"threshold", "0.05"}}, Budget(), g);
  const EvictionPlan pl4 = pt->plan(ctx_of(cache, pt, Budget()));
  // log 0.05 = -2.996: keeps L0H0 all, L1H0 -2 only, L1H1 +inf.
  REQUIRE(pl4.n_kept() == 4 + 1 + 1);
  REQUIRE(kept_tokens(kv, pl4, 1, 0) == std::vector<int32_t>{3});
}

TEST_CASE("trimkv keeps the top-M of every head by the same scores", "[eviction][policy]") {
  KvGeometry g{1, 2, 2, 2};
  // Token-major [t * 2 + h]: head 0 prefers old tokens (small decay on 0, 1), head 1 new ones.
  const std::vector<std::vector<float>> lb = {
      {-0.01f, -1.0f, -0.01f, -1.0f, -2.0f, -0.1f, -2.0f, -0.1f, -2.0f, -0.1f}};
  KvCache cache = beta_cache(g, lb, 5);
  const Budget b = Budget::per_head(2);
  auto p = make_policy("trimkv", {{"lookahead", "2"}}, b, g);
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{0, 1});
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 1) == std::vector<int32_t>{3, 4});
  // Sinks 1: head 1 keeps its first token and its best other one.
  auto ps = make_policy("trimkv", {{"lookahead", "2"}, {"sinks", "1"}}, b, g);
  const EvictionPlan pls = ps->plan(ctx_of(cache, ps, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), pls, 0, 0) == std::vector<int32_t>{0, 1});
  REQUIRE(kept_tokens(cache.bookkeeping(), pls, 0, 1) == std::vector<int32_t>{0, 4});
  REQUIRE_THROWS_WITH(make_policy("trimkv", {{"sinks", "2"}, {"window", "1"}}, b, g),
                      Contains("window 1 + sinks 2"));
}

TEST_CASE("streamingllm keeps the sinks and the newest tokens", "[eviction][policy]") {
  KvGeometry g{2, 1, 2, 3};
  KvCache cache = beta_cache(g, {{}, {}}, 12);
  const Budget b = Budget::per_head(5);
  auto p = make_policy("streamingllm", {{"sinks", "2"}}, b, g);
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  for (int il = 0; il < 2; ++il)
    REQUIRE(kept_tokens(cache.bookkeeping(), plan, il, 0) == std::vector<int32_t>{0, 1, 9, 10, 11});
  auto pw = make_policy("streamingllm", {{"sinks", "1"}, {"window", "2"}}, b, g);
  REQUIRE(kept_tokens(cache.bookkeeping(), pw->plan(ctx_of(cache, pw, b)), 0, 0) ==
          std::vector<int32_t>{0, 10, 11});
}

TEST_CASE("random keeps M entries per head, seeded and reproducible", "[eviction][policy]") {
  KvGeometry g{2, 2, 2, 4};
  KvCache cache = beta_cache(g, {{}, {}}, 30);
  const Budget b = Budget::per_head(7);
  auto p1 = make_policy("random", {{"seed", "3"}}, b, g);
  auto p2 = make_policy("random", {{"seed", "3"}}, b, g);
  auto p3 = make_policy("random", {{"seed", "4"}}, b, g);
  const EvictionPlan a = p1->plan(ctx_of(cache, p1, b));
  const EvictionPlan a2 = p2->plan(ctx_of(cache, p2, b));
  const EvictionPlan c = p3->plan(ctx_of(cache, p3, b));
  bool differs = false;
  for (int il = 0; il < 2; ++il)
    for (int h = 0; h < 2; ++h) {
      REQUIRE(a.keep(il, h).size() == 7);
      REQUIRE(a.keep(il, h) == a2.keep(il, h));
      differs = differs || a.keep(il, h) != c.keep(il, h);
    }
  REQUIRE(differs);
}

namespace {

// One layer, n_kv KV heads of head_dim 4; keys given per entry (all heads alike unless
// head_keys), values zero.
KvCache key_cache(int n_layer, int n_kv, const std::vector<std::vector<float>>& keys,
                  Modality modality = Modality::Text) {
  KvGeometry g{n_layer, n_kv, 4, 4};
  KvCache cache(g);
  const int n = static_cast<int>(keys.size());
  cache.register_tokens(tokens(0, n, modality));
  at::Tensor k = at::zeros({n, n_kv, 4});
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < n_kv; ++h)
      for (int d = 0; d < 4; ++d) k[i][h][d] = keys[i][d];
  for (int il = 0; il < n_layer; ++il) cache.append(il, k, at::zeros_like(k), iota(0, n));
  return cache;
}

void observe_all_layers(EvictionPolicy& p, const KvCache& cache, const at::Tensor& q,
                        const at::Tensor* attn_sum = nullptr) {
  for (int il = 0; il < cache.geometry().n_layer; ++il)
    p.observe_layer(LayerObservation{il, &q, attn_sum, cache.layer_view(il), 0.5, &cache});
}

}  // namespace

TEST_CASE("snapkv keeps the window and the entries the window queries attend to",
          "[eviction][policy]") {
  // 12 entries; entries 3 and 7 have a key aligned with the queries, the rest are orthogonal.
  std::vector<std::vector<float>> keys(12, {0, 1, 0, 0});
  keys[3] = {8, 0, 0, 0};
  keys[7] = {6, 0, 0, 0};
  KvCache cache = key_cache(1, 1, keys);
  const Budget b = Budget::per_head(4);
  auto p = make_policy("snapkv", {{"window", "2"}, {"kernel", "1"}}, b, cache.geometry());
  REQUIRE(p->needs().query_rows);
  at::Tensor q = at::zeros({2, 2, 4});  // 2 window rows, 2 query heads (GQA group of 2)
  q.select(2, 0).fill_(1.0f);
  observe_all_layers(*p, cache, q);
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{3, 7, 10, 11});

  // Votes equal the dense softmax of the window rows over their causal past (kernel 3, avg pool).
  auto p3 = make_policy("snapkv", {{"window", "2"}, {"kernel", "3"}}, b, cache.geometry());
  observe_all_layers(*p3, cache, q);
  const StreamScores s = p3->entry_scores(ctx_of(cache, p3, b));
  at::Tensor kt = cache.keys(0, 0);  // [12, 4]
  std::vector<double> votes(10, 0.0);
  for (int row = 0; row < 2; ++row) {
    const int visible = 10 + row + 1;
    at::Tensor logits = at::matmul(kt.narrow(0, 0, visible), q[row][0]) * (1.0 / std::sqrt(4.0));
    at::Tensor w = at::softmax(logits.to(at::kDouble), 0);
    for (int e = 0; e < 10; ++e) votes[e] += w[e].item<double>();  // both query heads alike: mean
  }
  for (int e = 0; e < 10; ++e) {
    double pooled = 0;
    for (int j = e - 1; j <= e + 1; ++j)
      if (j >= 0 && j < 10) pooled += votes[j];
    REQUIRE(s[0][e] == Approx(pooled / 3).epsilon(1e-5));
  }
  REQUIRE(std::isinf(s[0][10]));
  REQUIRE(std::isinf(s[0][11]));
}

TEST_CASE("adakv shares a layer's budget across heads with a floor", "[eviction][policy]") {
  // Head 0: entries 1, 2, 4, 5 attract attention; head 1: flat (all keys alike).
  KvGeometry g{1, 2, 4, 4};
  KvCache cache(g);
  const int n = 10;
  cache.register_tokens(tokens(0, n));
  at::Tensor k = at::zeros({n, 2, 4});
  k.select(2, 1).fill_(1.0f);
  for (int e : {1, 2, 4, 5}) {
    k[e][0][0] = 8.0f;
    k[e][0][1] = 0.0f;
  }
  cache.append(0, k, at::zeros_like(k), iota(0, n));
  at::Tensor q = at::zeros({2, 2, 4});  // window 2, one query head per KV head
  q.select(2, 0).fill_(1.0f);
  const Budget b = Budget::per_head(4);  // layer budget 8
  auto p = make_policy("adakv", {{"window", "2"}, {"kernel", "1"}, {"floor", "0.5"}}, b, g);
  observe_all_layers(*p, cache, q);
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  // Floor 2 per head; joint 8 - 4 = 4: the 4 window entries (+inf). Each head then adds its 2
  // best: head 0 two of {1,2,4,5} (equal votes: newer wins: 4, 5); head 1 flat votes, newer wins.
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{4, 5, 8, 9});
  REQUIRE(plan.keep(0, 1).size() == 4);
  // Without a floor, head 0's strong entries win the joint ranking.
  auto p0 = make_policy("adakv", {{"window", "2"}, {"kernel", "1"}, {"floor", "0"}}, b, g);
  observe_all_layers(*p0, cache, q);
  const EvictionPlan plan0 = p0->plan(ctx_of(cache, p0, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan0, 0, 0) == std::vector<int32_t>{1, 2, 4, 5, 8, 9});
  REQUIRE(kept_tokens(cache.bookkeeping(), plan0, 0, 1) == std::vector<int32_t>{8, 9});
  REQUIRE(plan0.n_kept() == 8);
}

TEST_CASE("pyramidkv layer budgets decrease linearly with depth and keep the total",
          "[eviction][policy]") {
  const std::vector<int64_t> b = pyramidkv_layer_budgets(4, 40, 8, 20.0);
  // B = 32: 62.4, 42.13, 21.87, 1.6 floored + window 8 -> 70, 50, 29, 9; +2 to reach 160.
  REQUIRE(b == std::vector<int64_t>{71, 51, 29, 9});
  for (int L : {1, 2, 3, 7, 30})
    for (int64_t m : {9, 33, 128}) {
      const auto v = pyramidkv_layer_budgets(L, m, 8, 20.0);
      int64_t sum = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        sum += v[i];
        if (i > 0) REQUIRE(v[i] <= v[i - 1]);
        REQUIRE(v[i] >= 8);
      }
      REQUIRE(sum == m * L);
    }
}

TEST_CASE("h2o keeps the heaviest accumulated entries plus the recent window",
          "[eviction][policy]") {
  KvGeometry g{1, 1, 4, 4};
  KvCache cache = key_cache(1, 1, std::vector<std::vector<float>>(8, {0, 0, 0, 0}));
  const Budget b = Budget::per_head(4);
  auto p = make_policy("h2o", {{"recent", "2"}}, b, g);
  REQUIRE(p->needs().attention_sum);
  at::Tensor q = at::zeros({1, 1, 4});
  at::Tensor sums = at::tensor({0.1f, 0.9f, 0.0f, 0.5f, 0.2f, 0.3f, 0.0f, 0.0f}).view({1, 8});
  observe_all_layers(*p, cache, q, &sums);
  at::Tensor sums2 = at::tensor({0.0f, 0.0f, 0.7f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}).view({1, 8});
  observe_all_layers(*p, cache, q, &sums2);
  // Totals 0.1 0.9 0.7 0.5 0.2 0.3 | recent 6, 7 -> keep 1, 2, 6, 7.
  EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{1, 2, 6, 7});
  cache.apply(plan);
  p->on_applied(plan);
  // Totals follow their entries through compaction: new token 8 arrives with attention on token
  // 6 (now entry 2) and the plan keeps 1 (0.9), 6 (1.0 total) + recent 7, 8.
  cache.register_tokens(tokens(8, 1));
  cache.append(0, at::zeros({1, 1, 4}), at::zeros({1, 1, 4}), {8});
  at::Tensor sums3 = at::tensor({0.0f, 0.0f, 1.0f, 0.0f, 0.0f}).view({1, 5});
  observe_all_layers(*p, cache, q, &sums3);
  plan = p->plan(ctx_of(cache, p, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{1, 6, 7, 8});
}

TEST_CASE("rkv evicts redundant keys first when importance is flat", "[eviction][policy]") {
  // Prefix 0..4: keys 0, 1, 2 identical (redundant), 3 and 4 distinct; window 5, 6.
  std::vector<std::vector<float>> keys = {{1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                                          {0, 0, 1, 0}, {0, 0, 0, 1}, {0, 0, 0, 1}};
  KvCache cache = key_cache(1, 1, keys);
  const Budget b = Budget::per_head(4);
  auto p = make_policy("rkv", {{"window", "2"}, {"kernel", "1"}}, b, cache.geometry());
  REQUIRE(p->needs().keys);
  observe_all_layers(*p, cache, at::zeros({2, 1, 4}));  // q = 0: uniform attention
  const EvictionPlan plan = p->plan(ctx_of(cache, p, b));
  REQUIRE(kept_tokens(cache.bookkeeping(), plan, 0, 0) == std::vector<int32_t>{3, 4, 5, 6});
  // With lambda = 1 only importance counts: flat, so the newest prefix entries win (tie-break).
  auto p1 =
      make_policy("rkv", {{"window", "2"}, {"kernel", "1"}, {"lambda", "1"}}, b, cache.geometry());
  observe_all_layers(*p1, cache, at::zeros({2, 1, 4}));
  REQUIRE(kept_tokens(cache.bookkeeping(), p1->plan(ctx_of(cache, p1, b)), 0, 0) ==
          std::vector<int32_t>{3, 4, 5, 6});
}

TEST_CASE("fastv drops the least-attended image tokens from the layers after K",
          "[eviction][policy]") {
  KvGeometry g{3, 1, 4, 4};
  KvCache cache(g);
  std::vector<TokenInfo> infos = tokens(0, 8);
  for (int t = 2; t <= 5; ++t) infos[t].modality = Modality::Image;
  cache.register_tokens(infos);
  at::Tensor k = at::zeros({8, 1, 4});
  k[3][0][0] = 5.0f;  // the last query attends to image tokens 3 and 5
  k[5][0][0] = 4.0f;
  for (int il = 0; il < 3; ++il) cache.append(il, k, at::zeros_like(k), iota(0, 8));
  auto p = make_policy("fastv", {{"layer", "0"}, {"ratio", "0.5"}}, Budget(), g);
  REQUIRE_FALSE(p->needs().uses_budget);
  at::Tensor q = at::zeros({8, 1, 4});
  q[7][0][0] = 1.0f;
  observe_all_layers(*p, cache, q);
  PolicyContext ctx = ctx_of(cache, p, Budget());
  REQUIRE(p->wants_to_plan(ctx));
  const EvictionPlan plan = p->plan(ctx);
  const KvBookkeeping& kv = cache.bookkeeping();
  REQUIRE(kept_tokens(kv, plan, 0, 0) == iota(0, 8));  // layer K itself keeps everything
  for (int il = 1; il < 3; ++il)
    REQUIRE(kept_tokens(kv, plan, il, 0) == std::vector<int32_t>{0, 1, 3, 5, 6, 7});
  cache.apply(plan);
  REQUIRE_FALSE(p->wants_to_plan(ctx));  // those images were handled
}

TEST_CASE("visionzip keeps dominant tokens and merges the rest into contextual tokens",
          "[eviction][policy]") {
  // 8 tokens; attention picks 1 and 6 as dominant; the rest (0,2,3,4,5,7) merge into 2.
  at::Tensor att = at::tensor({0.1f, 0.9f, 0.2f, 0.1f, 0.0f, 0.1f, 0.8f, 0.3f});
  at::Tensor keys = at::tensor({1.f, 0.f, 0.f, 0.f, 1.f, 0.1f, 0.f, 1.f, 0.9f, 0.1f, 0.f, 1.f, 0.f,
                                1.f, 0.2f, 0.8f})
                        .view({8, 2});
  at::Tensor emb = at::arange(8, at::kFloat).view({8, 1}).repeat({1, 3});
  const VisionZipResult r = visionzip_select(att, keys, emb, 2, 2);
  REQUIRE(r.dominant == std::vector<int32_t>{1, 6});
  // Seeds: rest = 0,2,3,4,5,7 -> step 3 -> tokens 0 and 4. Keys: 0 (1,0), 4 (0.9,0.1) are both
  // "x-like"; 2 (0,1) is nearer to 4 (cos 0.11) than to 0 (cos 0); 3, 5, 7 likewise.
  REQUIRE(r.contextual_seed == std::vector<int32_t>{0, 4});
  REQUIRE(r.assignment[1] == -1);
  REQUIRE(r.assignment[6] == -1);
  REQUIRE(r.assignment[0] == 0);
  REQUIRE(r.assignment[4] == 1);
  REQUIRE(r.embeddings.size(0) == 4);
  REQUIRE(r.embeddings[0][0].item<float>() == 1.0f);  // dominant rows first, in order
  REQUIRE(r.embeddings[1][0].item<float>() == 6.0f);
  // Contextual rows: means of their members.
  for (int c = 0; c < 2; ++c) {
    double sum = 0;
    int count = 0;
    for (int t = 0; t < 8; ++t)
      if (r.assignment[t] == c) {
        sum += t;
        ++count;
      }
    REQUIRE(r.embeddings[2 + c][0].item<float>() == Approx(sum / count));
  }
  // The policy is registered, ignores the budget and keeps the cache as it is.
  auto p = make_policy("visionzip", {{"dominant", "3"}}, Budget(), KvGeometry{1, 1, 4, 4});
  int dominant = 0, contextual = 0;
  REQUIRE(visionzip_settings(*p, dominant, contextual));
  REQUIRE(dominant == 3);
  REQUIRE(contextual == 10);
}

TEST_CASE("Bad eviction settings are refused with clear errors before any work",
          "[eviction][errors]") {
  const KvGeometry g{30, 3, 64, 16};
  auto make = [&](EvictionSettings s) { Evictor e(s, g); };
  EvictionSettings s;
  s.policy = "dbtrimkvv";
  REQUIRE_THROWS_WITH(make(s),
                      Contains("unknown eviction policy 'dbtrimkvv'") && Contains("snapkv"));
  s.policy = "snapkv";
  s.budget_per_head = 0;
  REQUIRE_THROWS_WITH(make(s), Contains("positive"));
  s.budget_per_head = -3;
  REQUIRE_THROWS_WITH(make(s), Contains("positive"));
  s.budget_per_head = 64;
  s.budget_global = 100;
  REQUIRE_THROWS_WITH(make(s), Contains("give one budget"));
  s.budget_global.reset();
  s.options = {"windw=4"};
  REQUIRE_THROWS_WITH(make(s), Contains("no option 'windw'") && Contains("window"));
  s.options = {"window=abc"};
  REQUIRE_THROWS_WITH(make(s), Contains("window=abc"));
  s.options = {"window"};
  REQUIRE_THROWS_WITH(make(s), Contains("key=value"));
  s.options = {"window=64"};
  REQUIRE_THROWS_WITH(make(s), Contains("at least 65"));
  s.options = {"pooling=median"};
  REQUIRE_THROWS_WITH(make(s), Contains("avg|max"));
  s.options = {};
  s.budget_per_head.reset();
  REQUIRE_THROWS_WITH(make(s), Contains("needs a budget"));

  EvictionSettings d;
  d.policy = "dbtrimkv";
  d.budget_global = 1000;
  d.options = {"floor=12"};  // 12 x 90 heads = 1080 > 1000
  REQUIRE_THROWS_WITH(make(d), Contains("floor 12") && Contains("90 heads") && Contains("1000"));
  d.options = {"threshold=0.1"};
  REQUIRE_THROWS_WITH(make(d), Contains("threshold"));
  d.options = {"threshold=2"};
  REQUIRE_THROWS_WITH(make(d), Contains("threshold=2"));
  d.options = {"lookahead=0"};
  REQUIRE_THROWS_WITH(make(d), Contains("lookahead=0"));
  EvictionSettings f;
  f.policy = "fastv";
  f.options = {"layer=29"};
  REQUIRE_THROWS_WITH(make(f), Contains("no later layer"));
  f.slack = -1;
  f.options = {};
  REQUIRE_THROWS_WITH(make(f), Contains("slack"));
  EvictionSettings ok;
  ok.policy = "dbtrimkv";
  ok.budget_per_head = 128;
  ok.options = {"floor=4", "window=16", "lookahead=2"};
  REQUIRE_NOTHROW(make(ok));
  // Every registered policy is constructible with a budget and default options.
  for (const auto& name : policy_names()) {
    EvictionSettings any;
    any.policy = name;
    if (policy_info(name).uses_budget) any.budget_per_head = 128;
    INFO(name);
    REQUIRE_NOTHROW(make(any));
  }
}

TEST_CASE("An order-free policy keeps the same tokens whether or not its cache is in token order",
          "[eviction][policy]") {
  // PolicyNeeds::order_free lets compaction fill holes from a head's tail (kFillFromTail); that
  // is only sound if the plan, read as tokens, does not depend on where entries sit. Two caches
  // with the same entries, one compacted keeping the order and one filling holes from the tail,
  // must get the same kept tokens per head, for every policy that says it is order-free.
  const KvGeometry g{2, 2, 4, 4};
  const int n = 40;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, -0.01f);
  std::vector<std::vector<float>> lb(2, std::vector<float>(static_cast<size_t>(n * g.n_kv_head)));
  for (auto& layer : lb)
    for (float& x : layer) x = u(rng);
  // Every third entry goes first: with kFillFromTail the later kept entries fill those holes.
  EvictionPlan thin(g.n_layer, g.n_kv_head);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h)
      for (int e = 0; e < n; ++e)
        if (e % 3 != 0) thin.keep(il, h).push_back(e);
  KvCache ordered = beta_cache(g, lb, n), filled = beta_cache(g, lb, n);
  ordered.apply(thin);
  filled.apply(thin, {}, Compaction::kFillFromTail);
  const auto& reordered = filled.bookkeeping().entries(0, 0);
  REQUIRE_FALSE(std::is_sorted(reordered.begin(), reordered.end(), [](const EntryMeta& x, const EntryMeta& y) {
    return x.token_index < y.token_index;
  }));
  int n_order_free = 0;
  for (const std::string& name : policy_names()) {
    const Budget b = Budget::global(32);
    std::unique_ptr<EvictionPolicy> probe;
    try {
      probe = make_policy(name, {}, b, g);
    } catch (const Error&) {
      continue;  // needs options this cache cannot give; not order-free in any case checked below
    }
    if (!probe->needs().order_free) continue;
    ++n_order_free;
    CAPTURE(name);
    auto pa = make_policy(name, {}, b, g);
    auto pb = make_policy(name, {}, b, g);
    const EvictionPlan a = pa->plan(ctx_of(ordered, pa, b));
    const EvictionPlan c = pb->plan(ctx_of(filled, pb, b));
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        std::vector<int32_t> ta = kept_tokens(ordered.bookkeeping(), a, il, h);
        std::vector<int32_t> tc = kept_tokens(filled.bookkeeping(), c, il, h);
        std::sort(ta.begin(), ta.end());
        std::sort(tc.begin(), tc.end());
        CHECK(ta == tc);
      }
  }
  CHECK(n_order_free >= 2);  // dbtrimkv and trimkv at least
}
