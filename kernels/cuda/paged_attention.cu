// Paged attention on the GPU (cuda_kernels.h): split-K partials, a merge pass, attention sums.
//
// Pass 1, one block per (query row, split s, KV head g): the split's visible entries are read
// tile by tile (kTile entries, K and V widened to float in shared memory, each entry's row found
// through g's block table), and every query head of g's GQA group runs an online softmax over
// them (warp w takes heads w, w + kWarps, ...; lane j scores entry j of the tile; each lane keeps
// head_dim / 32 output accumulators). It writes the split's max, sum and unnormalised output.
// Pass 2, one warp per (row, query head): merges the splits (log-sum-exp), writes the output and
// the row's log-sum-exp. Pass 3 (attention statistics only), one thread per (KV head, entry):
// Σ over rows and the group's heads of exp(q·k·scale - lse), rows in order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_common.cuh"
#include "trimkv/kernels/cuda_kernels.h"

namespace trimkv::kernels::cuda {

namespace {

using namespace detail;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 32;             // entries per tile: one per lane
constexpr int kMaxDimPerLane = 8;     // head_dim <= 256
constexpr int kMaxHeadsPerWarp = 4;   // GQA group <= 16

struct Pass1 {
  DeviceAttentionParams p;
  int group;
  int chunk;      // entries per split
  int n_splits;
  float* part_out;  // [n_q, n_head, n_splits, head_dim]
  float* part_ml;   // [n_q, n_head, n_splits, 2]: max, sum
};

__device__ __forceinline__ int visible_entries(int len, int n_q, int row) { return min(len, len - n_q + row + 1); }

template <typename T>
__global__ void __launch_bounds__(kThreads) attention_splits(Pass1 a) {
  const DeviceAttentionParams& p = a.p;
  const int row = blockIdx.x, s = blockIdx.y, g = blockIdx.z;
  const int d = p.kv.head_dim, ds = d + 1;  // shared rows padded by one: lanes reading a column hit distinct banks
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  extern __shared__ float smem[];
  float* q_s = smem;                  // [group][d], pre-scaled by nothing (scale applies to the dot)
  float* k_s = q_s + a.group * d;     // [kTile][d + 1]
  float* v_s = k_s + kTile * ds;      // [kTile][d + 1]

  const int len = p.kv.lengths[g];
  const int e0 = s * a.chunk;
  const int e1 = min(visible_entries(len, p.n_q, row), e0 + a.chunk);
  for (int i = threadIdx.x; i < a.group * d; i += kThreads) {
    const int hi = i / d, k = i % d;
    q_s[i] = p.q[row * p.q_row_stride + (g * a.group + hi) * p.q_head_stride + k];
  }
  float m[kMaxHeadsPerWarp], l[kMaxHeadsPerWarp], acc[kMaxHeadsPerWarp][kMaxDimPerLane];
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerWarp; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) acc[h][i] = 0.0f;
  }
  const T* kp = static_cast<const T*>(p.kv.k_pool);
  const T* vp = static_cast<const T*>(p.kv.v_pool);
  const int32_t* table = p.kv.tables + p.kv.table_offsets[g];
  const int r0 = p.kv.first_rows ? p.kv.first_rows[g] : 0;

