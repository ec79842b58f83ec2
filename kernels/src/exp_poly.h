// Internal to kernels/: e^x = 2^n · e^r for x = n ln2 + r (n an integer given as a float, |r| <=
// ln2/2), written so that a loop over it vectorises (libm's expf does not without -ffast-math):
// Cephes' two-part ln 2 and degree-6 polynomial, 2^n through the exponent bits. Relative error
// < 2e-7 for n in [-126, 127]. Callers clamp x and round n their own way (attention_row's
// non-positive logits, row_ops' SiLU).
#pragma once
#include <cstdint>
#include <cstring>

namespace trimkv::kernels {

inline float exp_split(float x, float n) {
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

constexpr float kLog2e = 1.44269504088896341f;

}  // namespace trimkv::kernels
