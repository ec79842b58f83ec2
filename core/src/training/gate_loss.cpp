#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/layers.h"

namespace trimkv {

const char* capacity_mode_name(CapacityMode mode) {
  return mode == CapacityMode::PerHead ? "per-head" : "global";
}

CapacityMode parse_capacity_mode(const std::string& name) {
  if (name == "per-head" || name == "per_head" || name == "head") return CapacityMode::PerHead;
  if (name == "global") return CapacityMode::Global;
  TRIMKV_FAIL(Input, "unknown capacity mode '", name, "' (expected global or per-head)");
}

CapacityMode default_capacity_mode(GateKind kind) {
  return kind == GateKind::TrimKV ? CapacityMode::PerHead : CapacityMode::Global;
}

at::Tensor retention_capacity(const std::vector<at::Tensor>& log_beta) {
  TRIMKV_ASSERT(!log_beta.empty());
  std::vector<at::Tensor> per_layer;
  per_layer.reserve(log_beta.size());
  // exp((t - i)·log β_i) for i <= t, exp(-inf) = 0 above the diagonal (no NaN in the backward).
  for (const auto& lb : log_beta) per_layer.push_back(retention_logit_bias(lb).exp().sum(-1));  // [H, n]
  return at::stack(per_layer, 0);  // [L, H, n]
}

at::Tensor capacity_loss(const at::Tensor& capacity, double budget, CapacityMode mode) {
  TRIMKV_CHECK(capacity.dim() == 3, Shape, "capacity must be [L, H, n], got ", capacity.sizes());
  TRIMKV_CHECK(budget > 0, Input, "the training budget must be > 0, got ", budget);
  const int64_t L = capacity.size(0), H = capacity.size(1), n = capacity.size(2);
  at::Tensor t = at::arange(n, capacity.options());  // 0-based positions
  at::Tensor r;
  if (mode == CapacityMode::PerHead) {
    r = at::relu((capacity - budget) / at::clamp_min(t - budget, 1.0));  // [L, H, n]
  } else {
    const double lh = static_cast<double>(L * H), m_global = budget * lh;
    at::Tensor sg = capacity.sum(at::IntArrayRef{0, 1});                                 // [n]
    r = at::relu((sg - m_global) / at::clamp_min(t * lh - m_global, 1.0));  // [n]
  }
  const int64_t active = (r > 0).sum().item<int64_t>();
  return active > 0 ? r.sum() / static_cast<double>(active) : r.sum() * 0.0;
}

QualityTerms quality_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                          const at::Tensor& targets, const at::Tensor& mask, bool reverse_kl) {
  TRIMKV_CHECK(student_logits.sizes() == teacher_logits.sizes() && student_logits.dim() == 2, Shape,
               "student and teacher logits must both be [n, vocab]: ", student_logits.sizes(), " vs ",
               teacher_logits.sizes());
  at::Tensor idx = mask.to(at::kBool).nonzero().view({-1});
  TRIMKV_CHECK(idx.numel() > 0, Input, "a training sequence needs at least one label token");
  at::Tensor log_q = at::log_softmax(student_logits.index_select(0, idx), -1);           // [m, V]
  at::Tensor log_p = at::log_softmax(teacher_logits.index_select(0, idx).detach(), -1);  // [m, V]
  at::Tensor tgt = targets.to(at::kLong).index_select(0, idx).unsqueeze(1);
  QualityTerms q;
  q.nll = -log_q.gather(1, tgt).mean();
  if (!reverse_kl) {
    q.kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean();
  } else {
    q.kl = (log_q.exp() * (log_q - log_p)).sum(-1).mean();
  }
  return q;
}

GateLoss gate_loss(const TextDecoder& decoder, const RetentionGates& gates, const at::Tensor& x,
                   const at::Tensor& targets, const at::Tensor& mask, const GateLossOptions& options,
                   const at::Tensor& rotary_positions, const LayerInjection& inject) {
  const int64_t n = x.size(0);
  TRIMKV_CHECK(targets.size(0) == n && mask.size(0) == n, Shape, "targets/mask must have ", n, " entries");
  const at::Tensor positions = rotary_positions.defined() ? rotary_positions : at::arange(n, at::kLong);
  TRIMKV_CHECK(positions.size(-1) == n, Shape, "rotary positions must cover the ", n, " inputs, got ",
               positions.sizes());
  at::Tensor idx = mask.to(at::kBool).nonzero().view({-1});
  TRIMKV_CHECK(idx.numel() > 0, Input, "a training sequence needs at least one label token");
  at::Tensor teacher;
  {
    at::NoGradGuard no_grad;
    teacher = decoder.logits(decoder.forward_dense(x, positions, {}, nullptr, nullptr, {}, inject)
                                 .index_select(0, idx));  // [m, V]
  }
  std::vector<at::Tensor> log_beta;
  at::Tensor h = decoder.forward_dense(x, positions, {}, &gates, &log_beta, {}, inject);
  at::Tensor student = decoder.logits(h.index_select(0, idx));  // [m, V]
  at::Tensor all = at::ones({idx.numel()}, x.options().dtype(at::kBool));
  QualityTerms q = quality_loss(student, teacher, targets.to(at::kLong).index_select(0, idx), all,
                                options.reverse_kl);
  at::Tensor capacity = retention_capacity(log_beta);
  GateLoss out;
  out.nll = q.nll;
  out.kl = q.kl;
  out.cap = capacity_loss(capacity, options.budget, options.capacity);
  out.total = 0.5 * (out.nll + out.kl) + options.lambda * out.cap;
  out.capacity = capacity.detach();
  out.n_label = idx.numel();
  return out;
}

}  // namespace trimkv
