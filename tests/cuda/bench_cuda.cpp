// bench_cuda: the CUDA kernels' speed on this GPU, printed as one table (tests/device/run.sh).
//  - paged decode attention (one new row; Qwen3-VL-8B's 32 query / 8 KV heads, head_dim 128,
//    bf16 K/V in blocks of 16 spread over the pool): K/V bytes read / time at 4K..128K entries per
//    sequence, batch 1..8, against the HBM peak and against LibTorch's
//    scaled_dot_product_attention over the same K/V held dense, GQA as stored (enable_gqa:
//    LibTorch >= 2.5 with CUDA only);
//  - selection + compaction over 36 layers x 8 KV heads x 64K entries (global top-k keeping
//    15/16, then every layer compacted), against one decode step's attention over that cache
//    plus reading 16.4 GB of bf16 weights at the measured bandwidth.
#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_buffer.h"
#include "trimkv/kernels/cuda_kernels.h"

// scaled_dot_product_attention with enable_gqa: LibTorch 2.5 and later.
#define SDPA_WITH_GQA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))

using namespace trimkv::kernels;
using trimkv::test::cuda_check;
using trimkv::test::DeviceBuffer;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kBlock = 16;

// Milliseconds per call of f (a few warm-up calls, then the mean of `reps`).
template <typename F>
double time_ms(F&& f, int reps = 20) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "event");
  cuda_check(cudaEventCreate(&b), "event");
  cuda_check(cudaEventRecord(a), "event");
  for (int i = 0; i < reps; ++i) f();
  cuda_check(cudaEventRecord(b), "event");
  cuda_check(cudaEventSynchronize(b), "event");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, a, b), "event");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

// A paged cache of `heads` sequences of `len` entries, blocks in a shuffled order.
struct Cache {
  DeviceBuffer<uint16_t> k, v;
  DeviceBuffer<int32_t> tables, lengths;
  DeviceBuffer<int64_t> offsets;
  cuda::DevicePagedKv kv;
  Cache(int heads, int len, std::mt19937& rng)
      : k(static_cast<size_t>(heads) * ((len + kBlock - 1) / kBlock) * kBlock * kDim),
        v(k.size()) {
    const int64_t per = (len + kBlock - 1) / kBlock;
    std::vector<int32_t> ids(static_cast<size_t>(heads * per));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int64_t> off;
    for (int h = 0; h < heads; ++h) off.push_back(h * per);
    tables = DeviceBuffer<int32_t>(ids);
    lengths = DeviceBuffer<int32_t>(std::vector<int32_t>(heads, len));
    offsets = DeviceBuffer<int64_t>(off);
    cuda_check(cudaMemset(k.get(), 0x3c, k.size() * 2), "fill");  // bf16 ~0.0115: finite, equal scores
    cuda_check(cudaMemset(v.get(), 0x3c, v.size() * 2), "fill");
    kv.k_pool = k.get();
    kv.v_pool = v.get();
    kv.dtype = KvDtype::BF16;
    kv.block_size = kBlock;
    kv.head_dim = kDim;
    kv.n_kv_head = heads;
    kv.tables = tables.get();
    kv.table_offsets = offsets.get();
    kv.lengths = lengths.get();
    kv.max_length = len;
  }
};

double decode_ms(Cache& c, int batch) {
  DeviceBuffer<float> q(static_cast<size_t>(batch) * kHeads * kDim), out(q.size());
  cuda_check(cudaMemset(q.get(), 0, q.size() * 4), "fill");
  cuda::DeviceAttentionParams p;
  p.q = q.get();
  p.q_row_stride = static_cast<int64_t>(batch) * kHeads * kDim;
  p.q_head_stride = kDim;
  p.out = out.get();
  p.out_row_stride = p.q_row_stride;
  p.out_head_stride = kDim;
  p.n_q = 1;
  p.n_head = batch * kHeads;
  p.scale = 0.088f;
  p.kv = c.kv;
  return time_ms([&] { cuda::paged_attention(p); });
}

double sdpa_ms(int batch, int len) {
#if SDPA_WITH_GQA
  if (!at::hasCUDA()) return -1;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor q = at::randn({batch, kHeads, 1, kDim}, o);
  at::Tensor k = at::randn({batch, kKvHeads, len, kDim}, o);  // GQA as stored: the same bytes as ours
  at::Tensor v = at::randn({batch, kKvHeads, len, kDim}, o);
  return time_ms([&] { (void)at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, std::nullopt, true); });
#else
  (void)batch;
  (void)len;
  return -1;  // LibTorch 1.x has no scaled_dot_product_attention
#endif
}

}  // namespace

