// The CUDA kernels (kernels/cuda) against references on the host: paged attention and its
// statistics against the CPU kernel (random per-head lengths, 0 included, block boundaries,
// offsets into the first block, f32 / bf16 / f16, GQA, decode and prefill rows, forced splits);
// compaction against the rows it must move; scoring bit for bit against core's float formula;
// every selection mode against a brute-force sort in core's order (eviction_select.h), on scores
// with many ties. Without a GPU the program prints "skipped: ..." and exits 77 (ctest: skipped).
#define CATCH_CONFIG_RUNNER
#include <ATen/ATen.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "cuda_buffer.h"
#include "kernels/random_paged_cache.h"
#include "trimkv/kernels/cuda_kernels.h"
#include "trimkv/kernels/paged_attention.h"

using namespace trimkv::kernels;
using trimkv::test::DeviceBuffer;
using trimkv::test::RandomPagedCache;

namespace {

// A random cache (kernels/random_paged_cache.h) stored as `dtype`; with `offsets` every head
// starts at a random row of its first block.
RandomPagedCache make_cache(std::mt19937& rng, const std::vector<int32_t>& lengths, int block_size, int head_dim,
                            KvDtype dtype, bool offsets) {
  std::vector<int32_t> first;
  for (size_t h = 0; h < lengths.size(); ++h) first.push_back(offsets ? static_cast<int32_t>(rng() % block_size) : 0);
  return RandomPagedCache(lengths, head_dim, block_size, /*extra_blocks=*/3, rng, first).stored_as(dtype);
}

// The cache's tables, lengths and pools on the device, and the view over them.
struct DeviceCache {
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<int32_t> tables, lengths, first_rows;
  DeviceBuffer<int64_t> offsets;
  cuda::DevicePagedKv kv;

  static std::vector<int32_t> concat(const RandomPagedCache& c, std::vector<int64_t>& offsets) {
    std::vector<int32_t> all;
    for (const auto& t : c.tables) {
      offsets.push_back(static_cast<int64_t>(all.size()));
      all.insert(all.end(), t.begin(), t.end());
    }
    all.push_back(0);  // never empty
    return all;
  }
  static std::vector<uint8_t> bytes(const at::Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    return std::vector<uint8_t>(p, p + t.numel() * t.element_size());
  }
  // null_first_rows: the view passes no first_rows (every head starts at row 0 of its block).
  explicit DeviceCache(const RandomPagedCache& c, bool null_first_rows = false,
                       std::vector<int64_t> host_offsets = {})
      : k(bytes(c.k_pool)), v(bytes(c.v_pool)), tables(concat(c, host_offsets)), lengths(c.lengths),
        first_rows(c.first), offsets(host_offsets) {
    kv.k_pool = k.get();
    kv.v_pool = v.get();
    kv.dtype = c.dtype;
    kv.block_size = c.block_size;
    kv.head_dim = c.head_dim;
    kv.n_kv_head = c.n_kv_head;
    kv.tables = tables.get();
    kv.table_offsets = offsets.get();
    kv.lengths = lengths.get();
    kv.first_rows = null_first_rows ? nullptr : first_rows.get();
    kv.max_length = *std::max_element(c.lengths.begin(), c.lengths.end());
  }
};

struct AttentionCase {
  std::vector<int32_t> lengths;
  int n_q, group, block_size, head_dim;
  KvDtype dtype;
  int n_splits;
};

void check_attention(const AttentionCase& t, uint32_t seed) {
  CAPTURE(t.n_q, t.group, t.block_size, t.head_dim, kv_dtype_name(t.dtype), t.n_splits, seed);
  std::mt19937 rng(seed);
  // Every head has at least n_q entries or none (the new rows are the last entries of each head).
  std::vector<int32_t> lengths = t.lengths;
  for (auto& l : lengths)
    if (l > 0) l = std::max(l, t.n_q);
  // Odd seeds: heads start at random rows of their first block; even seeds: at row 0, given to the
  // kernel as a null first_rows.
  const bool offsets = seed % 2 == 1;
  const RandomPagedCache c = make_cache(rng, lengths, t.block_size, t.head_dim, t.dtype, offsets);
  const int n_head = c.n_kv_head * t.group;
  at::manual_seed(seed);
  const at::Tensor q = at::randn({t.n_q, n_head, t.head_dim});
  const double scale = 1.0 / std::sqrt(static_cast<double>(t.head_dim));
  const PagedAttentionOutput ref = paged_attention_with_stats(q, c.view(), scale);

  const DeviceCache dc(c, !offsets);
  const int32_t max_len = dc.kv.max_length;
  DeviceBuffer<float> dq(std::vector<float>(q.data_ptr<float>(), q.data_ptr<float>() + q.numel()));
  DeviceBuffer<float> out(static_cast<size_t>(q.numel()));
  DeviceBuffer<float> sums(static_cast<size_t>(std::max(1, c.n_kv_head * max_len)));
  cuda::DeviceAttentionParams p;
  p.q = dq.get();
  p.q_row_stride = static_cast<int64_t>(n_head) * t.head_dim;
  p.q_head_stride = t.head_dim;
  p.out = out.get();  // head-major [n_head, n_q, head_dim]: other strides than q's
  p.out_row_stride = t.head_dim;
  p.out_head_stride = static_cast<int64_t>(t.n_q) * t.head_dim;
  p.n_q = t.n_q;
  p.n_head = n_head;
  p.scale = static_cast<float>(scale);
  p.kv = dc.kv;
  p.attn_sum = max_len > 0 ? sums.get() : nullptr;
  p.attn_sum_stride = max_len;
  p.n_splits = t.n_splits;
  cuda::paged_attention(p);
  const std::vector<float> got = out.host();
  const at::Tensor want_t = ref.out.transpose(0, 1).contiguous();  // head-major as requested
  const float* want = want_t.data_ptr<float>();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  CHECK(worst < 2e-5);
  if (max_len > 0) {
    const std::vector<float> gs = sums.host();
    const float* ws = ref.attn_sum.data_ptr<float>();
    double worst_sum = 0;
    for (size_t i = 0; i < gs.size(); ++i) worst_sum = std::max(worst_sum, static_cast<double>(std::fabs(gs[i] - ws[i])));
    CHECK(worst_sum < 2e-5 * t.n_q * t.group + 1e-6);
  }
}

}  // namespace

