// Scoring and selection on the GPU (cuda_kernels.h). Every entry gets one 64-bit key whose
// ascending order is core's order: the high word is the score's rank key (higher score first,
// -0 == +0), the low word the token index reversed (newer first); a stable radix sort of the
// entries, listed stream after stream, then breaks what is left by the smaller stream. So the
// chosen sets equal core's (eviction_select.h) entry for entry, whatever the equal scores.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <cmath>

#include "cuda_common.cuh"
#include "trimkv/kernels/cuda_kernels.h"

namespace trimkv::kernels::cuda {

namespace {

using namespace detail;

constexpr int kBlock = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

__device__ __forceinline__ uint64_t order_key(float score, int32_t token) {
  if (score == 0.0f) score = 0.0f;
  uint32_t u = __float_as_uint(score);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending in the score
  const uint32_t t = static_cast<uint32_t>(token) ^ 0x80000000u;  // ascending in the token
  return (static_cast<uint64_t>(~u) << 32) | ~t;
}

__device__ __forceinline__ float log1mexp(float x) {
  return x > -0.6931472f ? logf(-expm1f(x)) : log1pf(-expf(x));
}

__global__ void scores_kernel(DeviceEntries e, int64_t q, int lookahead, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (i >= e.total) return;
  const float lb = e.log_beta[i];
  const int32_t pos = e.token_index[i];
  float s;
  // Products and sums rounded one by one (no fused multiply-add): core's float arithmetic.
  if (lb == 0.0f) s = INFINITY;
  else if (lookahead == 2) s = __fadd_rn(__fmul_rn(static_cast<float>(q + 1 - pos), lb), e.log1p_beta[i]);
  else if (lookahead <= 1) s = __fmul_rn(static_cast<float>(q - pos), lb);
  else
    s = __fsub_rn(__fadd_rn(__fmul_rn(static_cast<float>(q + 1 - pos), lb),
                            log1mexp(__fmul_rn(static_cast<float>(lookahead), lb))),
                  log1mexp(lb));
  out[i] = s;
}

__global__ void protect_kernel(DeviceEntries e, int32_t first_protected, int32_t n_first, float* scores) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (i >= e.total) return;
  const int32_t t = e.token_index[i];
  if (t >= first_protected || t < n_first) scores[i] = INFINITY;
}

__global__ void keys_kernel(DeviceEntries e, const float* scores, uint64_t* keys, int32_t* index) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (i >= e.total) return;
  keys[i] = order_key(scores[i], e.token_index[i]);
  index[i] = static_cast<int32_t>(i);
}

// keep[order[j]] = (j < k) for the first `n` sorted positions (global selection).
__global__ void flag_first(const int32_t* order, int64_t n, int64_t k, uint8_t* keep) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (j < n) keep[order[j]] = j < k;
}

__global__ void count_kept(DeviceEntries e, const uint8_t* keep, int64_t* count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (i < e.total && keep[i]) atomicAdd(reinterpret_cast<unsigned long long*>(&count[segment_of(e.offsets, e.n_streams, i)]), 1ull);
}

// Sorted within streams: keep the first limit[s] of stream s (limit = count[s] + add).
__global__ void flag_stream_prefix(DeviceEntries e, const int32_t* order, const int64_t* limit, int64_t add,
                                   uint8_t* keep) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (j >= e.total) return;
  const int s = segment_of(e.offsets, e.n_streams, j);
  keep[order[j]] = j - e.offsets[s] < limit[s] + add;
}

__global__ void flag_threshold(DeviceEntries e, const float* scores, float t, uint8_t* keep) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (i < e.total) keep[i] = scores[i] >= t;
}

void check_size(const DeviceEntries& e) {
  if (e.total < 0 || e.total > INT_MAX || e.n_streams <= 0)
    throw std::invalid_argument("cuda selection: " + std::to_string(e.total) + " entries over " +
                                std::to_string(e.n_streams) + " streams (at most 2^31 - 1 entries, >= 1 stream)");
}

// The entries' indices sorted by their keys: over all entries, or within each stream.
struct Sorted {
  Scratch keys_in, keys_out, index_in, index_out;
  Sorted(const DeviceEntries& e, const float* scores, bool per_stream)
      : keys_in(e.total * 8, as_stream(e.stream), "selection: keys"),
        keys_out(e.total * 8, as_stream(e.stream), "selection: keys"),
        index_in(e.total * 4, as_stream(e.stream), "selection: indices"),
        index_out(e.total * 4, as_stream(e.stream), "selection: indices") {
    const cudaStream_t stream = as_stream(e.stream);
    const int n = static_cast<int>(e.total);
    keys_kernel<<<blocks_for(n), kBlock, 0, stream>>>(e, scores, keys_in.as<uint64_t>(), index_in.as<int32_t>());
    check_launch("selection: keys");
    size_t temp_bytes = 0;
    auto sort = [&](void* temp) {
      if (per_stream)
        return cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, keys_in.as<uint64_t>(), keys_out.as<uint64_t>(),
                                                        index_in.as<int32_t>(), index_out.as<int32_t>(), n,
                                                        e.n_streams, e.offsets, e.offsets + 1, 0, 64, stream);
      return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in.as<uint64_t>(), keys_out.as<uint64_t>(),
                                             index_in.as<int32_t>(), index_out.as<int32_t>(), n, 0, 64, stream);
    };
    check(sort(nullptr), "selection: sort size");
    Scratch temp(temp_bytes, stream, "selection: sort scratch");
    check(sort(temp.as<void>()), "selection: sort");
  }
  const int32_t* order() const { return index_out.as<int32_t>(); }
};

