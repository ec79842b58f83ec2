// bench_cuda_e2e: end-to-end decode speed on the GPU (issue 23's device table, last rows). A text
// decoder of Qwen3-VL-8B's shape (36 layers, hidden 4096, 32 query / 8 KV heads of 128, MLP
// 12288, vocabulary 151936; random bf16 weights, Qwen3's q/k norms) decodes 64 tokens after a
// 32K-token context (random K/V put in the cache: decode speed does not depend on how the context
// got there):
//  - trimkv, full cache (paged, bf16 K/V, kernels/cuda attention);
//  - trimkv, dbtrimkv at 4K entries per head (random gates and retention; the context compressed
//    once, then the policy runs whenever the cache exceeds budget + slack);
//  - the same weights with a dense preallocated bf16 cache and LibTorch's
//    scaled_dot_product_attention (a static-cache baseline: what transformers does at best).
// Output: a markdown table of tokens per second (tests/device/run.sh; transformers itself by
// bench_transformers.py beside it when the machine has transformers).
#include <ATen/ATen.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "trimkv/core/compute_device.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/layers.h"
#include "trimkv/core/retention_gates.h"
#include "trimkv/core/text_family.h"
#include "trimkv/core/text_model.h"

#define SDPA_WITH_GQA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))

using namespace trimkv;

namespace {

constexpr int64_t kContext = 32768, kSteps = 64, kBudget = 4096;

TextConfig qwen3_vl_8b_text() {
  TextConfig c;
  c.model_type = "qwen3";
  c.architecture = "Qwen3-VL-8B-shaped (random)";
  c.vocab_size = 151936;
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  c.n_layer = 36;
  c.n_head = 32;
  c.n_kv_head = 8;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 262144;
  c.rope.theta = 5e6;
  return c;
}

// Random bf16 matrices (std 0.02), float32 norms of 1, on the GPU.
TextModel random_model(const TextConfig& c) {
  const at::TensorOptions mat = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::TensorOptions vec = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  auto w = [&](int64_t rows, int64_t cols) { return (at::randn({rows, cols}, mat) * 0.02).contiguous(); };
  const int64_t d = c.hidden_size, hd = c.head_dim;
  DecoderWeights dw;
  dw.embed = w(c.vocab_size, d);
  dw.lm_head = w(c.vocab_size, d);
  dw.final_norm = at::ones({d}, vec);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    DecoderLayerWeights l;
    l.attn_norm = at::ones({d}, vec);
    l.w_qkv = w((c.n_head + 2 * c.n_kv_head) * hd, d);
    l.w_o = w(d, c.n_head * hd);
    l.q_norm = at::ones({hd}, vec);
    l.k_norm = at::ones({hd}, vec);
    l.mlp_norm = at::ones({d}, vec);
    l.w_gate_up = w(2 * c.intermediate_size, d);
    l.w_down = w(d, c.intermediate_size);
    dw.layers.push_back(l);
  }
  TextModel m;
  m.dir = "(random Qwen3-VL-8B-shaped decoder)";
  m.config = c;
  m.family = &find_text_family(c.model_type, m.dir);
  m.decoder = std::make_shared<TextDecoder>(c, *m.family, std::move(dw));
  m.weight_format = kernels::WeightFormat::BF16;
  m.kv_dtype = kernels::KvDtype::BF16;
  m.device = ComputeDevice::Cuda;
  return m;
}

// The context: kContext text tokens with random K/V rows and retention in every stream.
void fill_context(KvCache& cache, std::mt19937& rng) {
  const KvGeometry& g = cache.geometry();
  std::vector<TokenInfo> tokens(kContext);
  std::vector<int32_t> idx(kContext);
  for (int32_t i = 0; i < kContext; ++i) {
    tokens[i].token_index = tokens[i].rope_position = idx[i] = i;
  }
  cache.register_tokens(tokens);
  std::uniform_real_distribution<float> retention(-0.05f, 0.0f);
  std::vector<float> log_beta(static_cast<size_t>(kContext * g.n_kv_head));
  const at::TensorOptions o = cache.k_pool().options();
  for (int il = 0; il < g.n_layer; ++il) {
    for (float& x : log_beta) x = retention(rng);
    cache.append(il, at::randn({kContext, g.n_kv_head, g.head_dim}, o), at::randn({kContext, g.n_kv_head, g.head_dim}, o),
                 idx, log_beta);
  }
}

// Seconds per token over kSteps greedy steps (after 4 unmeasured ones); `step` returns CPU logits.
template <typename Step>
double seconds_per_token(Step&& step) {
  int32_t next = 1;
  for (int i = 0; i < 4; ++i) next = static_cast<int32_t>(step(next).argmax().template item<int64_t>());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) next = static_cast<int32_t>(step(next).argmax().template item<int64_t>());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSteps;
}

