// FNV-1a (64-bit) and its hex form: the fingerprints written into files (gate-training
// checkpoints, datasets, the weight cache). Changing either makes every stored fingerprint stale.
#pragma once
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace trimkv {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

inline uint64_t fnv1a_bytes(const void* data, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aOffset) { return fnv1a_bytes(s.data(), s.size(), h); }

// Lowercase hex, no leading zeros.
inline std::string hex64(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

}  // namespace trimkv
