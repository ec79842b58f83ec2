// The fused decode step (core/src/model/decode_step.cpp): one token through the decoder on raw
// rows must compute what the ATen path computes, for every text family (biases, q/k norms, GQA,
// tied heads), every KV dtype, weights in a low-precision format, a retention-gate scorer and an
// attention observer that asks for the per-entry attention sums.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/attention_observer.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;

namespace {

const std::vector<int32_t> kTokens = {1, 17, 42, 99, 3, 250, 8, 64, 11, 5, 77, 200, 5, 9, 100, 31, 7, 64, 2, 13};

// Restores the fused path when a test ends.
struct FusedDecode {
  explicit FusedDecode(bool on) { TextDecoder::set_fused_decode(on); }
  ~FusedDecode() { TextDecoder::set_fused_decode(true); }
};

// A retention-gate stand-in that depends on every value of the normed row it is given.
struct RowScorer : EntryScorer {
  int64_t n_kv = 0;
  at::Tensor log_beta(int64_t il, const at::Tensor& x_norm) const override {
    const at::Tensor s = x_norm.sum(1, true) * (0.01 * static_cast<double>(il + 1));
    return -at::softplus(s.expand({x_norm.size(0), n_kv}) + at::arange(n_kv, at::kFloat) * 0.1).contiguous();
  }
};

// Keeps every layer's queries and attention sums.
struct Recorder : AttentionObserver {
  std::vector<at::Tensor> q, sums;
  bool observes() const override { return true; }
  bool wants_attention_sum() const override { return true; }
  void on_layer(const LayerObservation& o) override {
    q.push_back(o.q->clone());
    sums.push_back(o.attn_sum->clone());
  }
};

struct Run {
  std::vector<at::Tensor> logits;   // per decode step
  std::vector<at::Tensor> q, sums;  // observer records, every step and layer
  std::vector<at::Tensor> keys;     // the cache's K after the run, every layer and head
};

// Prefill 12 tokens (ATen path, chunks of 8), then 8 one-token steps through forward_cached.
Run run(const TextModel& m, kernels::KvDtype kv, bool fused, bool score, bool observe) {
  at::TensorOptions opts = kv == kernels::KvDtype::F32 ? at::TensorOptions().dtype(at::kFloat)
                                                       : at::TensorOptions().dtype(at::kHalf);
  KvCache cache(kv_geometry_of(m.config, 4), opts);
  RowScorer scorer;
  scorer.n_kv = m.config.n_kv_head;
  TextRunner runner(m, cache, 8);
  (void)runner.prefill(std::vector<int32_t>(kTokens.begin(), kTokens.begin() + 12));
  Run r;
  Recorder rec;
  const FusedDecode mode(fused);
  const TextDecoder& dec = *m.decoder;
  for (int32_t i = 12; i < static_cast<int32_t>(kTokens.size()); ++i) {
    TokenInfo info;
    info.token_index = i;
    info.rope_position = i;
    cache.register_tokens({info});
    const at::Tensor x = dec.embed(at::tensor(std::vector<int64_t>{kTokens[static_cast<size_t>(i)]}, at::kLong));
    const at::Tensor h = dec.forward_cached(x, at::tensor(std::vector<int64_t>{i}, at::kLong), {i}, cache,
                                            score ? &scorer : nullptr, observe ? &rec : nullptr);
    r.logits.push_back(dec.logits(h).view({-1}));
  }
  r.q = rec.q;
  r.sums = rec.sums;
  for (int il = 0; il < m.config.n_layer; ++il)
    for (int hh = 0; hh < m.config.n_kv_head; ++hh) r.keys.push_back(cache.keys(il, hh));
  return r;
}

double worst(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].sizes() == b[i].sizes());
    w = std::max(w, (a[i] - b[i]).abs().max().item<double>());
  }
  return w;
}

}  // namespace

TEST_CASE("The fused decode step computes what the ATen path computes", "[decode-step]") {
  for (const char* name : {"llama_gqa", "llama_tied", "qwen2", "qwen3"}) {
    for (const char* weights : {"", "q8"}) {
      const TextModel m = load_text_model(test::model_dir(name), {weights});
      REQUIRE(m.decoder);
      for (kernels::KvDtype kv : {kernels::KvDtype::F32, kernels::KvDtype::F16}) {
        for (int variant = 0; variant < 2; ++variant) {
          const bool extras = variant == 1;  // with the scorer and the observer
          CAPTURE(name, weights, kernels::kv_dtype_name(kv), extras);
          const Run aten = run(m, kv, false, extras, extras);
          const Run fused = run(m, kv, true, extras, extras);
          // Only the norms' float sums round in another order: float32 noise, which a float16
          // cache can turn into one f16 rounding step of a K/V value (these random fixtures
          // amplify such steps).
          const double tol = kv == kernels::KvDtype::F32 ? 1e-5 : 1e-4;
          CHECK(worst(aten.logits, fused.logits) < 10 * tol);
          CHECK(worst(aten.keys, fused.keys) < (kv == kernels::KvDtype::F32 ? 1e-5 : 2e-3));
          if (extras) {
            REQUIRE(fused.q.size() == static_cast<size_t>(8 * m.config.n_layer));
            CHECK(worst(aten.q, fused.q) < tol);
            CHECK(worst(aten.sums, fused.sums) < tol);
          }
        }
      }
    }
  }
}

TEST_CASE("The fused decode step is what one-token steps run by default", "[decode-step]") {
  REQUIRE(TextDecoder::fused_decode());
  const TextModel m = load_text_model(test::model_dir("qwen3"));
  const Run a = run(m, kernels::KvDtype::F32, true, false, false);
  const Run b = run(m, kernels::KvDtype::F32, false, false, false);
  // Not bit-identical (the norms' sums), so the default path is not the ATen one.
  CHECK(worst(a.logits, b.logits) > 0);
  REQUIRE(TextDecoder::fused_decode());
}
