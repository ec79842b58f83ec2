// Attention of new query rows over one layer of a KvCache, on the device the cache lives on: the
// CPU kernel (kernels/paged_attention.h) for CPU pools, kernels/cuda for CUDA pools (builds with
// the CUDA runtime, compute_device.h). What the decoder's cached path and the attention-statistics
// policies (SnapKV family, FastV) call, so none of them cares where the cache is.
#pragma once
#include <ATen/core/Tensor.h>

namespace trimkv {

class KvCache;

struct CacheAttention {
  at::Tensor out;       // [n_q, n_head, head_dim] float32, on the cache's device
  at::Tensor attn_sum;  // [n_kv_head, max_len] float32 on the CPU, when asked (else undefined)
};

// q: [n_q, n_head, head_dim] float32 rotated queries (any device: moved to the cache's), n_head a
// multiple of the cache's KV heads; the layer's last n_q entries are the rows' own tokens
// (bottom-right causality, paged_attention.h). attention_sum: also the per-entry softmax sums.
CacheAttention attend_cache_layer(const KvCache& cache, int il, const at::Tensor& q, double scale,
                                  bool attention_sum = false);

}  // namespace trimkv
