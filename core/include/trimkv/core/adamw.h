// AdamW (β1 0.9, β2 0.999, ε 1e-8, decoupled weight decay, as torch.optim.AdamW) with global
// grad-norm clipping, and the warm-up + cosine learning-rate schedule. Shared by gate training
// and the demo model's training. Its state is plain float32 tensors and a step count, saved into
// and restored from checkpoints so a resumed run continues bit for bit.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "trimkv/core/safetensors.h"

namespace trimkv {

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // a leaf with requires_grad
  bool decay = true;  // whether weight decay applies (matrices yes; norms, biases usually not)
  double lr_scale = 1.0;  // its rate is step()'s times this (decay included), as a torch param group's lr
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double clip = 1.0;  // global grad-norm clip; <= 0: none
};

class AdamW {
 public:
  AdamW(std::vector<NamedParameter> params, AdamWOptions options);

  // Clears the gradients of every parameter.
  void zero_grad();
  // One update at learning rate `lr` from the current gradients (a parameter without gradient is
  // left alone, moments included, as torch does). Returns the global gradient norm before clipping.
  double step(double lr);

  int64_t steps() const { return m_steps; }
  const std::vector<NamedParameter>& parameters() const { return m_params; }

  // Checkpoint state: `prefix`m.<name> and `prefix`v.<name> tensors; the step count goes to
  // metadata[prefix + "steps"].
  void save_state(const std::string& prefix, std::vector<TensorToWrite>& tensors,
                  std::map<std::string, std::string>& metadata) const;
  // Restores what save_state wrote; Error{Format} naming `path` and the tensor when missing or
  // of another shape.
  void load_state(const std::string& prefix, const SafetensorsFile& file, const std::string& path);

 private:
  std::vector<NamedParameter> m_params;
  AdamWOptions m_opt;
  std::vector<at::Tensor> m_m, m_v;
  int64_t m_steps = 0;
};

// Linear warm-up to `lr` over `warmup` steps, then cosine decay to `min_lr` at `total` (and
// `min_lr` after). `step` is 1-based.
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr);

}  // namespace trimkv
