// The runtime on the GPU against the CPU (issue 23): the same checkpoint, prompt and eviction
// policy run with --device cpu and --device cuda. The CPU path is the reference (it is itself
// checked against transformers by the oracle suites). Per model and precision:
//  - logits of the prefill and of every teacher-forced decode step within 1e-3 (f32 weights and
//    cache) / 2e-2 relative (bf16: the GPU multiplies bf16-rounded activations, the CPU float32
//    ones), greedy tokens identical (bf16: each GPU choice a near-tie on the CPU);
//  - for every policy at a budget that makes it evict: the trace's events identical entry for
//    entry (what each head kept and evicted, by modality and token), blocks freed identical, the
//    cache's blocks in use identical and its K/V rows after compaction within the tolerance;
//  - the demo model and every vision-language fixture family (towers and decoders on the GPU):
//    the same logits and answers; VisionZip and SnapKV on them;
//  - gate training: six steps on either device give the same gates.
// Built where core has the CUDA runtime (a CUDA LibTorch and nvcc); without a GPU it prints
// "skipped: ..." and exits 77 (ctest: skipped).
#define CATCH_CONFIG_RUNNER
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "trimkv/core/compute_device.h"
#include "trimkv/core/conversation_types.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/eviction_policy.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/retention_gates.h"
#include "trimkv/core/session.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/trace.h"
#include "trimkv/core/train_gates.h"
#include "trimkv/vision/vlm.h"

using namespace trimkv;

namespace {

std::string model_dir(const std::string& name) { return std::string(TRIMKV_TEST_DATA_DIR) + "/models/" + name; }

struct Precision {
  const char* weights;
  const char* kv;
  double tol;     // absolute, or relative to max(1, |x|)
  bool relative;  // bf16: the GPU rounds activations to bf16, the CPU keeps them in float32
};
const Precision kF32{"f32", "f32", 1e-3, false};
const Precision kBF16{"bf16", "bf16", 2e-2, true};

// The largest |a - b| / max(1, |a|) (relative) or |a - b|.
double max_diff(const at::Tensor& a_in, const at::Tensor& b_in, bool relative) {
  const at::Tensor a = a_in.to(at::kCPU, at::kFloat), b = b_in.to(at::kCPU, at::kFloat);
  const at::Tensor d = (a - b).abs();
  return (relative ? d / a.abs().clamp_min(1.0) : d).max().item<double>();
}
double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return max_diff(a, b, false); }

// Gates with varied retention (output bias 0 instead of 18, so scores differ and ties are few).
std::shared_ptr<const RetentionGates> test_gates(const TextModel& m) {
  GateConfig c = GateConfig::for_model(m.config, GateKind::DBTrimKV);
  c.gate_hidden = 32;
  c.bias_init = 0.0;
  c.init_std = 0.3;
  const RetentionGates g = RetentionGates::init(c, 7);
  return std::make_shared<const RetentionGates>(g.to(at::TensorOptions().device(torch_device(m.device))));
}

struct DeviceRun {
  std::vector<at::Tensor> logits;  // prefill, then each forced step (CPU)
  std::vector<int32_t> tokens;     // greedy
  std::shared_ptr<const Trace> trace;
  std::vector<at::Tensor> keys, values;  // per stream, after the greedy run (CPU float32)
  int32_t blocks_used = 0;
  int64_t entries = 0;
};

