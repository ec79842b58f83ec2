// CUDA kernels for the paged per-head KV cache (kernels/cuda/, built when the CUDA toolkit is
// found: TRIMKV_CUDA). Plain C++ declarations: callers need no CUDA headers. Every pointer below
// is device memory unless named host_*; work is queued on `stream` (a cudaStream_t; null: the
// default stream) and errors (a failed launch, too little memory) throw std::runtime_error naming
// the kernel. The CPU kernels (paged_attention.h) and core's selection rules
// (eviction_select.h) are the references these are tested against entry for entry.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trimkv/kernels/kv_dtype.h"

namespace trimkv::kernels::cuda {

// Whether a CUDA device can be used now; when not, `why` (if given) says why ("no CUDA device",
// the driver's message).
bool device_available(std::string* why = nullptr);
// Memory bandwidth of device 0 in bytes/s from its clock and bus width (the HBM peak).
double peak_bandwidth_bytes_per_s();

// ---------------------------------------------------------------------------------------------
// Paged attention: the contract of paged_attention.h (layout, bottom-right causality, GQA,
// attn_sum), with the block tables of all KV heads in one array: head h's table starts at
// tables[table_offsets[h]].
struct DevicePagedKv {
  const void* k_pool = nullptr;  // [n_blocks, block_size, head_dim] of dtype
  const void* v_pool = nullptr;
  KvDtype dtype = KvDtype::F32;
  int block_size = 0;
  int head_dim = 0;       // at most 256
  int n_kv_head = 0;
  const int32_t* tables = nullptr;
  const int64_t* table_offsets = nullptr;  // [n_kv_head]
  const int32_t* lengths = nullptr;        // [n_kv_head]
  const int32_t* first_rows = nullptr;     // [n_kv_head] or null (all 0)
  int32_t max_length = 0;                  // max of lengths (the host knows it; a smaller value
                                           // would leave entries unread)
};

struct DeviceAttentionParams {
  const float* q = nullptr;  // [n_q, n_head, head_dim], head_dim unit-stride
  int64_t q_row_stride = 0, q_head_stride = 0;
  float* out = nullptr;      // [n_q, n_head, head_dim]; must not overlap q
  int64_t out_row_stride = 0, out_head_stride = 0;
  int n_q = 0;
  int n_head = 0;            // a multiple of kv.n_kv_head, at most 16 per KV head
  float scale = 1.0f;
  DevicePagedKv kv;
  float* attn_sum = nullptr;  // [n_kv_head, attn_sum_stride] or null; stride >= kv.max_length
  int64_t attn_sum_stride = 0;
  int n_splits = 0;          // 0: chosen from the lengths and the device's SM count
  void* stream = nullptr;
};

// Split-K over the entries (one block per KV head, split and query row; the GQA group's query
// heads share each K/V tile), then a pass that merges the splits; with attn_sum a third pass
// adds up every entry's softmax weight over rows and the group's heads (no atomics: the sums do
// not depend on scheduling).
void paged_attention(const DeviceAttentionParams& params);

// ---------------------------------------------------------------------------------------------
// Compaction of one layer: stream (KV head) h keeps the entries keep[keep_offsets[h] ..
// keep_offsets[h + 1]) (ascending entry indices below lengths[h]), moved to the front of its rows
// (entry i then holds what entry keep[...+i] held) in place, through a scratch copy on the device.
// The caller then sets lengths[h] to the kept count and returns the blocks past
// ceil((first_row + kept) / block_size) to its pool: blocks_after_compaction() says how many each
// head holds then.
struct DeviceCompaction {
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  KvDtype dtype = KvDtype::F32;
  int block_size = 0, head_dim = 0, n_kv_head = 0;
  const int32_t* tables = nullptr;
  const int64_t* table_offsets = nullptr;
  const int32_t* first_rows = nullptr;  // or null
  const int32_t* keep = nullptr;        // concatenated keep lists
  const int64_t* keep_offsets = nullptr;  // [n_kv_head + 1]
  int64_t total_kept = 0;               // keep_offsets[n_kv_head] (the host knows it)
  void* stream = nullptr;
};
void compact(const DeviceCompaction& c);
int64_t blocks_after_compaction(int32_t first_row, int64_t kept, int block_size);

// ---------------------------------------------------------------------------------------------
// Scoring and selection over every entry of every stream (stream = layer * n_kv_head + head;
// entries concatenated stream after stream, stream s at [offsets[s], offsets[s + 1])). The order
// is core's deterministic one (eviction_select.h): higher score first, then the newer token,
// then the smaller stream; the results are keep flags (1 = kept) per entry.
struct DeviceEntries {
  const float* log_beta = nullptr;    // [total]
  const float* log1p_beta = nullptr;  // [total] (lookahead 2)
  const int32_t* token_index = nullptr;
  const int64_t* offsets = nullptr;   // [n_streams + 1]
  int n_streams = 0;
  int64_t total = 0;
  void* stream = nullptr;
};

// scores[e] (METHOD.md §4): +inf where log β == 0; lookahead 2 as core computes it (bit for
// bit); other lookaheads with the device's log / expm1 (within an ulp or two of the CPU's).
void retention_scores(const DeviceEntries& e, int64_t q, int lookahead, float* scores);
// scores[e] = +inf where token >= first_protected (recent window) or token < n_first (sinks).
void protect_tokens(const DeviceEntries& e, int32_t first_protected, int32_t n_first, float* scores);

// Global top-k (with a per-stream floor as core's select_top_k_joint), per-stream top-k
// (host_k_per_stream), threshold (score >= t). `keep` [total] receives 0/1.
void select_global_top_k(const DeviceEntries& e, const float* scores, int64_t k, int64_t floor_per_head,
                         uint8_t* keep);
void select_per_head_top_k(const DeviceEntries& e, const float* scores, const std::vector<int64_t>& host_k_per_stream,
                           uint8_t* keep);
void select_threshold(const DeviceEntries& e, const float* scores, float threshold, uint8_t* keep);

// Keep flags -> per-stream keep lists in cache order (host), given the host copy of the offsets.
std::vector<std::vector<int32_t>> keep_lists(const uint8_t* keep, const std::vector<int64_t>& host_offsets,
                                             void* stream = nullptr);

}  // namespace trimkv::kernels::cuda
