#include "trimkv/core/retention_gates.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <random>

#include "trimkv/core/error.h"
#include "trimkv/core/random_init.h"
#include "trimkv/kernels/linear.h"

namespace trimkv {

namespace {

void check_shape(const at::Tensor& t, std::vector<int64_t> want, int64_t il, const char* leaf) {
  TRIMKV_CHECK(t.defined(), Shape, "retention gate tensor '", gate_tensor_name(il, leaf),
               "' is missing");
  TRIMKV_CHECK(t.sizes().vec() == want, Shape, "retention gate tensor '",
               gate_tensor_name(il, leaf), "' has shape ", t.sizes(), ", expected ",
               at::IntArrayRef(want));
}

at::Tensor lin(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return kernels::linear_auto(x, w, b);
}

}  // namespace

const char* gate_kind_name(GateKind kind) {
  return kind == GateKind::TrimKV ? "trimkv" : "dbtrimkv";
}

GateKind parse_gate_kind(const std::string& name) {
  if (name == "trimkv" || name == "rg") return GateKind::TrimKV;
  if (name == "dbtrimkv" || name == "rg10") return GateKind::DBTrimKV;
  TRIMKV_FAIL(Input, "unknown gate kind '", name, "' (expected dbtrimkv or trimkv)");
}

std::string gate_tensor_name(int64_t il, const std::string& leaf) {
  return "model.layers." + std::to_string(il) + ".self_attn.retention_gate." + leaf;
}

GateConfig GateConfig::for_model(const TextConfig& cfg, GateKind kind) {
  GateConfig g;
  g.kind = kind;
  g.n_layer = cfg.n_layer;
  g.hidden_size = cfg.hidden_size;
  g.n_kv_head = cfg.n_kv_head;
  return g;
}

RetentionGates RetentionGates::init(const GateConfig& cfg, uint64_t seed) {
  TRIMKV_CHECK(cfg.n_layer > 0 && cfg.hidden_size > 0 && cfg.n_kv_head > 0 && cfg.gate_hidden > 0,
               Input, "gate sizes must be positive (layers ", cfg.n_layer, ", hidden size ",
               cfg.hidden_size, ", KV heads ", cfg.n_kv_head, ", gate width ", cfg.gate_hidden, ")");
  std::mt19937_64 rng(seed);
  const int64_t d = cfg.hidden_size, h = cfg.gate_hidden, nkv = cfg.n_kv_head;
  const bool db = cfg.kind == GateKind::DBTrimKV;
  at::Tensor shared_w3, shared_bias;
  std::vector<GateLayer> layers;
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    GateLayer g;
    g.w1 = normal_tensor(rng, {h, d}, cfg.init_std);
    g.b1 = at::zeros({h}, at::kFloat);
    g.w2 = normal_tensor(rng, {db ? h : nkv, h}, cfg.init_std);
    if (db) {
      g.b2 = at::zeros({h}, at::kFloat);
      if (cfg.is_tied() && shared_w3.defined()) {
        g.w3 = shared_w3;
      } else {
        g.w3 = normal_tensor(rng, {nkv, h}, cfg.init_std);
        if (cfg.is_tied()) shared_w3 = g.w3;
      }
    }
    if (cfg.is_tied() && shared_bias.defined()) {
      g.bias = shared_bias;
    } else {
      g.bias = at::full({nkv}, cfg.bias_init, at::kFloat);
      if (cfg.is_tied()) shared_bias = g.bias;
    }
    layers.push_back(std::move(g));
  }
  return RetentionGates(cfg, std::move(layers));
}

RetentionGates::RetentionGates(GateConfig cfg, std::vector<GateLayer> layers)
    : m_cfg(cfg), m_layers(std::move(layers)) {
  TRIMKV_CHECK(static_cast<int64_t>(m_layers.size()) == m_cfg.n_layer, Shape, "retention gates have ",
               m_layers.size(), " layers, the configuration says ", m_cfg.n_layer);
  const int64_t d = m_cfg.hidden_size, h = m_cfg.gate_hidden, nkv = m_cfg.n_kv_head;
  const bool db = m_cfg.kind == GateKind::DBTrimKV;
  for (int64_t il = 0; il < m_cfg.n_layer; ++il) {
    const GateLayer& g = m_layers[il];
    check_shape(g.w1, {h, d}, il, "linear1.weight");
    check_shape(g.b1, {h}, il, "linear1.bias");
    check_shape(g.w2, {db ? h : nkv, h}, il, "linear2.weight");
    if (db) {
      check_shape(g.b2, {h}, il, "linear2.bias");
      check_shape(g.w3, {nkv, h}, il, "linear3.weight");
    }
    check_shape(g.bias, {nkv}, il, "bias");
    if (m_cfg.is_tied()) {
      TRIMKV_ASSERT(g.w3.is_same(m_layers[0].w3) && g.bias.is_same(m_layers[0].bias),
                    "tied gates must share linear3 and bias across layers");
    }
  }
}

