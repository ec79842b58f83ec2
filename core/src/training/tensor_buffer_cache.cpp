#include "trimkv/core/tensor_buffer_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "trimkv/core/error.h"

// LibTorch 2.3 made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TRIMKV_ALLOCATOR_2_3 1
#else
#define TRIMKV_ALLOCATOR_2_3 0
#endif

namespace trimkv {

namespace {

constexpr size_t kAlignment = 64;  // what LibTorch's own CPU allocator guarantees
constexpr size_t kPage = 4096;

struct Block {
  void* data;
  size_t size;  // rounded up to whole pages
};

// One per process: tensors made while a TensorBufferCache was alive may be freed after it ended,
// so the deleter and its bookkeeping must outlive every scope.
class CachingAllocator final : public c10::Allocator {
 public:
#if TRIMKV_ALLOCATOR_2_3
  c10::DataPtr allocate(size_t n) override { return take(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return const_cast<CachingAllocator*>(this)->take(n); }
#endif

  void start(c10::Allocator* previous, size_t max_bytes, size_t min_bytes) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_previous = previous;
    m_max = max_bytes;
    m_min = min_bytes;
    m_on = true;
    m_stats = {};
  }
  void stop() {
    std::multimap<size_t, Block*> held;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_on = false;
      held.swap(m_free);
      m_stats.cached = 0;
    }
    for (auto& [size, b] : held) destroy(b);
  }
  TensorBufferCacheStats stats() {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_stats;
  }
  c10::Allocator* previous() const { return m_previous; }

 private:
  c10::DataPtr take(size_t n) {
    const size_t size = (n + kPage - 1) / kPage * kPage;
    c10::Allocator* previous = nullptr;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (!m_on || n < m_min) {
        previous = m_previous;
      } else {
        auto it = m_free.find(size);
        if (it != m_free.end()) {
          Block* b = it->second;
          m_free.erase(it);
          m_stats.cached -= size;
          ++m_stats.hits;
          return wrap(b);
        }
        ++m_stats.misses;
      }
    }
    if (previous) return previous->allocate(n);
    void* data = nullptr;
    TRIMKV_CHECK(posix_memalign(&data, kAlignment, size) == 0 && data, Internal, "out of memory allocating ", size,
                 " bytes for a tensor");
    return wrap(new Block{data, size});
  }

  static c10::DataPtr wrap(Block* b) { return {b->data, b, &CachingAllocator::release, c10::Device(c10::kCPU)}; }

  static void destroy(Block* b) {
    std::free(b->data);
    delete b;
  }

  static void release(void* ctx) {
    Block* b = static_cast<Block*>(ctx);
    CachingAllocator& self = instance();
    {
      std::lock_guard<std::mutex> lock(self.m_mutex);
      if (self.m_on && self.m_stats.cached + b->size <= self.m_max) {
        self.m_free.emplace(b->size, b);
        self.m_stats.cached += b->size;
        self.m_stats.peak_cached = std::max(self.m_stats.peak_cached, self.m_stats.cached);
        return;
      }
    }
    destroy(b);
  }

 public:
  static CachingAllocator& instance() {
    static CachingAllocator* a = new CachingAllocator;  // never destroyed: deleters may run at exit
    return *a;
  }

 private:
  std::mutex m_mutex;
  std::multimap<size_t, Block*> m_free;  // by size
  c10::Allocator* m_previous = nullptr;
  size_t m_max = 0, m_min = 0;
  bool m_on = false;
  TensorBufferCacheStats m_stats;
};

size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{4} << 30;
}

}  // namespace

TensorBufferCache::TensorBufferCache(size_t max_bytes, size_t min_bytes) {
  CachingAllocator& a = CachingAllocator::instance();
  c10::Allocator* previous = c10::GetCPUAllocator();
  if (previous == &a) return;  // an enclosing cache is already at work
  a.start(previous, max_bytes > 0 ? max_bytes : physical_memory() / 4, min_bytes);
  c10::SetCPUAllocator(&a, 0);
  m_installed = c10::GetCPUAllocator() == &a;
  if (!m_installed) a.stop();
}

TensorBufferCache::~TensorBufferCache() {
  if (!m_installed) return;
  CachingAllocator& a = CachingAllocator::instance();
  c10::SetCPUAllocator(a.previous(), 0);
  a.stop();
}

TensorBufferCacheStats TensorBufferCache::stats() { return CachingAllocator::instance().stats(); }

}  // namespace trimkv