DeviceRun run_on(const std::string& dir, const char* device, const Precision& p, const EvictionSettings* eviction,
                 const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced, int n_new) {
  ModelLoadOptions o(p.weights, p.kv);
  o.device = device;
  const TextModel m = load_text_model(dir, o);
  REQUIRE(std::string(compute_device_name(m.device)) == device);
  const auto gates = test_gates(m);
  const KvGeometry g = kv_geometry_of(m.config, 16);
  DeviceRun out;
  {  // logits along a fixed token path (the CPU's greedy tokens), full cache
    KvCache cache(g, kv_tensor_options(m));
    TextRunner runner(m, cache, 8);
    runner.set_eviction(nullptr, gates.get());
    out.logits.push_back(runner.prefill(prompt));
    for (int32_t t : forced) out.logits.push_back(runner.step(t));
  }
  KvCache cache(g, kv_tensor_options(m));
  std::unique_ptr<Evictor> evictor;
  if (eviction) evictor = std::make_unique<Evictor>(*eviction, g, static_cast<int>(cache.k_pool().element_size()));
  TextRunner runner(m, cache, 8);  // chunks of 8: compression between prefill chunks too
  runner.set_eviction(evictor.get(), gates.get());
  GenerationParams gp;
  gp.max_new_tokens = n_new;
  gp.stop_at_eos = false;
  const GenerationResult r = generate(runner, prompt, gp);
  out.tokens = r.tokens;
  out.trace = r.trace;
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      out.keys.push_back(cache.keys(il, h));
      out.values.push_back(cache.values(il, h));
    }
  out.blocks_used = cache.n_blocks_used();
  out.entries = cache.bookkeeping().total_entries();
  return out;
}

std::vector<int32_t> test_prompt(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 250 + 3));
  return ids;
}

void compare_runs(const DeviceRun& cpu, const DeviceRun& gpu, const Precision& p) {
  const double tol = p.tol;
  REQUIRE(cpu.logits.size() == gpu.logits.size());
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    INFO("logits " << i << " (0 = prefill)");
    CHECK(max_diff(cpu.logits[i], gpu.logits[i], p.relative) < tol);
  }
  if (!p.relative) {
    CHECK(gpu.tokens == cpu.tokens);
  } else {
    // Along the forced path: the GPU's greedy choice is the CPU's, or a near-tie of it there.
    for (size_t i = 0; i < cpu.logits.size(); ++i) {
      const at::Tensor c = cpu.logits[i].to(at::kFloat);
      const int64_t g = gpu.logits[i].argmax().item<int64_t>();
      const double best = c.max().item<double>();
      INFO("step " << i << ": GPU token " << g);
      CHECK(best - c[g].item<double>() <= tol * std::max(1.0, std::abs(best)));
    }
  }
  CHECK(gpu.entries == cpu.entries);
  CHECK(gpu.blocks_used == cpu.blocks_used);
  REQUIRE(cpu.keys.size() == gpu.keys.size());
  for (size_t s = 0; s < cpu.keys.size(); ++s) {
    INFO("stream " << s);
    CHECK(cpu.keys[s].sizes() == gpu.keys[s].sizes());
    if (cpu.keys[s].sizes() != gpu.keys[s].sizes()) continue;
    if (cpu.keys[s].numel() == 0) continue;
    if (!p.relative || cpu.tokens == gpu.tokens) {  // the same tokens, so the same entries
      CHECK(max_diff(cpu.keys[s], gpu.keys[s], p.relative) < tol);
      CHECK(max_diff(cpu.values[s], gpu.values[s], p.relative) < tol);
    }
  }
  REQUIRE((cpu.trace == nullptr) == (gpu.trace == nullptr));
  if (!cpu.trace) return;
  const auto& a = cpu.trace->events;
  const auto& b = gpu.trace->events;
  REQUIRE(a.size() == b.size());
  for (size_t e = 0; e < a.size(); ++e) {
    INFO("eviction event " << e);
    CHECK(a[e].step == b[e].step);
    CHECK(a[e].entries_before == b[e].entries_before);
    CHECK(a[e].entries_after == b[e].entries_after);
    CHECK(a[e].blocks_freed == b[e].blocks_freed);
    CHECK((a[e].heads == b[e].heads));  // kept / evicted counts and evicted tokens, head by head
  }
}

}  // namespace

