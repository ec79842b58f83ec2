// The elementwise and per-row steps of one decoder layer on raw float32 rows: what a decode step
// (one token) needs between its matrix products, without an ATen operator per step (at one row,
// dispatching ~60 of them per layer cost more than the arithmetic). Each computes what the
// decoder's ATen expressions compute (core/layers.h); sums may round in another order.
#pragma once
#include <cstdint>

namespace trimkv::kernels {

// y[r] = w * (x[r] * rsqrt(mean(x[r]^2) + eps)) for n rows of d values (contiguous; y may be x).
void rms_norm_rows(const float* x, const float* w, float eps, int64_t n, int64_t d, float* y);

// Rotary embedding, rotate-half form, in place on n_heads rows of head_dim values (contiguous):
// x = x * cos + [-x2, x1] * sin, cos/sin [head_dim] (the token's angles).
void rope_rows(float* x, const float* cos, const float* sin, int64_t n_heads, int64_t head_dim);

// y[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i < n.
void silu_mul(const float* gate, const float* up, int64_t n, float* y);

// x[i] += y[i], i < n.
void add_rows(float* x, const float* y, int64_t n);

}  // namespace trimkv::kernels
