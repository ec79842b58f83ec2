// A randomly laid-out paged cache for one layer, for the CPU and CUDA attention tests.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "trimkv/kernels/paged_attention.h"

namespace trimkv::test {

using kernels::KvDtype;
using kernels::PagedKvView;

// Block ids are a random permutation of the pool, and every pool row not holding a live entry is
// NaN, so a read past a head's length shows up.
struct RandomPagedCache {
  int n_kv_head = 0, head_dim = 0, block_size = 0;
  std::vector<int32_t> lengths;              // [n_kv_head]
  std::vector<std::vector<int32_t>> tables;  // [n_kv_head][n_blocks_h]
  std::vector<const int32_t*> table_ptrs;    // [n_kv_head]
  std::vector<int32_t> first;                // [n_kv_head] row of entry 0 in the first block
  at::Tensor k_pool, v_pool;                 // [n_blocks, block_size, head_dim] of dtype
  KvDtype dtype = KvDtype::F32;

  // Rows not holding an entry (before a head's first row, past its last) are NaN.
  RandomPagedCache(std::vector<int32_t> lens, int head_dim_, int block_size_, int extra_blocks,
                   std::mt19937& rng, std::vector<int32_t> first_rows = {})
      : n_kv_head(static_cast<int>(lens.size())),
        head_dim(head_dim_),
        block_size(block_size_),
        lengths(std::move(lens)),
        first(first_rows.empty() ? std::vector<int32_t>(lengths.size(), 0) : std::move(first_rows)) {
    int n_blocks = extra_blocks;
    for (int h = 0; h < n_kv_head; ++h) n_blocks += (first[h] + lengths[h] + block_size - 1) / block_size;
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    k_pool = at::full({n_blocks, block_size, head_dim}, nan, at::kFloat);
    v_pool = at::full({n_blocks, block_size, head_dim}, nan, at::kFloat);
    size_t next = 0;
    tables.resize(n_kv_head);
    for (int h = 0; h < n_kv_head; ++h) {
      const int nb = (first[h] + lengths[h] + block_size - 1) / block_size;
      for (int b = 0; b < nb; ++b) tables[h].push_back(ids[next++]);
      for (int e = 0; e < lengths[h]; ++e) {
        const int64_t blk = tables[h][(first[h] + e) / block_size], off = (first[h] + e) % block_size;
        k_pool[blk][off].copy_(at::randn({head_dim}));
        v_pool[blk][off].copy_(at::randn({head_dim}));
      }
    }
    for (auto& t : tables) table_ptrs.push_back(t.data());
  }

  // The same cache with its pools stored as `d` (bf16 / f16: every value rounded once).
  RandomPagedCache stored_as(KvDtype d) const {
    RandomPagedCache c = *this;
    const at::ScalarType t = d == KvDtype::F32 ? at::kFloat : d == KvDtype::BF16 ? at::kBFloat16 : at::kHalf;
    c.k_pool = k_pool.to(t).contiguous();
    c.v_pool = v_pool.to(t).contiguous();
    c.dtype = d;
    c.table_ptrs.clear();  // the copy's own tables
    for (auto& tb : c.tables) c.table_ptrs.push_back(tb.data());
    return c;
  }

  // Pool element offset of entry e of head h.
  int64_t row_offset(int h, int64_t e) const {
    const int64_t r = first[h] + e;
    return (int64_t{tables[h][r / block_size]} * block_size + r % block_size) * head_dim;
  }

  PagedKvView view() const {
    PagedKvView v;
    v.k_pool = k_pool.data_ptr();
    v.v_pool = v_pool.data_ptr();
    v.dtype = dtype;
    v.n_blocks = k_pool.size(0);
    v.block_size = block_size;
    v.head_dim = head_dim;
    v.n_kv_head = n_kv_head;
    v.block_tables = table_ptrs.data();
    v.lengths = lengths.data();
    v.first_rows = first.data();
    return v;
  }

  // [lengths[h], head_dim] rows of head h, in cache order, as float64.
  at::Tensor gather(const at::Tensor& pool, int h) const {
    std::vector<int64_t> slots;
    for (int e = 0; e < lengths[h]; ++e) slots.push_back(row_offset(h, e) / head_dim);
    at::Tensor idx = at::tensor(slots, at::kLong);
    return pool.reshape({-1, head_dim}).index_select(0, idx).to(at::kDouble);
  }
};

}  // namespace trimkv::test