  for (int t0 = e0; t0 < e1; t0 += kTile) {
    const int n = min(kTile, e1 - t0);
    __syncthreads();  // the previous tile is consumed (and q_s written, the first time)
    for (int j = warp; j < n; j += kWarps) {
      const int64_t base = pool_row(table, r0, t0 + j, p.kv.block_size, d);
      for (int k = lane; k < d; k += 32) {
        k_s[j * ds + k] = widen(kp[base + k]);
        v_s[j * ds + k] = widen(vp[base + k]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kMaxHeadsPerWarp; ++h) {
      const int hi = warp + h * kWarps;
      if (hi >= a.group) break;
      const float* q = q_s + hi * d;
      float sc = -INFINITY;
      if (lane < n) {
        float dot = 0.0f;
        const float* kr = k_s + lane * ds;
        for (int k = 0; k < d; ++k) dot += q[k] * kr[k];
        sc = dot * p.scale;
      }
      const float m_new = fmaxf(m[h], warp_max(sc));
      const float w = lane < n ? expf(sc - m_new) : 0.0f;
      const float corr = expf(m[h] - m_new);  // 0 on the first tile (m = -inf)
      l[h] = l[h] * corr + warp_sum(w);
#pragma unroll
      for (int i = 0; i < kMaxDimPerLane; ++i) acc[h][i] *= corr;
      for (int j = 0; j < n; ++j) {
        const float wj = __shfl_sync(0xffffffffu, w, j);
        const float* vr = v_s + j * ds;
#pragma unroll
        for (int i = 0; i < kMaxDimPerLane; ++i) {
          const int k = lane + 32 * i;
          if (k < d) acc[h][i] += wj * vr[k];
        }
      }
      m[h] = m_new;
    }
  }
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerWarp; ++h) {
    const int hi = warp + h * kWarps;
    if (hi >= a.group) break;
    const int64_t idx = (static_cast<int64_t>(row) * p.n_head + g * a.group + hi) * a.n_splits + s;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int k = lane + 32 * i;
      if (k < d) a.part_out[idx * d + k] = acc[h][i];
    }
    if (lane == 0) {
      a.part_ml[idx * 2] = m[h];
      a.part_ml[idx * 2 + 1] = l[h];
    }
  }
}

// One warp per (row, query head): out = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s.
__global__ void merge_splits(DeviceAttentionParams p, int n_splits, const float* part_out, const float* part_ml,
                             float* lse) {
  const int64_t task = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (task >= static_cast<int64_t>(p.n_q) * p.n_head) return;
  const int row = static_cast<int>(task / p.n_head), qh = static_cast<int>(task % p.n_head);
  const int d = p.kv.head_dim;
  const float* ml = part_ml + task * n_splits * 2;
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s)
    if (ml[2 * s + 1] > 0.0f) M = fmaxf(M, ml[2 * s]);
  float L = 0.0f;
  for (int s = 0; s < n_splits; ++s)
    if (ml[2 * s + 1] > 0.0f) L += ml[2 * s + 1] * expf(ml[2 * s] - M);
  float* o = p.out + row * p.out_row_stride + qh * p.out_head_stride;
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int k = lane; k < d; k += 32) {
    float x = 0.0f;
    for (int s = 0; s < n_splits; ++s)
      if (ml[2 * s + 1] > 0.0f) x += part_out[(task * n_splits + s) * d + k] * expf(ml[2 * s] - M);
    o[k] = x * inv;  // rows that see nothing: 0
  }
  if (lane == 0) lse[task] = L > 0.0f ? M + logf(L) : -INFINITY;
}

// One thread per (KV head, entry < stride): the entry's softmax weight summed over rows and heads.
template <typename T>
__global__ void attention_sums(DeviceAttentionParams p, int group, const float* lse) {
  const int g = blockIdx.y;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= p.attn_sum_stride) return;
  const int len = p.kv.lengths[g];
  float sum = 0.0f;
  if (e < len) {
    const int d = p.kv.head_dim;
    const T* kr = static_cast<const T*>(p.kv.k_pool) +
                  pool_row(p.kv.tables + p.kv.table_offsets[g], p.kv.first_rows ? p.kv.first_rows[g] : 0, e,
                           p.kv.block_size, d);
    for (int row = 0; row < p.n_q; ++row) {
      if (e >= visible_entries(len, p.n_q, row)) continue;
      for (int hi = 0; hi < group; ++hi) {
        const int qh = g * group + hi;
        const float* q = p.q + row * p.q_row_stride + qh * p.q_head_stride;
        float dot = 0.0f;
        for (int k = 0; k < d; ++k) dot += q[k] * widen(kr[k]);
        sum += expf(dot * p.scale - lse[static_cast<int64_t>(row) * p.n_head + qh]);
      }
    }
  }
  p.attn_sum[g * p.attn_sum_stride + e] = sum;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev), "SM count");
    return v;
  }();
  return n;
}

template <typename T>
void launch_pass1(const Pass1& a, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attention_splits<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "paged attention: shared memory");
  const dim3 grid(a.p.n_q, a.n_splits, a.p.kv.n_kv_head);  // rows in x: up to 2^31 - 1
  attention_splits<T><<<grid, kThreads, smem, stream>>>(a);
  check_launch("paged attention (splits)");
}

