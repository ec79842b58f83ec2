// KvCache: tensor storage behind KvBookkeeping. Checked against a dense model that keeps, per
// (layer, KV head), the K/V rows in cache order; attention over the paged cache is compared with
// dense softmax attention over those rows (float64 reference, tolerance 1e-5 as in
// tests/kernels/test_paged_attention.cpp).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/kernels/paged_attention.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

// Dense model: per stream the K and V rows in cache order.
struct DenseModel {
  KvGeometry g;
  std::vector<at::Tensor> k, v;  // [n_streams] -> [len, head_dim]

  explicit DenseModel(const KvGeometry& geometry) : g(geometry) {
    for (int s = 0; s < g.n_streams(); ++s) {
      k.push_back(at::zeros({0, g.head_dim}));
      v.push_back(at::zeros({0, g.head_dim}));
    }
  }
  int stream(int il, int h) const { return il * g.n_kv_head + h; }

  void append(int il, const at::Tensor& nk, const at::Tensor& nv) {  // [n, n_kv_head, head_dim]
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int s = stream(il, h);
      k[s] = at::cat({k[s], nk.select(1, h)}, 0);
      v[s] = at::cat({v[s], nv.select(1, h)}, 0);
    }
  }
  void apply(const EvictionPlan& plan) {
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        const int s = stream(il, h);
        std::vector<int64_t> keep(plan.keep(il, h).begin(), plan.keep(il, h).end());
        const at::Tensor idx = at::tensor(keep, at::kLong);
        k[s] = k[s].index_select(0, idx);
        v[s] = v[s].index_select(0, idx);
      }
  }
};

void check_same_rows(const KvCache& cache, const DenseModel& m) {
  for (int il = 0; il < m.g.n_layer; ++il)
    for (int h = 0; h < m.g.n_kv_head; ++h) {
      const int s = m.stream(il, h);
      REQUIRE(cache.length(il, h) == m.k[s].size(0));
      REQUIRE(at::equal(cache.keys(il, h), m.k[s]));
      REQUIRE(at::equal(cache.values(il, h), m.v[s]));
    }
}

std::vector<int32_t> iota_tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// Each entry kept with probability keep_p; with older_first, as learned retention mostly evicts,
// every entry from a random cut on is kept and older ones with keep_p / 4 (the heads then compact
// toward the end of their blocks, kv_bookkeeping.h).
EvictionPlan random_plan(const KvCache& cache, std::mt19937& rng, double keep_p, bool older_first = false) {
  const KvGeometry& g = cache.geometry();
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  std::bernoulli_distribution keep(keep_p), keep_old(keep_p / 4);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int32_t len = cache.length(il, h);
      const int32_t cut = len == 0 ? 0 : static_cast<int32_t>(rng() % (len + 1));
      for (int32_t e = 0; e < len; ++e)
        if (older_first ? (e >= cut || keep_old(rng)) : keep(rng)) plan.keep(il, h).push_back(e);
    }
  return plan;
}

// Dense causal attention (float64) of q [n_q, n_head, head_dim] over the model's rows of layer il.
at::Tensor dense_attention(const at::Tensor& q, const DenseModel& m, int il, double scale) {
  const int64_t n_q = q.size(0), n_head = q.size(1);
  const int64_t group = n_head / m.g.n_kv_head;
  at::Tensor out = at::zeros({n_q, n_head, m.g.head_dim}, at::kDouble);
  for (int64_t qh = 0; qh < n_head; ++qh) {
    const int s = m.stream(il, static_cast<int>(qh / group));
    const int64_t len = m.k[s].size(0);
    at::Tensor logits = at::matmul(q.select(1, qh).to(at::kDouble), m.k[s].to(at::kDouble).t()) *
                        scale;  // [n_q, len]
    at::Tensor row = at::arange(n_q, at::kLong).unsqueeze(1);
    at::Tensor col = at::arange(len, at::kLong).unsqueeze(0);
    at::Tensor hidden = (col < (row + (len - n_q + 1))).logical_not();
    logits = logits.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    out.select(1, qh).copy_(at::matmul(at::softmax(logits, 1), m.v[s].to(at::kDouble)));
  }
  return out;
}

}  // namespace

