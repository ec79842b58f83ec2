// Low-precision weights in the decoder (text_model.h ModelLoadOptions, kernels/weight_format.h):
// our q8_0 / q4_0 blocks are byte for byte the PyPI gguf package's (llama.cpp's reference
// quantisers, an independent implementation), bf16 / f16 roundings torch's; decoders held in
// bf16 / f16 compute what transformers computes on the rounded weights, quantised ones stay near
// their dequantised weights; widths the quantised formats cannot hold fall back to bf16, named.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "logit_oracle.h"
#include "random_llama.h"
#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/kernels/weight_format.h"

using namespace trimkv;
using kernels::WeightFormat;

namespace {

at::Tensor fixture(const std::string& key) {
  static const WeightStore ws = WeightStore::open_file(test::data_dir() + "/quant/quant.safetensors");
  const TensorInfo* info = ws.find(key);
  REQUIRE(info);
  // Raw bytes (uint8 / int16 patterns) as they are; float32 tensors converted.
  if (info->dtype == DType::U8 || info->dtype == DType::I16) {
    const auto type = info->dtype == DType::U8 ? at::kByte : at::kShort;
    return at::from_blob(const_cast<void*>(static_cast<const void*>(info->data)), info->shape, type).clone();
  }
  return tensor_to_float(*info);
}

// Greedy logits of a prompt and `steps` decode steps (decode runs the GEMV, prefill the GEMM).
std::vector<at::Tensor> run(const TextModel& m, const std::vector<int32_t>& prompt, int steps) {
  KvCache cache(kv_geometry_of(m.config, 4));
  TextRunner runner(m, cache, 8);
  std::vector<at::Tensor> out;
  at::Tensor logits = runner.prefill(prompt);
  for (int i = 0; i < steps; ++i) {
    out.push_back(logits.clone());
    logits = runner.step(static_cast<int32_t>(logits.argmax().item<int64_t>()));
  }
  out.push_back(logits.clone());
  return out;
}

}  // namespace

TEST_CASE("q8_0 / q4_0 blocks equal the gguf package's bytes; bf16 / f16 equal torch's rounding",
          "[weights][oracle]") {
  const at::Tensor x = fixture("x");
  for (const auto& [name, f] : {std::pair{"q8_0", WeightFormat::Q8_0}, std::pair{"q4_0", WeightFormat::Q4_0}}) {
    CAPTURE(name);
    const at::Tensor ours = kernels::pack_weight(x, f);
    const at::Tensor theirs = fixture(name);
    REQUIRE(theirs.numel() == ours.numel());
    REQUIRE(at::equal(ours.view({-1}), theirs.view({-1})));
    REQUIRE(at::equal(kernels::unpack_weight(ours), fixture(std::string(name) + "_deq")));
  }
  REQUIRE(at::equal(kernels::pack_weight(x, WeightFormat::BF16).view(at::kShort), fixture("bf16")));
  REQUIRE(at::equal(kernels::pack_weight(x, WeightFormat::F16).view(at::kShort), fixture("f16")));
}

TEST_CASE("Decoders held in bf16 / f16 compute what transformers computes with the rounded weights; q8 / q4 stay "
          "near their dequantised weights", "[weights][oracle]") {
  // 12 prompt tokens prefilled in chunks of 8 (the GEMM path), then 6 decode steps (the GEMV):
  // test::worst_logit_error.
  static const WeightStore oracle = WeightStore::open_file(test::data_dir() + "/quant/logits.safetensors");
  for (const char* name : {"llama_gqa", "llama_tied", "qwen2", "qwen3"}) {
    const std::string dir = test::model_dir(name);
    const TextModel f32 = load_text_model(dir);
    REQUIRE(f32.weight_format == WeightFormat::F32);  // float32 files: float32 by default
    // bf16 / f16: the same math as transformers on rounded weights, summation order aside
    // (measured within 2e-5). q8 / q4 decode steps also round the activations to 8 bits per block
    // (llama.cpp's scheme; measured 0.10-0.23 for q8, 0.10-0.52 for q4 here): bounded loosely,
    // since these random fixtures amplify perturbations (rounding the weights to bf16 alone moves
    // transformers' own logits by up to 0.14); their quality is judged on the demo model's accuracy.
    for (const auto& [fmt, bound] : {std::pair{"f32", 1e-4}, std::pair{"bf16", 1e-4}, std::pair{"f16", 1e-4},
                                     std::pair{"q8", 0.3}, std::pair{"q4", 0.6}}) {
      CAPTURE(name, fmt);
      const TextModel m = load_text_model(dir, {fmt});
      REQUIRE(kernels::weight_format_name(m.weight_format) == std::string(fmt));
      // qwen3's fixture is 48 wide: its q/k/v, gate/up, lm_head and embedding cannot be q8 / q4.
      const bool odd = std::string(name) == "qwen3" && (std::string(fmt) == "q8" || std::string(fmt) == "q4");
      REQUIRE(m.weight_notes.empty() == !odd);
      REQUIRE(m.decoder->parameter_count() == f32.decoder->parameter_count());
      if (std::string(fmt) != "f32") REQUIRE(m.decoder->weight_bytes() < f32.decoder->weight_bytes());
      const double worst =
          test::worst_logit_error(m, oracle.load({std::string(name) + "." + fmt}, {7, m.config.vocab_size}));
      INFO("max |logit - oracle| " << worst);
      CHECK(worst < bound);
    }
  }
}

