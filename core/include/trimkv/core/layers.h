// Shared building blocks of the text decoders (MODELS.md "Shared text decoder"), written once
// and composed by the family files. All float32; all usable under autograd (dense path) and in
// the cached path.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "trimkv/core/kv_types.h"
#include "trimkv/core/model_config.h"

namespace trimkv {

// x * rsqrt(mean(x^2) + eps) * weight, computed in float32.   x: [..., d], weight: [d]
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// inv_freq[i] = theta^(-2i/dim) for i < dim/2, float32 from torch's pow (a double pow then a cast
// differs in a few entries), adjusted per rope type, as transformers' rope init computes it.
at::Tensor rope_inverse_frequencies(const RopeConfig& rope, int64_t dim);

// Rotary tables for the given positions from the rope's inverse frequencies (inv_freq [head_dim /
// 2], rope_inverse_frequencies: computed once per model, not per forward): cos, sin each [n,
// head_dim] (the rotate-half layout, halves duplicated). positions: [n] int64, or [3, n] (time, row, column) for a multimodal rope:
// frequency k then turns by the axis mrope_axes gives it. Angles are float32 products, as
// transformers computes them.
struct RopeTables {
  at::Tensor cos;  // [n, head_dim]
  at::Tensor sin;  // [n, head_dim]
};
RopeTables rope_tables(const RopeConfig& rope, const at::Tensor& inv_freq, const at::Tensor& positions);

// The axis (0 time, 1 row, 2 column) of each of the n_freq rotary frequencies of a multimodal
// rope: chunked sections (Qwen2-VL, Qwen2.5-VL) or interleaved ones (Qwen3-VL).
std::vector<int64_t> mrope_axes(const RopeConfig& rope, int64_t n_freq);

// Absolute rotary positions of n tokens appended from position `base`: base + offsets[i] (a
// segment's multimodal offsets), or base + i on every axis when `offsets` is null. `next` becomes
// one past the largest position on any axis (and never less than before): where the following
// tokens start. What the runner does per chunk and gate training per sample.
void place_rotary_positions(const RopeOffset* offsets, int64_t n, int64_t base, RopeOffset* out, int64_t& next);
// The decoder's positions argument: [n] (time only) or, for a multimodal rope, [3, n] int64.
at::Tensor rotary_position_tensor(const std::vector<RopeOffset>& placed, bool multimodal);

// x: [n, n_heads, head_dim]; returns x*cos + rotate_half(x)*sin (rotate-half convention).
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& t);

// SiLU-gated MLP with fused gate/up weight: w_gate_up [2*ffn, d], w_down [d, ffn].   x: [n, d]
at::Tensor gated_mlp(const at::Tensor& x, const at::Tensor& w_gate_up, const at::Tensor& w_down);

// Dense causal attention for the training / reference path.
// q: [n, n_head, hd], k, v: [n, n_kv_head, hd] -> [n, n_head * hd].
// `logit_bias` (optional) [n_kv_head, n, n] is added to the attention logits of every query head
// of the group (used by retention-gated attention in training).
at::Tensor dense_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale, const at::Tensor& logit_bias = {});

// Retention-gated attention's additive term (METHOD.md §3): bias[h, t, i] = (t - i)·log_beta[i, h]
// for i <= t, -inf above the diagonal (never attended). log_beta: [n, n_kv] -> [n_kv, n, n].
at::Tensor retention_logit_bias(const at::Tensor& log_beta);

}  // namespace trimkv
