#include "trimkv/kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#ifdef TRIMKV_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include <stdexcept>
#include <string>

namespace trimkv::kernels {

namespace {

// One output row block [o0, o1) for every x row. The weight row is read once and used for all
// x rows while it sits in L1. `omp simd reduction` allows the vectorised (reassociated) sum.
__attribute__((target_clones("avx512f", "avx2", "default")))
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

at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  check(x.dim() == 2 && w.dim() == 2, "x and w must be 2-D");
  check(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "float32 only");
  check(x.device().is_cpu() && w.device().is_cpu(), "CPU tensors only");
  check(x.size(1) == w.size(1), "x has " + std::to_string(x.size(1)) + " columns, w has " +
                                    std::to_string(w.size(1)));
  check(w.is_contiguous(), "w must be contiguous");
  check(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0) && b.is_contiguous() &&
                         b.scalar_type() == at::kFloat),
        "b must be [out] float32 contiguous");
  at::Tensor xc = x.stride(1) == 1 ? x : x.contiguous();
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  linear_rows_cpu(xc.data_ptr<float>(), xc.stride(0), w.data_ptr<float>(),
                  b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(), y.stride(0),
                  x.size(0), x.size(1), w.size(0));
  return y;
}

bool have_fast_gemm() {
#ifdef TRIMKV_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

at::Tensor linear_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
#ifdef TRIMKV_HAVE_DNNL
  check(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "shapes do not match");
  check(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && x.device().is_cpu(),
        "float32 CPU tensors only");
  at::Tensor xc = x.contiguous(), wc = w.contiguous();
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  at::Tensor y = b.defined() ? b.expand({n, out}).contiguous() : at::empty({n, out}, x.options());
  const dnnl_status_t st = dnnl_sgemm('N', 'T', n, out, in, 1.0f, xc.data_ptr<float>(), in,
                                      wc.data_ptr<float>(), in, b.defined() ? 1.0f : 0.0f,
                                      y.data_ptr<float>(), out);
  check(st == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(int(st)));
  return y;
#else
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
#endif
}

at::Tensor linear_auto(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const bool plain = x.dim() == 2 && x.device().is_cpu() && x.scalar_type() == at::kFloat &&
                     w.is_contiguous() &&
                     !(x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  if (plain && x.size(0) <= kSmallBatchRows) return linear_rows(x, w, b);
  if (plain) return linear_gemm(x, w, b);
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

}  // namespace trimkv::kernels
