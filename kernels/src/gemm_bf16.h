// Internal to kernels/: prefill GEMMs in bfloat16 on CPUs with AMX tiles (gemm_bf16_cpu.cpp),
// called by linear_cpu.cpp.
//
// Why: on a CPU with AMX-BF16 (Intel Sapphire Rapids and later) oneDNN's bf16 matmul runs
// ~2.5-3x the float32 sgemm at 2 threads (measured: 1024x768x3072 in 8.4 ms vs 22 ms). On
// every other CPU (AVX-512-BF16 without AMX, AVX-512, AVX2) oneDNN's bf16 matmul is slower than
// its sgemm, so it is used only where the implementation oneDNN picks is an AMX one.
// Products accumulate in float32; the activations are rounded to bf16 (what transformers' bf16
// models and llama.cpp's bf16 matmuls do; llama.cpp rounds them to 8 bits for q8_0 / q4_0). A
// split into two bf16 parts (hi + lo, float32-class accuracy) was measured: at the decoder's and
// the towers' shapes two-part GEMMs ran 1.0-1.3x the sgemm, so where float32-class activations
// are wanted the sgemm stays.
#pragma once
#include <cstdint>

namespace trimkv::kernels {

// Whether bf16 GEMMs go to an AMX implementation here and are enabled (probed once; the
// environment variable TRIMKV_BF16_GEMM=0 or set_amx_bf16_gemm(false) turns them off, for
// comparisons). False when the build lacks oneDNN.
bool amx_bf16_gemm();
// Turns the bf16 GEMM on (where available) or off; returns amx_bf16_gemm() afterwards.
bool set_amx_bf16_gemm(bool on);

// float32 -> bfloat16, round to nearest even (c10::BFloat16's rounding; NaN stays NaN).
void narrow_row_bf16(const float* x, uint16_t* y, int64_t n);

// y[r, o] (row stride ldy) = x[r, :] · w[o, :] (+ b[o]) for r < n, o < out: x [n, in] bf16
// contiguous, w [out, in] bf16 with row stride ldw, b float32 [out] or null, y float32.
// Requires amx_bf16_gemm(); throws std::runtime_error when oneDNN refuses.
void gemm_bf16_into(const uint16_t* x, int64_t n, int64_t in, const uint16_t* w, int64_t ldw, int64_t out,
                    const float* b, float* y, int64_t ldy);

}  // namespace trimkv::kernels
