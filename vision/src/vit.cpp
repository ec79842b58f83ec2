#include "trimkv/vision/vit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "trimkv/core/error.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/kernels/linear.h"

namespace trimkv::vision {

namespace {

std::vector<int64_t> shape_of(VitTensor role, const VitConfig& c) {
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  switch (role) {
    case VitTensor::q_w:
    case VitTensor::k_w:
    case VitTensor::v_w:
    case VitTensor::o_w: return {d, d};
    case VitTensor::fc1_w: return {f, d};
    case VitTensor::fc1_b: return {f};
    case VitTensor::fc2_w: return {d, f};
    default: return {d};
  }
}

}  // namespace

at::Tensor vit_activation(const at::Tensor& x, const std::string& act) {
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return at::gelu(x, "tanh");
  if (act == "gelu") return at::gelu(x);
  if (act == "quick_gelu") return x * at::sigmoid(1.702 * x);
  if (act == "silu") return at::silu(x);
  TRIMKV_FAIL(Unsupported, "vision activation '", act, "'");
}


at::Tensor hold_tower_matrix(at::Tensor w, kernels::WeightFormat format) {
  if (format == kernels::WeightFormat::F32 || !w.defined()) return w;
  return kernels::pack_weight(w, kernels::format_fits(format, w.size(1)) ? format : kernels::WeightFormat::BF16);
}

VitLayerWeights vit_layer_on_device(const VitLayerWeights& w, const at::Device& device, bool* converted) {
  auto on = [&](const at::Tensor& t) { return kernels::weight_on_device(t, device, converted); };
  return {on(w.ln1_w), on(w.ln1_b), on(w.w_qkv), on(w.b_qkv), on(w.w_o),   on(w.b_o),
          on(w.ln2_w), on(w.ln2_b), on(w.w_fc1), on(w.b_fc1), on(w.w_fc2), on(w.b_fc2)};
}

at::Tensor tower_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return kernels::linear_auto(x, w, b, kernels::Activations::Bf16);
}

void check_vit_activation(const std::string& act, const std::string& where) {
  TRIMKV_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu" || act == "quick_gelu" ||
                   act == "silu",
               Unsupported, where, ": vision hidden_act '", act,
               "' is not supported (gelu_pytorch_tanh, gelu_new, gelu, quick_gelu, silu)");
}

std::vector<VitLayerWeights> load_vit_layers(const WeightStore& ws, const std::string& layers_prefix,
                                             const std::vector<VitTensorSpec>& table, const VitConfig& cfg,
                                             kernels::WeightFormat format) {
  std::vector<VitLayerWeights> layers;
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    const std::string prefix = layers_prefix + std::to_string(il) + ".";
    std::map<VitTensor, at::Tensor> t;
    for (const auto& spec : table) t[spec.role] = ws.load({prefix + spec.name}, shape_of(spec.role, cfg));
    VitLayerWeights w;
    w.ln1_w = t[VitTensor::ln1_w];
    w.ln1_b = t[VitTensor::ln1_b];
    w.w_qkv = at::cat({t[VitTensor::q_w], t[VitTensor::k_w], t[VitTensor::v_w]}, 0).contiguous();
    w.b_qkv = at::cat({t[VitTensor::q_b], t[VitTensor::k_b], t[VitTensor::v_b]}, 0).contiguous();
    w.w_o = t[VitTensor::o_w];
    w.b_o = t[VitTensor::o_b];
    w.ln2_w = t[VitTensor::ln2_w];
    w.ln2_b = t[VitTensor::ln2_b];
    w.w_fc1 = t[VitTensor::fc1_w];
    w.b_fc1 = t[VitTensor::fc1_b];
    w.w_fc2 = t[VitTensor::fc2_w];
    w.b_fc2 = t[VitTensor::fc2_b];
    for (at::Tensor* m : {&w.w_qkv, &w.w_o, &w.w_fc1, &w.w_fc2}) *m = hold_tower_matrix(*m, format);
    layers.push_back(std::move(w));
  }
  return layers;
}

at::Tensor vit_block_batched(const at::Tensor& x, const VitLayerWeights& w, const VitConfig& cfg) {
  const int64_t b = x.size(0), n = x.size(1), d = cfg.hidden_size, nh = cfg.n_head, hd = cfg.head_dim();
  at::Tensor h = at::layer_norm(x, {d}, w.ln1_w, w.ln1_b, cfg.layer_norm_eps);
  at::Tensor qkv = at::linear(h, w.w_qkv, w.b_qkv).view({b, n, 3, nh, hd}).permute({2, 0, 3, 1, 4});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor probs = at::softmax(at::matmul(qkv[0], qkv[1].transpose(-1, -2)) * scale, -1);  // [b, nh, n, n]
  at::Tensor attn = at::matmul(probs, qkv[2]).permute({0, 2, 1, 3}).reshape({b, n, d});
  at::Tensor y = x + at::linear(attn, w.w_o, w.b_o);
  at::Tensor m = at::layer_norm(y, {d}, w.ln2_w, w.ln2_b, cfg.layer_norm_eps);
  return y + at::linear(vit_activation(at::linear(m, w.w_fc1, w.b_fc1), cfg.hidden_act), w.w_fc2, w.b_fc2);
}

