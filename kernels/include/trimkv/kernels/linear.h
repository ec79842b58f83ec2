// y = x W^T (+ b) for a few rows of x: the decode-time matrix-vector products of the decoder.
//
// Why a kernel of our own: decode reads every weight once per token, so it is bound by memory
// bandwidth; a BLAS library that does not recognise the CPU (OpenBLAS on a masked CPU model
// falls back to its generic SSE3 kernels) leaves much of that bandwidth unused. This kernel is
// compiled for AVX-512, AVX2 and baseline x86-64 and picks the best at run time
// (function multi-versioning), and splits the output rows over threads with at::parallel_for.
// Larger batches (prefill) go to a GEMM (see linear_gemm).
// Weights may be stored in any WeightFormat (weight_format.h): bfloat16 / float16 / q8_0 / q4_0
// matrices get their own decode kernels (gemv_lowp_cpu.cpp) and, for prefill, are converted to
// float32 one panel of rows at a time for the GEMM (never the whole matrix), or multiplied in
// bfloat16 on CPUs with AMX (prefill_gemm_bf16).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "trimkv/kernels/weight_format.h"

namespace trimkv::kernels {

// Rows of x up to which linear_rows() is used by linear_auto().
constexpr int64_t kSmallBatchRows = 4;

// How a prefill GEMM may treat the activations of a bf16 matrix: Exact keeps float32 activations
// (the sgemm on float32 panels: the text decoder, whose bf16 logits must stay within 2e-2 of
// float32), Bf16 lets them be rounded to bf16 where the CPU has AMX (the vision towers, as
// transformers' bf16 towers compute). q8 / q4 matrices round them to bf16 under either (their
// own rounding is far coarser; llama.cpp rounds them to 8 bits).
enum class Activations { Exact, Bf16 };

// Raw view: x [n, in] (row stride x_stride), w [out, in] contiguous, b [out] or null,
// y [n, out] (row stride y_stride). No validation.
void linear_rows_cpu(const float* x, int64_t x_stride, const float* w, const float* b, float* y,
                     int64_t y_stride, int64_t n, int64_t in, int64_t out);

// The same product on a caller's own buffers (a decode step's rows): x [n, in] at x_stride, y
// [n, out] at y_stride, w a contiguous stored matrix in any WeightFormat, b [out] or null. No
// validation beyond the format, no ATen operator.
void linear_rows_into(const at::Tensor& w, const float* x, int64_t x_stride, const float* b, float* y,
                      int64_t y_stride, int64_t n);

// Validating launcher: x [n, in] float32 CPU (unit stride in the last axis), w a contiguous
// stored matrix of `in` columns (any WeightFormat), b [out] float32 or undefined. Returns y [n, out].
at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

// Matrix-matrix product for prefill-sized batches: oneDNN's sgemm when the build found oneDNN
// (it dispatches on the CPU's instruction sets, not its model name), at::linear otherwise; its
// bf16 matmul on AMX where prefill_gemm_bf16(format, a). Same contract as linear_rows(); no
// autograd.
at::Tensor linear_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                       Activations a = Activations::Exact);
bool have_fast_gemm();  // whether linear_gemm() uses oneDNN

// Whether linear_gemm() multiplies matrices of format f in bfloat16 on this CPU: where oneDNN has
// an AMX implementation, q8 and q4 matrices, and bf16 ones under Activations::Bf16 (products
// summed in float32). The environment variable TRIMKV_BF16_GEMM=0 turns it off. Elsewhere, and
// for f16 matrices, panels are widened to float32 for the sgemm.
bool prefill_gemm_bf16(WeightFormat f, Activations a = Activations::Exact);
// For tests and benchmarks: turn that path on (where the CPU has it) or off; returns
// prefill_gemm_bf16(WeightFormat::Q8_0) afterwards.
bool set_prefill_gemm_bf16(bool on);
// The instruction set the low-precision kernels use on this CPU ("avx512+vnni", "avx2+fma+f16c",
// "portable").
const char* lowp_kernel_isa();
// For tests and benchmarks: use "avx512", "avx2" or "portable" kernels even where the CPU has
// better ones ("" or "best": the CPU's best again). False (nothing changed) for an unknown name
// or one this CPU cannot run.
bool force_lowp_kernel_isa(const std::string& name);

// Without autograd: linear_rows() for n <= kSmallBatchRows rows, linear_gemm() above;
// with autograd (training): at::linear (a low-precision w converted to float32 first); off the
// CPU: at::linear, a bfloat16/float16 w with activations in its dtype (result in x's dtype).
at::Tensor linear_auto(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                       Activations a = Activations::Exact);

}  // namespace trimkv::kernels