namespace {

// A tiny random Llama checkpoint written in `dtype`: hidden `d` (heads of 16), MLP `f`.
void write_llama(const test::ScratchDir& dir, int64_t d, int64_t f, DType dtype) {
  test::RandomLlama m;
  m.hidden = d;
  m.mlp = f;
  m.dtype = dtype;
  test::write_random_llama(dir, m);
}

}  // namespace

TEST_CASE("Weights: the checkpoint's own half precision by default, unknown formats refused, odd widths in bf16",
          "[weights][errors]") {
  test::ScratchDir bf16("bf16-model");
  write_llama(bf16, 64, 128, DType::BF16);
  REQUIRE(load_text_model(bf16.path()).weight_format == WeightFormat::BF16);  // the file's own dtype
  REQUIRE(load_text_model(bf16.path(), {"f32"}).weight_format == WeightFormat::F32);
  REQUIRE_THROWS_WITH(load_text_model(bf16.path(), {"q5"}), Catch::Contains("q5") && Catch::Contains("q8"));
  REQUIRE(resolve_weight_format("", DType::F16) == WeightFormat::F16);
  REQUIRE(resolve_weight_format("", DType::F32) == WeightFormat::F32);
  // bf16 held as bf16 is the file's values exactly: the same logits as the float32 load of them.
  const std::vector<int32_t> prompt = {3, 9, 27, 81};
  const auto a = run(load_text_model(bf16.path()), prompt, 3), b = run(load_text_model(bf16.path(), {"f32"}), prompt, 3);
  for (size_t i = 0; i < a.size(); ++i) REQUIRE((a[i] - b[i]).abs().max().item<double>() < 1e-4);
  // MLP width 80 (not a multiple of 32): down_proj cannot be q8; it is held in bf16 and named.
  test::ScratchDir odd("odd-model");
  write_llama(odd, 64, 80, DType::F32);
  const TextModel q8 = load_text_model(odd.path(), {"q8"});
  REQUIRE(q8.weight_notes.size() == 2);  // one down_proj per layer
  CHECK_THAT(q8.weight_notes[0], Catch::Contains("layer 0 down_proj") && Catch::Contains("80 wide") &&
                                     Catch::Contains("bf16"));
  const auto want = run(load_text_model(odd.path()), prompt, 3), got = run(q8, prompt, 3);
  for (size_t i = 0; i < want.size(); ++i) CHECK((got[i] - want[i]).abs().max().item<double>() < 0.1);
}

TEST_CASE("Weights: a stopped load ends before its next tensor, naming the checkpoint", "[weights][errors][cancel]") {
  test::ScratchDir dir("big-model");
  test::RandomLlama big;
  big.hidden = 512;
  big.mlp = 1536;
  big.layers = 24;  // 24 x 9 matrices of 0.25-0.75 M floats: a load of a few hundred ms
  test::write_random_llama(dir, big);
  ModelLoadOptions o;
  std::atomic<bool> stop{true};
  o.cancel = &stop;
  REQUIRE_THROWS_MATCHES(load_text_model(dir.path(), o), Error,
                         Catch::Matchers::Predicate<Error>([&](const Error& e) {
                           return e.kind() == ErrorKind::Cancelled &&
                                  std::string(e.what()).find(dir.path()) != std::string::npos;
                         }, "Error{Cancelled} naming the folder"));
  // Stopped midway from another thread: back within 200 ms of the stop (one tensor's read). The
  // stop is timed from a warm load (the first read the files cold); when the load still ends
  // before the stop lands (a busy machine's timing), the stop is tried again earlier.
  stop = false;
  double full_ms = 1e9;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    load_text_model(dir.path(), o);
    full_ms = std::min(full_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  bool cancelled = false;
  double ms = 0, delay_ms = full_ms / 3;
  for (int attempt = 0; attempt < 6 && !cancelled; ++attempt, delay_ms /= 2) {
    stop = false;
    std::chrono::steady_clock::time_point stopped_at;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
      stopped_at = std::chrono::steady_clock::now();
      stop = true;
    });
    try {
      load_text_model(dir.path(), o);
    } catch (const Error& e) {
      cancelled = e.kind() == ErrorKind::Cancelled;
      if (!cancelled) throw;
    }
    const auto back = std::chrono::steady_clock::now();
    stopper.join();
    ms = std::chrono::duration<double, std::milli>(back - stopped_at).count();
  }
  INFO("warm load " << full_ms << " ms; last stop after " << delay_ms * 2 << " ms; back " << ms
                    << " ms after the stop");
  REQUIRE(cancelled);
  REQUIRE(ms < 200);
}