TEST_CASE("KvCache::append stores each head's K/V rows in append order from strided inputs",
          "[cache]") {
  at::manual_seed(1);
  const KvGeometry g{2, 3, 8, 4};
  KvCache cache(g);
  DenseModel m(g);
  // k as a transposed view and v as a slice: neither is contiguous.
  const at::Tensor k = at::randn({3, 6, 8}).transpose(0, 1).narrow(1, 0, 3);  // [6, 3, 8]
  const at::Tensor v = at::randn({6, 3, 16}).narrow(2, 4, 8);                 // [6, 3, 8]
  REQUIRE_FALSE(k.is_contiguous());
  cache.append(1, k, v, iota_tokens(0, 6), std::vector<float>(18, -0.25f));
  m.append(1, k, v);
  check_same_rows(cache, m);
  CHECK(cache.bookkeeping().entries(1, 2)[5].token_index == 5);
  CHECK(cache.bookkeeping().entries(1, 2)[5].log_beta == -0.25f);
  CHECK(cache.length(0, 0) == 0);
}

TEST_CASE("KvCache: rows written from memory equal rows converted by ATen, for every pool dtype",
          "[cache]") {
  // append() takes heads-contiguous float32 rows straight to append_rows() (the decode step's
  // path) and anything else through Tensor::to + index_copy_; both must store the same bits.
  at::manual_seed(4);
  const KvGeometry g{2, 3, 8, 4};
  for (at::ScalarType st : {at::kFloat, at::kBFloat16, at::kHalf}) {
    CAPTURE(st);
    KvCache rows(g, at::TensorOptions().dtype(st));
    KvCache converted(g, at::TensorOptions().dtype(st));
    const at::Tensor k = at::randn({5, 3, 8}) * 3, v = at::randn({5, 3, 8}) * 3;
    rows.append(0, k, v, iota_tokens(0, 5));
    // The same values as a float64 tensor and a transposed view take the ATen path.
    converted.append(0, k.to(at::kDouble), v.transpose(0, 1).contiguous().transpose(0, 1), iota_tokens(0, 5));
    for (int h = 0; h < g.n_kv_head; ++h) {
      CHECK(at::equal(rows.keys(0, h), converted.keys(0, h)));
      CHECK(at::equal(rows.values(0, h), converted.values(0, h)));
      CHECK(at::equal(rows.keys(0, h), k.select(1, h).to(st).to(at::kFloat)));
    }
  }
}

TEST_CASE("KvCache grows its pools without losing stored rows", "[cache]") {
  at::manual_seed(2);
  const KvGeometry g{3, 2, 16, 2};
  KvCache cache(g);  // starts with no blocks
  DenseModel m(g);
  int32_t next = 0;
  for (int step = 0; step < 20; ++step) {
    const int il = step % 3;
    const int n = 1 + step % 5;
    const at::Tensor k = at::randn({n, 2, 16}), v = at::randn({n, 2, 16});
    const int32_t cap_before = cache.capacity_blocks();
    cache.append(il, k, v, iota_tokens(next, n));
    next += n;
    m.append(il, k, v);
    CHECK(cache.k_pool().size(0) == cache.capacity_blocks());
    CHECK(cache.capacity_blocks() >= cap_before);
    check_same_rows(cache, m);
  }
  CHECK(cache.peak_blocks_used() == cache.n_blocks_used());
}

TEST_CASE("KvCache::apply keeps exactly the chosen K/V rows, each with its own entry", "[cache]") {
  // kPreserveOrder: the cache equals the dense model row for row. kFillFromTail may reorder a
  // head's entries: each entry must still sit on the K/V rows appended with its token (checked in
  // both modes).
  for (const Compaction compaction : {Compaction::kPreserveOrder, Compaction::kFillFromTail}) {
    int64_t reordered = 0;
    for (int seed = 0; seed < 20; ++seed) {
      CAPTURE(seed, compaction == Compaction::kFillFromTail);
      std::mt19937 rng(seed);
      at::manual_seed(seed);
      const int block_sizes[] = {1, 3, 16};
      const KvGeometry g{2, 2, 8, block_sizes[seed % 3]};
      KvCache cache(g);
      DenseModel m(g);
      std::vector<std::map<int32_t, std::pair<at::Tensor, at::Tensor>>> rows(static_cast<size_t>(g.n_streams()));
      int32_t next = 0;
      for (int step = 0; step < 12; ++step) {
        if (step % 3 == 2) {
          const EvictionPlan plan = random_plan(cache, rng, 0.6, step % 2 == 1);
          cache.apply(plan, {}, compaction);
          m.apply(plan);
        } else {
          const int il = static_cast<int>(rng() % 2);
          const int n = static_cast<int>(rng() % 20);
          const at::Tensor k = at::randn({n, 2, 8}), v = at::randn({n, 2, 8});
          cache.append(il, k, v, iota_tokens(next, n));
          m.append(il, k, v);
          for (int t = 0; t < n; ++t)
            for (int h = 0; h < 2; ++h) rows[static_cast<size_t>(il * 2 + h)][next + t] = {k[t][h], v[t][h]};
          next += n;
        }
        if (compaction == Compaction::kPreserveOrder) check_same_rows(cache, m);
        cache.bookkeeping().check_invariants();
        for (int il = 0; il < 2; ++il)
          for (int h = 0; h < 2; ++h) {
            const auto& entries = cache.bookkeeping().entries(il, h);
            const at::Tensor keys = cache.keys(il, h), values = cache.values(il, h);
            for (size_t e = 0; e < entries.size(); ++e) {
              const auto& want = rows[static_cast<size_t>(il * 2 + h)].at(entries[e].token_index);
              REQUIRE(at::equal(keys[static_cast<int64_t>(e)], want.first));
              REQUIRE(at::equal(values[static_cast<int64_t>(e)], want.second));
              reordered += e > 0 && entries[e].token_index < entries[e - 1].token_index;
            }
          }
      }
    }
    // Only the order-free compaction leaves token order (and it really does).
    CHECK((reordered > 0) == (compaction == Compaction::kFillFromTail));
  }
}

