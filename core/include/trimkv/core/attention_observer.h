// A hook on the attention step of TextDecoder::forward_cached (STYLE.md §5: a small hook, not a
// copy of the attention kernel). Eviction policies that need attention statistics (SnapKV family,
// H2O, R-KV, FastV) receive each layer's queries and, only when asked, the per-entry attention
// sums; nothing is computed for an observer that asks for nothing.
#pragma once
#include <ATen/core/Tensor.h>

#include "trimkv/kernels/paged_attention.h"

namespace trimkv {

class KvCache;

// One layer of one forward, as the attention step saw it.
struct LayerObservation {
  int il = 0;
  const at::Tensor* q = nullptr;         // [n_q, n_head, head_dim] rotated queries of the new rows,
                                         // on the cache's device
  const at::Tensor* attn_sum = nullptr;  // [n_kv_head, max_len] on the CPU, or null (not asked for)
  kernels::PagedKvView view;             // this layer, new entries appended; valid during the call
                                         // (pools null when the cache is not on the CPU)
  double scale = 1.0;                    // attention scale (1/sqrt(head_dim))
  const KvCache* cache = nullptr;        // the cache (attend_cache_layer attends on its device)
};

class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  // Whether on_layer() should be called at all (false: the decoder skips the hook entirely).
  virtual bool observes() const = 0;
  // Whether the attention step must also produce attn_sum (paged_attention_with_stats).
  virtual bool wants_attention_sum() const = 0;
  // Called after the attention of layer il, before its output projection.
  virtual void on_layer(const LayerObservation& obs) = 0;
};

}  // namespace trimkv
