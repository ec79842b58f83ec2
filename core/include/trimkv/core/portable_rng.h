// Random numbers that are the same on every platform, for the generators of synthetic data (the
// visual world, the long-context text tasks): std::mt19937_64 (its output sequence is fixed by
// the C++ standard) with distributions written out here, because the standard library's
// distributions (uniform_int_distribution, ...) differ between implementations. Together they
// make a generated item a pure function of its key (seed, split, index, ...) everywhere.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "trimkv/core/error.h"

namespace trimkv {

class PortableRng {
 public:
  // Seeded through std::seed_seq, whose mixing the standard also fixes; distinct key tuples
  // give distinct, independent-looking streams.
  explicit PortableRng(const std::vector<uint32_t>& key) {
    std::seed_seq seq(key.begin(), key.end());
    m_engine.seed(seq);
  }

  uint64_t next_u64() { return m_engine(); }

  // Uniform in [lo, hi] (inclusive), without modulo bias: draws below 2^64 mod n are rejected.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    TRIMKV_ASSERT(lo <= hi, "uniform_int(", lo, ", ", hi, ")");
    const uint64_t n = static_cast<uint64_t>(hi - lo) + 1;
    if (n == 0) return static_cast<int64_t>(next_u64());  // the full 64-bit range
    const uint64_t threshold = (0 - n) % n;                 // 2^64 mod n
    uint64_t r = next_u64();
    while (r < threshold) r = next_u64();
    return lo + static_cast<int64_t>(r % n);
  }

  // An index in [0, n).
  size_t index(size_t n) { return static_cast<size_t>(uniform_int(0, static_cast<int64_t>(n) - 1)); }

  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

  bool bernoulli(double p) { return uniform01() < p; }

  // An index drawn with probability proportional to weights[i] (non-negative, not all zero).
  size_t weighted(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    TRIMKV_ASSERT(total > 0, "weighted() with no positive weight");
    double u = uniform01() * total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (u < weights[i]) return i;
      u -= weights[i];
    }
    for (size_t i = weights.size(); i-- > 0;)  // rounding left u >= the last weight
      if (weights[i] > 0) return i;
    return 0;
  }

  template <typename T>
  const T& pick(const std::vector<T>& items) {
    TRIMKV_ASSERT(!items.empty(), "pick() from an empty list");
    return items[index(items.size())];
  }

 private:
  std::mt19937_64 m_engine;
};

}  // namespace trimkv
