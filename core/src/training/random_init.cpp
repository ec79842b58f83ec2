#include "trimkv/core/random_init.h"

#include <ATen/ATen.h>

#include <cmath>

namespace trimkv {

at::Tensor normal_tensor(std::mt19937_64& rng, std::vector<int64_t> shape, double std) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  constexpr double kTwoPi = 6.283185307179586476925;
  auto uniform = [&rng] {  // (0, 1]
    return (static_cast<double>(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = kTwoPi * uniform();
    p[i] = static_cast<float>(std * r * std::cos(a));
    if (i + 1 < n) p[i + 1] = static_cast<float>(std * r * std::sin(a));
  }
  return t;
}

}  // namespace trimkv
