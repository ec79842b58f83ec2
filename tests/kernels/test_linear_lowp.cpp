// Low-precision weight kernels (weight_format.h, linear.h): packing round trips, the decode GEMV
// of every format and instruction set against a float64 reference, the prefill GEMM's panels,
// row gathers, and refused inputs.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "trimkv/kernels/linear.h"
#include "trimkv/kernels/weight_format.h"

using namespace trimkv::kernels;

namespace {

const WeightFormat kLowp[] = {WeightFormat::BF16, WeightFormat::F16, WeightFormat::Q8_0, WeightFormat::Q4_0};

// x · dequant(w)ᵀ in float64: what every kernel approximates.
at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  at::Tensor y = at::matmul(x.to(at::kDouble), unpack_weight(w).to(at::kDouble).t());
  if (b.defined()) y = y + b.to(at::kDouble);
  return y;
}

// The error the kernels may add on top of the weights' own rounding: float32 accumulation for
// the float formats; the activations' q8 rounding (half a step of max|x|/127 per value) for the
// quantised ones.
double tolerance(WeightFormat f, const at::Tensor& x, const at::Tensor& w) {
  const double in = static_cast<double>(x.size(1));
  const double wmax = unpack_weight(w).abs().max().item<double>(), xmax = x.abs().max().item<double>();
  if (!is_quantized(f)) return 1e-5 * in * wmax * xmax;
  return 0.5 / 127.0 * xmax * wmax * in + 1e-4;
}

std::string isa_label(const char* isa) { return isa; }

at::Tensor bf16_rounded(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); }

}  // namespace

TEST_CASE("Weight formats: names, sizes and packing round trips", "[kernels][lowp]") {
  for (const char* n : {"f32", "bf16", "f16", "q8", "q4", "q8_0", "q4_0"}) REQUIRE_NOTHROW(parse_weight_format(n));
  REQUIRE_THROWS_WITH(parse_weight_format("q5"), Catch::Contains("'q5'") && Catch::Contains("q8"));
  at::manual_seed(1);
  const at::Tensor w = at::randn({40, 96});
  for (WeightFormat f : kLowp) {
    CAPTURE(weight_format_name(f));
    const at::Tensor p = pack_weight(w, f);
    REQUIRE(format_of(p) == f);
    REQUIRE(weight_rows(p) == 40);
    REQUIRE(weight_cols(p) == 96);
    REQUIRE(weight_bytes(p) == static_cast<int64_t>(40 * 96 * bytes_per_value(f)));
    const at::Tensor back = unpack_weight(p);
    REQUIRE(back.sizes() == w.sizes());
    // Each value within its format's rounding: half an ulp (bf16 2^-8, f16 2^-11 relative), half
    // a quantisation step of its block (q8: max/127; q4: max/8) plus the f16 scale's rounding.
    const double bound = f == WeightFormat::BF16 ? 1.0 / 256 : f == WeightFormat::F16 ? 1.0 / 2048
                         : f == WeightFormat::Q8_0 ? 0.5 / 127 + 1e-3 : 1.0 / 8 + 1e-3;
    const at::Tensor blockmax = w.abs().view({40, 3, 32}).amax(-1, true).expand({40, 3, 32}).reshape({40, 96});
    const at::Tensor scale = is_quantized(f) ? blockmax : w.abs();
    REQUIRE(((back - w).abs() - bound * scale).max().item<double>() <= 1e-7);
    // Packing the unpacked matrix again gives the same bytes (a fixed point).
    REQUIRE(at::equal(pack_weight(back, f), p));
    // Row ranges and gathers.
    REQUIRE(at::equal(unpack_rows(p, 5, 9), back.slice(0, 5, 9)));
    const at::Tensor ids = at::tensor(std::vector<int64_t>{3, 0, 39, 3}, at::kLong);
    REQUIRE(at::equal(gather_rows(p, ids), back.index_select(0, ids)));
  }
  REQUIRE(at::equal(pack_weight(w, WeightFormat::F32), w));
}

TEST_CASE("Weight formats: refused shapes and tensors", "[kernels][lowp]") {
  const at::Tensor w = at::randn({4, 33});
  REQUIRE_FALSE(format_fits(WeightFormat::Q8_0, 33));
  REQUIRE(format_fits(WeightFormat::BF16, 33));
  REQUIRE_THROWS_WITH(pack_weight(w, WeightFormat::Q8_0), Catch::Contains("33") && Catch::Contains("32"));
  REQUIRE_THROWS_WITH(pack_weight(w, WeightFormat::Q4_0), Catch::Contains("33"));
  REQUIRE_THROWS(format_of(at::zeros({4, 3, 7}, at::kByte)));
  REQUIRE_THROWS(format_of(at::zeros({4, 8}, at::kInt)));
  REQUIRE_THROWS_WITH(linear_rows(at::randn({1, 64}), pack_weight(at::randn({8, 96}), WeightFormat::Q8_0)),
                      Catch::Contains("64") && Catch::Contains("96"));
}

