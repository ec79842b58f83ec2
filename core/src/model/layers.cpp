#include "trimkv/core/layers.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "trimkv/core/error.h"
#include "trimkv/kernels/linear.h"

namespace trimkv {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor var = x.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x * at::rsqrt(var + eps));
}

at::Tensor rope_inverse_frequencies(const RopeConfig& rope, int64_t head_dim) {
  at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(rope.theta, exponent);
  if (rope.type == "linear") {
    inv_freq = inv_freq / rope.factor;
  } else if (rope.type == "llama3") {
    // Wavelength-dependent scaling: long wavelengths divided by factor, short ones kept, smooth
    // interpolation in between.
    const double low_wavelen = rope.original_max_position / rope.low_freq_factor;
    const double high_wavelen = rope.original_max_position / rope.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq);
    at::Tensor smooth = (rope.original_max_position / wavelen - rope.low_freq_factor) /
                        (rope.high_freq_factor - rope.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen);
    inv_freq = at::where(medium, smoothed, scaled);
  }
  if (!rope.freq_factors.empty()) {
    TRIMKV_ASSERT(static_cast<int64_t>(rope.freq_factors.size()) == head_dim / 2);
    inv_freq = inv_freq / at::tensor(rope.freq_factors, at::kFloat);
  }
  return inv_freq;
}


RopeTables rope_tables(const RopeConfig& rope, const at::Tensor& inv_freq, const at::Tensor& positions) {
  const int64_t head_dim = 2 * inv_freq.size(0);
  at::Tensor freqs;                                           // [n, hd/2]
  if (positions.dim() == 1) {
    freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  } else {
    // Multimodal: angles on each axis [3, n, hd/2], then frequency k takes its section's axis.
    TRIMKV_ASSERT(positions.dim() == 2 && positions.size(0) == 3 && rope.multimodal());
    const at::Tensor per_axis = positions.to(at::kFloat).unsqueeze(2) * inv_freq.view({1, 1, -1});
    const at::Tensor axis = at::tensor(mrope_axes(rope, head_dim / 2), at::kLong);  // [hd/2]
    freqs = per_axis.permute({1, 2, 0}).gather(2, axis.view({1, -1, 1}).expand({positions.size(1), -1, 1})).squeeze(2);
  }
  at::Tensor emb = at::cat({freqs, freqs}, -1);  // [n, hd]
  return {emb.cos(), emb.sin()};
}

std::vector<int64_t> mrope_axes(const RopeConfig& rope, int64_t n_freq) {
  const std::vector<int64_t>& s = rope.mrope_section;
  TRIMKV_ASSERT(s.size() == 3);
  std::vector<int64_t> axis(static_cast<size_t>(n_freq), 0);
  for (int64_t k = 0; k < n_freq; ++k) {
    if (rope.mrope_interleaved) {  // h at k % 3 == 1 below 3·s_h, w at k % 3 == 2 below 3·s_w
      if (k % 3 == 1 && k < 3 * s[1]) axis[k] = 1;
      else if (k % 3 == 2 && k < 3 * s[2]) axis[k] = 2;
    } else {  // chunked: the first s_t frequencies time, the next s_h rows, the rest columns
      axis[k] = k < s[0] ? 0 : k < s[0] + s[1] ? 1 : 2;
    }
  }
  return axis;
}

void place_rotary_positions(const RopeOffset* offsets, int64_t n, int64_t base, RopeOffset* out, int64_t& next) {
  for (int64_t i = 0; i < n; ++i) {
    const RopeOffset o = offsets ? offsets[i] : RopeOffset{static_cast<int32_t>(i), static_cast<int32_t>(i),
                                                             static_cast<int32_t>(i)};
    out[i] = {static_cast<int32_t>(base + o.t), static_cast<int32_t>(base + o.h), static_cast<int32_t>(base + o.w)};
    next = std::max<int64_t>({next, out[i].t + 1, out[i].h + 1, out[i].w + 1});
  }
}

at::Tensor rotary_position_tensor(const std::vector<RopeOffset>& placed, bool multimodal) {
  const int64_t n = static_cast<int64_t>(placed.size());
  std::vector<int64_t> pos(static_cast<size_t>((multimodal ? 3 : 1) * n));
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = placed[i].t;
    if (multimodal) {
      pos[n + i] = placed[i].h;
      pos[2 * n + i] = placed[i].w;
    }
  }
  at::Tensor t = at::tensor(pos, at::kLong);
  return multimodal ? t.view({3, n}) : t;
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * t.cos.unsqueeze(1) + rotated * t.sin.unsqueeze(1);
}

at::Tensor gated_mlp(const at::Tensor& x, const at::Tensor& w_gate_up, const at::Tensor& w_down) {
  at::Tensor gu = kernels::linear_auto(x, w_gate_up);  // [n, 2*ffn]
  const int64_t ffn = gu.size(-1) / 2;
  return kernels::linear_auto(at::silu(gu.narrow(-1, 0, ffn)) * gu.narrow(-1, ffn, ffn), w_down);
}

at::Tensor dense_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale, const at::Tensor& logit_bias) {
  const int64_t n = q.size(0), n_head = q.size(1), hd = q.size(2), n_kv = k.size(1);
  const int64_t group = n_head / n_kv;
  at::Tensor qh = q.permute({1, 0, 2});                                            // [H, n, hd]
  at::Tensor kh = k.permute({1, 0, 2}).repeat_interleave(group, 0);                 // [H, n, hd]
  at::Tensor vh = v.permute({1, 0, 2}).repeat_interleave(group, 0);                 // [H, n, hd]
  at::Tensor logits = at::matmul(qh, kh.transpose(1, 2)) * scale;                   // [H, n, n]
  if (logit_bias.defined()) logits = logits + logit_bias.repeat_interleave(group, 0);
  at::Tensor mask = at::ones({n, n}, q.options().dtype(at::kBool)).triu(1);
  logits = logits.masked_fill(mask, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(logits, -1);
  return at::matmul(probs, vh).permute({1, 0, 2}).reshape({n, n_head * hd});
}

at::Tensor retention_logit_bias(const at::Tensor& log_beta) {
  const int64_t n = log_beta.size(0);
  at::Tensor idx = at::arange(n, log_beta.options());
  at::Tensor dist = idx.unsqueeze(1) - idx.unsqueeze(0);                   // [n, n]: t - i
  at::Tensor bias = dist.unsqueeze(0) * log_beta.t().unsqueeze(1);         // [n_kv, n, n]
  at::Tensor upper = at::ones({n, n}, log_beta.options().dtype(at::kBool)).triu(1);
  return bias.masked_fill(upper, -std::numeric_limits<double>::infinity());
}

}  // namespace trimkv
