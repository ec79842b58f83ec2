// The KV cache in bf16 / f16 (--kv-dtype, text_model.h ModelLoadOptions): the pools store 16-bit
// K and V, attention accumulates in float32 (kernel exactness: test_kernels "[kv-dtype]"); the
// model's logits stay within 2e-2 of the float32 cache's, the bytes halve, MiB budgets count
// entries at the stored size, and the default follows the checkpoint's own precision.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;

namespace {

// Logits of a 12-token prefill (chunks of 8) and 6 decode steps on the model's own cache.
std::vector<at::Tensor> logits_run(const TextModel& m, KvCache& cache) {
  const std::vector<int32_t> tokens = {1, 17, 42, 99, 3, 250, 8, 64, 11, 5, 77, 200, 5, 9, 100, 31, 7, 64};
  TextRunner runner(m, cache, 8);
  std::vector<at::Tensor> out{runner.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + 12))};
  for (int i = 0; i < 6; ++i) out.push_back(runner.step(tokens[12 + i]));
  return out;
}

}  // namespace

TEST_CASE("An f16 KV cache keeps the logits within 2e-2 of the float32 cache's, bf16 within 0.1, at half the bytes",
          "[kv-dtype]") {
  for (const char* name : {"llama_gqa", "qwen2", "qwen3"}) {
    const TextModel f32 = load_text_model(test::model_dir(name));
    REQUIRE(f32.kv_dtype == kernels::KvDtype::F32);  // float32 files: float32 cache by default
    KvCache c32(kv_geometry_of(f32.config, 4), kv_tensor_options(f32));
    const auto want = logits_run(f32, c32);
    // f16 keeps 11 significant bits, bf16 8: these random fixtures amplify any perturbation
    // (rounding their weights to bf16 moves transformers' own logits by up to 0.14); measured
    // 0.03-0.08 for bf16, below 1e-2 for f16.
    for (const auto& [kv, bound] : {std::pair{"bf16", 0.1}, std::pair{"f16", 2e-2}}) {
      CAPTURE(name, kv);
      const TextModel m = load_text_model(test::model_dir(name), {"f32", kv});
      REQUIRE(kernels::kv_dtype_name(m.kv_dtype) == std::string(kv));
      KvCache cache(kv_geometry_of(m.config, 4), kv_tensor_options(m));
      const auto got = logits_run(m, cache);
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, (got[i] - want[i]).abs().max().item<double>());
      INFO("max |logit - float32 cache| " << worst);
      CHECK(worst < bound);
      CHECK(worst > 0);  // the cache really is 16-bit
      CHECK(cache.bytes_held() * 2 == c32.bytes_held());
      CHECK(cache.keys(0, 0).scalar_type() == at::kFloat);
    }
  }
}

TEST_CASE("The KV dtype defaults to f16 for checkpoints stored in 16 bits or fewer, f32 otherwise; unknown ones are refused by name",
          "[kv-dtype]") {
  CHECK(resolve_kv_dtype("", DType::F32) == kernels::KvDtype::F32);
  CHECK(resolve_kv_dtype("", DType::BF16) == kernels::KvDtype::F16);
  CHECK(resolve_kv_dtype("", DType::F16) == kernels::KvDtype::F16);
  CHECK(resolve_kv_dtype("", DType::Q8_0) == kernels::KvDtype::F16);
  CHECK(resolve_kv_dtype("", DType::Q4_1) == kernels::KvDtype::F16);
  CHECK(resolve_kv_dtype("bf16", DType::F32) == kernels::KvDtype::BF16);
  CHECK(resolve_kv_dtype("f32", DType::BF16) == kernels::KvDtype::F32);
  const TextModel g = load_text_model(test::data_dir() + "/gguf/qwen2.bf16-bf16.gguf");
  CHECK(g.kv_dtype == kernels::KvDtype::F16);
  CHECK(load_text_model(test::data_dir() + "/gguf/qwen2.bf16-bf16.gguf", {"", "f32"}).kv_dtype == kernels::KvDtype::F32);
  try {
    (void)load_text_model(test::model_dir("qwen2"), {"", "fp8"});
    FAIL("an unknown KV dtype was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Input);
    CHECK(std::string(e.what()).find("--kv-dtype: unknown KV dtype 'fp8'") != std::string::npos);
  }
  CHECK_THROWS_AS(check_kv_dtype_option("int4"), Error);
  CHECK_NOTHROW(check_kv_dtype_option(""));
}

TEST_CASE("A MiB budget counts entries at the cache's stored size", "[kv-dtype][eviction]") {
  const KvGeometry g{2, 2, 16, 4};  // 2 layers, 2 KV heads, head_dim 16, blocks of 4
  EvictionSettings s;
  s.policy = "streamingllm";
  s.budget_mib = 1.0 / 16;  // 65,536 bytes
  // float32: 128 bytes per entry -> 512 entries; f16: 64 -> 1024.
  CHECK(budget_of(s, g, 4).global_entries(g) == 512);
  CHECK(budget_of(s, g, 2).global_entries(g) == 1024);
  CHECK(Evictor(s, g, 2).snapshot(KvCache(g, at::TensorOptions().dtype(at::kHalf))).budget_global == 1024);
  s.budget_global = 10;
  CHECK_THROWS_WITH(validate_eviction_settings(s), Catch::Contains("give one budget"));
  s.budget_global.reset();
  s.budget_mib = -1;
  CHECK_THROWS_WITH(validate_eviction_settings(s), Catch::Contains("MiB budget must be > 0"));
}