TEST_CASE("CUDA paged attention equals the CPU kernel: per-head lengths (0 too), blocks, dtypes, GQA, splits",
          "[cuda][attention]") {
  uint32_t seed = 1;
  for (KvDtype dtype : {KvDtype::F32, KvDtype::BF16, KvDtype::F16})
    for (int head_dim : {64, 128, 80})
      for (int n_q : {1, 7, 40})
        for (int n_splits : {0, 1, 5}) {
          // Lengths at block boundaries (15, 16, 17, 32), empty heads, one long head.
          check_attention({{0, 15, 16, 17, 32, 1, 300, 0}, n_q, 4, 16, head_dim, dtype, n_splits}, seed++);
          check_attention({{2049, 0, 63}, n_q, 1, 32, head_dim, dtype, n_splits}, seed++);
        }
  check_attention({{5000, 4097, 1}, 1, 16, 16, 256, KvDtype::BF16, 0}, seed++);  // the widest group, head_dim
  check_attention({{0, 0}, 3, 2, 16, 64, KvDtype::F32, 0}, seed++);               // nothing cached
}

TEST_CASE("CUDA paged attention refuses a group or head_dim it cannot take", "[cuda][attention]") {
  cuda::DeviceAttentionParams p;
  p.n_q = 1;
  p.n_head = 34;
  p.kv.n_kv_head = 2;
  p.kv.head_dim = 64;
  REQUIRE_THROWS_WITH(cuda::paged_attention(p), Catch::Contains("GQA group 17"));
  p.n_head = 3;
  REQUIRE_THROWS_WITH(cuda::paged_attention(p), Catch::Contains("not a positive multiple"));
}

