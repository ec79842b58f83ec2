// Value types shared by the KV cache, the eviction policies and the inspection snapshots.
// Plain C++: no ATen (bookkeeping code includes this).
//
// Units (DESIGN.md "Budgets and units"): one entry = one token's K and V in one layer and one KV
// head. A token is a position of the sequence's token stream; token_index is its sequential,
// 0-based position, the `pos` used by eviction scores (METHOD.md §4), never an M-RoPE position.
#pragma once
#include <cmath>
#include <cstdint>

namespace trimkv {

enum class Modality : uint8_t { Text, Image, Special };

const char* modality_name(Modality modality);

// One position of the token stream (every token ever appended, evicted or not).
struct TokenInfo {
  int32_t token_index = 0;    // sequential, 0-based; == the position in the stream
  int32_t rope_position = 0;  // the position RoPE used (M-RoPE: its time axis)
  Modality modality = Modality::Text;
  int16_t turn = 0;       // conversation turn the token belongs to
  int16_t image_id = -1;  // -1: not part of an image
  int16_t tile = 0;       // tile of the image (families that tile), else 0
  int16_t patch_row = 0;  // patch grid position inside the image / tile
  int16_t patch_col = 0;
};

// A token's multimodal rotary position (Qwen-VL M-RoPE, shared/QWEN-VL.md §4) relative to the
// start of the segment it is appended with: time, row, column. A text token's three are equal.
struct RopeOffset {
  int32_t t = 0, h = 0, w = 0;
};

// Per cached entry: what a policy needs to score it (METHOD.md §2, §4).
struct EntryMeta {
  int32_t token_index = 0;  // the token this entry was created for
  float log_beta = 0.0f;    // log β from the retention gate; 0 means "never forget"
  // log(1 + β) = log1p(exp(log_beta)), the lookahead-2 retention score's constant term, computed
  // once by KvBookkeeping::append (eviction_select.h: log1p_beta_of); derived, not compared.
  float log1p_beta = 0.0f;
};

// log(1 + β) from log β: EntryMeta::log1p_beta.
inline float log1p_beta_of(float log_beta) { return std::log1p(std::exp(log_beta)); }

// Equal token and log β (log1p_beta follows from log β).
inline bool operator==(const EntryMeta& a, const EntryMeta& b) {
  return a.token_index == b.token_index && a.log_beta == b.log_beta;
}
inline bool operator!=(const EntryMeta& a, const EntryMeta& b) { return !(a == b); }

inline constexpr int kDefaultBlockSize = 16;  // entries per block; to be chosen by measurement

struct KvGeometry {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int block_size = kDefaultBlockSize;

  int n_streams() const { return n_layer * n_kv_head; }  // one stream per (layer, KV head)
};

}  // namespace trimkv
