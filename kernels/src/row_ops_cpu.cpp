// Per-row decoder steps on raw float32 rows (row_ops.h). Compiled for AVX2 + FMA and baseline
// x86-64 (function multi-versioning, as the attention kernel); `omp simd` lets the sums vectorise.
#include "trimkv/kernels/row_ops.h"

#include "exp_poly.h"
#include "target_clones.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace trimkv::kernels {

namespace {

// exp(x) for any float x: x clamped to [-87.3, 88.3] (e^x stays a normal float; beyond, the SiLU
// below has its limits 0 and x), then exp_split.
inline float exp_vec(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  // Round to nearest by truncating a positive number (t >= -126): no branch, so the loop vectorises.
  const float fn = static_cast<float>(static_cast<int32_t>(x * kLog2e + 128.5f) - 128);  // n in [-126, 127]
  return exp_split(x, fn);
}

}  // namespace

TRIMKV_CLONES_V3 void rms_norm_rows(const float* x, const float* w, float eps, int64_t n, int64_t d, float* y) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

TRIMKV_CLONES_V3 void rope_rows(float* x, const float* cos, const float* sin, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = xh[i], x2 = xh[i + half];
      xh[i] = x1 * cos[i] + (-x2) * sin[i];
      xh[i + half] = x2 * cos[i + half] + x1 * sin[i + half];
    }
  }
}

TRIMKV_CLONES_V3 void silu_mul(const float* gate, const float* up, int64_t n, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + exp_vec(-gate[i])) * up[i];
}

TRIMKV_CLONES_V3 void add_rows(float* x, const float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace trimkv::kernels