TEST_CASE("CUDA compaction moves each head's kept rows to its front, bit for bit", "[cuda][compaction]") {
  std::mt19937 rng(7);
  for (KvDtype dtype : {KvDtype::F32, KvDtype::BF16})
    for (int round = 0; round < 4; ++round) {
      const std::vector<int32_t> lengths = {0, 1, 16, 17, 100, 333};
      const RandomPagedCache c = make_cache(rng, lengths, 16, 64, dtype, round % 2 == 1);
      std::vector<int32_t> keep;
      std::vector<int64_t> keep_offsets = {0};
      for (int32_t len : lengths) {
        for (int32_t e = 0; e < len; ++e)
          if (rng() % 3 != 0 || round == 3) keep.push_back(e);  // round 3: keep everything
        keep_offsets.push_back(static_cast<int64_t>(keep.size()));
      }
      DeviceCache dc(c, round % 2 == 0);  // even rounds: no offsets, null first_rows
      DeviceBuffer<int32_t> dkeep(keep.empty() ? std::vector<int32_t>{0} : keep);
      DeviceBuffer<int64_t> doff(keep_offsets);
      cuda::DeviceCompaction cp;
      cp.k_pool = dc.k.get();
      cp.v_pool = dc.v.get();
      cp.dtype = dtype;
      cp.block_size = 16;
      cp.head_dim = 64;
      cp.n_kv_head = c.n_kv_head;
      cp.tables = dc.tables.get();
      cp.table_offsets = dc.offsets.get();
      cp.first_rows = dc.kv.first_rows;
      cp.keep = dkeep.get();
      cp.keep_offsets = doff.get();
      cp.total_kept = keep_offsets.back();
      cuda::compact(cp);
      const std::vector<uint8_t> k = dc.k.host(), v = dc.v.host();
      const size_t row_bytes = 64 * c.k_pool.element_size();
      const auto* k0 = static_cast<const uint8_t*>(c.k_pool.data_ptr());
      const auto* v0 = static_cast<const uint8_t*>(c.v_pool.data_ptr());
      std::vector<char> written(k.size(), 0);
      for (int h = 0; h < c.n_kv_head; ++h)
        for (int64_t i = keep_offsets[h]; i < keep_offsets[h + 1]; ++i) {
          const size_t to = c.row_offset(h, i - keep_offsets[h]) * c.k_pool.element_size();
          const size_t from = c.row_offset(h, keep[i]) * c.k_pool.element_size();
          REQUIRE(std::memcmp(k.data() + to, k0 + from, row_bytes) == 0);
          REQUIRE(std::memcmp(v.data() + to, v0 + from, row_bytes) == 0);
          std::fill(written.begin() + to, written.begin() + to + row_bytes, 1);
        }
      for (size_t b = 0; b < k.size(); ++b)  // every other byte of both pools is as it was
        if (!written[b]) REQUIRE((k[b] == k0[b] && v[b] == v0[b]));
      CHECK(cuda::blocks_after_compaction(c.first[5], keep_offsets[6] - keep_offsets[5], 16) ==
            (c.first[5] + keep_offsets[6] - keep_offsets[5] + 15) / 16);
    }
}

namespace {

// Entries over streams with many equal scores: log β from a small set (0 among them: +inf), the
// same tokens in several streams.
struct HostEntries {
  std::vector<float> log_beta, log1p_beta;
  std::vector<int32_t> token;
  std::vector<int64_t> offsets = {0};
  int n_streams = 0;
};

HostEntries make_entries(std::mt19937& rng, int n_streams, int max_len) {
  const float betas[] = {0.0f, -0.0f, -1e-3f, -0.05f, -0.05f, -0.5f, -2.0f};
  HostEntries h;
  h.n_streams = n_streams;
  for (int s = 0; s < n_streams; ++s) {
    const int len = static_cast<int>(rng() % (max_len + 1));
    std::vector<int32_t> tokens(static_cast<size_t>(max_len + 5));
    std::iota(tokens.begin(), tokens.end(), 0);
    std::shuffle(tokens.begin(), tokens.end(), rng);
    for (int e = 0; e < len; ++e) {
      const float lb = betas[rng() % 7];
      h.log_beta.push_back(lb);
      h.log1p_beta.push_back(std::log1p(std::exp(lb)));
      h.token.push_back(tokens[e]);
    }
    h.offsets.push_back(static_cast<int64_t>(h.log_beta.size()));
  }
  return h;
}

struct Ranked {
  float score;
  int32_t token;
  int stream;
  int32_t entry;
};
bool before(const Ranked& a, const Ranked& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.token != b.token) return a.token > b.token;
  return a.stream < b.stream;
}