double trimkv_tokens_per_s(const TextModel& m, const RetentionGates& gates, const char* policy, int64_t* kept) {
  std::mt19937 rng(5);
  const KvGeometry g = kv_geometry_of(m.config, 16);
  KvCache cache(g, kv_tensor_options(m));
  fill_context(cache, rng);
  std::unique_ptr<Evictor> evictor;
  if (std::string(policy) != "full") {
    EvictionSettings s;
    s.policy = policy;
    s.budget_per_head = kBudget;
    s.record_evicted_tokens = false;
    evictor = std::make_unique<Evictor>(s, g, 2);
    evictor->compress(cache, "prefill");
  }
  *kept = cache.bookkeeping().total_entries() / g.n_streams();
  TextRunner runner(m, cache, 256);
  runner.set_eviction(evictor.get(), evictor ? &gates : nullptr);  // the full cache needs no gates
  return 1.0 / seconds_per_token([&](int32_t t) { return runner.step(t); });
}

// The same decoder over a dense preallocated cache [n_kv, capacity, hd] per layer with SDPA.
double dense_tokens_per_s(const TextModel& m) {
  const TextConfig& c = m.config;
  const at::TensorOptions o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const int64_t capacity = kContext + kSteps + 8;
  std::vector<at::Tensor> K, V;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    K.push_back(at::randn({1, c.n_kv_head, capacity, c.head_dim}, o));
    V.push_back(at::randn({1, c.n_kv_head, capacity, c.head_dim}, o));
  }
  int64_t pos = kContext;
  const TextDecoder& dec = *m.decoder;
  return 1.0 / seconds_per_token([&](int32_t t) {
    const at::Tensor x = dec.embed(at::tensor({static_cast<int64_t>(t)}, at::kLong));
    const at::Tensor positions = at::tensor({pos}, at::kLong);
    const at::Tensor h = dec.run_layers(x, positions, [&](int64_t il, const at::Tensor&, const at::Tensor& q,
                                                          const at::Tensor& k, const at::Tensor& v) {
      // q [1, n_head, hd], k/v [1, n_kv, hd] -> the cache's row pos, attend over [0, pos].
      K[il].select(2, pos).copy_(k);  // [1, n_kv, hd] both
      V[il].select(2, pos).copy_(v);
      const at::Tensor keys = K[il].narrow(2, 0, pos + 1), values = V[il].narrow(2, 0, pos + 1);
      const at::Tensor qh = q.to(at::kBFloat16).transpose(0, 1).unsqueeze(0);  // [1, n_head, 1, hd]
#if SDPA_WITH_GQA
      const at::Tensor a = at::scaled_dot_product_attention(qh, keys, values, {}, 0.0, false, {}, true);
#else
      const int64_t rep = c.n_head / c.n_kv_head;
      const at::Tensor a = at::scaled_dot_product_attention(qh, keys.repeat_interleave(rep, 1),
                                                            values.repeat_interleave(rep, 1));
#endif
      return a.squeeze(0).transpose(0, 1).reshape({1, c.n_head * c.head_dim}).to(at::kFloat);
    });
    ++pos;
    return dec.logits(h).view({-1}).to(at::kCPU);
  });
}

}  // namespace

int main() {
  std::string why;
  if (!cuda_usable(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  const TextModel m = random_model(qwen3_vl_8b_text());
  GateConfig gc = GateConfig::for_model(m.config, GateKind::DBTrimKV);
  const RetentionGates gates = RetentionGates::init(gc, 3).to(at::TensorOptions().device(at::kCUDA));
  int64_t kept_full = 0, kept_db = 0;
  const double full = trimkv_tokens_per_s(m, gates, "full", &kept_full);
  const double db = trimkv_tokens_per_s(m, gates, "dbtrimkv", &kept_db);
  const double dense = dense_tokens_per_s(m);
  std::printf("\n| decode, Qwen3-VL-8B-shaped bf16, %lld-token context, %lld steps | entries per head | tok/s | vs dense SDPA |\n",
              static_cast<long long>(kContext), static_cast<long long>(kSteps));
  std::printf("|---|---|---|---|\n");
  std::printf("| trimkv full cache | %lld | %.1f | %.2fx |\n", static_cast<long long>(kept_full), full, full / dense);
  std::printf("| trimkv dbtrimkv, budget %lld per head | %lld | %.1f | %.2fx |\n", static_cast<long long>(kBudget),
              static_cast<long long>(kept_db), db, db / dense);
  std::printf("| dense cache + SDPA (LibTorch %s) | %lld | %.1f | 1.00x |\n", TORCH_VERSION,
              static_cast<long long>(kContext), dense);
  return 0;
}
