#include "trimkv/core/text_decoder.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>

#include "trimkv/core/attention_observer.h"
#include "trimkv/core/cache_attention.h"
#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/layers.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/kernels/linear.h"
#include "trimkv/kernels/paged_attention.h"

namespace trimkv {

namespace {

// Where the text model's tensors live, per naming scheme (legacy and new): plain LLMs
// ("model."), VLMs in transformers v5 ("model.language_model."), VLMs saved by v4
// ("language_model.model."), Idefics3/SmolVLM ("model.text_model.").
const std::vector<std::string> kTextRoots = {"model.", "model.language_model.",
                                             "language_model.model.", "model.text_model.", ""};
const std::vector<std::string> kLmHeadNames = {"lm_head.weight", "language_model.lm_head.weight",
                                               "model.lm_head.weight"};

std::vector<int64_t> shape_of(LayerTensor role, const TextConfig& c) {
  const int64_t d = c.hidden_size, q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim,
                f = c.intermediate_size, hd = c.head_dim;
  switch (role) {
    case LayerTensor::attn_norm:
    case LayerTensor::mlp_norm:
    case LayerTensor::o_bias: return {d};
    case LayerTensor::q: return {q, d};
    case LayerTensor::k:
    case LayerTensor::v: return {kv, d};
    case LayerTensor::o: return {d, q};
    case LayerTensor::q_bias: return {q};
    case LayerTensor::k_bias:
    case LayerTensor::v_bias: return {kv};
    case LayerTensor::q_norm:
    case LayerTensor::k_norm: return {hd};
    case LayerTensor::gate:
    case LayerTensor::up: return {f, d};
    case LayerTensor::down: return {d, f};
  }
  return {};
}

}  // namespace

std::string text_weight_root(const WeightStore& ws) {
  for (const auto& root : kTextRoots)
    if (ws.contains(root + "embed_tokens.weight")) return root;
  TRIMKV_FAIL(Config, "checkpoint '", ws.source(),
              "' has no token embedding (looked for 'model.embed_tokens.weight' and the "
              "'model.language_model.', 'language_model.model.', 'model.text_model.' schemes)");
}

std::shared_ptr<TextDecoder> TextDecoder::load(const TextConfig& cfg, const TextFamily& family,
                                               const WeightStore& ws, kernels::WeightFormat format,
                                               std::vector<std::string>* notes, bool keep_stored) {
  const std::string root = text_weight_root(ws);
  // One weight matrix, or several stacked along their rows (fused q/k/v, gate/up), held in the
  // format asked, or in bfloat16 where that format cannot hold it; each part comes as the file
  // stores it when that is the format (no float32 copy).
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
  };
  auto hold = [&](const std::vector<Part>& parts, const std::string& what) {
    const int64_t in = parts.front().shape[1];
    kernels::WeightFormat f = format;
    if (keep_stored) {
      const TensorInfo* stored = ws.find(parts.front().name);
      if (const auto held = stored ? stored_weight_format(stored->dtype) : std::nullopt) f = *held;
    }
    if (!kernels::format_fits(f, in)) {
      // float16 files (and GGUF's float16 fallback for such rows) stay float16; others go bf16.
      const TensorInfo* stored = ws.find(parts.front().name);
      f = stored && stored->dtype == DType::F16 ? kernels::WeightFormat::F16 : kernels::WeightFormat::BF16;
      if (notes)
        notes->push_back(what + " (" + std::to_string(in) + " wide, not a multiple of 32) is held in " +
                         kernels::weight_format_name(f) + ", not " + kernels::weight_format_name(format));
    }
    std::vector<at::Tensor> held;
    for (const Part& p : parts) held.push_back(ws.load_matrix({p.name}, p.shape, f));
    return held.size() == 1 ? held.front() : at::cat(held, 0).contiguous();
  };
  DecoderWeights w;
  w.embed = hold({{root + "embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}}}, "the token embedding");
  w.final_norm = ws.load({root + "norm.weight"}, {cfg.hidden_size});
  const TensorInfo* lm_head = ws.find_any(kLmHeadNames);
  if (cfg.tie_word_embeddings && !lm_head) {
    w.lm_head = w.embed;
  } else {
    if (!lm_head) ws.load(kLmHeadNames, {});  // throws, naming every alias tried
    w.lm_head = hold({{lm_head->name, {cfg.vocab_size, cfg.hidden_size}}}, "lm_head");
  }
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    const std::string prefix = root + "layers." + std::to_string(il) + ".";
    std::map<LayerTensor, at::Tensor> t;
    std::map<LayerTensor, std::string> present;  // role -> tensor name
    for (const auto& spec : family.layer_tensors) {
      const std::string name = prefix + spec.name;
      if (spec.need == Need::Optional && !ws.contains(name)) continue;
      present[spec.role] = name;
    }
    auto part = [&](LayerTensor r) {
      const auto it = present.find(r);
      TRIMKV_ASSERT(it != present.end());
      return Part{it->second, shape_of(r, cfg)};
    };
    auto get = [&](LayerTensor r) {  // a float32 vector (norms, biases), undefined when absent
      const auto it = present.find(r);
      return it == present.end() ? at::Tensor() : ws.load({it->second}, shape_of(r, cfg));
    };
    DecoderLayerWeights lw;
    lw.attn_norm = get(LayerTensor::attn_norm);
    const std::string layer = "layer " + std::to_string(il) + " ";
    lw.w_qkv = hold({part(LayerTensor::q), part(LayerTensor::k), part(LayerTensor::v)}, layer + "q/k/v");
    const bool any_bias = present.count(LayerTensor::q_bias) || present.count(LayerTensor::k_bias) ||
                          present.count(LayerTensor::v_bias);
    if (any_bias) {
      auto bias_or_zero = [&](LayerTensor r) {
        return present.count(r) ? get(r) : at::zeros(shape_of(r, cfg), at::kFloat);
      };
      lw.b_qkv = at::cat({bias_or_zero(LayerTensor::q_bias), bias_or_zero(LayerTensor::k_bias),
                          bias_or_zero(LayerTensor::v_bias)}, 0);
    }
    lw.w_o = hold({part(LayerTensor::o)}, layer + "o_proj");
    lw.b_o = get(LayerTensor::o_bias);
    lw.q_norm = get(LayerTensor::q_norm);
    lw.k_norm = get(LayerTensor::k_norm);
    lw.mlp_norm = get(LayerTensor::mlp_norm);
    lw.w_gate_up = hold({part(LayerTensor::gate), part(LayerTensor::up)}, layer + "gate/up");
    lw.w_down = hold({part(LayerTensor::down)}, layer + "down_proj");
    w.layers.push_back(std::move(lw));
  }
  return std::make_shared<TextDecoder>(cfg, family, std::move(w));
}

TextDecoder::TextDecoder(TextConfig cfg, const TextFamily& family, DecoderWeights weights)
    : m_cfg(std::move(cfg)), m_family(&family), m_w(std::move(weights)) {
  TRIMKV_ASSERT(static_cast<int64_t>(m_w.layers.size()) == m_cfg.n_layer);
  m_raw_rows = rows_are_raw();
  m_inv_freq = rope_inverse_frequencies(m_cfg.rope, m_cfg.head_dim);
}

namespace {
// Calls f on every weight tensor once (a tied lm_head is the embedding).
template <class F>
void for_each_weight(const DecoderWeights& w, F&& f) {
  f(w.embed);
  f(w.final_norm);
  if (!w.lm_head.is_same(w.embed)) f(w.lm_head);
  for (const auto& l : w.layers)
    for (const at::Tensor* t : {&l.attn_norm, &l.w_qkv, &l.b_qkv, &l.w_o, &l.b_o, &l.q_norm, &l.k_norm, &l.mlp_norm,
                                &l.w_gate_up, &l.w_down})
      f(*t);
}
}  // namespace

int64_t TextDecoder::parameter_count() const {
  int64_t n = 0;
  for_each_weight(m_w, [&](const at::Tensor& t) { n += kernels::value_count(t); });
  return n;
}

int64_t TextDecoder::weight_bytes() const {
  int64_t n = 0;
  for_each_weight(m_w, [&](const at::Tensor& t) {
    if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
  });
  return n;
}

at::Tensor TextDecoder::embed(const at::Tensor& ids) const {
  return kernels::gather_rows(m_w.embed, ids.to(m_w.embed.device(), at::kLong));
}

at::Device TextDecoder::device() const { return m_w.embed.device(); }

std::shared_ptr<TextDecoder> TextDecoder::on_device(at::Device device, std::vector<std::string>* notes) const {
  // kernels::weight_on_device: a tensor already there as it is; q8/q4 and float16 matrices go as
  // bfloat16 (unpacked on the CPU, one matrix at a time), float32 and bfloat16 ones as they are.
  std::map<const void*, at::Tensor> moved;  // so the tied lm_head stays the embedding
  bool converted = false;
  auto move = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    const auto it = moved.find(t.unsafeGetTensorImpl());
    if (it != moved.end()) return it->second;
    return moved[t.unsafeGetTensorImpl()] = kernels::weight_on_device(t, device, &converted);
  };
  DecoderWeights w;
  w.embed = move(m_w.embed);
  w.final_norm = move(m_w.final_norm);
  w.lm_head = move(m_w.lm_head);
  for (const DecoderLayerWeights& l : m_w.layers)
    w.layers.push_back({move(l.attn_norm), move(l.w_qkv), move(l.b_qkv), move(l.w_o), move(l.b_o), move(l.q_norm),
                        move(l.k_norm), move(l.mlp_norm), move(l.w_gate_up), move(l.w_down)});
  if (converted && notes)
    notes->push_back(std::string("q8/q4 and f16 matrices are held in bfloat16 on ") + device.str() +
                     " (no quantised GPU kernel; bf16 activations keep float32's range)");
  return std::make_shared<TextDecoder>(m_cfg, *m_family, std::move(w));
}

void TextDecoder::project_qkv(const DecoderLayerWeights& lw, const at::Tensor& x_norm,
                              const RopeTables& rope, at::Tensor& q, at::Tensor& k,
                              at::Tensor& v) const {
  const int64_t n = x_norm.size(0), hd = m_cfg.head_dim, nq = m_cfg.n_head, nkv = m_cfg.n_kv_head;
  at::Tensor qkv = kernels::linear_auto(x_norm, lw.w_qkv, lw.b_qkv);  // [n, (nq+2nkv)*hd]
  q = qkv.narrow(1, 0, nq * hd).view({n, nq, hd});
  k = qkv.narrow(1, nq * hd, nkv * hd).view({n, nkv, hd});
  v = qkv.narrow(1, (nq + nkv) * hd, nkv * hd).view({n, nkv, hd});
  if (lw.q_norm.defined()) q = rms_norm(q, lw.q_norm, m_cfg.rms_norm_eps);
  if (lw.k_norm.defined()) k = rms_norm(k, lw.k_norm, m_cfg.rms_norm_eps);
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
}

at::Tensor TextDecoder::run_layers(const at::Tensor& x_in, const at::Tensor& positions,
                                   const AttendFn& attend, const LayerInjection& inject) const {
  // Positions and rotary tables are computed on the CPU (they are small) and sent where x is.
  RopeTables rope = rope_tables(m_cfg.rope, m_inv_freq, positions.to(at::kCPU));
  if (!x_in.device().is_cpu()) rope = {rope.cos.to(x_in.device()), rope.sin.to(x_in.device())};
  const at::Tensor inject_rows = inject.empty() ? at::Tensor() : inject.rows.to(x_in.device());
  at::Tensor x = x_in;
  for (int64_t il = 0; il < m_cfg.n_layer; ++il) {
    const auto& lw = m_w.layers[il];
    at::Tensor h = rms_norm(x, lw.attn_norm, m_cfg.rms_norm_eps);
    at::Tensor q, k, v;
    project_qkv(lw, h, rope, q, k, v);
    const at::Tensor attn = attend(il, h, q, k, v);  // [n, n_head * head_dim]
    x = x + kernels::linear_auto(attn, lw.w_o, lw.b_o);
    x = x + gated_mlp(rms_norm(x, lw.mlp_norm, m_cfg.rms_norm_eps), lw.w_gate_up, lw.w_down);
    if (!inject.empty() && il < static_cast<int64_t>(inject.adds.size()))
      x = x.index_add(0, inject_rows, inject.adds[static_cast<size_t>(il)].to(x.device(), x.scalar_type()));
  }
  return rms_norm(x, m_w.final_norm, m_cfg.rms_norm_eps);
}

at::Tensor TextDecoder::forward_dense(const at::Tensor& x_in, const at::Tensor& positions,
                                      const std::vector<at::Tensor>& logit_bias,
                                      const EntryScorer* scorer,
                                      std::vector<at::Tensor>* log_beta_out,
                                      const QkObserver& on_qk, const LayerInjection& inject) const {
  TRIMKV_ASSERT(logit_bias.empty() || static_cast<int64_t>(logit_bias.size()) == m_cfg.n_layer);
  const double scale = 1.0 / std::sqrt(static_cast<double>(m_cfg.head_dim));
  return run_layers(x_in, positions, [&](int64_t il, const at::Tensor& h, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v) {
    if (on_qk) on_qk(il, h, q, k);
    at::Tensor bias = logit_bias.empty() ? at::Tensor() : logit_bias[il];
    if (scorer) {
      at::Tensor lb = scorer->log_beta(il, h);  // [n, n_kv]
      if (log_beta_out) log_beta_out->push_back(lb);
      at::Tensor rb = retention_logit_bias(lb);
      bias = bias.defined() ? bias + rb : rb;
    }
    return dense_causal_attention(q, k, v, scale, bias);
  }, inject);
}

at::Tensor TextDecoder::forward_cached(const at::Tensor& x_in, const at::Tensor& positions,
                                       const std::vector<int32_t>& token_indices, KvCache& cache,
                                       const EntryScorer* scorer,
                                       AttentionObserver* observer, const LayerInjection& inject,
                                       const std::atomic<bool>* cancel) const {
  const int64_t n = x_in.size(0);
  TRIMKV_ASSERT(static_cast<int64_t>(token_indices.size()) == n && positions.size(-1) == n);
  if (n == 1 && inject.empty() && m_raw_rows && fused_decode() && cache.k_pool().device().is_cpu() &&
      x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat && !x_in.requires_grad())
    return decode_one(x_in, positions, token_indices, cache, scorer, observer);
  TRIMKV_CHECK(cache.k_pool().device() == device(), Input, "the KV cache is on ", cache.k_pool().device(),
               " but the decoder's weights are on ", device());
  const double scale = 1.0 / std::sqrt(static_cast<double>(m_cfg.head_dim));
  // On a GPU each layer's log β stays there until the layers are done, then comes back in one
  // copy (a read-back per layer would make the host wait for the device 36 times a token).
  const bool defer_log_beta = scorer && !device().is_cpu();
  std::vector<at::Tensor> device_log_beta;
  const at::Tensor out = run_layers(x_in.to(device()), positions, [&](int64_t il, const at::Tensor& h, const at::Tensor& q,
                                                                      const at::Tensor& k, const at::Tensor& v) {
    if (il > 0 && cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "prefill cancelled");
    std::vector<float> lb;
    if (defer_log_beta) {
      device_log_beta.push_back(scorer->log_beta(il, h).to(at::kFloat));  // [n, n_kv]
    } else if (scorer) {
      const at::Tensor log_beta = scorer->log_beta(il, h).to(at::kFloat).contiguous();  // [n, n_kv]
      lb.assign(log_beta.data_ptr<float>(), log_beta.data_ptr<float>() + log_beta.numel());
    }
    cache.append(static_cast<int>(il), k, v, token_indices, lb);
    const bool observe = observer && observer->observes();
    const CacheAttention a =
        attend_cache_layer(cache, static_cast<int>(il), q, scale, observe && observer->wants_attention_sum());
    if (observe)
      observer->on_layer(LayerObservation{static_cast<int>(il), &q, a.attn_sum.defined() ? &a.attn_sum : nullptr,
                                          cache.layer_view(static_cast<int>(il)), scale, &cache});
    return a.out.view({n, m_cfg.n_head * m_cfg.head_dim});
  }, inject);
  if (defer_log_beta) {
    const at::Tensor all = at::stack(device_log_beta).to(at::kCPU).contiguous();  // [n_layer, n, n_kv]
    for (int64_t il = 0; il < m_cfg.n_layer; ++il) {
      const float* p = all.data_ptr<float>() + il * all.stride(0);
      cache.set_newest_log_beta(static_cast<int>(il), std::vector<float>(p, p + all.stride(0)));
    }
  }
  return out;
}

at::Tensor TextDecoder::logits(const at::Tensor& hidden) const {
  return kernels::linear_auto(hidden, m_w.lm_head);
}

}  // namespace trimkv