template <typename T>
void launch_sums(const DeviceAttentionParams& p, int group, const float* lse, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.attn_sum_stride + 127) / 128), p.kv.n_kv_head);
  attention_sums<T><<<grid, 128, 0, stream>>>(p, group, lse);
  check_launch("paged attention (sums)");
}

}  // namespace

void paged_attention(const DeviceAttentionParams& p) {
  const DevicePagedKv& kv = p.kv;
  if (kv.n_kv_head <= 0 || kv.n_kv_head > 65535 || p.n_head <= 0 || p.n_head % kv.n_kv_head != 0)
    throw std::invalid_argument("cuda paged_attention: n_head " + std::to_string(p.n_head) +
                                " is not a positive multiple of n_kv_head " + std::to_string(kv.n_kv_head) +
                                " (1..65535)");
  const int group = p.n_head / kv.n_kv_head;
  if (group > kWarps * kMaxHeadsPerWarp || kv.head_dim <= 0 || kv.head_dim > 32 * kMaxDimPerLane)
    throw std::invalid_argument("cuda paged_attention: GQA group " + std::to_string(group) + " (at most 16) or head_dim " +
                                std::to_string(kv.head_dim) + " (at most 256) out of range");
  if (p.attn_sum && p.attn_sum_stride < kv.max_length)
    throw std::invalid_argument("cuda paged_attention: attn_sum_stride below the longest head");
  if (p.n_q <= 0) return;
  const cudaStream_t stream = as_stream(p.stream);
  // Splits: enough blocks for two waves over the SMs, no split under two tiles.
  int n_splits = p.n_splits;
  if (n_splits <= 0) {
    const int64_t base = static_cast<int64_t>(kv.n_kv_head) * p.n_q;
    const int64_t want = std::max<int64_t>(1, (2 * sm_count() + base - 1) / base);
    const int64_t most = std::max<int64_t>(1, (kv.max_length + 2 * kTile - 1) / (2 * kTile));
    n_splits = static_cast<int>(std::min(want, most));
  }
  n_splits = static_cast<int>(std::min<int64_t>({n_splits, 65535, std::max<int32_t>(1, kv.max_length)}));
  Pass1 a;
  a.p = p;
  a.group = group;
  a.n_splits = n_splits;
  a.chunk = static_cast<int>(std::max<int64_t>(1, (kv.max_length + n_splits - 1) / n_splits));
  const int64_t tasks = static_cast<int64_t>(p.n_q) * p.n_head;
  Scratch part_out(static_cast<size_t>(tasks * n_splits * kv.head_dim) * sizeof(float), stream, "paged attention: scratch");
  Scratch part_ml(static_cast<size_t>(tasks * n_splits * 2) * sizeof(float), stream, "paged attention: scratch");
  Scratch lse(static_cast<size_t>(tasks) * sizeof(float), stream, "paged attention: scratch");
  a.part_out = part_out.as<float>();
  a.part_ml = part_ml.as<float>();
  const size_t smem = (static_cast<size_t>(group) * kv.head_dim + 2 * kTile * (kv.head_dim + 1)) * sizeof(float);
  switch (kv.dtype) {
    case KvDtype::F32: launch_pass1<float>(a, smem, stream); break;
    case KvDtype::BF16: launch_pass1<__nv_bfloat16>(a, smem, stream); break;
    case KvDtype::F16: launch_pass1<__half>(a, smem, stream); break;
  }
  const int warps_per_block = 4;
  merge_splits<<<static_cast<unsigned>((tasks + warps_per_block - 1) / warps_per_block), 32 * warps_per_block, 0,
                 stream>>>(p, n_splits, a.part_out, a.part_ml, lse.as<float>());
  check_launch("paged attention (merge)");
  if (p.attn_sum && p.attn_sum_stride > 0) {
    switch (kv.dtype) {
      case KvDtype::F32: launch_sums<float>(p, group, lse.as<float>(), stream); break;
      case KvDtype::BF16: launch_sums<__nv_bfloat16>(p, group, lse.as<float>(), stream); break;
      case KvDtype::F16: launch_sums<__half>(p, group, lse.as<float>(), stream); break;
    }
  }
}

}  // namespace trimkv::kernels::cuda