TEST_CASE("Low-precision GEMV: every format and instruction set against float64", "[kernels][lowp]") {
  at::manual_seed(2);
  // Widths with tails past the vector loops (in % 32 != 0 for the float formats).
  for (int64_t in : {32, 64, 96, 1056, 1000}) {
    for (WeightFormat f : kLowp) {
      if (!format_fits(f, in)) continue;
      const at::Tensor w = pack_weight(at::randn({67, in}) * 0.1, f);
      const at::Tensor b = at::randn({67});
      for (int64_t n : {1, 3}) {
        const at::Tensor x = at::randn({n, in});
        const at::Tensor want = reference(x, w, b);
        at::Tensor first;
        for (const char* isa : {"best", "avx512", "avx2", "portable"}) {
          if (!force_lowp_kernel_isa(isa)) continue;  // this CPU lacks it
          CAPTURE(in, weight_format_name(f), n, isa_label(isa), lowp_kernel_isa());
          const at::Tensor y = linear_rows(x, w, b);
          REQUIRE(y.sizes() == at::IntArrayRef({n, 67}));
          REQUIRE((y.to(at::kDouble) - want).abs().max().item<double>() <= tolerance(f, x, w));
          // Quantised kernels: AVX-512 and AVX2 sum the same integers in the same float order.
          if (is_quantized(f) && std::string(isa) != "portable") {
            if (!first.defined()) first = y;
            else REQUIRE(at::equal(first, y));
          }
        }
        force_lowp_kernel_isa("best");
      }
    }
  }
}

