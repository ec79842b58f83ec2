// Paged attention (CPU) against the plain reference: dense softmax(q k^T * scale + causal mask) v
// over the K/V rows gathered from the block tables, computed in float64.
// Tolerance: 1e-5 absolute on outputs of magnitude ~1 (fp32 dot products over head_dim <= 64 and
// fp32 softmax sums over <= a few hundred entries stay well below it); attn_sum sums up to
// n_q * group probabilities, so its tolerance is 1e-5 per summed row.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/random_paged_cache.h"
#include "trimkv/kernels/paged_attention.h"

using trimkv::kernels::paged_attention;
using trimkv::kernels::paged_attention_with_stats;
using trimkv::kernels::PagedAttentionOutput;
using trimkv::kernels::PagedKvView;
using trimkv::test::RandomPagedCache;

namespace {

// Dense reference (float64): out [n_q, n_head, head_dim], attn_sum [n_kv_head, max_len].
PagedAttentionOutput reference_attention(const at::Tensor& q, const RandomPagedCache& c,
                                         double scale) {
  const int64_t n_q = q.size(0), n_head = q.size(1);
  const int64_t group = n_head / c.n_kv_head;
  const int32_t max_len = *std::max_element(c.lengths.begin(), c.lengths.end());
  at::Tensor out = at::zeros({n_q, n_head, c.head_dim}, at::kDouble);
  at::Tensor attn_sum = at::zeros({c.n_kv_head, max_len}, at::kDouble);
  for (int64_t qh = 0; qh < n_head; ++qh) {
    const int g = static_cast<int>(qh / group);
    const int64_t len = c.lengths[g];
    if (len == 0) continue;
    at::Tensor k = c.gather(c.k_pool, g), v = c.gather(c.v_pool, g);  // [len, head_dim]
    at::Tensor qq = q.select(1, qh).to(at::kDouble);                  // [n_q, head_dim]
    at::Tensor logits = at::matmul(qq, k.t()) * scale;                // [n_q, len]
    at::Tensor row = at::arange(n_q, at::kLong).unsqueeze(1);
    at::Tensor col = at::arange(len, at::kLong).unsqueeze(0);
    at::Tensor visible = col < (row + (len - n_q + 1));  // bottom-right aligned causal mask
    logits = logits.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
    at::Tensor probs = at::softmax(logits, 1);
    probs = probs.masked_fill(visible.logical_not(), 0.0);  // rows with nothing visible -> 0
    out.select(1, qh).copy_(at::matmul(probs, v));
    attn_sum[g].narrow(0, 0, len).add_(probs.sum(0));
  }
  return {out, attn_sum};
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) return 0.0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

void expect_matches_reference(const at::Tensor& q, const RandomPagedCache& c) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  PagedAttentionOutput got = paged_attention_with_stats(q, c.view(), scale);
  PagedAttentionOutput want = reference_attention(q, c, scale);
  const int64_t group = q.size(1) / c.n_kv_head;
  REQUIRE(got.out.sizes() == want.out.sizes());
  REQUIRE(got.attn_sum.sizes() == want.attn_sum.sizes());
  CHECK_FALSE(at::isnan(got.out).any().item<bool>());
  CHECK(max_abs_diff(got.out, want.out) < 1e-5);
  CHECK(max_abs_diff(got.attn_sum, want.attn_sum) < 1e-5 * q.size(0) * group);
  CHECK(max_abs_diff(paged_attention(q, c.view(), scale), want.out) < 1e-5);
}

}  // namespace

TEST_CASE("paged_attention matches dense causal attention over the gathered K/V", "[kernels]") {
  const int head_dim = GENERATE(16, 64);
  const int block_size = GENERATE(1, 4, 16);
  const auto heads = GENERATE(std::make_pair(4, 4), std::make_pair(6, 2), std::make_pair(8, 1),
                              std::make_pair(9, 3));
  const int n_q = GENERATE(1, 5);
  const int n_head = heads.first, n_kv_head = heads.second;
  for (int seed = 0; seed < 3; ++seed) {
    CAPTURE(head_dim, block_size, n_head, n_kv_head, n_q, seed);
    std::mt19937 rng(1000 * seed + head_dim + block_size + n_head + n_q);
    at::manual_seed(seed);
    std::uniform_int_distribution<int32_t> len_dist(n_q, 70);
    std::vector<int32_t> lens(n_kv_head);
    for (auto& l : lens) l = len_dist(rng);  // ragged: every head its own length
    RandomPagedCache cache(lens, head_dim, block_size, /*extra_blocks=*/3, rng);
    at::Tensor q = at::randn({n_q, n_head, head_dim});
    expect_matches_reference(q, cache);
  }
}