at::Tensor RetentionGates::pre_activation(int64_t il, const at::Tensor& x) const {
  TRIMKV_ASSERT(il >= 0 && il < m_cfg.n_layer);
  TRIMKV_CHECK(x.dim() == 2 && x.size(1) == m_cfg.hidden_size, Shape,
               "retention gate input has shape ", x.sizes(), ", expected [n, ", m_cfg.hidden_size, "]");
  const GateLayer& g = m_layers[il];
  at::Tensor a = at::silu(lin(x, g.w1, g.b1));  // [n, h]
  if (m_cfg.kind == GateKind::TrimKV) return lin(a, g.w2, g.bias);
  a = at::silu(lin(a, g.w2, g.b2));              // [n, h]
  return lin(a, g.w3, g.bias);                   // [n, n_kv]
}

at::Tensor RetentionGates::log_beta(int64_t il, const at::Tensor& x_norm) const {
  return at::log_sigmoid(pre_activation(il, x_norm));
}

void RetentionGates::append_layer_tensors(int64_t il, bool with_output,
                                          std::vector<GateParameter>& out) const {
  const GateLayer& g = m_layers[il];
  out.push_back({gate_tensor_name(il, "linear1.weight"), g.w1});
  out.push_back({gate_tensor_name(il, "linear1.bias"), g.b1});
  out.push_back({gate_tensor_name(il, "linear2.weight"), g.w2});
  if (g.b2.defined()) out.push_back({gate_tensor_name(il, "linear2.bias"), g.b2});
  if (!with_output) return;
  if (g.w3.defined()) out.push_back({gate_tensor_name(il, "linear3.weight"), g.w3});
  out.push_back({gate_tensor_name(il, "bias"), g.bias});
}

std::vector<GateParameter> RetentionGates::parameters() const {
  // Each tensor once: a tied output projection and bias come last, under layer 0's names.
  std::vector<GateParameter> out;
  const bool tied = m_cfg.is_tied();
  for (int64_t il = 0; il < m_cfg.n_layer; ++il) append_layer_tensors(il, !tied, out);
  if (tied) {
    out.push_back({gate_tensor_name(0, "linear3.weight"), m_layers[0].w3});
    out.push_back({gate_tensor_name(0, "bias"), m_layers[0].bias});
  }
  return out;
}

int64_t RetentionGates::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.tensor.numel();
  return n;
}

std::vector<GateParameter> RetentionGates::named_tensors() const {
  // Every layer with all its tensors (tied ones repeated), as the reference state dict lists them.
  std::vector<GateParameter> out;
  for (int64_t il = 0; il < m_cfg.n_layer; ++il) append_layer_tensors(il, true, out);
  return out;
}

RetentionGates RetentionGates::to(at::ScalarType dtype) const { return to(at::TensorOptions().dtype(dtype)); }

RetentionGates RetentionGates::to(const at::TensorOptions& options) const {
  std::map<const void*, at::Tensor> copied;  // TensorImpl -> copy, so tying survives
  auto copy = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    auto it = copied.find(t.unsafeGetTensorImpl());
    if (it != copied.end()) return it->second;
    at::Tensor c = t.detach().to(options).clone().contiguous();
    copied[t.unsafeGetTensorImpl()] = c;
    return c;
  };
  std::vector<GateLayer> layers;
  for (const GateLayer& g : m_layers)
    layers.push_back({copy(g.w1), copy(g.b1), copy(g.w2), copy(g.b2), copy(g.w3), copy(g.bias)});
  return RetentionGates(m_cfg, std::move(layers));
}

at::ScalarType RetentionGates::scalar_type() const { return m_layers.at(0).w1.scalar_type(); }

void RetentionGates::set_requires_grad(bool on) {
  for (auto& p : parameters()) p.tensor.requires_grad_(on);
}

}  // namespace trimkv
