// One budget concept for every eviction policy (DESIGN.md "Budgets and units", METHOD.md §4).
// Plain C++, no tensors.
//
// A budget is counted in KV entries (one entry = one token's K and V in one layer and one KV
// head). It is given either per head (M, the paper's convention: "budget 1024") or globally
// (M_global, what DBTrimKV ranks against) and converted by the single rule
//     M_global = M · L · H_kv
// used everywhere (policies, CLI, GUI, reports), so policies compare at equal memory. A global
// budget that is not a multiple of L·H_kv gives per-head policies floor(M_global / (L·H_kv)).
#pragma once
#include <cstdint>
#include <string>

#include "trimkv/core/kv_types.h"

namespace trimkv {

class Budget {
 public:
  // No limit (the full cache, token-pruning policies, DBTrimKV's threshold mode).
  Budget() = default;
  static Budget unlimited() { return Budget(); }
  // M entries per (layer, KV head). Error{Input} unless m > 0.
  static Budget per_head(int64_t m);
  // M_global entries over all layers and KV heads. Error{Input} unless m_global > 0.
  static Budget global(int64_t m_global);

  bool is_unlimited() const { return m_kind == Kind::Unlimited; }
  bool given_per_head() const { return m_kind == Kind::PerHead; }

  // M_global for geometry g (-1 when unlimited).
  int64_t global_entries(const KvGeometry& g) const;
  // M for geometry g: the per-head value given, or floor(M_global / (L·H_kv)) (-1 when
  // unlimited).
  int64_t per_head_entries(const KvGeometry& g) const;
  // Bytes of K and V that M_global entries hold at `bytes_per_value` (4 for float32).
  int64_t bytes(const KvGeometry& g, int bytes_per_value = 4) const;
  // Error{Input} naming `who` when the per-head value is below m_min. A global budget smaller
  // than L·H_kv is legal for DBTrimKV (heads may reach 0) but leaves per-head policies M = 0.
  void require_per_head_at_least(const KvGeometry& g, int64_t m_min, const std::string& who) const;

  // "unlimited", "128 per head (11520 global)", "11520 global (128 per head)".
  std::string describe(const KvGeometry& g) const;
  // The value as given, for reports: per-head M or M_global; 0 when unlimited.
  int64_t value() const { return m_value; }

 private:
  enum class Kind { Unlimited, PerHead, Global };
  Budget(Kind kind, int64_t value) : m_kind(kind), m_value(value) {}
  Kind m_kind = Kind::Unlimited;
  int64_t m_value = 0;
};

// Bytes of K and V of one entry (one token, one layer, one KV head).
inline int64_t kv_bytes_per_entry(const KvGeometry& g, int bytes_per_value = 4) {
  return 2 * static_cast<int64_t>(g.head_dim) * bytes_per_value;
}

}  // namespace trimkv