TEST_CASE("paged_attention reads each head's rows from its first row on (heads compacted toward the end)",
          "[kernels]") {
  const int block_size = GENERATE(4, 16);
  const int n_q = GENERATE(1, 5);
  for (int seed = 0; seed < 4; ++seed) {
    CAPTURE(block_size, n_q, seed);
    std::mt19937 rng(500 + seed);
    at::manual_seed(seed);
    std::uniform_int_distribution<int32_t> len_dist(n_q, 60), row_dist(0, block_size - 1);
    std::vector<int32_t> lens(3), rows(3);
    for (int h = 0; h < 3; ++h) {
      lens[h] = len_dist(rng);
      rows[h] = row_dist(rng);
    }
    rows[0] = block_size - 1;  // the last row of the first block: one entry there
    RandomPagedCache cache(lens, 32, block_size, 2, rng, rows);
    expect_matches_reference(at::randn({n_q, 6, 32}), cache);  // NaN rows before would show
  }
}

TEST_CASE(
    "paged_attention aligns a prefill block bottom-right: query row 0 of a fresh head sees "
    "only entry 0",
    "[kernels]") {
  std::mt19937 rng(7);
  at::manual_seed(7);
  const int n_q = 6, head_dim = 16;
  RandomPagedCache cache({n_q, n_q + 4}, head_dim, 4, 0, rng);
  at::Tensor q = at::randn({n_q, 2, head_dim});
  at::Tensor out = paged_attention(q, cache.view(), 0.25);
  // Head 0 holds exactly the n_q new tokens: row 0 attends to entry 0 alone, so out = v[0].
  at::Tensor v0 = cache.gather(cache.v_pool, 0)[0].to(at::kFloat);
  CHECK(max_abs_diff(out[0][0], v0) < 1e-6);
  // Head 1 has 4 older entries: row 0 sees 5 of them, and the whole block matches the reference.
  expect_matches_reference(q, cache);
}

TEST_CASE("paged_attention is exact across a multi-threaded prefill with statistics", "[kernels]") {
  // Large enough that the work is split into several chunks, exercising the attn_sum reduction.
  std::mt19937 rng(11);
  at::manual_seed(11);
  const int n_q = 48, head_dim = 64;
  RandomPagedCache cache({300, 120, 48, 257}, head_dim, 16, 5, rng);
  at::Tensor q = at::randn({n_q, 8, head_dim});
  const int threads_before = at::get_num_threads();
  at::set_num_threads(2);
  expect_matches_reference(q, cache);
  PagedAttentionOutput two = paged_attention_with_stats(q, cache.view(), 0.125);
  at::set_num_threads(1);
  PagedAttentionOutput one = paged_attention_with_stats(q, cache.view(), 0.125);
  at::set_num_threads(threads_before);
  CHECK(max_abs_diff(one.out, two.out) == 0.0);  // rows are independent: bitwise equal
  CHECK(max_abs_diff(one.attn_sum, two.attn_sum) < 1e-5 * n_q * 2);
}

TEST_CASE("paged_attention writes zeros, not NaN, for a head with no visible entries",
          "[kernels]") {
  std::mt19937 rng(3);
  at::manual_seed(3);
  SECTION("empty head") {
    RandomPagedCache cache({0, 5, 2}, 16, 4, 1, rng);
    at::Tensor q = at::randn({1, 6, 16});
    PagedAttentionOutput got = paged_attention_with_stats(q, cache.view(), 0.25);
    CHECK(got.out.select(1, 0).abs().max().item<float>() == 0.0f);
    CHECK(got.out.select(1, 1).abs().max().item<float>() == 0.0f);
    CHECK(got.attn_sum[0].abs().max().item<float>() == 0.0f);
    expect_matches_reference(q, cache);
  }
  SECTION("head shorter than the query block") {
    RandomPagedCache cache({2, 6}, 16, 4, 0, rng);
    at::Tensor q = at::randn({4, 2, 16});
    PagedAttentionOutput got = paged_attention_with_stats(q, cache.view(), 0.25);
    // Head 0 has 2 entries for 4 query rows: rows 0 and 1 see nothing.
    CHECK(got.out[0][0].abs().max().item<float>() == 0.0f);
    CHECK(got.out[1][0].abs().max().item<float>() == 0.0f);
    expect_matches_reference(q, cache);
  }
}

TEST_CASE("paged_attention accepts strided queries", "[kernels]") {
  std::mt19937 rng(5);
  at::manual_seed(5);
  RandomPagedCache cache({9, 17}, 16, 4, 0, rng);
  at::Tensor big = at::randn({3, 4, 32});
  at::Tensor q = big.narrow(2, 8, 16);                     // [3, 4, 16], rows and heads strided
  at::Tensor qt = at::randn({4, 3, 16}).transpose(0, 1);   // [3, 4, 16], head stride < row stride
  at::Tensor qnc = at::randn({3, 16, 4}).transpose(1, 2);  // [3, 4, 16], head_dim not unit-stride
  for (const at::Tensor& x : {q, qt, qnc}) {
    CHECK(max_abs_diff(paged_attention(x, cache.view(), 0.25),
                       paged_attention(x.contiguous(), cache.view(), 0.25)) == 0.0);
    expect_matches_reference(x, cache);
  }
}

