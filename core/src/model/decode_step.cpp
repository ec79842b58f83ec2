// One decode step (one token, CPU) of the text decoder on raw float32 rows: run_layers' steps
// (text_decoder.cpp) with the kernels called directly on one workspace, so a step of a small
// model is not spent dispatching ~60 ATen operators per layer. What it computes is what
// forward_cached computes for n = 1: the same matrices, cache appends, attention (and observer,
// retention-gate scorer) in the same order; only float sums inside the norms round differently.
#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "trimkv/core/attention_observer.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/layers.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/kernels/linear.h"
#include "trimkv/kernels/paged_attention.h"
#include "trimkv/kernels/row_ops.h"

namespace trimkv {

namespace {

std::atomic<bool> g_fused_decode{true};

bool raw_vector(const at::Tensor& t, bool optional) {
  if (!t.defined()) return optional;
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && !t.requires_grad();
}

const float* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

void TextDecoder::set_fused_decode(bool on) { g_fused_decode.store(on); }
bool TextDecoder::fused_decode() { return g_fused_decode.load(); }

bool TextDecoder::rows_are_raw() const {
  if (!raw_vector(m_w.final_norm, false)) return false;
  for (const DecoderLayerWeights& l : m_w.layers) {
    if (!raw_vector(l.attn_norm, false) || !raw_vector(l.mlp_norm, false) || !raw_vector(l.b_qkv, true) ||
        !raw_vector(l.b_o, true) || !raw_vector(l.q_norm, true) || !raw_vector(l.k_norm, true))
      return false;
    for (const at::Tensor* w : {&l.w_qkv, &l.w_o, &l.w_gate_up, &l.w_down})
      if (!w->device().is_cpu() || !w->is_contiguous() || w->requires_grad()) return false;
  }
  return true;
}

at::Tensor TextDecoder::decode_one(const at::Tensor& x_in, const at::Tensor& positions,
                                   const std::vector<int32_t>& token_indices, KvCache& cache,
                                   const EntryScorer* scorer, AttentionObserver* observer) const {
  const TextConfig& c = m_cfg;
  const int64_t d = c.hidden_size, hd = c.head_dim, nq = c.n_head, nkv = c.n_kv_head, ffn = c.intermediate_size;
  const int64_t qkv_width = (nq + 2 * nkv) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const RopeTables rope = rope_tables(c.rope, m_inv_freq, positions);  // [1, hd] each
  const at::Tensor cos_t = rope.cos.contiguous(), sin_t = rope.sin.contiguous();
  const float* cos = cos_t.data_ptr<float>();
  const float* sin = sin_t.data_ptr<float>();

  // Workspace: the residual row, a normed row, a projection's output, q/k/v, attention, gate/up,
  // the gated activation.
  std::vector<float> ws(static_cast<size_t>(3 * d + qkv_width + nq * hd + 3 * ffn));
  float* x = ws.data();
  float* h = x + d;
  float* proj = h + d;
  float* qkv = proj + d;
  float* attn = qkv + qkv_width;
  float* gate_up = attn + nq * hd;
  float* act = gate_up + 2 * ffn;
  const at::Tensor x_c = x_in.contiguous();
  std::memcpy(x, x_c.data_ptr<float>(), static_cast<size_t>(d) * sizeof(float));

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const DecoderLayerWeights& lw = m_w.layers[static_cast<size_t>(il)];
    kernels::rms_norm_rows(x, lw.attn_norm.data_ptr<float>(), eps, 1, d, h);
    kernels::linear_rows_into(lw.w_qkv, h, d, data_or_null(lw.b_qkv), qkv, qkv_width, 1);
    float* q = qkv;
    float* k = qkv + nq * hd;
    const float* v = k + nkv * hd;
    if (lw.q_norm.defined()) kernels::rms_norm_rows(q, lw.q_norm.data_ptr<float>(), eps, nq, hd, q);
    if (lw.k_norm.defined()) kernels::rms_norm_rows(k, lw.k_norm.data_ptr<float>(), eps, nkv, hd, k);
    kernels::rope_rows(q, cos, sin, nq, hd);
    kernels::rope_rows(k, cos, sin, nkv, hd);

    std::vector<float> lb;
    if (scorer) {
      const at::Tensor log_beta = scorer->log_beta(il, at::from_blob(h, {1, d}, at::kFloat)).contiguous();
      lb.assign(log_beta.data_ptr<float>(), log_beta.data_ptr<float>() + log_beta.numel());
    }
    cache.append_rows(static_cast<int>(il), k, v, qkv_width, token_indices, lb);
    const kernels::PagedKvView view = cache.layer_view(static_cast<int>(il));
    kernels::PagedAttentionParams p;
    p.q = q;
    p.q_row_stride = qkv_width;
    p.q_head_stride = hd;
    p.out = attn;
    p.out_row_stride = nq * hd;
    p.out_head_stride = hd;
    p.n_q = 1;
    p.n_head = static_cast<int>(nq);
    p.scale = static_cast<float>(scale);
    p.kv = view;
    const bool observe = observer && observer->observes();
    at::Tensor attn_sum;  // [n_kv_head, max_len], only when the observer asks
    if (observe && observer->wants_attention_sum()) {
      const int32_t max_len = view.max_length();
      attn_sum = at::zeros({nkv, max_len}, at::kFloat);
      if (max_len > 0) {
        p.attn_sum = attn_sum.data_ptr<float>();
        p.attn_sum_stride = max_len;
      }
    }
    kernels::paged_attention_cpu(p);
    if (observe) {
      const at::Tensor q_t = at::from_blob(q, {1, nq, hd}, at::kFloat);
      observer->on_layer(LayerObservation{static_cast<int>(il), &q_t, attn_sum.defined() ? &attn_sum : nullptr,
                                          view, scale, &cache});
    }
    kernels::linear_rows_into(lw.w_o, attn, nq * hd, data_or_null(lw.b_o), proj, d, 1);
    kernels::add_rows(x, proj, d);
    kernels::rms_norm_rows(x, lw.mlp_norm.data_ptr<float>(), eps, 1, d, h);
    kernels::linear_rows_into(lw.w_gate_up, h, d, nullptr, gate_up, 2 * ffn, 1);
    kernels::silu_mul(gate_up, gate_up + ffn, ffn, act);
    kernels::linear_rows_into(lw.w_down, act, ffn, nullptr, proj, d, 1);
    kernels::add_rows(x, proj, d);
  }
  at::Tensor out = at::empty({1, d}, at::kFloat);
  kernels::rms_norm_rows(x, m_w.final_norm.data_ptr<float>(), eps, 1, d, out.data_ptr<float>());
  return out;
}

}  // namespace trimkv
