#include "trimkv/kernels/linear.h"

#include "target_clones.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#ifdef TRIMKV_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemm_bf16.h"
#include "gemv_lowp.h"
#include "trimkv/kernels/weight_format.h"

namespace trimkv::kernels {

namespace {

// One output row block [o0, o1) for every x row. The weight row is read once and used for all
// x rows while it sits in L1. `omp simd reduction` allows the vectorised (reassociated) sum.
TRIMKV_CLONES_WIDE
void rows_block(const float* x, int64_t x_stride, const float* w, const float* b, float* y,
                int64_t y_stride, int64_t n, int64_t in, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    const float* wr = w + o * in;
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x + r * x_stride;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < in; ++i) acc += xr[i] * wr[i];
      y[r * y_stride + o] = acc + (b ? b[o] : 0.0f);
    }
  }
}

void check(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument("linear_rows: " + msg);
}

}  // namespace

void linear_rows_cpu(const float* x, int64_t x_stride, const float* w, const float* b, float* y,
                     int64_t y_stride, int64_t n, int64_t in, int64_t out) {
  // Grain: ~64 KiB of weights per task, so 2-16 threads all get work on decoder-sized matrices.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(in, 1));
  at::parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
    rows_block(x, x_stride, w, b, y, y_stride, n, in, o0, o1);
  });
}

namespace {

void check_operands(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  check(x.dim() == 2, "x must be 2-D");
  check(x.scalar_type() == at::kFloat, "x must be float32");
  check(x.device().is_cpu() && w.device().is_cpu(), "CPU tensors only");
  try {
    (void)format_of(w);
  } catch (const std::invalid_argument& e) {
    check(false, e.what());
  }
  check(x.size(1) == weight_cols(w), "x has " + std::to_string(x.size(1)) + " columns, w has " +
                                         std::to_string(weight_cols(w)));
  check(w.is_contiguous(), "w must be contiguous");
  check(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0) && b.is_contiguous() &&
                         b.scalar_type() == at::kFloat),
        "b must be [out] float32 contiguous");
}

}  // namespace

at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  check_operands(x, w, b);
  at::Tensor xc = x.stride(1) == 1 ? x : x.contiguous();
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  linear_rows_into(w, xc.data_ptr<float>(), xc.stride(0), b.defined() ? b.data_ptr<float>() : nullptr,
                   y.data_ptr<float>(), y.stride(0), x.size(0));
  return y;
}

void linear_rows_into(const at::Tensor& w, const float* x, int64_t x_stride, const float* b, float* y,
                      int64_t y_stride, int64_t n) {
  const WeightFormat f = format_of(w);
  const int64_t in = weight_cols(w), out = w.size(0);
  if (f == WeightFormat::F32) {
    linear_rows_cpu(x, x_stride, w.data_ptr<float>(), b, y, y_stride, n, in, out);
  } else {
    gemv_rows_lowp(f, x, x_stride, static_cast<const uint8_t*>(w.data_ptr()), weight_bytes(w) / std::max<int64_t>(1, out),
                   b, y, y_stride, n, in, out);
  }
}

const char* lowp_kernel_isa() { return gemv_isa_name(); }
bool force_lowp_kernel_isa(const std::string& name) { return force_gemv_isa(name); }