std::vector<std::vector<Ranked>> by_stream(const HostEntries& h, const std::vector<float>& scores) {
  std::vector<std::vector<Ranked>> out(h.n_streams);
  for (int s = 0; s < h.n_streams; ++s)
    for (int64_t i = h.offsets[s]; i < h.offsets[s + 1]; ++i)
      out[s].push_back({scores[i], h.token[i], s, static_cast<int32_t>(i - h.offsets[s])});
  return out;
}

std::vector<std::vector<int32_t>> lists_of(const std::vector<std::vector<Ranked>>& kept) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : kept) {
    std::vector<int32_t> l;
    for (const Ranked& r : s) l.push_back(r.entry);
    std::sort(l.begin(), l.end());
    out.push_back(l);
  }
  return out;
}

// Each stream's own best `limit[s]` entries.
std::vector<std::vector<int32_t>> own_best(std::vector<std::vector<Ranked>> streams, const std::vector<int64_t>& limit) {
  for (size_t s = 0; s < streams.size(); ++s) {
    std::sort(streams[s].begin(), streams[s].end(), before);
    streams[s].resize(static_cast<size_t>(std::min<int64_t>(limit[s], static_cast<int64_t>(streams[s].size()))));
  }
  return lists_of(streams);
}

std::vector<std::vector<int32_t>> brute_global(const HostEntries& h, const std::vector<float>& scores, int64_t k,
                                               int64_t floor) {
  const auto streams = by_stream(h, scores);
  std::vector<Ranked> all;
  for (const auto& s : streams) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end(), before);
  const int64_t joint = std::max<int64_t>(0, std::min<int64_t>(k - floor * h.n_streams, static_cast<int64_t>(all.size())));
  std::vector<std::vector<Ranked>> kept(h.n_streams);
  for (int64_t j = 0; j < joint; ++j) kept[all[j].stream].push_back(all[j]);
  if (floor == 0) return lists_of(kept);
  std::vector<int64_t> limit;
  for (const auto& s : kept) limit.push_back(static_cast<int64_t>(s.size()) + floor);
  return own_best(streams, limit);
}

}  // namespace