TEST_CASE("KvCache::apply frees the tail blocks of a shrunk head", "[cache]") {
  at::manual_seed(3);
  const KvGeometry g{1, 2, 8, 4};
  KvCache cache(g);
  cache.append(0, at::randn({20, 2, 8}), at::randn({20, 2, 8}), iota_tokens(0, 20));
  REQUIRE(cache.n_blocks_used() == 10);
  const int64_t entry_bytes = 2 * 8 * static_cast<int64_t>(sizeof(float));
  CHECK(cache.bytes_held() == 40 * entry_bytes);
  CHECK(cache.bytes_reserved() == 10 * 4 * entry_bytes);
  const int32_t capacity = cache.capacity_blocks();
  const int32_t free_before = cache.n_blocks_free();
  const int64_t allocated = cache.bytes_allocated();

  EvictionPlan plan = EvictionPlan::keep_all(cache.bookkeeping());
  plan.keep(0, 1) = {0, 7, 19};  // head 1: 20 entries (5 blocks) -> 3 entries (1 block)
  const ApplyResult r = cache.apply(plan);

  CHECK(r.n_blocks_freed == 4);
  CHECK(cache.n_blocks_used() == 6);
  CHECK(cache.n_blocks_free() == free_before + 4);
  CHECK(cache.capacity_blocks() == capacity);
  CHECK(cache.bytes_held() == 23 * entry_bytes);
  CHECK(cache.bytes_reserved() == 6 * 4 * entry_bytes);
  CHECK(cache.bytes_allocated() == allocated);
  CHECK(cache.peak_blocks_used() == 10);
  CHECK(cache.bookkeeping().block_table(0, 1).size() == 1);

  // The freed blocks serve the next appends: no growth until they are used up.
  cache.append(0, at::randn({8, 2, 8}), at::randn({8, 2, 8}), iota_tokens(20, 8));
  CHECK(cache.capacity_blocks() == capacity);
}

TEST_CASE("KvCache attention over a compacted cache equals attention over the kept entries",
          "[cache]") {
  for (int seed = 0; seed < 12; ++seed) {
    std::mt19937 rng(100 + seed);
    at::manual_seed(seed);
    const int n_head = 6, n_kv_head = 2, head_dim = 16;
    const KvGeometry g{2, n_kv_head, head_dim, seed % 2 == 0 ? 4 : 16};
    // float32 and 16-bit pools (these widen each block once per call from 4 query rows on).
    const at::ScalarType dtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};
    const at::ScalarType dtype = dtypes[seed % 3];
    const bool older_first = seed >= 6;
    CAPTURE(seed, dtype, older_first);
    KvCache cache(g, at::TensorOptions().dtype(dtype));
    DenseModel m(g);
    auto rounded = [&](const at::Tensor& t) { return t.to(dtype).to(at::kFloat); };
    // Prefill, evict, then a new chunk of n_q tokens appended before attention (never evicted).
    const int n_prefill = 40, n_q = seed % 3 == 0 ? 1 : 5;
    for (int il = 0; il < 2; ++il) {
      const at::Tensor k = at::randn({n_prefill, n_kv_head, head_dim});
      const at::Tensor v = at::randn({n_prefill, n_kv_head, head_dim});
      cache.append(il, k, v, iota_tokens(0, n_prefill));
      m.append(il, rounded(k), rounded(v));
    }
    const int64_t held_before = cache.bytes_held();
    const EvictionPlan plan = random_plan(cache, rng, 0.4, older_first);
    cache.apply(plan);
    m.apply(plan);
    CHECK(cache.bytes_held() < held_before);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    for (int il = 0; il < 2; ++il) {
      const at::Tensor k = at::randn({n_q, n_kv_head, head_dim});
      const at::Tensor v = at::randn({n_q, n_kv_head, head_dim});
      cache.append(il, k, v, iota_tokens(n_prefill, n_q));
      m.append(il, rounded(k), rounded(v));
      const at::Tensor q = at::randn({n_q, n_head, head_dim});
      const at::Tensor got = kernels::paged_attention(q, cache.layer_view(il), scale);
      const at::Tensor want = dense_attention(q, m, il, scale);
      CHECK((got.to(at::kDouble) - want).abs().max().item<double>() < 1e-5);
    }
    // The older-first plans left heads starting inside their first block.
    if (older_first) {
      bool offset = false;
      for (int il = 0; il < 2; ++il)
        for (int h = 0; h < n_kv_head; ++h) offset = offset || cache.bookkeeping().first_row(il, h) > 0;
      CHECK((offset || g.block_size == 1));
    }
  }
}

