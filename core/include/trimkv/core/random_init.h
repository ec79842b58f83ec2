// Random initialisation that does not depend on LibTorch's generators: the same seed gives the
// same tensors with every LibTorch version (gates, the demo model).
#pragma once
#include <ATen/core/Tensor.h>

#include <random>
#include <vector>

namespace trimkv {

// float32 N(0, std) of `shape` from `rng` (Box-Muller in double).
at::Tensor normal_tensor(std::mt19937_64& rng, std::vector<int64_t> shape, double std);

}  // namespace trimkv
