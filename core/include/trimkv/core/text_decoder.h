// The text decoder shared by every family: weights bound from a TextFamily table, and two paths
// over the same weights:
//  - forward_dense: full causal attention over the given sequence, plain ATen ops, usable under
//    autograd (gate training, reference);
//  - forward_cached: appends the new tokens' K/V to a paged KvCache and attends over it
//    (inference: chunked prefill onto an existing cache, decode).
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/layers.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/text_family.h"
#include "trimkv/kernels/weight_format.h"

namespace trimkv {

class AttentionObserver;
class KvCache;
class WeightStore;

struct DecoderLayerWeights {
  at::Tensor attn_norm;  // [d]
  at::Tensor w_qkv;      // [(n_head + 2*n_kv_head) * head_dim, d]  (q, k, v projections fused)
  at::Tensor b_qkv;      // [(n_head + 2*n_kv_head) * head_dim] or undefined
  at::Tensor w_o;        // [d, n_head * head_dim]
  at::Tensor b_o;        // [d] or undefined
  at::Tensor q_norm;     // [head_dim] or undefined (Qwen3)
  at::Tensor k_norm;     // [head_dim] or undefined (Qwen3)
  at::Tensor mlp_norm;   // [d]
  at::Tensor w_gate_up;  // [2 * ffn, d]  (gate and up projections fused)
  at::Tensor w_down;     // [d, ffn]
};

struct DecoderWeights {
  at::Tensor embed;       // [vocab, d]
  std::vector<DecoderLayerWeights> layers;
  at::Tensor final_norm;  // [d]
  at::Tensor lm_head;     // [vocab, d] (the embedding itself when tied)
};

// Scores new KV entries when they are created (the retention gate's hook). Given the layer's
// post-norm hidden state of the new tokens, returns log β for each KV head.
class EntryScorer {
 public:
  virtual ~EntryScorer() = default;
  // x_norm: [n, d] -> [n, n_kv_head], values <= 0.
  virtual at::Tensor log_beta(int64_t il, const at::Tensor& x_norm) const = 0;
};

// Where a checkpoint's text-decoder tensors live: "model." (plain LLMs, legacy VLM saves),
// "model.language_model." (transformers v5 VLMs), "language_model.model.", "model.text_model."
// (Idefics3), "". Error{Config} naming the folder when none holds a token embedding.
std::string text_weight_root(const WeightStore& ws);

// Features added to some positions' hidden states after the first decoder layers (Qwen3-VL's
// deepstack: the vision tower's intermediate features on the image positions, prefill only).
struct LayerInjection {
  at::Tensor rows;               // [m] int64: positions (rows of the forward's input) they go to
  std::vector<at::Tensor> adds;  // adds[j]: [m, d], added to those rows after layer j's output
  bool empty() const { return adds.empty() || !rows.defined() || rows.numel() == 0; }
};

class TextDecoder {
 public:
  // Binds every tensor of `family` from `weights` (legacy and new name schemes accepted), checking
  // shapes against `cfg`. Errors name the tensor and file.
  // The matrices (embedding, q/k/v/o, gate/up/down, lm_head) are held in `format`
  // (kernels/weight_format.h), converted one layer at a time; a matrix the format cannot hold
  // (quantised formats need widths divisible by 32) is held in bfloat16 and named in `notes`.
  // With `keep_stored`, a matrix stored in a held format (a GGUF file's q8_0 / q4_0 / f16 ...)
  // stays in it, blocks as they are, and `format` is for the others (e.g. Q4_1).
  static std::shared_ptr<TextDecoder> load(const TextConfig& cfg, const TextFamily& family,
                                           const WeightStore& weights,
                                           kernels::WeightFormat format = kernels::WeightFormat::F32,
                                           std::vector<std::string>* notes = nullptr, bool keep_stored = false);
  TextDecoder(TextConfig cfg, const TextFamily& family, DecoderWeights weights);

  const TextConfig& config() const { return m_cfg; }
  const TextFamily& family() const { return *m_family; }
  const DecoderWeights& weights() const { return m_w; }
  int64_t parameter_count() const;
  // Where the weights are (every weight is on one device).
  at::Device device() const;
  // The same decoder with its weights on `device` (compute_device.h): float32, bfloat16 and
  // float16 matrices as they are, block-quantised ones (q8_0, q4_0...) as bfloat16 on a GPU (said
  // in `notes`). The cached path then runs there, with a KvCache on the same device.
  std::shared_ptr<TextDecoder> on_device(at::Device device, std::vector<std::string>* notes = nullptr) const;
  int64_t weight_bytes() const;  // bytes held in memory by every weight (the stored formats)

