// Internal to kernels/: the low-precision decode GEMV (gemv_lowp_cpu.cpp), called by linear_cpu.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "trimkv/kernels/weight_format.h"

namespace trimkv::kernels {

// y[r, o] = x[r, :] · w[o, :] (+ b[o]) for r < n, o < out; w rows of `w_row_bytes` bytes in
// format f (BF16, F16, Q8_0 or Q4_0; `in` a multiple of 32 for the quantised ones). Threaded
// over output rows with at::parallel_for.
void gemv_rows_lowp(WeightFormat f, const float* x, int64_t x_stride, const uint8_t* w, int64_t w_row_bytes,
                    const float* b, float* y, int64_t y_stride, int64_t n, int64_t in, int64_t out);

// bfloat16 / float16 values to float32 (the prefill panels), vectorised like the GEMV.
void widen_row_16bit(const uint16_t* s, float* y, int64_t n, bool bf16);

// The instruction set the kernels chose on this CPU ("avx512+vnni", "avx2+fma+f16c", "portable").
const char* gemv_isa_name();
// force_lowp_kernel_isa (linear.h).
bool force_gemv_isa(const std::string& name);

}  // namespace trimkv::kernels
