// Bookkeeping of a pool of fixed-size KV blocks (METHOD.md §5). Plain C++, no tensors: the owner
// of the storage (KvCache) watches capacity() and grows its tensors to match.
#pragma once
#include <cstdint>
#include <vector>

namespace trimkv {

class BlockPool {
 public:
  struct Allocation {
    int32_t block_id = -1;
    bool grew = false;  // capacity grew to satisfy this allocation
  };

  explicit BlockPool(int32_t initial_capacity = 0);

  // Takes a free block; when none is free the capacity doubles first (an empty pool grows to 1).
  // Free blocks are handed out lowest id first after a growth, most recently released first
  // otherwise. Deterministic.
  Allocation allocate();
  // Returns a used block to the pool. Releasing a free or unknown id is a bug
  // (ErrorKind::Internal).
  void release(int32_t block_id);
  // Releases every block; capacity is kept.
  void release_all();
  // Adds capacity without allocating (e.g. to pre-size for a known prompt).
  void reserve(int32_t capacity);

  bool is_used(int32_t block_id) const;
  int32_t capacity() const { return static_cast<int32_t>(m_used.size()); }
  int32_t n_used() const { return m_n_used; }
  int32_t n_free() const { return static_cast<int32_t>(m_free.size()); }
  int32_t peak_used() const { return m_peak_used; }
  void reset_peak() { m_peak_used = m_n_used; }

 private:
  void grow_to(int32_t capacity);

  std::vector<uint8_t> m_used;  // [capacity] 1 if allocated
  std::vector<int32_t> m_free;  // stack of free ids; back() is handed out next
  int32_t m_n_used = 0;
  int32_t m_peak_used = 0;
};

}  // namespace trimkv
