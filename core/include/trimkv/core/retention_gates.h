// Retention gates (METHOD.md §2): one small MLP per decoder layer that scores every KV entry when
// it is created. Input: the layer's post-RMSNorm hidden state x_t (the tensor fed to q/k/v);
// output: log β_{l,h,t} = logsigmoid(f_l(x_t)) for each KV head h.
//
//   TrimKV   ("rg"):   f_l(x) = W2_l · silu(W1_l x + b1_l) + b_l                     d → H → H_kv
//   DBTrimKV ("rg10"): f_l(x) = W3 · silu(W2_l · silu(W1_l x + b1_l) + b2_l) + b      d → H → H → H_kv
//
// DBTrimKV ties W3 (no bias) and the output bias b [H_kv] across all layers (one scale for the
// global ranking); `tied = false` is the ablation with a per-layer W3/b. TrimKV's output bias is
// always per layer. Init: weights N(0, init_std), inner biases 0, output bias = bias_init (18:
// β ≈ 1, nothing is forgotten at the start).
//
// Tensor names follow the authors' reference state dict (see gate_file.h):
//   model.layers.{l}.self_attn.retention_gate.linear1.{weight,bias}
//   model.layers.{l}.self_attn.retention_gate.linear2.weight (+ .bias for DBTrimKV)
//   model.layers.{l}.self_attn.retention_gate.linear3.weight           (DBTrimKV only)
//   model.layers.{l}.self_attn.retention_gate.bias
// A tied tensor is the same at::Tensor (same storage) in every GateLayer.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trimkv/core/gate_types.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/text_decoder.h"

namespace trimkv {

struct GateConfig {
  GateKind kind = GateKind::DBTrimKV;
  int64_t n_layer = 0;      // decoder layers of the model the gates belong to
  int64_t hidden_size = 0;  // d: the model's hidden size (gate input)
  int64_t n_kv_head = 0;    // H_kv: outputs per gate
  int64_t gate_hidden = 512;
  bool tied = true;         // DBTrimKV: W3 and b shared by all layers (ignored for TrimKV)
  double init_std = 0.02;
  double bias_init = 18.0;
  int64_t train_budget = 0;  // M per head the gates were trained with (0 = not trained / unknown)

  // Sizes from the model; other fields default as METHOD.md says.
  static GateConfig for_model(const TextConfig& cfg, GateKind kind);
  bool is_tied() const { return kind == GateKind::DBTrimKV && tied; }
};

struct GateLayer {
  at::Tensor w1;    // [gate_hidden, d]
  at::Tensor b1;    // [gate_hidden]
  at::Tensor w2;    // TrimKV: [n_kv_head, gate_hidden] (output); DBTrimKV: [gate_hidden, gate_hidden]
  at::Tensor b2;    // DBTrimKV: [gate_hidden]; TrimKV: undefined
  at::Tensor w3;    // DBTrimKV: [n_kv_head, gate_hidden] (shared when tied); TrimKV: undefined
  at::Tensor bias;  // [n_kv_head] output bias (shared when tied)
};

// A named parameter: `name` is the reference name of its first occurrence (layer 0 for a tied one).
struct GateParameter {
  std::string name;
  at::Tensor tensor;
};

class RetentionGates : public EntryScorer {
 public:
  // Fresh gates initialised as METHOD.md §2 says, from a portable generator (the same seed gives
  // the same weights with every LibTorch version). float32.
  static RetentionGates init(const GateConfig& cfg, uint64_t seed);
  // Takes ownership of `layers`; checks every shape against `cfg` and, when cfg.is_tied(), that
  // w3/bias are the same tensor in every layer (Error{Shape} / Error{Internal} otherwise).
  RetentionGates(GateConfig cfg, std::vector<GateLayer> layers);

  // EntryScorer: x_norm [n, d] (any float dtype matching the gates) -> log β [n, n_kv_head] <= 0.
  // Differentiable (gate training); without autograd it uses the decode GEMV kernel.
  at::Tensor log_beta(int64_t il, const at::Tensor& x_norm) const override;
  // f_l(x) before the logsigmoid: [n, n_kv_head].
  at::Tensor pre_activation(int64_t il, const at::Tensor& x_norm) const;

  const GateConfig& config() const { return m_cfg; }
  GateConfig& mutable_config() { return m_cfg; }
  const std::vector<GateLayer>& layers() const { return m_layers; }

  // Every distinct trainable tensor once, in a fixed order (per layer w1, b1, w2, [b2], [w3, bias
  // when untied] ..., then the shared w3, bias when tied).
  std::vector<GateParameter> parameters() const;
  int64_t parameter_count() const;
  // Every reference name with its tensor, tied tensors repeated under each layer (the layout of
  // the reference state dict and of our gates file).
  std::vector<GateParameter> named_tensors() const;

  // Deep copy (tying preserved), converted to `dtype`; the copy does not require grad.
  RetentionGates to(at::ScalarType dtype) const;
  // The same with the options' device and/or dtype (what they leave unset stays).
  RetentionGates to(const at::TensorOptions& options) const;
  RetentionGates clone() const { return to(scalar_type()); }
  at::ScalarType scalar_type() const;
  void set_requires_grad(bool on);

 private:
  // Layer il's tensors under their reference names; the output projection and bias only when
  // `with_output`.
  void append_layer_tensors(int64_t il, bool with_output, std::vector<GateParameter>& out) const;
  GateConfig m_cfg;
  std::vector<GateLayer> m_layers;
};

// Reference name of a gate tensor: "model.layers.{il}.self_attn.retention_gate." + leaf
// (leaf = "linear1.weight", "bias", ...).
std::string gate_tensor_name(int64_t il, const std::string& leaf);

}  // namespace trimkv
