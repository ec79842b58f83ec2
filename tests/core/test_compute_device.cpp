// --device: the spelling, what auto resolves to, the refusal of cuda where it cannot run, and the
// device-neutral pieces the CUDA path shares with the CPU (attend_cache_layer, KvCache's host
// copies, TextDecoder::on_device). The GPU side itself: tests/cuda/test_cuda_runtime.cpp.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/cache_attention.h"
#include "trimkv/core/compute_device.h"
#include "trimkv/core/error.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"
#include "trimkv/kernels/paged_attention.h"

using namespace trimkv;

TEST_CASE("--device: names, auto, and cuda refused with the reason where it cannot run", "[device]") {
  CHECK(resolve_compute_device("cpu") == ComputeDevice::Cpu);
  CHECK(std::string(compute_device_name(ComputeDevice::Cuda)) == "cuda");
  CHECK(torch_device(ComputeDevice::Cuda).is_cuda());
  CHECK_NOTHROW(check_device_option(""));
  CHECK_NOTHROW(check_device_option("auto"));
  try {
    check_device_option("gpu");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Input);
    CHECK_THAT(e.what(), Catch::Contains("unknown device 'gpu'") && Catch::Contains("auto, cpu or cuda"));
  }
  std::string why;
  if (cuda_usable(&why)) {
    WARN("a CUDA device is here: tests/cuda/test_cuda_runtime covers it");
    CHECK(resolve_compute_device("auto") == ComputeDevice::Cuda);
    return;
  }
  CHECK_FALSE(why.empty());
  CHECK(resolve_compute_device("auto") == ComputeDevice::Cpu);
  CHECK(resolve_compute_device("") == ComputeDevice::Cpu);
  try {
    (void)resolve_compute_device("cuda");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("--device cuda: " + why));
  }
  // A load asked for cuda is refused before a file is read (no half-loaded model).
  ModelLoadOptions o;
  o.device = "cuda";
  CHECK_THROWS_AS(load_text_model("/nonexistent/model", o), Error);
  try {
    load_text_model("/nonexistent/model", o);
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("--device cuda"));
  }
}

TEST_CASE("attend_cache_layer on CPU pools is the CPU kernel, sums included", "[device][cache]") {
  const TextModel m = load_text_model(test::model_dir("llama_gqa"), {"f32", "bf16"});
  const KvGeometry g = kv_geometry_of(m.config, 4);
  KvCache cache(g, kv_tensor_options(m));
  TextRunner runner(m, cache, 8);
  (void)runner.prefill({3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46});
  const at::Tensor q = at::randn({3, m.config.n_head, m.config.head_dim});
  const double scale = 0.125;
  for (int il = 0; il < g.n_layer; ++il) {
    const CacheAttention a = attend_cache_layer(cache, il, q, scale, true);
    const kernels::PagedAttentionOutput want = kernels::paged_attention_with_stats(q, cache.layer_view(il), scale);
    CHECK(at::equal(a.out, want.out));
    CHECK(at::equal(a.attn_sum, want.attn_sum));
    CHECK_FALSE(attend_cache_layer(cache, il, q, scale).attn_sum.defined());
    // Host copies of the cache's rows: float32, on the CPU, whatever the pools hold.
    const at::Tensor k = cache.keys(il, 0);
    CHECK(k.device().is_cpu());
    CHECK(k.scalar_type() == at::kFloat);
    CHECK(k.size(0) == cache.length(il, 0));
  }
}

TEST_CASE("TextDecoder::on_device to the CPU gives the same decoder", "[device]") {
  const TextModel m = load_text_model(test::model_dir("qwen3"), {"q8"});
  std::vector<std::string> notes;
  const auto copy = m.decoder->on_device(at::Device(at::kCPU), &notes);
  CHECK(notes.empty());  // nothing converted: q8 stays q8 on the CPU
  CHECK(copy->device().is_cpu());
  CHECK(copy->weights().layers[0].w_qkv.is_same(m.decoder->weights().layers[0].w_qkv));
  const at::Tensor ids = at::tensor({5, 6, 7}, at::kLong);
  CHECK(at::equal(copy->embed(ids), m.decoder->embed(ids)));
}