TEST_CASE("CUDA scores equal core's formula bit for bit; every selection mode equals a brute-force sort",
          "[cuda][selection]") {
  std::mt19937 rng(11);
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    const HostEntries h = make_entries(rng, 1 + static_cast<int>(rng() % 12), round < 6 ? 40 : 700);
    const int64_t total = h.offsets.back();
    if (total == 0) continue;
    DeviceBuffer<float> lb(h.log_beta), l1p(h.log1p_beta), scores(static_cast<size_t>(total));
    DeviceBuffer<int32_t> tok(h.token);
    DeviceBuffer<int64_t> off(h.offsets);
    DeviceBuffer<uint8_t> keep(static_cast<size_t>(total));
    cuda::DeviceEntries e;
    e.log_beta = lb.get();
    e.log1p_beta = l1p.get();
    e.token_index = tok.get();
    e.offsets = off.get();
    e.n_streams = h.n_streams;
    e.total = total;
    const int64_t q = 800;
    const int32_t recent = round < 6 ? 30 : 600;  // tokens run up to max_len + 4
    // Lookahead 1: one product, rounded (bit for bit); 3: log / expm1 of the device's library.
    cuda::retention_scores(e, q, 1, scores.get());
    const std::vector<float> one = scores.host();
    cuda::retention_scores(e, q, 3, scores.get());
    const std::vector<float> three = scores.host();
    for (int64_t i = 0; i < total; ++i) {
      const float lbi = h.log_beta[i];
      if (lbi == 0.0f) {
        REQUIRE((std::isinf(one[i]) && std::isinf(three[i])));
        continue;
      }
      REQUIRE(one[i] == static_cast<float>(q - h.token[i]) * lbi);
      const auto l1m = [](float x) { return x > -0.6931472f ? std::log(-std::expm1(x)) : std::log1p(-std::exp(x)); };
      const float ref3 = static_cast<float>(q + 1 - h.token[i]) * lbi + l1m(3.0f * lbi) - l1m(lbi);
      REQUIRE(three[i] == Approx(ref3).epsilon(1e-5).margin(1e-5));
    }
    cuda::retention_scores(e, q, 2, scores.get());
    cuda::protect_tokens(e, recent, 2, scores.get());  // a recent window and two sinks
    std::vector<float> want(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
      const float lbi = h.log_beta[i];
      // core's lookahead2_score: one product, one sum, each rounded (eviction_select.h)
      float s = lbi == 0.0f ? INFINITY : static_cast<float>(q + 1 - h.token[i]) * lbi + h.log1p_beta[i];
      if (h.token[i] >= recent || h.token[i] < 2) s = INFINITY;
      want[i] = s;
    }
    const std::vector<float> got = scores.host();
    REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);

    for (int64_t k : {int64_t{0}, int64_t{1}, total / 3, total / 2, total - 1, total, total + 5})
      for (int64_t floor : {0, 1, 4}) {
        if (floor * h.n_streams > k) continue;
        CAPTURE(k, floor);
        cuda::select_global_top_k(e, scores.get(), k, floor, keep.get());
        REQUIRE(cuda::keep_lists(keep.get(), h.offsets) == brute_global(h, want, k, floor));
      }
    std::vector<int64_t> per(static_cast<size_t>(h.n_streams));
    for (auto& x : per) x = static_cast<int64_t>(rng() % 60);
    cuda::select_per_head_top_k(e, scores.get(), per, keep.get());
    REQUIRE(cuda::keep_lists(keep.get(), h.offsets) == own_best(by_stream(h, want), per));
    const float t = want[static_cast<size_t>(rng() % total)];
    cuda::select_threshold(e, scores.get(), t, keep.get());
    std::vector<std::vector<int32_t>> thr(h.n_streams);
    for (int s = 0; s < h.n_streams; ++s)
      for (int64_t i = h.offsets[s]; i < h.offsets[s + 1]; ++i)
        if (want[i] >= t) thr[s].push_back(static_cast<int32_t>(i - h.offsets[s]));
    REQUIRE(cuda::keep_lists(keep.get(), h.offsets) == thr);
  }
  cuda::DeviceEntries e;
  e.n_streams = 4;
  REQUIRE_THROWS_WITH(cuda::select_global_top_k(e, nullptr, 3, 1, nullptr), Catch::Contains("floor 1 x 4"));
}

TEST_CASE("CUDA selection ranks -0 and +0 as one score (then the newer token first)", "[cuda][selection]") {
  // Two streams; entry scores +0, -0, -0, +0 / -0, +0 with tokens chosen so that the sign would
  // decide if -0 ranked below +0.
  HostEntries h;
  h.n_streams = 2;
  h.token = {1, 5, 3, 2, 4, 0};
  h.offsets = {0, 4, 6};
  const std::vector<float> scores = {0.0f, -0.0f, -0.0f, 0.0f, -0.0f, 0.0f};
  DeviceBuffer<float> ds(scores);
  DeviceBuffer<int32_t> tok(h.token);
  DeviceBuffer<int64_t> off(h.offsets);
  DeviceBuffer<uint8_t> keep(6);
  cuda::DeviceEntries e;
  e.token_index = tok.get();
  e.offsets = off.get();
  e.n_streams = 2;
  e.total = 6;
  for (int64_t k = 0; k <= 6; ++k) {
    CAPTURE(k);
    cuda::select_global_top_k(e, ds.get(), k, 0, keep.get());
    REQUIRE(cuda::keep_lists(keep.get(), h.offsets) == brute_global(h, scores, k, 0));
  }
  cuda::select_global_top_k(e, ds.get(), 3, 0, keep.get());  // tokens 5, 4, 3
  REQUIRE(cuda::keep_lists(keep.get(), h.offsets) == std::vector<std::vector<int32_t>>{{1, 2}, {0}});
}

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::device_available(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