void flag_stream_prefixes(const DeviceEntries& e, const float* scores, const int64_t* limit, int64_t add,
                          uint8_t* keep) {
  const Sorted sorted(e, scores, true);
  flag_stream_prefix<<<blocks_for(e.total), kBlock, 0, as_stream(e.stream)>>>(e, sorted.order(), limit, add, keep);
  check_launch("selection: per-stream prefixes");
}

}  // namespace

void retention_scores(const DeviceEntries& e, int64_t q, int lookahead, float* scores) {
  check_size(e);
  if (e.total == 0) return;
  scores_kernel<<<blocks_for(e.total), kBlock, 0, as_stream(e.stream)>>>(e, q, lookahead, scores);
  check_launch("retention scores");
}

void protect_tokens(const DeviceEntries& e, int32_t first_protected, int32_t n_first, float* scores) {
  check_size(e);
  if (e.total == 0) return;
  protect_kernel<<<blocks_for(e.total), kBlock, 0, as_stream(e.stream)>>>(e, first_protected, n_first, scores);
  check_launch("protect tokens");
}

void select_global_top_k(const DeviceEntries& e, const float* scores, int64_t k, int64_t floor_per_head,
                         uint8_t* keep) {
  check_size(e);
  if (k < 0 || floor_per_head < 0 || floor_per_head * e.n_streams > k)
    throw std::invalid_argument("cuda selection: k " + std::to_string(k) + " and floor " +
                                std::to_string(floor_per_head) + " x " + std::to_string(e.n_streams) +
                                " streams (k >= floor x streams >= 0)");
  if (e.total == 0) return;
  const cudaStream_t stream = as_stream(e.stream);
  const int64_t k_joint = k - floor_per_head * e.n_streams;
  if (k_joint >= e.total) {
    check(cudaMemsetAsync(keep, 1, e.total, stream), "selection: keep all");
  } else if (k_joint <= 0) {
    check(cudaMemsetAsync(keep, 0, e.total, stream), "selection: keep none");
  } else {
    const Sorted sorted(e, scores, false);
    flag_first<<<blocks_for(e.total), kBlock, 0, stream>>>(sorted.order(), e.total, k_joint, keep);
    check_launch("selection: global top-k");
  }
  if (floor_per_head == 0) return;
  // The floor: every stream keeps its own best count + floor (a stream's joint share is a prefix
  // of its own ranking).
  Scratch count(static_cast<size_t>(e.n_streams) * 8, stream, "selection: counts");
  check(cudaMemsetAsync(count.as<void>(), 0, static_cast<size_t>(e.n_streams) * 8, stream), "selection: counts");
  count_kept<<<blocks_for(e.total), kBlock, 0, stream>>>(e, keep, count.as<int64_t>());
  check_launch("selection: counts");
  flag_stream_prefixes(e, scores, count.as<int64_t>(), floor_per_head, keep);
}

void select_per_head_top_k(const DeviceEntries& e, const float* scores, const std::vector<int64_t>& host_k_per_stream,
                           uint8_t* keep) {
  check_size(e);
  if (static_cast<int>(host_k_per_stream.size()) != e.n_streams)
    throw std::invalid_argument("cuda selection: " + std::to_string(host_k_per_stream.size()) + " budgets for " +
                                std::to_string(e.n_streams) + " streams");
  if (e.total == 0) return;
  const cudaStream_t stream = as_stream(e.stream);
  Scratch limit(host_k_per_stream.size() * 8, stream, "selection: budgets");
  check(cudaMemcpyAsync(limit.as<void>(), host_k_per_stream.data(), host_k_per_stream.size() * 8,
                        cudaMemcpyHostToDevice, stream),
        "selection: budgets");
  flag_stream_prefixes(e, scores, limit.as<int64_t>(), 0, keep);
  check(cudaStreamSynchronize(stream), "selection: per-head top-k");  // the host budgets are read
}

void select_threshold(const DeviceEntries& e, const float* scores, float threshold, uint8_t* keep) {
  check_size(e);
  if (e.total == 0) return;
  flag_threshold<<<blocks_for(e.total), kBlock, 0, as_stream(e.stream)>>>(e, scores, threshold, keep);
  check_launch("selection: threshold");
}

std::vector<std::vector<int32_t>> keep_lists(const uint8_t* keep, const std::vector<int64_t>& host_offsets,
                                             void* stream) {
  const int64_t total = host_offsets.empty() ? 0 : host_offsets.back();
  std::vector<uint8_t> flags(static_cast<size_t>(total));
  if (total > 0) {
    check(cudaMemcpyAsync(flags.data(), keep, static_cast<size_t>(total), cudaMemcpyDeviceToHost, as_stream(stream)),
          "keep lists: copy");
    check(cudaStreamSynchronize(as_stream(stream)), "keep lists: copy");
  }
  std::vector<std::vector<int32_t>> lists(host_offsets.empty() ? 0 : host_offsets.size() - 1);
  for (size_t s = 0; s < lists.size(); ++s)
    for (int64_t i = host_offsets[s]; i < host_offsets[s + 1]; ++i)
      if (flags[static_cast<size_t>(i)]) lists[s].push_back(static_cast<int32_t>(i - host_offsets[s]));
  return lists;
}

}  // namespace trimkv::kernels::cuda
