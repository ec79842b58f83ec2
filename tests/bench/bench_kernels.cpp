// Kernel benchmark (not a test): decode-shaped matrix-vector products, at::linear (the BLAS
// LibTorch links) against kernels::linear_rows, side by side. Prints a Markdown table.
// Usage: bench_kernels [threads]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "trimkv/kernels/linear.h"
#include "trimkv/kernels/weight_format.h"

namespace {

template <typename F>
double best_ms(F&& f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  at::set_num_threads(threads);
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  // SmolLM2-135M decode shapes.
  const Shape shapes[] = {{"qkv 960x576", 960, 576},
                          {"o 576x576", 576, 576},
                          {"gate_up 3072x576", 3072, 576},
                          {"down 576x1536", 576, 1536},
                          {"lm_head 49152x576", 49152, 576},
                          // Qwen2.5-VL-3B decode shapes (tests/bench/bench_qwen_vl.py).
                          {"3B qkv 2560x2048", 2560, 2048},
                          {"3B gate_up 22016x2048", 22016, 2048},
                          {"3B down 2048x11008", 2048, 11008}};
  std::printf("threads %d\n\n| shape | rows | at::linear ms | linear_rows ms | GB/s (ours) | speed-up |\n"
              "|---|---:|---:|---:|---:|---:|\n", threads);
  for (const auto& s : shapes) {
    at::Tensor w = at::randn({s.out, s.in});
    for (int64_t rows : {1, 4}) {
      at::Tensor x = at::randn({rows, s.in});
      at::Tensor ref = at::linear(x, w), got = trimkv::kernels::linear_rows(x, w);
      if (!at::allclose(ref, got, 1e-4, 1e-3)) {
        std::printf("MISMATCH for %s\n", s.name);
        return 1;
      }
      const int reps = s.out > 10000 ? 20 : 200;
      double a = best_ms([&] { at::linear(x, w); }, reps);
      double b = best_ms([&] { trimkv::kernels::linear_rows(x, w); }, reps);
      std::printf("| %s | %lld | %.3f | %.3f | %.1f | %.2fx |\n", s.name, (long long)rows, a, b,
                  s.out * s.in * 4.0 / (b * 1e6), a / b);
    }
  }
  // Decode GEMV per stored format (weight_format.h): the bytes each reads, and GB/s of them.
  std::printf("\nlow-precision decode GEMV (%s kernels), 1 row\n\n| shape | f32 ms | bf16 ms | f16 ms | q8 ms | q4 ms | q4 GB/s |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n", trimkv::kernels::lowp_kernel_isa());
  for (const auto& s : shapes) {
    const at::Tensor w = at::randn({s.out, s.in}) * 0.05;
    const at::Tensor x = at::randn({1, s.in});
    const int reps = s.out > 10000 ? 20 : 200;
    std::printf("| %s |", s.name);
    double q4_ms = 0;
    for (auto f : {trimkv::kernels::WeightFormat::F32, trimkv::kernels::WeightFormat::BF16,
                   trimkv::kernels::WeightFormat::F16, trimkv::kernels::WeightFormat::Q8_0,
                   trimkv::kernels::WeightFormat::Q4_0}) {
      const at::Tensor p = trimkv::kernels::pack_weight(w, f);
      const double ms = best_ms([&] { trimkv::kernels::linear_rows(x, p); }, reps);
      if (f == trimkv::kernels::WeightFormat::Q4_0) q4_ms = ms;
      std::printf(" %.3f |", ms);
    }
    std::printf(" %.1f |\n", s.out * s.in * 18.0 / 32.0 / (q4_ms * 1e6));
  }
  // A whole decode step's matrices as the model reads them: 30 SmolLM2-135M layers (q/k/v, o,
  // gate/up, down) and the lm_head, each read once per step, so none stays in the caches (the
  // table above repeats one matrix; its small shapes run from L2).
  std::printf("\ndecode step of SmolLM2-135M's matrices, each read once per step (%s kernels)\n\n"
              "| format | MB per step | ms per step | GB/s |\n|---|---:|---:|---:|\n",
              trimkv::kernels::lowp_kernel_isa());
  for (auto f : {trimkv::kernels::WeightFormat::BF16, trimkv::kernels::WeightFormat::Q8_0,
                 trimkv::kernels::WeightFormat::Q4_0}) {
    std::vector<at::Tensor> mats;
    for (int l = 0; l < 30; ++l)
      for (int k = 0; k < 4; ++k) mats.push_back(trimkv::kernels::pack_weight(at::randn({shapes[k].out, shapes[k].in}) * 0.05, f));
    mats.push_back(trimkv::kernels::pack_weight(at::randn({shapes[4].out, shapes[4].in}) * 0.05, f));
    double bytes = 0;
    for (const auto& m : mats) bytes += static_cast<double>(m.numel()) * m.element_size();
    const at::Tensor x576 = at::randn({1, 576}), x1536 = at::randn({1, 1536});
    const double ms = best_ms([&] {
      for (size_t i = 0; i < mats.size(); ++i) trimkv::kernels::linear_rows(i % 4 == 3 && i + 1 < mats.size() ? x1536 : x576, mats[i]);
    }, 20);
    std::printf("| %s | %.1f | %.3f | %.1f |\n", trimkv::kernels::weight_format_name(f), bytes / 1e6, ms, bytes / (ms * 1e6));
  }
  std::printf("\nprefill GEMM (oneDNN used: %s)\n\n| shape | rows | at::linear ms | linear_gemm ms | GFLOP/s (ours) | speed-up |\n"
              "|---|---:|---:|---:|---:|---:|\n", trimkv::kernels::have_fast_gemm() ? "yes" : "no");
  for (const auto& s : shapes) {
    if (s.out > 10000 || s.in > 4096) continue;
    at::Tensor w = at::randn({s.out, s.in});
    for (int64_t rows : {16, 128}) {
      at::Tensor x = at::randn({rows, s.in});
      at::Tensor ref = at::linear(x, w), got = trimkv::kernels::linear_gemm(x, w);
      if (!at::allclose(ref, got, 1e-4, 1e-3)) {
        std::printf("MISMATCH for %s\n", s.name);
        return 1;
      }
      double a = best_ms([&] { at::linear(x, w); }, 50);
      double b = best_ms([&] { trimkv::kernels::linear_gemm(x, w); }, 50);
      std::printf("| %s | %lld | %.3f | %.3f | %.1f | %.2fx |\n", s.name, (long long)rows, a, b,
                  2.0 * rows * s.out * s.in / (b * 1e6), a / b);
    }
  }
  return 0;
}