bool have_fast_gemm() {
#ifdef TRIMKV_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

namespace {

// y[:, o0 : o0 + w.size(0)] (row stride ldy) = x wᵀ (+ b) for a float32 matrix w.
void sgemm_into(const at::Tensor& x, const at::Tensor& w, const float* b, float* y, int64_t ldy) {
  const int64_t n = x.size(0), out = w.size(0);
  if (b) {
    for (int64_t r = 0; r < n; ++r) std::copy(b, b + out, y + r * ldy);
  }
#ifdef TRIMKV_HAVE_DNNL
  const int64_t in = x.size(1);
  const dnnl_status_t st = dnnl_sgemm('N', 'T', n, out, in, 1.0f, x.data_ptr<float>(), in, w.data_ptr<float>(), in,
                                      b ? 1.0f : 0.0f, y, ldy);
  check(st == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(int(st)));
#else
  at::Tensor prod = at::mm(x, w.t());
  at::Tensor dst = at::from_blob(y, {n, out}, {ldy, 1}, at::kFloat);
  if (b) dst.add_(prod);
  else dst.copy_(prod);
#endif
}

// Rows of a low-precision matrix converted to float32 per GEMM: enough for the GEMM to run at
// full speed, small enough to stay in the caches (~1 MiB).
int64_t panel_rows(int64_t in) { return std::max<int64_t>(16, (int64_t{1} << 18) / std::max<int64_t>(in, 1)); }

// Rows [o0, o1) of a quantised matrix as bf16 [o1 - o0, in].
void bf16_panel(WeightFormat f, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t o0, int64_t o1,
                uint16_t* panel) {
  at::parallel_for(o0, o1, 16, [&](int64_t a, int64_t b) {
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t r = a; r < b; ++r) {
      dequantize_row(f, w + r * row_bytes, row.data(), in);
      narrow_row_bf16(row.data(), panel + (r - o0) * in, in);
    }
  });
}

void gemm_bf16(const at::Tensor& x, const at::Tensor& w, WeightFormat f, const float* b, float* y) {
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  const float* xs = x.data_ptr<float>();
  const std::unique_ptr<uint16_t[]> xb(new uint16_t[static_cast<size_t>(n * in)]);
  at::parallel_for(0, n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) narrow_row_bf16(xs + r * in, xb.get() + r * in, in);
  });
  if (f == WeightFormat::BF16) {
    gemm_bf16_into(xb.get(), n, in, static_cast<const uint16_t*>(w.data_ptr()), in, out, b, y, out);
    return;
  }
  const int64_t step = panel_rows(in), row_bytes = weight_bytes(w) / std::max<int64_t>(1, out);
  const std::unique_ptr<uint16_t[]> panel(new uint16_t[static_cast<size_t>(std::min(step, out) * in)]);
  for (int64_t o0 = 0; o0 < out; o0 += step) {
    const int64_t o1 = std::min(out, o0 + step);
    bf16_panel(f, static_cast<const uint8_t*>(w.data_ptr()), row_bytes, in, o0, o1, panel.get());
    gemm_bf16_into(xb.get(), n, in, panel.get(), in, o1 - o0, b ? b + o0 : nullptr, y + o0, out);
  }
}

}  // namespace

// Where the CPU has AMX (gemm_bf16.h): q8_0 / q4_0 matrices are multiplied one bf16 panel at a
// time, bf16 ones as they are stored when the caller lets the activations be rounded; f16
// matrices keep float32 panels (bf16 would drop three of their mantissa bits).
bool prefill_gemm_bf16(WeightFormat f, Activations a) {
  const bool quantized = f == WeightFormat::Q8_0 || f == WeightFormat::Q4_0;
  return (quantized || (f == WeightFormat::BF16 && a == Activations::Bf16)) && amx_bf16_gemm();
}

bool set_prefill_gemm_bf16(bool on) { return set_amx_bf16_gemm(on); }

at::Tensor linear_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Activations a) {
  check_operands(x, w, b);
  const WeightFormat f = format_of(w);
  at::Tensor xc = x.contiguous();
  const int64_t n = x.size(0), out = w.size(0);
  at::Tensor y = at::empty({n, out}, x.options());
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  if (prefill_gemm_bf16(f, a)) {
    gemm_bf16(xc, w, f, bp, y.data_ptr<float>());
    return y;
  }
  if (f == WeightFormat::F32) {
#ifdef TRIMKV_HAVE_DNNL
    sgemm_into(xc, w, bp, y.data_ptr<float>(), out);
    return y;
#else
    return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
#endif
  }
  const int64_t step = panel_rows(x.size(1));
  for (int64_t o0 = 0; o0 < out; o0 += step) {
    const int64_t o1 = std::min(out, o0 + step);
    sgemm_into(xc, unpack_rows(w, o0, o1), bp ? bp + o0 : nullptr, y.data_ptr<float>() + o0, out);
  }
  return y;
}

at::Tensor linear_auto(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Activations a) {
  const bool grad = x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad());
  const bool plain = x.dim() == 2 && x.device().is_cpu() && x.scalar_type() == at::kFloat && w.is_contiguous() && !grad;
  if (plain && x.size(0) <= kSmallBatchRows) return linear_rows(x, w, b);
  if (plain) return linear_gemm(x, w, b, a);
  if (!x.device().is_cpu() && (w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kHalf)) {
    // On a GPU a 16-bit matrix multiplies 16-bit activations (tensor cores, float32 accumulation),
    // as transformers runs such a model; the result comes back in x's dtype.
    const at::Tensor xh = x.to(w.scalar_type());
    const at::Tensor y = b.defined() ? at::linear(xh, w, b.to(w.scalar_type())) : at::linear(xh, w);
    return y.to(x.scalar_type());
  }
  // A stored low-precision matrix is unpacked for at::linear; other dtypes (float64 in
  // gradient checks) go as they are.
  const at::Tensor wf = is_low_precision(w) ? unpack_weight(w).to(x.scalar_type()) : w;
  return b.defined() ? at::linear(x, wf, b) : at::linear(x, wf);
}

}  // namespace trimkv::kernels
