// The eviction trace: one event per compression, plain values (no tensors), safe to copy to
// another thread; exported as JSON (schema below) and as per-head counts CSV.
//
// JSON schema (trimkv-trace, version 1). Every count is in KV entries.
// {
//   "format": "trimkv-trace", "version": 1,
//   "policy": "dbtrimkv", "options": {"lookahead": "2", ...},     // as given (key=value text)
//   "geometry": {"n_layer": L, "n_kv_head": H, "head_dim": D, "block_size": B},
//   "budget": {"global": M_global or null, "per_head": M or null}, "slack_per_head": S,
//   "events": [{
//     "index": 0,                 // 0-based event number
//     "kind": "evict",            // "evict" (a plan applied to the cache)
//     "step": 3,                  // forwards run so far (prefill chunks and decode steps), 1-based
//     "n_tokens": 517,            // tokens in the stream when it happened (q = n_tokens + 1)
//     "phase": "prefill",         // "prefill" (a multi-token forward) or "decode"
//     "entries_before": 1440, "entries_after": 1152, "blocks_freed": 12,
//     "select_ms": 0.12,          // the policy's plan (scoring + selection)
//     "apply_ms": 0.30,           // plan check, trace accounting, compaction, freeing blocks
//     "heads": [                  // L*H items, index il*H + h
//       {"layer": 0, "head": 0,
//        "kept": {"text": 10, "image": 54, "special": 0},
//        "evicted": {"text": 3, "image": 10, "special": 0},
//        "evicted_tokens": [5, 17, ...]}   // token indices, ascending ([] when not recorded)
//     ]}],
//   "token_merges": [{            // token-stream changes made before the decoder (visionzip)
//     "image_id": 0, "first_token": 12, "n_in": 64, "n_out": 20,
//     "dominant": [...],          // indices (into the image's tokens) kept as they are
//     "assignment": [...]}]       // per input token: contextual token it merged into, -1 if kept
// }
// CSV (trace_per_head_csv): header
//   event,step,n_tokens,phase,layer,head,kept_text,kept_image,kept_special,evicted_text,
//   evicted_image,evicted_special
// then one row per event and (layer, head).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trimkv/core/kv_stats.h"
#include "trimkv/core/kv_types.h"

namespace trimkv {

struct HeadEviction {
  ModalityCounts kept, evicted;
  std::vector<int32_t> evicted_tokens;  // ascending token indices
  bool operator==(const HeadEviction& o) const {
    return kept == o.kept && evicted == o.evicted && evicted_tokens == o.evicted_tokens;
  }
};

struct EvictionEvent {
  int64_t index = 0;
  std::string kind = "evict";
  int64_t step = 0;
  int64_t n_tokens = 0;
  std::string phase;  // "prefill" | "decode"
  int64_t entries_before = 0, entries_after = 0;
  int64_t blocks_freed = 0;
  double select_ms = 0, apply_ms = 0;
  std::vector<HeadEviction> heads;  // [n_layer * n_kv_head]

  ModalityCounts kept_total() const;
  ModalityCounts evicted_total() const;
};

struct TokenMerge {
  int32_t image_id = -1;
  int32_t first_token = 0;  // token index of the image's first (kept) token in the stream
  int32_t n_in = 0, n_out = 0;
  std::vector<int32_t> dominant;
  std::vector<int32_t> assignment;
  bool operator==(const TokenMerge& o) const {
    return image_id == o.image_id && first_token == o.first_token && n_in == o.n_in &&
           n_out == o.n_out && dominant == o.dominant && assignment == o.assignment;
  }
};

struct Trace {
  std::string policy;
  std::map<std::string, std::string> options;
  KvGeometry geometry;
  int64_t budget_global = -1;    // -1: unlimited
  int64_t budget_per_head = -1;  // -1: unlimited
  int64_t slack_per_head = 0;
  std::vector<EvictionEvent> events;
  std::vector<TokenMerge> token_merges;
};

bool operator==(const EvictionEvent& a, const EvictionEvent& b);
bool operator==(const Trace& a, const Trace& b);

// JSON text of the schema above (indent < 0: compact).
std::string trace_to_json(const Trace& trace, int indent = -1);
// Parses trace_to_json's output. Error{Format} naming the field on malformed input.
Trace trace_from_json(const std::string& json);
// Per-head counts, one row per event and (layer, head).
std::string trace_per_head_csv(const Trace& trace);

}  // namespace trimkv
