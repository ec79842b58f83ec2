// The paged, per-head variable-length KV cache (METHOD.md §5): KvBookkeeping plus tensor storage.
// Mutated only by append(), apply(plan) and clear() (STYLE.md §4); everything else is a query.
//
// Storage: one K pool and one V pool shared by every layer and KV head,
// [capacity_blocks, block_size, head_dim]; a block belongs to one (layer, KV head) stream at a
// time (see kv_bookkeeping.h for the slot layout). When the block pool grows, the tensors are
// reallocated and copied, so data pointers (and views) are invalidated by every mutation.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "trimkv/core/kv_bookkeeping.h"
#include "trimkv/kernels/paged_attention.h"

namespace trimkv {

class KvCache {
 public:
  // options: dtype/device of the pools (float32, bfloat16 or float16; on the CPU, or on a CUDA
  // device in builds with the CUDA runtime: attend_cache_layer; --kv-dtype, kv_tensor_options).
  // initial_blocks pre-sizes the pool; it grows on demand (capacity doubles).
  explicit KvCache(const KvGeometry& geometry,
                   at::TensorOptions options = at::TensorOptions().dtype(at::kFloat),
                   int32_t initial_blocks = 0);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  // --- mutation -----------------------------------------------------------------------------
  // Appends the K/V rows of n_new tokens to every KV head of layer il. k, v: any strides, same
  // device as the pools (converted to the pools' dtype if needed). token_indices: [n_new];
  // log_beta: [n_new * n_kv_head] (token-major) or empty = 0 ("never forget").
  void append(int il, const at::Tensor& k /* [n_new, n_kv_head, head_dim] */,
              const at::Tensor& v /* [n_new, n_kv_head, head_dim] */,
              const std::vector<int32_t>& token_indices, const std::vector<float>& log_beta = {});
  // The same for float32 rows in memory, CPU pools only (a decode step's own buffers): token i,
  // KV head h's row at k + i * token_stride + h * head_dim (v likewise).
  void append_rows(int il, const float* k, const float* v, int64_t token_stride,
                   const std::vector<int32_t>& token_indices, const std::vector<float>& log_beta = {});
  // Keeps exactly the entries the plan lists (validated first; nothing changes on error),
  // compacting K/V rows to the front of each head and returning the freed tail blocks to the
  // pool. The pool tensors keep their capacity; freed blocks are reused by later appends.
  // before_stream(s), if set, runs on the worker thread about to compact stream s
  // (il * n_kv_head + h) while its entries are still those the plan indexes (ApplyHooks::before).
  // On CPU pools each stream's rows move on that thread right after it is compacted, so the
  // result's moves list stays empty; on other devices it lists the moves that were run.
  // compaction: whether the kept entries must stay in order (kv_bookkeeping.h).
  ApplyResult apply(const EvictionPlan& plan, const std::function<void(int64_t)>& before_stream = {},
                    Compaction compaction = Compaction::kPreserveOrder);
  // KvBookkeeping::set_newest_log_beta (log β read back after a forward on a GPU).
  void set_newest_log_beta(int il, const std::vector<float>& log_beta) { m_book.set_newest_log_beta(il, log_beta); }
  // Drops every entry and token (capacity is kept).
  void clear();
  // Records the token stream (metadata only; see KvBookkeeping::register_tokens).
  void register_tokens(const std::vector<TokenInfo>& tokens) { m_book.register_tokens(tokens); }

  // --- queries ------------------------------------------------------------------------------
  const KvBookkeeping& bookkeeping() const { return m_book; }
  const KvGeometry& geometry() const { return m_book.geometry(); }
  int32_t length(int il, int h) const { return m_book.length(il, h); }

  // View of layer il for the attention kernel; valid until the next mutation. Requires float32,
  // bfloat16 or float16 pools. On a device other than the CPU the pools are null (the tables,
  // lengths and first rows are the host's): attend through attend_cache_layer there.
  kernels::PagedKvView layer_view(int il) const;

  // Gathered copies of head h of layer il in cache order, as float32 on the CPU.
  at::Tensor keys(int il, int h) const;             // [length, head_dim]
  at::Tensor values(int il, int h) const;           // [length, head_dim]
  const at::Tensor& k_pool() const { return m_k; }  // [capacity_blocks, block_size, head_dim]
  const at::Tensor& v_pool() const { return m_v; }  // [capacity_blocks, block_size, head_dim]

  // Memory: bytes of the live entries (K and V), of the blocks in use, of the whole pool.
  int64_t bytes_held() const;
  int64_t bytes_reserved() const;
  int64_t bytes_allocated() const;
  int32_t capacity_blocks() const { return m_book.pool().capacity(); }
  int32_t n_blocks_used() const { return m_book.pool().n_used(); }
  int32_t n_blocks_free() const { return m_book.pool().n_free(); }
  int32_t peak_blocks_used() const { return m_book.pool().peak_used(); }

 private:
  void grow_storage();   // makes the tensors match the pool's capacity
  void refresh_views();  // after every mutation
  at::Tensor gather(const at::Tensor& pool, int il, int h) const;
  int64_t bytes_per_entry() const;  // K and V of one entry

  KvBookkeeping m_book;
  at::TensorOptions m_options;
  at::Tensor m_k;  // [capacity_blocks, block_size, head_dim]
  at::Tensor m_v;  // [capacity_blocks, block_size, head_dim]
  // Per stream (il * n_kv_head + h): block table pointer, length and first row, as layer_view()
  // hands out.
  std::vector<const int32_t*> m_view_tables;  // [n_layer * n_kv_head]
  std::vector<int32_t> m_view_lengths;        // [n_layer * n_kv_head]
  std::vector<int32_t> m_view_first_rows;     // [n_layer * n_kv_head]
};

}  // namespace trimkv
