// Shared by the CUDA kernels: error checks that throw, the stream cast, 16-bit loads widened to
// float, and warp reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace trimkv::kernels::cuda::detail {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
// After a launch: the launch's own error (bad configuration, no device).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// A scratch allocation on `stream`, freed on it when the object goes (stream-ordered).
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream, const char* what) : m_stream(stream) {
    if (bytes > 0) check(cudaMallocAsync(&m_ptr, bytes, stream), what);
  }
  ~Scratch() {
    if (m_ptr) cudaFreeAsync(m_ptr, m_stream);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(m_ptr); }

 private:
  void* m_ptr = nullptr;
  cudaStream_t m_stream;
};

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Row `row` of a head whose rows start at first_row of its first block: the pool element offset.
__device__ __forceinline__ int64_t pool_row(const int32_t* table, int first_row, int64_t entry, int block_size,
                                            int head_dim) {
  const int64_t r = first_row + entry;
  return (static_cast<int64_t>(table[r / block_size]) * block_size + r % block_size) * head_dim;
}

// The segment holding position i of a concatenation whose n segments start at offsets[0..n): the
// last s with offsets[s] <= i (empty segments are skipped over).
__device__ __forceinline__ int segment_of(const int64_t* offsets, int n, int64_t i) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace trimkv::kernels::cuda::detail