  at::Tensor embed(const at::Tensor& ids /* [n] int64 */) const;  // -> [n, d]

  // Dense path. x: [n, d] input embeddings, positions: [n] int64 rope positions.
  // Returns the final-normed hidden states [n, d]. `logit_bias` per layer (optional): [n_kv, n, n]
  // added to the attention logits.
  // `scorer` (optional): retention-gated attention (METHOD.md §3): each layer's log β [n, n_kv]
  // is computed from that layer's post-norm hidden state and (t - i)·log β_i is added to the
  // logits (t, i = sequential indices 0..n-1), on top of `logit_bias`. Each layer's log β is
  // appended to `log_beta_out` when given. Differentiable through the gates.
  // `on_qk` (optional): called per layer with its normed input h [n, d], rotated queries
  // [n, n_head, hd] and keys [n, n_kv_head, hd] (differentiable), e.g. to supervise where a head
  // attends in training, or what a position knows before the layer.
  using QkObserver =
      std::function<void(int64_t layer, const at::Tensor& h, const at::Tensor& q, const at::Tensor& k)>;
  at::Tensor forward_dense(const at::Tensor& x, const at::Tensor& positions,
                           const std::vector<at::Tensor>& logit_bias = {},
                           const EntryScorer* scorer = nullptr,
                           std::vector<at::Tensor>* log_beta_out = nullptr,
                           const QkObserver& on_qk = {}, const LayerInjection& inject = {}) const;

  // Cached path: x [n, d] (any device: taken to the weights'), positions [n] (rope; computed on
  // the CPU), token_indices [n] (sequential stream indices, already registered in the cache, which
  // must be on the weights' device). Appends each layer's K/V (and log β from `scorer`, if any)
  // then attends over the cache. Returns final-normed hidden states [n, d].
  // `observer` (optional): receives each layer's queries and, when it asks, the per-entry
  // attention sums (eviction policies that need attention statistics; attention_observer.h).
  // `inject` (optional): features added after the first layers (LayerInjection).
  // `cancel` (optional): polled before every layer but the first: Error{Cancelled}, leaving the
  // cache torn (the tokens registered, only the layers before appended): it must be cleared.
  at::Tensor forward_cached(const at::Tensor& x, const at::Tensor& positions,
                            const std::vector<int32_t>& token_indices, KvCache& cache,
                            const EntryScorer* scorer = nullptr,
                            AttentionObserver* observer = nullptr, const LayerInjection& inject = {},
                            const std::atomic<bool>* cancel = nullptr) const;

  at::Tensor logits(const at::Tensor& hidden /* [n, d] */) const;  // -> [n, vocab]

  // The layer stack shared by both paths with the caller's attention, the only difference
  // between them: (il, x_norm [n, d], q [n, n_head, hd], k, v [n, n_kv_head, hd]) ->
  // [n, n_head * hd]. x [n, d] on the weights' device; positions as forward_cached's. For
  // baselines (e.g. a dense cache in a benchmark) and the two paths themselves.
  using AttendFn = std::function<at::Tensor(int64_t, const at::Tensor&, const at::Tensor&,
                                            const at::Tensor&, const at::Tensor&)>;
  at::Tensor run_layers(const at::Tensor& x, const at::Tensor& positions, const AttendFn& attend,
                        const LayerInjection& inject = {}) const;

  // Whether forward_cached runs one-token CPU steps through decode_one (default: yes). Off, every
  // step takes the ATen path; for tests and benchmarks that compare the two.
  static void set_fused_decode(bool on);
  static bool fused_decode();

 private:
  // forward_cached for one token on the CPU without an ATen operator between the kernels
  // (decode_step.cpp): the same steps on the model's raw rows, sums rounded in another order.
  at::Tensor decode_one(const at::Tensor& x, const at::Tensor& positions, const std::vector<int32_t>& token_indices,
                        KvCache& cache, const EntryScorer* scorer, AttentionObserver* observer) const;
  // Whether every vector decode_one reads is float32 and contiguous (set at construction).
  bool rows_are_raw() const;

  // q, k, v of one layer, normed (Qwen3) and rotated. x_norm: [n, d].
  void project_qkv(const DecoderLayerWeights& lw, const at::Tensor& x_norm, const RopeTables& rope,
                   at::Tensor& q, at::Tensor& k, at::Tensor& v) const;

  TextConfig m_cfg;
  const TextFamily* m_family;
  DecoderWeights m_w;
  bool m_raw_rows = false;  // rows_are_raw(), computed once
  at::Tensor m_inv_freq;    // the rope's inverse frequencies [head_dim / 2], computed once
};

}  // namespace trimkv
