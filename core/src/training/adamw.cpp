#include "trimkv/core/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "trimkv/core/error.h"
#include "trimkv/core/weight_store.h"

namespace trimkv {

AdamW::AdamW(std::vector<NamedParameter> params, AdamWOptions options)
    : m_params(std::move(params)), m_opt(options) {
  for (const auto& p : m_params) {
    m_m.push_back(at::zeros_like(p.tensor.detach()));
    m_v.push_back(at::zeros_like(p.tensor.detach()));
  }
}

void AdamW::zero_grad() {
  for (auto& p : m_params)
    if (p.tensor.grad().defined()) p.tensor.mutable_grad() = at::Tensor();
}

double AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (auto& p : m_params)
    if (p.tensor.grad().defined()) norms.push_back(p.tensor.grad().norm(2));
  const double total = norms.empty() ? 0.0 : at::stack(norms).norm(2).item<double>();
  const double coef = m_opt.clip > 0 ? m_opt.clip / (total + 1e-6) : 1.0;
  const int64_t t = ++m_steps;
  const double bc1 = 1.0 - std::pow(m_opt.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(m_opt.beta2, static_cast<double>(t));
  for (size_t k = 0; k < m_params.size(); ++k) {
    at::Tensor p = m_params[k].tensor;
    if (!p.grad().defined()) continue;  // as torch: a parameter without gradient is left alone
    at::Tensor g = coef < 1.0 ? p.grad() * coef : p.grad();
    const double rate = lr * m_params[k].lr_scale;
    if (m_params[k].decay && m_opt.weight_decay != 0) p.mul_(1.0 - rate * m_opt.weight_decay);
    m_m[k].mul_(m_opt.beta1).add_(g, 1.0 - m_opt.beta1);
    m_v[k].mul_(m_opt.beta2).addcmul_(g, g, 1.0 - m_opt.beta2);
    at::Tensor denom = (m_v[k].sqrt() / std::sqrt(bc2)).add_(m_opt.eps);
    p.addcdiv_(m_m[k], denom, -rate / bc1);
  }
  return total;
}

void AdamW::save_state(const std::string& prefix, std::vector<TensorToWrite>& tensors,
                       std::map<std::string, std::string>& metadata) const {
  for (size_t k = 0; k < m_params.size(); ++k) {
    tensors.push_back(float_tensor_to_write(prefix + "m." + m_params[k].name, m_m[k]));
    tensors.push_back(float_tensor_to_write(prefix + "v." + m_params[k].name, m_v[k]));
  }
  metadata[prefix + "steps"] = std::to_string(m_steps);
}

void AdamW::load_state(const std::string& prefix, const SafetensorsFile& file, const std::string& path) {
  at::NoGradGuard no_grad;
  auto get = [&](const std::string& name, at::Tensor& into) {
    auto it = file.tensors().find(name);
    TRIMKV_CHECK(it != file.tensors().end(), Format, "checkpoint '", path, "' lacks tensor '", name, "'");
    at::Tensor t = tensor_to_float(it->second);
    TRIMKV_CHECK(t.sizes() == into.sizes(), Format, "checkpoint '", path, "': tensor '", name, "' has shape ",
                 t.sizes(), ", expected ", into.sizes());
    into.copy_(t);
  };
  for (size_t k = 0; k < m_params.size(); ++k) {
    get(prefix + "m." + m_params[k].name, m_m[k]);
    get(prefix + "v." + m_params[k].name, m_v[k]);
  }
  auto it = file.metadata().find(prefix + "steps");
  TRIMKV_CHECK(it != file.metadata().end(), Format, "checkpoint '", path, "' lacks '", prefix, "steps'");
  m_steps = std::stoll(it->second);
}

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr) {
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace trimkv