at::Tensor bidirectional_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                   VitAttentionStats* stats, const std::atomic<bool>* cancel) {
  const int64_t n = q.size(0), nh = q.size(1), hd = q.size(2);
  // Per head, both products through linear_gemm (oneDNN when built with it): the BLAS behind
  // at::matmul may be a generic build several times slower (README "Benchmarks").
  at::Tensor out = at::empty({n, nh * hd}, q.options());
  at::Tensor received, keys;
  if (stats) {
    received = at::zeros({n}, q.options().dtype(at::kFloat));
    keys = at::zeros({n, hd}, q.options().dtype(at::kFloat));
  }
  // x yᵀ: linear_gemm on the CPU, LibTorch's matmul elsewhere (a tower on the GPU).
  const auto gemm = [](const at::Tensor& x, const at::Tensor& y) {
    return x.device().is_cpu() ? kernels::linear_gemm(x, y) : at::matmul(x, y.t());
  };
  for (int64_t h = 0; h < nh; ++h) {
    const at::Tensor kh = k.select(1, h).contiguous();                               // [n, hd]
    const at::Tensor vt = v.select(1, h).t().contiguous();                           // [hd, n]
    const at::Tensor qh = q.select(1, h);
    for (int64_t r = 0; r < n; r += kAttentionRowBlock) {
      if (cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "image encoding cancelled");
      const int64_t rows = std::min(kAttentionRowBlock, n - r);
      const at::Tensor probs = at::softmax(gemm(qh.narrow(0, r, rows), kh) * scale, -1);  // [rows, n]
      out.narrow(0, r, rows).narrow(1, h * hd, hd).copy_(gemm(probs, vt));              // [rows, hd]
      if (stats) received.add_(probs.sum(0).to(at::kFloat));  // column sums: attention received
    }
    if (stats) keys.add_(kh.to(at::kFloat));
  }
  if (stats) {
    stats->received = received / static_cast<double>(nh * n);
    stats->keys = keys / static_cast<double>(nh);
  }
  return out;
}

at::Tensor vit_block(const at::Tensor& x, const VitLayerWeights& w, const VitConfig& cfg,
                     VitAttentionStats* stats) {
  const int64_t n = x.size(0), d = cfg.hidden_size, nh = cfg.n_head, hd = cfg.head_dim();
  at::Tensor h = at::layer_norm(x, {d}, w.ln1_w, w.ln1_b, cfg.layer_norm_eps);
  const at::Tensor qkv = tower_linear(h, w.w_qkv, w.b_qkv).view({n, 3, nh, hd});  // [n, 3, nh, hd]
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor attn = bidirectional_attention(qkv.select(1, 0), qkv.select(1, 1), qkv.select(1, 2), scale, stats);
  at::Tensor y = x + tower_linear(attn, w.w_o, w.b_o);
  at::Tensor m = at::layer_norm(y, {d}, w.ln2_w, w.ln2_b, cfg.layer_norm_eps);
  m = tower_linear(vit_activation(tower_linear(m, w.w_fc1, w.b_fc1), cfg.hidden_act),
                           w.w_fc2, w.b_fc2);
  return y + m;
}

at::Tensor patch_embed(const at::Tensor& pixels, const at::Tensor& w_flat, const at::Tensor& b,
                       int64_t p) {
  const int64_t c = pixels.size(0), s = pixels.size(1), g = s / p;
  TRIMKV_ASSERT(pixels.size(2) == s && s % p == 0);
  // [C, g, p, g, p] -> [g, g, C, p, p]: one row per patch, in the conv weight's (c, kh, kw) order.
  at::Tensor patches = pixels.reshape({c, g, p, g, p}).permute({1, 3, 0, 2, 4}).reshape({g * g, c * p * p});
  return tower_linear(patches.contiguous(), w_flat, b);
}

at::Tensor patch_embed_batched(const at::Tensor& pixels, const at::Tensor& w_flat, const at::Tensor& b,
                               int64_t p) {
  const int64_t n = pixels.size(0), c = pixels.size(1), s = pixels.size(2), g = s / p;
  TRIMKV_ASSERT(pixels.size(3) == s && s % p == 0);
  at::Tensor patches = pixels.reshape({n, c, g, p, g, p}).permute({0, 2, 4, 1, 3, 5}).reshape({n, g * g, c * p * p});
  return at::linear(patches, w_flat, b);
}

at::Tensor bucketed_position_ids(int64_t n_h, int64_t n_w, int64_t max_h, int64_t max_w, int64_t side) {
  // Float32 arithmetic exactly as Idefics3VisionEmbeddings.forward (torch.arange in double then
  // cast; 1.0 / count and the products in float32; torch.bucketize(right=True)).
  std::vector<float> boundaries;
  const double step = 1.0 / static_cast<double>(side);
  const int64_t n_bound = static_cast<int64_t>(std::ceil((1.0 - step) / step));
  for (int64_t i = 0; i < n_bound; ++i) boundaries.push_back(static_cast<float>(step + i * step));
  auto bucket = [&](int64_t idx, int64_t count) {
    const float frac = std::min(static_cast<float>(idx) * (1.0f / static_cast<float>(count)),
                                static_cast<float>(1.0 - 1e-6));
    int64_t b = 0;
    while (b < static_cast<int64_t>(boundaries.size()) && boundaries[b] <= frac) ++b;
    return b;
  };
  std::vector<int64_t> ids(static_cast<size_t>(max_h * max_w), 0);
  for (int64_t r = 0; r < n_h; ++r)
    for (int64_t c = 0; c < n_w; ++c) ids[r * max_w + c] = bucket(r, n_h) * side + bucket(c, n_w);
  return at::tensor(ids, at::kLong);
}

at::Tensor pixel_shuffle(const at::Tensor& x, int64_t s) {
  const int64_t n = x.size(0), seq = x.size(1), d = x.size(2);
  const int64_t g = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(seq))));
  TRIMKV_ASSERT(g * g == seq && g % s == 0, "pixel shuffle of ", seq, " tokens with scale ", s);
  return x.reshape({n, g / s, s, g / s, s, d}).permute({0, 1, 3, 2, 4, 5}).reshape({n, (g / s) * (g / s), s * s * d});
}

}  // namespace trimkv::vision