int main() {
  std::string why;
  if (!cuda::device_available(&why)) {
    std::printf("bench_cuda: %s\n", why.c_str());
    return 77;
  }
#if !SDPA_WITH_GQA
  std::printf("(LibTorch %d.%d: no scaled_dot_product_attention with GQA; the SDPA columns are n/a)\n",
              TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
#endif
  const double peak = cuda::peak_bandwidth_bytes_per_s();
  std::mt19937 rng(1);
  std::printf("HBM peak (clock x bus) %.0f GB/s\n\n", peak / 1e9);
  std::printf("| entries/seq | batch | paged ms | paged GB/s | %% of peak | SDPA dense ms | paged / SDPA time |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  double attn64k = 0;
  for (int len : {4096, 16384, 32768, 65536, 131072})
    for (int batch : {1, 4, 8}) {
      Cache c(batch * kKvHeads, len, rng);
      const double ms = decode_ms(c, batch);
      if (len == 65536 && batch == 1) attn64k = ms;
      const double bytes = 2.0 * batch * kKvHeads * static_cast<double>(len) * kDim * 2;
      const double sdpa = sdpa_ms(batch, len);
      std::printf("| %d | %d | %.3f | %.0f | %.1f | %s | %s |\n", len, batch, ms, bytes / ms / 1e6,
                  100 * bytes * 1e3 / ms / peak, sdpa > 0 ? std::to_string(sdpa).c_str() : "n/a",
                  sdpa > 0 ? std::to_string(ms / sdpa).c_str() : "n/a");
    }

  // Selection + compaction at 64K entries per head, 36 layers x 8 KV heads.
  const int layers = 36, len = 65536;
  const int64_t streams = static_cast<int64_t>(layers) * kKvHeads, total = streams * len;
  std::vector<float> lb(static_cast<size_t>(total)), l1p(lb.size());
  std::vector<int32_t> tok(lb.size());
  std::vector<int64_t> off = {0};
  std::uniform_real_distribution<float> u(-3.0f, -1e-4f);
  for (int64_t i = 0; i < total; ++i) {
    lb[i] = u(rng);
    l1p[i] = std::log1p(std::exp(lb[i]));
    tok[i] = static_cast<int32_t>(i % len);
  }
  for (int64_t s = 1; s <= streams; ++s) off.push_back(s * len);
  DeviceBuffer<float> dlb(lb), dl1p(l1p), scores(lb.size());
  DeviceBuffer<int32_t> dtok(tok);
  DeviceBuffer<int64_t> doff(off);
  DeviceBuffer<uint8_t> keep(lb.size());
  cuda::DeviceEntries e;
  e.log_beta = dlb.get();
  e.log1p_beta = dl1p.get();
  e.token_index = dtok.get();
  e.offsets = doff.get();
  e.n_streams = static_cast<int>(streams);
  e.total = total;
  const double select_ms = time_ms([&] {
    cuda::retention_scores(e, len + 1, 2, scores.get());
    cuda::select_global_top_k(e, scores.get(), total / 16 * 15, 0, keep.get());
  }, 5);
  // Compaction of every layer: each head keeps 15 of every 16 entries.
  Cache layer(kKvHeads, len, rng);
  std::vector<int32_t> kept;
  std::vector<int64_t> kept_off = {0};
  for (int h = 0; h < kKvHeads; ++h) {
    for (int32_t i = 0; i < len; ++i)
      if (i % 16 != 5) kept.push_back(i);
    kept_off.push_back(static_cast<int64_t>(kept.size()));
  }
  DeviceBuffer<int32_t> dkept(kept);
  DeviceBuffer<int64_t> dkoff(kept_off);
  cuda::DeviceCompaction cp;
  cp.k_pool = layer.k.get();
  cp.v_pool = layer.v.get();
  cp.dtype = KvDtype::BF16;
  cp.block_size = kBlock;
  cp.head_dim = kDim;
  cp.n_kv_head = kKvHeads;
  cp.tables = layer.tables.get();
  cp.table_offsets = layer.offsets.get();
  cp.keep = dkept.get();
  cp.keep_offsets = dkoff.get();
  cp.total_kept = kept_off.back();
  const double compact_ms = layers * time_ms([&] { cuda::compact(cp); }, 5);
  const double weights_ms = 16.4e9 / peak * 1e3;
  const double step_ms = layers * attn64k + weights_ms;
  std::printf("\n| 64K entries x 36 layers x 8 KV heads | ms |\n|---|---:|\n");
  std::printf("| scores + global top-k (%lld entries) | %.3f |\n", static_cast<long long>(total), select_ms);
  std::printf("| compaction, 36 layers (1/16 evicted) | %.3f |\n", compact_ms);
  std::printf("| decode step: 36 x attention (%.3f) + 16.4 GB weights at peak (%.3f) | %.3f |\n", attn64k, weights_ms,
              step_ms);
  std::printf("| selection + compaction / decode step | %.1f%% |\n", 100 * (select_ms + compact_ms) / step_ms);
  return 0;
}