TEST_CASE("cuda runtime: logits and greedy tokens match the CPU with the full cache", "[cuda][runtime]") {
  for (const char* name : {"llama_gqa", "llama_tied", "qwen2", "qwen3"})
    for (const Precision& p : {kF32, kBF16}) {
      INFO(name << " weights " << p.weights << " kv " << p.kv);
      const std::vector<int32_t> prompt = test_prompt(40);
      const DeviceRun ref = run_on(model_dir(name), "cpu", p, nullptr, prompt, {}, 12);
      const std::vector<int32_t> forced(ref.tokens.begin(), ref.tokens.begin() + 8);
      const DeviceRun cpu = run_on(model_dir(name), "cpu", p, nullptr, prompt, forced, 12);
      const DeviceRun gpu = run_on(model_dir(name), "cuda", p, nullptr, prompt, forced, 12);
      compare_runs(cpu, gpu, p);
    }
}

TEST_CASE("cuda runtime: every policy evicts the same entries as on the CPU", "[cuda][runtime][eviction]") {
  const std::vector<int32_t> prompt = test_prompt(72);
  for (const std::string& policy : policy_names()) {
    if (policy == "full") continue;
    INFO("policy " << policy);
    EvictionSettings ev;
    ev.policy = policy;
    ev.budget_per_head = 24;
    ev.slack = 2;
    // Windows and layers that fit this 2-layer fixture and budget (test_eviction_runner's).
    if (policy == "snapkv" || policy == "adakv" || policy == "pyramidkv") ev.options = {"window=8"};
    if (policy == "fastv") ev.options = {"layer=0"};
    const DeviceRun ref = run_on(model_dir("llama_gqa"), "cpu", kF32, &ev, prompt, {}, 16);
    const std::vector<int32_t> forced(ref.tokens.begin(), ref.tokens.begin() + 4);
    const DeviceRun cpu = run_on(model_dir("llama_gqa"), "cpu", kF32, &ev, prompt, forced, 16);
    const DeviceRun gpu = run_on(model_dir("llama_gqa"), "cuda", kF32, &ev, prompt, forced, 16);
    compare_runs(cpu, gpu, kF32);
  }
}

TEST_CASE("cuda runtime: the demo model answers a picture as on the CPU", "[cuda][runtime][demo]") {
  std::vector<std::string> answers;
  std::vector<at::Tensor> logits;
  for (const char* device : {"cpu", "cuda"}) {
    ModelLoadOptions o;
    o.device = device;
    const std::shared_ptr<const vision::VlmModel> vlm = vision::load_vlm(default_model_dir(), {}, o);
    Session session(vlm->text, vlm->encoder);
    session.add_user_turn(content_from_prompt("<image>How many shapes are there?",
                                                      {std::string(TRIMKV_TEST_DATA_DIR) + "/vlm/images/a.png"}));
    logits.push_back(session.pending_logits().to(at::kCPU));
    GenerationParams gp;
    gp.max_new_tokens = 8;
    answers.push_back(session.generate(gp).text);
  }
  CHECK(max_abs_diff(logits[0], logits[1]) < 1e-3);
  CHECK(answers[0] == answers[1]);
}

