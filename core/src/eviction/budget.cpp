#include "trimkv/core/budget.h"

#include "trimkv/core/error.h"

namespace trimkv {

Budget Budget::per_head(int64_t m) {
  TRIMKV_CHECK(m > 0, Input, "budget must be a positive number of KV entries per head, got ", m);
  return Budget(Kind::PerHead, m);
}

Budget Budget::global(int64_t m_global) {
  TRIMKV_CHECK(m_global > 0, Input, "global budget must be a positive number of KV entries, got ",
               m_global);
  return Budget(Kind::Global, m_global);
}

int64_t Budget::global_entries(const KvGeometry& g) const {
  switch (m_kind) {
    case Kind::Unlimited:
      return -1;
    case Kind::PerHead:
      return m_value * g.n_streams();
    case Kind::Global:
      return m_value;
  }
  return -1;
}

int64_t Budget::per_head_entries(const KvGeometry& g) const {
  switch (m_kind) {
    case Kind::Unlimited:
      return -1;
    case Kind::PerHead:
      return m_value;
    case Kind::Global:
      return m_value / g.n_streams();
  }
  return -1;
}

int64_t Budget::bytes(const KvGeometry& g, int bytes_per_value) const {
  if (is_unlimited()) return -1;
  return global_entries(g) * kv_bytes_per_entry(g, bytes_per_value);
}

void Budget::require_per_head_at_least(const KvGeometry& g, int64_t m_min,
                                       const std::string& who) const {
  if (is_unlimited()) return;
  TRIMKV_CHECK(per_head_entries(g) >= m_min, Input, who, " needs at least ", m_min,
               " KV entries per head, but the budget ", describe(g), " gives ", per_head_entries(g),
               " (", g.n_layer, " layers x ", g.n_kv_head, " KV heads)");
}

std::string Budget::describe(const KvGeometry& g) const {
  switch (m_kind) {
    case Kind::Unlimited:
      return "unlimited";
    case Kind::PerHead:
      return std::to_string(m_value) + " per head (" + std::to_string(global_entries(g)) +
             " global)";
    case Kind::Global:
      return std::to_string(m_value) + " global (" + std::to_string(per_head_entries(g)) +
             " per head)";
  }
  return "?";
}

}  // namespace trimkv