TEST_CASE("Quantised GEMV: exact integer block sums on the activations' own q8 rounding", "[kernels][lowp]") {
  // The kernels round each activation block to int8 with scale max|x|/127 (half away from zero);
  // with that rounding done here, the product must match float64 to float32 accuracy.
  at::manual_seed(5);
  const int64_t in = 256;
  const at::Tensor x = at::randn({2, in});
  at::Tensor xq = x.clone();
  auto* p = xq.data_ptr<float>();
  for (int64_t b = 0; b < 2 * in / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(p[b * 32 + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) p[b * 32 + j] = d * static_cast<float>(std::lround(p[b * 32 + j] * id));
  }
  for (WeightFormat f : {WeightFormat::Q8_0, WeightFormat::Q4_0}) {
    const at::Tensor w = pack_weight(at::randn({50, in}), f);
    const at::Tensor want = reference(xq, w);
    for (const char* isa : {"best", "avx2", "portable"}) {
      if (!force_lowp_kernel_isa(isa)) continue;
      CAPTURE(weight_format_name(f), isa);
      const at::Tensor y = linear_rows(x, w);
      REQUIRE(((y.to(at::kDouble) - want).abs() / (want.abs() + 1.0)).max().item<double>() < 1e-5);
    }
    force_lowp_kernel_isa("best");
  }
}

TEST_CASE("Low-precision prefill: the panel GEMM equals the float32 GEMM of the unpacked matrix", "[kernels][lowp]") {
  at::manual_seed(3);
  for (WeightFormat f : kLowp) {
    CAPTURE(weight_format_name(f));
    // More rows than one panel (2^18 / 320 = 819) so several panels are stitched together.
    const at::Tensor w = pack_weight(at::randn({1900, 320}) * 0.05, f);
    const at::Tensor b = at::randn({1900});
    const at::Tensor x = at::randn({37, 320});
    const at::Tensor y = linear_gemm(x, w, b);
    const at::Tensor want = at::linear(x, unpack_weight(w), b);
    if (prefill_gemm_bf16(f)) {
      // AMX, quantised matrix: both operands rounded to bf16, products summed in float32.
      const at::Tensor want16 = at::linear(bf16_rounded(x), bf16_rounded(unpack_weight(w)), b);
      REQUIRE((y - want16).abs().max().item<double>() < 1e-4);
    } else {
      // float32 panels (a bf16 matrix under Activations::Exact too): the float32 GEMM's numbers.
      REQUIRE((y - want).abs().max().item<double>() < 1e-4);
    }
    // linear_auto: small batches through the GEMV, large through the GEMM, autograd through at::linear.
    REQUIRE(at::equal(linear_auto(x, w, b), y));
    REQUIRE((linear_auto(x.narrow(0, 0, 2), w, b) - want.narrow(0, 0, 2)).abs().max().item<double>() <
            tolerance(f, x, w));
    const at::Tensor xg = x.clone().requires_grad_(true);
    linear_auto(xg, w, b).sum().backward();
    REQUIRE(xg.grad().defined());
  }
}

TEST_CASE("bf16 prefill GEMM: odd shapes, with and without bias, match the float32 GEMM of the rounded operands",
          "[kernels][lowp][bf16-gemm]") {
  if (!prefill_gemm_bf16(WeightFormat::Q8_0)) {
    // Not an AMX CPU (or TRIMKV_BF16_GEMM=0): every format keeps float32 panels.
    for (WeightFormat f : kLowp) {
      REQUIRE_FALSE(prefill_gemm_bf16(f));
      REQUIRE_FALSE(prefill_gemm_bf16(f, Activations::Bf16));
    }
    WARN("no AMX bf16 GEMM on this CPU: only the float32 panel path was tested");
    return;
  }
  // bf16 matrices only when the caller lets the activations be rounded; never f16 / f32.
  REQUIRE_FALSE(prefill_gemm_bf16(WeightFormat::BF16));
  REQUIRE(prefill_gemm_bf16(WeightFormat::BF16, Activations::Bf16));
  REQUIRE(prefill_gemm_bf16(WeightFormat::Q4_0));
  for (Activations a : {Activations::Exact, Activations::Bf16}) {
    REQUIRE_FALSE(prefill_gemm_bf16(WeightFormat::F16, a));
    REQUIRE_FALSE(prefill_gemm_bf16(WeightFormat::F32, a));
  }
  at::manual_seed(11);
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::Q8_0, WeightFormat::Q4_0}) {
    for (int64_t n : {5, 17, 300}) {
      for (int64_t out : {1, 33, 1000}) {
        for (bool bias : {false, true}) {
          CAPTURE(weight_format_name(f), n, out, bias);
          const at::Tensor w = pack_weight(at::randn({out, 96}) * 0.1, f);
          const at::Tensor x = at::randn({n, 96});
          const at::Tensor b = bias ? at::randn({out}) : at::Tensor();
          const at::Tensor y = linear_gemm(x, w, b, Activations::Bf16);
          const at::Tensor want = at::linear(bf16_rounded(x), bf16_rounded(unpack_weight(w)), b);
          REQUIRE((y - want).abs().max().item<double>() < 1e-4);
          // Exact keeps a bf16 matrix's product in float32 activations.
          if (f == WeightFormat::BF16)
            REQUIRE((linear_gemm(x, w, b) - at::linear(x, unpack_weight(w), b)).abs().max().item<double>() < 1e-4);
        }
      }
    }
  }
  // Non-finite activations stay non-finite (no silent zeros).
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::Q8_0}) {
    const at::Tensor w = pack_weight(at::randn({8, 64}), f);
    at::Tensor x = at::randn({6, 64});
    x[2][5] = std::numeric_limits<float>::quiet_NaN();
    x[4][7] = std::numeric_limits<float>::infinity();
    const at::Tensor y = linear_gemm(x, w, {}, Activations::Bf16);
    REQUIRE(y[2].isnan().all().item<bool>());
    REQUIRE_FALSE(y[4].isfinite().any().item<bool>());
    REQUIRE_FALSE(y[1].isnan().any().item<bool>());
  }
  // Turned off, the float32 panels are used, and on again.
  REQUIRE_FALSE(set_prefill_gemm_bf16(false));
  REQUIRE_FALSE(prefill_gemm_bf16(WeightFormat::Q4_0));
  const at::Tensor w = pack_weight(at::randn({40, 64}), WeightFormat::Q4_0);
  const at::Tensor x = at::randn({9, 64});
  REQUIRE((linear_gemm(x, w) - at::linear(x, unpack_weight(w))).abs().max().item<double>() < 1e-4);
  REQUIRE(set_prefill_gemm_bf16(true));
}

TEST_CASE("The low-precision kernels run the instruction set this run expects", "[kernels][lowp]") {
  // TRIMKV_EXPECT_LOWP_ISA is set by the ctest entries that run this suite on an emulated CPU
  // (tests/CMakeLists.txt: qemu-user, Haswell -> avx2, Westmere -> portable): the dispatch must
  // really have picked that tier, or those entries would test the native code a second time.
  const char* expect = std::getenv("TRIMKV_EXPECT_LOWP_ISA");
  if (!expect) {
    SUCCEED("native run: every tier this CPU has is forced in turn above");
    return;
  }
  CAPTURE(expect, lowp_kernel_isa());
  REQUIRE(std::string(lowp_kernel_isa()).rfind(expect, 0) == 0);  // "avx2+fma+f16c", "portable"
  REQUIRE_FALSE(force_lowp_kernel_isa(std::string(expect) == "avx2" ? "avx512" : "avx2"));  // nothing above it
}