TEST_CASE("cuda runtime: every vision-language family (tower and decoder on the GPU) matches the CPU",
          "[cuda][runtime][vlm]") {
  struct Case {
    const char* model;
    const char* image;
    const char* policy;  // visionzip reduces the image tokens from the tower's own statistics
  };
  for (const Case& c : {Case{"idefics3", "a.png", "full"}, Case{"idefics3", "a.png", "visionzip"},
                        Case{"smolvlm", "a.png", "full"}, Case{"qwen2_vl", "qwen_a.png", "full"},
                        Case{"qwen2_5_vl", "qwen_tall.png", "full"}, Case{"qwen3_vl", "qwen_a.png", "full"},
                        Case{"qwen3_vl", "qwen_a.png", "snapkv"}}) {
    INFO(c.model << " " << c.policy);
    std::vector<at::Tensor> logits;
    std::vector<std::vector<int32_t>> tokens;
    for (const char* device : {"cpu", "cuda"}) {
      ModelLoadOptions o;
      o.device = device;
      const auto vlm = vision::load_vlm(std::string(TRIMKV_TEST_DATA_DIR) + "/vlm/" + c.model, {}, o);
      Session session(vlm->text, vlm->encoder);
      EvictionSettings ev;
      ev.policy = c.policy;
      if (std::string(c.policy) == "snapkv") {
        ev.budget_per_head = 24;
        ev.options = {"window=8"};
      }
      if (std::string(c.policy) == "visionzip") ev.options = {"dominant=4", "contextual=2"};  // 16-token tiles
      session.set_eviction(ev, nullptr);
      session.add_user_turn(content_from_prompt(
          "<image>What is this?", {std::string(TRIMKV_TEST_DATA_DIR) + "/vlm/images/" + c.image}));
      logits.push_back(session.pending_logits().to(at::kCPU));
      GenerationParams gp;
      gp.max_new_tokens = 6;
      gp.stop_at_eos = false;
      tokens.push_back(session.generate(gp).tokens);
    }
    CHECK(max_abs_diff(logits[0], logits[1]) < 1e-3);
    CHECK(tokens[0] == tokens[1]);
  }
}

TEST_CASE("cuda runtime: gate training on the GPU follows the CPU's", "[cuda][runtime][training]") {
  // The same data, init and steps with the teacher, student and gates on either device.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "trimkv-cuda-train";
  std::filesystem::create_directories(dir);
  {
    std::ofstream data(dir / "data.jsonl");
    std::mt19937 rng(2);
    for (int i = 0; i < 6; ++i) {
      data << "{\"ids\": [";
      for (int t = 0; t < 32; ++t) data << (t ? ", " : "") << 3 + static_cast<int>(rng() % 300);
      data << "]}\n";
    }
  }
  std::vector<RetentionGates> trained;
  for (const char* device : {"cpu", "cuda"}) {
    TrainOptions o;
    o.model_dir = model_dir("llama_gqa");
    o.data_path = (dir / "data.jsonl").string();
    o.out_path = (dir / (std::string(device) + ".safetensors")).string();
    o.gate_hidden = 16;
    o.budget = 4;
    o.steps = 6;
    o.batch = 2;
    o.lr = 0.05;
    o.min_lr = 0.005;
    o.warmup = 1;
    o.checkpoint_every = 0;
    o.seed = 3;
    o.bias_init = 2.0;  // gates that forget from the start: gradients well above Adam's epsilon
    o.device = device;
    REQUIRE(train_gates(o).steps_done == 6);
    trained.push_back(load_gates(o.out_path));
  }
  const auto a = trained[0].named_tensors(), b = trained[1].named_tensors();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(max_abs_diff(a[i].tensor, b[i].tensor) < 1e-3);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cuda runtime: --device cuda puts the weights and the cache on the GPU", "[cuda][runtime]") {
  ModelLoadOptions o("q8", "f16");
  o.device = "cuda";
  const TextModel m = load_text_model(model_dir("llama_gqa"), o);
  CHECK(m.decoder->device().is_cuda());
  CHECK(m.decoder->weights().layers.at(0).w_qkv.scalar_type() == at::kBFloat16);  // q8 dequantised on the GPU
  bool noted = false;
  for (const auto& n : m.weight_notes) noted |= n.find("bfloat16 on cuda") != std::string::npos;
  CHECK(noted);
  KvCache cache(kv_geometry_of(m.config, 16), kv_tensor_options(m));
  CHECK(cache.k_pool().is_cuda());
  CHECK(resolve_compute_device("auto") == ComputeDevice::Cuda);
}

int main(int argc, char** argv) {
  std::string why;
  if (!cuda_usable(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
