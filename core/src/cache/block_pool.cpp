#include "trimkv/core/block_pool.h"

#include <algorithm>
#include <limits>

#include "trimkv/core/error.h"

namespace trimkv {

BlockPool::BlockPool(int32_t initial_capacity) {
  TRIMKV_CHECK(initial_capacity >= 0, Input, "BlockPool: initial capacity must be >= 0, got ",
               initial_capacity);
  grow_to(initial_capacity);
}

void BlockPool::grow_to(int32_t capacity) {
  const int32_t old = this->capacity();
  if (capacity <= old) return;
  m_used.resize(static_cast<size_t>(capacity), 0);
  // Push the new ids highest first so the lowest new id is handed out next; they go below the
  // ids already free (m_free is empty whenever growth is triggered by allocate()).
  std::vector<int32_t> fresh;
  fresh.reserve(static_cast<size_t>(capacity - old));
  for (int32_t id = capacity - 1; id >= old; --id) fresh.push_back(id);
  m_free.insert(m_free.begin(), fresh.begin(), fresh.end());
}

void BlockPool::reserve(int32_t capacity) {
  TRIMKV_CHECK(capacity >= 0, Input, "BlockPool::reserve: capacity must be >= 0, got ", capacity);
  grow_to(capacity);
}

BlockPool::Allocation BlockPool::allocate() {
  Allocation a;
  if (m_free.empty()) {
    const int32_t cap = capacity();
    TRIMKV_CHECK(cap <= std::numeric_limits<int32_t>::max() / 2, Input,
                 "BlockPool: cannot grow beyond ", cap, " blocks");
    grow_to(std::max<int32_t>(1, 2 * cap));
    a.grew = true;
  }
  a.block_id = m_free.back();
  m_free.pop_back();
  m_used[static_cast<size_t>(a.block_id)] = 1;
  ++m_n_used;
  m_peak_used = std::max(m_peak_used, m_n_used);
  return a;
}

void BlockPool::release(int32_t block_id) {
  TRIMKV_ASSERT(block_id >= 0 && block_id < capacity(), "BlockPool::release: block ", block_id,
                " outside [0, ", capacity(), ")");
  TRIMKV_ASSERT(m_used[static_cast<size_t>(block_id)] != 0, "BlockPool::release: block ", block_id,
                " is not in use");
  m_used[static_cast<size_t>(block_id)] = 0;
  m_free.push_back(block_id);
  --m_n_used;
}

void BlockPool::release_all() {
  m_free.clear();
  std::fill(m_used.begin(), m_used.end(), 0);
  for (int32_t id = capacity() - 1; id >= 0; --id) m_free.push_back(id);
  m_n_used = 0;
}

bool BlockPool::is_used(int32_t block_id) const {
  return block_id >= 0 && block_id < capacity() && m_used[static_cast<size_t>(block_id)] != 0;
}

}  // namespace trimkv