TEST_CASE("paged_attention launcher rejects invalid inputs with a clear error", "[kernels]") {
  std::mt19937 rng(9);
  RandomPagedCache cache({5, 3}, 16, 4, 0, rng);
  const at::Tensor q = at::randn({1, 4, 16});
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(paged_attention(q.to(at::kDouble), cache.view(), 1.0), Contains("float32"));
  CHECK_THROWS_WITH(paged_attention(at::randn({1, 4, 8}), cache.view(), 1.0), Contains("head_dim"));
  CHECK_THROWS_WITH(paged_attention(at::randn({1, 3, 16}), cache.view(), 1.0),
                    Contains("multiple of n_kv_head"));
  CHECK_THROWS_WITH(paged_attention(at::randn({4, 16}), cache.view(), 1.0),
                    Contains("[n_q, n_head, head_dim]"));
  PagedKvView bad = cache.view();
  std::vector<int32_t> bad_table = {0, 99};
  std::vector<const int32_t*> bad_ptrs = {bad_table.data(), cache.table_ptrs[1]};
  bad.block_tables = bad_ptrs.data();
  CHECK_THROWS_WITH(paged_attention(q, bad, 1.0), Contains("outside the pool"));
  std::vector<int32_t> neg = {-1, 3};
  bad = cache.view();
  bad.lengths = neg.data();
  CHECK_THROWS_WITH(paged_attention(q, bad, 1.0), Contains("length must be >= 0"));
  std::vector<const int32_t*> null_ptrs = {nullptr, cache.table_ptrs[1]};
  bad = cache.view();
  bad.block_tables = null_ptrs.data();
  CHECK_THROWS_AS(paged_attention(q, bad, 1.0), std::invalid_argument);
  // A first row past the block, or one that pushes the rows into a block the table lacks.
  std::vector<int32_t> rows = {4, 0};
  bad = cache.view();
  bad.first_rows = rows.data();
  CHECK_THROWS_WITH(paged_attention(q, bad, 1.0), Contains("first row 4"));
}

TEST_CASE("paged_attention stays exact for sharply peaked and for flat softmax", "[kernels]") {
  std::mt19937 rng(13);
  at::manual_seed(13);
  RandomPagedCache cache({33, 64, 1}, 16, 8, 2, rng);
  at::Tensor q = at::randn({3, 6, 16});
  for (double scale : {40.0, 1e-4}) {  // logits spread over ~±500 (most weights underflow) / ~0
    CAPTURE(scale);
    PagedAttentionOutput got = paged_attention_with_stats(q, cache.view(), scale);
    PagedAttentionOutput want = reference_attention(q, cache, scale);
    CHECK_FALSE(at::isnan(got.out).any().item<bool>());
    CHECK(max_abs_diff(got.out, want.out) < 1e-5);
    CHECK(max_abs_diff(got.attn_sum, want.attn_sum) < 1e-5 * 3 * 2);
  }
}

TEST_CASE("paged_attention over bf16 / f16 pools equals float32 attention over the same values",
          "[kernels][kv-dtype]") {
  // 16-bit storage is widened exactly as it is read: the result is the float32 kernel's on the
  // rounded K/V, bit for bit (prefill and decode, every thread count), and the dense float64
  // reference's on them within the usual 1e-5.
  const auto dtype = GENERATE(trimkv::kernels::KvDtype::BF16, trimkv::kernels::KvDtype::F16);
  const int n_q = GENERATE(1, 7);
  std::mt19937 rng(31 + n_q);
  at::manual_seed(31);
  RandomPagedCache cache({40, 17, 64, 33}, 64, 16, 2, rng);
  const at::ScalarType st = dtype == trimkv::kernels::KvDtype::BF16 ? at::kBFloat16 : at::kHalf;
  // The float32 pools become the rounded values; the 16-bit pools hold them (NaN rows stay NaN).
  const at::Tensor k16 = cache.k_pool.to(st), v16 = cache.v_pool.to(st);
  cache.k_pool = k16.to(at::kFloat);
  cache.v_pool = v16.to(at::kFloat);
  PagedKvView view16 = cache.view();
  view16.k_pool = k16.data_ptr();
  view16.v_pool = v16.data_ptr();
  view16.dtype = dtype;
  const at::Tensor q = at::randn({n_q, 8, 64});
  const double scale = 0.125;
  const auto got = paged_attention_with_stats(q, view16, scale);
  const auto want = paged_attention_with_stats(q, cache.view(), scale);
  CHECK(at::equal(got.out, want.out));
  CHECK(at::equal(got.attn_sum, want.attn_sum));
  CHECK(max_abs_diff(got.out, reference_attention(q, cache, scale).out) < 1e-5);
  CHECK(std::string(trimkv::kernels::kv_dtype_name(dtype)) == (st == at::kBFloat16 ? "bf16" : "f16"));
  CHECK(trimkv::kernels::parse_kv_dtype("f16") == trimkv::kernels::KvDtype::F16);
  CHECK_THROWS_WITH(trimkv::kernels::parse_kv_dtype("f8"), Catch::Contains("unknown KV dtype 'f8'"));
}
