// A snapshot of the KV cache at one step: what the GUI draws (per layer x head, which entries
// are kept, their metadata and policy score; totals; pool usage). A plain value type: compact
// vectors and bitsets, no tensor copies, safe to hand to another thread.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trimkv/core/kv_types.h"
#include "trimkv/core/trace.h"

namespace trimkv {

class KvBookkeeping;

struct SnapshotEntry {
  int32_t token_index = 0;
  float log_beta = 0;
  float score = 0;  // the policy's score (NaN when the policy has none)
  Modality modality = Modality::Text;
  int16_t turn = 0;
  int16_t image_id = -1;
  int16_t tile = 0;
  int16_t patch_row = 0;
  int16_t patch_col = 0;
};

struct HeadSnapshot {
  std::vector<SnapshotEntry> entries;  // in cache order
  ModalityCounts counts;
  std::vector<uint64_t> kept_bits;  // bit t set <=> token t has an entry here; [ceil(n_tokens/64)]
  bool kept(int32_t token_index) const {
    const size_t w = static_cast<size_t>(token_index) / 64;
    return token_index >= 0 && w < kept_bits.size() && ((kept_bits[w] >> (token_index % 64)) & 1u);
  }
};

struct KvSnapshot {
  int64_t step = 0;      // forwards run so far
  int64_t n_tokens = 0;  // tokens in the stream
  std::string policy;
  KvGeometry geometry;
  std::vector<HeadSnapshot> heads;  // [n_layer * n_kv_head], index il * n_kv_head + h
  ModalityCounts totals;
  int64_t total_entries = 0;
  int64_t bytes_held = 0;      // K and V of the live entries
  int64_t budget_global = -1;  // -1: unlimited
  int32_t blocks_used = 0, blocks_free = 0, blocks_capacity = 0, peak_blocks_used = 0;
  int64_t n_events = 0;  // compressions so far
  // [n_tokens]: how many (layer, KV head) streams hold an entry for each token (what the
  // Studio's all-heads views shade by), counted once here rather than per repaint.
  std::vector<int32_t> keepers;

  const HeadSnapshot& head(int il, int h) const {
    return heads[static_cast<size_t>(il * geometry.n_kv_head + h)];
  }
};

// Builds a snapshot from the bookkeeping; `scores` ([n_streams] -> [length], may be empty = NaN)
// from the policy. bytes_per_entry: K and V of one entry.
KvSnapshot make_snapshot(const KvBookkeeping& kv, const std::vector<std::vector<float>>& scores,
                         int64_t bytes_per_entry);

}  // namespace trimkv
