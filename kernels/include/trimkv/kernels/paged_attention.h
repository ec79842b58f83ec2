// Attention over a paged, per-head variable-length KV cache (METHOD.md §5), CPU implementation.
//
// Layout. K and V live in two pools of fixed-size blocks, [n_blocks, block_size, head_dim]. Each
// KV head h is its own variable-length sequence: lengths[h] entries, stored densely in the blocks
// listed by block_tables[h] from row r = first_rows[h] of the first one on (entry e sits in row
// (r + e) % block_size of block block_tables[h][(r + e) / block_size]; r = 0 when first_rows is
// null). The order of entries inside a head does not matter to attention (keys carry RoPE
// from their original positions), except for the causal rule below.
//
// Causality (bottom-right aligned). The last n_q entries of every head are the n_q new tokens,
// appended before attention, in query order; every older entry comes from an earlier token. Query
// row i (0-based) therefore sees the entries e < lengths[h] - n_q + i + 1. A row whose visible
// length is <= 0 produces zeros (and contributes nothing to attn_sum), never NaN.
//
// GQA: query head qh reads KV head qh / (n_head / n_kv_head).
//
// Two entry points: paged_attention_cpu() takes raw views and trusts them (the hot path, no
// checks); paged_attention() / paged_attention_with_stats() are the ATen launchers that validate
// everything (throwing std::invalid_argument with the offending values) and allocate outputs.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "trimkv/kernels/kv_dtype.h"

namespace trimkv::kernels {


// Non-owning view of one layer of a paged KV cache. Valid as long as the owner (KvCache) is not
// mutated. All pointers are host pointers (pools of `dtype`, int32 tables and lengths).
struct PagedKvView {
  const void* k_pool = nullptr;   // [n_blocks, block_size, head_dim] of dtype, contiguous
  const void* v_pool = nullptr;   // [n_blocks, block_size, head_dim] of dtype, contiguous
  KvDtype dtype = KvDtype::F32;
  int64_t n_blocks = 0;           // capacity of the pools in blocks (for validation)
  int block_size = 0;
  int head_dim = 0;
  int n_kv_head = 0;
  const int32_t* const* block_tables = nullptr;  // [n_kv_head] -> [ceil((r + lengths[h]) / block_size)]
  const int32_t* lengths = nullptr;              // [n_kv_head], entries per KV head
  const int32_t* first_rows = nullptr;           // [n_kv_head], r in [0, block_size), or null (all 0)

  int32_t max_length() const;
  int32_t first_row(int h) const { return first_rows ? first_rows[h] : 0; }
};

// Raw parameters of one attention call. Strides are in elements; the head_dim axis of q and out
// is unit-stride.
struct PagedAttentionParams {
  const float* q = nullptr;   // [n_q, n_head, head_dim]
  int64_t q_row_stride = 0;   // elements between query rows
  int64_t q_head_stride = 0;  // elements between query heads
  float* out = nullptr;       // [n_q, n_head, head_dim], fully written
  int64_t out_row_stride = 0;
  int64_t out_head_stride = 0;
  int n_q = 0;
  int n_head = 0;      // query heads; a multiple of kv.n_kv_head
  float scale = 1.0f;  // multiplies q·k before the softmax (usually 1/sqrt(head_dim))
  PagedKvView kv;
  // Optional attention statistics (nullable): attn_sum[h * attn_sum_stride + e] receives, for KV
  // head h and entry e < lengths[h], the softmax weight of e summed over all query rows and all
  // query heads of h's GQA group. The whole row [0, attn_sum_stride) is written (zeros past
  // lengths[h]). Requires attn_sum_stride >= kv.max_length().
  float* attn_sum = nullptr;  // [n_kv_head, attn_sum_stride]
  int64_t attn_sum_stride = 0;
};

// Hot path: no validation (preconditions above). Parallelised with at::parallel_for over
// (query head, query row). Deterministic for a fixed number of threads.
void paged_attention_cpu(const PagedAttentionParams& params);

// Validates a view (non-null pools, positive sizes, lengths >= 0, every block id of every table
// within [0, n_blocks)). Throws std::invalid_argument naming the field and the values.
void validate_paged_kv_view(const PagedKvView& kv);

// ATen launcher: validates q (float32, CPU, [n_q, n_head, head_dim] with n_head a multiple of
// kv.n_kv_head, any strides) and kv, and returns out [n_q, n_head, head_dim] (contiguous).
at::Tensor paged_attention(const at::Tensor& q /* [n_q, n_head, head_dim] */, const PagedKvView& kv,
                           double scale);

struct PagedAttentionOutput {
  at::Tensor out;       // [n_q, n_head, head_dim]
  at::Tensor attn_sum;  // [n_kv_head, max_length], zeros past each head's length
};

// Same as paged_attention(), also returning the per-entry attention statistics.
PagedAttentionOutput paged_attention_with_stats(const at::Tensor& q /* [n_q, n_head, head_dim] */,
                                                const PagedKvView& kv, double scale);

}  // namespace trimkv::kernels