TEST_CASE("KvCache::layer_view exposes each head's length and block table", "[cache]") {
  const KvGeometry g{2, 2, 8, 4};
  KvCache cache(g);
  cache.append(1, at::randn({6, 2, 8}), at::randn({6, 2, 8}), iota_tokens(0, 6));
  EvictionPlan plan = EvictionPlan::keep_all(cache.bookkeeping());
  plan.keep(1, 0) = {5};
  cache.apply(plan);
  const kernels::PagedKvView view = cache.layer_view(1);
  CHECK(view.n_kv_head == 2);
  CHECK(view.block_size == 4);
  CHECK(view.head_dim == 8);
  CHECK(view.n_blocks == cache.capacity_blocks());
  CHECK(view.lengths[0] == 1);
  CHECK(view.lengths[1] == 6);
  CHECK(view.block_tables[1][1] == cache.bookkeeping().block_table(1, 1)[1]);
  CHECK(view.k_pool == cache.k_pool().data_ptr<float>());
  CHECK(cache.layer_view(0).lengths[0] == 0);
  kernels::validate_paged_kv_view(view);
  CHECK_THROWS_AS(cache.layer_view(2), Error);
}

TEST_CASE("KvCache::append rejects mismatched K/V shapes and changes nothing", "[cache]") {
  const KvGeometry g{1, 2, 8, 4};
  KvCache cache(g);
  cache.append(0, at::randn({2, 2, 8}), at::randn({2, 2, 8}), iota_tokens(0, 2));
  CHECK_THROWS_WITH(cache.append(0, at::randn({3, 2, 8}), at::randn({3, 2, 8}), iota_tokens(2, 2)),
                    Contains("n_new=2"));
  CHECK_THROWS_WITH(cache.append(0, at::randn({1, 3, 8}), at::randn({1, 3, 8}), iota_tokens(2, 1)),
                    Contains("n_kv_head=2"));
  CHECK_THROWS_WITH(cache.append(0, at::randn({1, 2, 8}), at::randn({1, 2, 4}), iota_tokens(2, 1)),
                    Contains("must match k"));
  try {
    cache.append(0, at::randn({1, 2, 4}), at::randn({1, 2, 4}), iota_tokens(2, 1));
    FAIL("bad shape accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Shape);
  }
  CHECK(cache.length(0, 0) == 2);
  CHECK(cache.bookkeeping().total_entries() == 4);
}

TEST_CASE("KvCache::clear empties every head and keeps the pool for reuse", "[cache]") {
  const KvGeometry g{2, 2, 8, 4};
  KvCache cache(g, at::TensorOptions().dtype(at::kFloat), /*initial_blocks=*/4);
  CHECK(cache.capacity_blocks() == 4);
  CHECK(cache.k_pool().size(0) == 4);
  cache.append(0, at::randn({9, 2, 8}), at::randn({9, 2, 8}), iota_tokens(0, 9));
  const int32_t capacity = cache.capacity_blocks();
  cache.clear();
  CHECK(cache.bytes_held() == 0);
  CHECK(cache.bytes_reserved() == 0);
  CHECK(cache.n_blocks_used() == 0);
  CHECK(cache.capacity_blocks() == capacity);
  CHECK(cache.layer_view(0).lengths[0] == 0);
  CHECK(cache.keys(0, 0).size(0) == 0);
}
