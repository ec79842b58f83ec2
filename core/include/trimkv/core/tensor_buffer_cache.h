// Reuse of large CPU tensor buffers while training.
//
// A training step allocates the same large tensors every step ([heads, n, n] attention logits
// and probabilities, retention biases, activations kept for the backward: gigabytes at 1K
// tokens on a 135M model) and frees them in the backward. glibc serves blocks above 32 MiB (and,
// after trimming, smaller ones too) with fresh mmap()s, so every step pays the kernel to fault in
// and zero those pages again: measured ~18% of a gate-training step's time in system time, and
// more in page-fault stalls. While a TensorBufferCache is alive, LibTorch's CPU allocations of at
// least `min_bytes` come from a cache of freed buffers of the same size (rounded up to 4 KiB
// pages) when one is there; freed buffers go back to the cache while it holds less than
// `max_bytes`, else to the system. Nothing numerical changes: only where the memory comes from.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trimkv {

struct TensorBufferCacheStats {
  int64_t hits = 0;     // allocations served from the cache
  int64_t misses = 0;   // large allocations the cache could not serve
  size_t cached = 0;    // bytes held for reuse now
  size_t peak_cached = 0;
};

class TensorBufferCache {
 public:
  // max_bytes 0: a quarter of the machine's physical memory.
  explicit TensorBufferCache(size_t max_bytes = 0, size_t min_bytes = size_t{1} << 20);
  ~TensorBufferCache();  // frees what it holds; LibTorch's previous CPU allocator is back
  TensorBufferCache(const TensorBufferCache&) = delete;
  TensorBufferCache& operator=(const TensorBufferCache&) = delete;

  // False when another CPU allocator with a higher priority is installed (nothing is cached then).
  bool active() const { return m_installed; }
  static TensorBufferCacheStats stats();

 private:
  bool m_installed = false;
};

}  // namespace trimkv
