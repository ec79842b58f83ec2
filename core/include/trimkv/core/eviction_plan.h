// What an eviction policy returns and the cache applies (DESIGN.md "Key objects", STYLE.md §5):
// for every (layer, KV head), the indices of the entries to KEEP, into that head's current cache
// order, strictly increasing. Heads not touched by a policy must still list every entry
// (keep_all() builds that). Plain C++, no ATen.
#pragma once
#include <cstdint>
#include <vector>

namespace trimkv {

class KvBookkeeping;

class EvictionPlan {
 public:
  EvictionPlan() = default;
  // Every head keeps nothing until filled in.
  EvictionPlan(int n_layer, int n_kv_head);
  // Keeps every entry of every head of `kv`; a policy then narrows the heads it evicts from.
  static EvictionPlan keep_all(const KvBookkeeping& kv);

  int n_layer() const { return m_n_layer; }
  int n_kv_head() const { return m_n_kv_head; }

  // Sorted keep indices of head h of layer il (into that head's cache order).
  std::vector<int32_t>& keep(int il, int h) { return m_keep[stream(il, h)]; }
  const std::vector<int32_t>& keep(int il, int h) const { return m_keep[stream(il, h)]; }

  // Entries kept over all heads.
  int64_t n_kept() const;

  // Throws trimkv::Error (ErrorKind::Input) naming the layer, head and index when the plan's
  // geometry differs from kv's, an index is outside [0, length), or indices are not strictly
  // increasing.
  void validate(const KvBookkeeping& kv) const;

 private:
  int stream(int il, int h) const;

  int m_n_layer = 0;
  int m_n_kv_head = 0;
  std::vector<std::vector<int32_t>> m_keep;  // [n_layer * n_kv_head] -> sorted keep indices
};

}  // namespace trimkv
