// AdamW (core/training/adamw.h): one update by hand, and a parameter's rate scale (lr_scale)
// against the same parameter updated alone at the scaled rate. The optimiser is otherwise
// checked end to end against PyTorch through gate training (test_gate_training.cpp).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "trimkv/core/adamw.h"

using namespace trimkv;

namespace {

NamedParameter leaf(const std::string& name, const at::Tensor& value, double lr_scale = 1.0) {
  NamedParameter p{name, value.clone().set_requires_grad(true)};
  p.lr_scale = lr_scale;
  return p;
}

// Sets each parameter's gradient to a fixed function of the step and the parameter's value.
void set_grads(const std::vector<NamedParameter>& ps, int step) {
  for (const auto& p : ps) p.tensor.mutable_grad() = (p.tensor.detach() * 0.5 + 0.1 * step).sin();
}

}  // namespace

TEST_CASE("adamw: the first update is lr * g / (|g| + eps) after decay, as torch's AdamW", "[adamw]") {
  const at::Tensor start = at::tensor({0.5f, -1.0f, 2.0f});
  std::vector<NamedParameter> ps = {leaf("w", start)};
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.clip = 0;
  AdamW adam(ps, o);
  set_grads(ps, 1);
  const at::Tensor g = ps[0].tensor.grad().clone();
  adam.step(0.01);
  const at::Tensor expected = start * (1 - 0.01 * 0.1) - 0.01 * g / (g.abs() + 1e-8);
  CHECK(at::allclose(ps[0].tensor.detach(), expected, 1e-6, 1e-7));
}

TEST_CASE("adamw: a parameter's lr_scale is its rate, decay included; the others keep the step's", "[adamw]") {
  const at::Tensor a0 = at::linspace(-1, 1, 6).reshape({2, 3}), b0 = at::tensor({0.3f, -0.7f});
  AdamWOptions o;
  o.weight_decay = 0.05;
  o.clip = 0;  // clipping couples parameters through the global norm: off, so each can be run alone
  std::vector<NamedParameter> both = {leaf("a", a0, 0.25), leaf("b", b0)};
  std::vector<NamedParameter> a_alone = {leaf("a", a0)}, b_alone = {leaf("b", b0)}, full = {leaf("a", a0)};
  AdamW mixed(both, o), scaled(a_alone, o), plain(b_alone, o), unscaled(full, o);
  const double lr = 0.02;
  for (int step = 1; step <= 5; ++step) {
    for (auto* ps : {&both, &a_alone, &b_alone, &full}) set_grads(*ps, step);
    mixed.step(lr);
    scaled.step(lr * 0.25);
    plain.step(lr);
    unscaled.step(lr);
  }
  CHECK(at::allclose(both[0].tensor.detach(), a_alone[0].tensor.detach(), 1e-6, 1e-7));
  CHECK(at::allclose(both[1].tensor.detach(), b_alone[0].tensor.detach(), 1e-6, 1e-7));
  // And the scale made a difference: at the full rate the first parameter ends elsewhere.
  CHECK_FALSE(at::allclose(full[0].tensor.detach(), a_alone[0].tensor.detach(), 1e-4, 1e-5));
}
