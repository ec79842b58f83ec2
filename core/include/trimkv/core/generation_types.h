// Plain value types of generation (no tensors): what the CLI and GUI pass in and get back.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/sampling.h"
#include "trimkv/core/trace.h"

namespace trimkv {

struct GenerationParams {
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;  // generation stops when the text contains one
  bool stop_at_eos = true;
  // Tokens that stop generation as EOS does (with stop_at_eos), besides the model's EOS ids: a
  // chat session adds its template's end-of-turn token.
  std::vector<int32_t> stop_token_ids;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token included when EOS stopped it)
  std::string text;             // decoded text without special tokens, cut before a stop string
  std::string stop_reason;      // eos | stop_string | max_tokens | context_full | cancelled
  int64_t prompt_tokens = 0;
  std::vector<int32_t> prompt_ids;  // the prompt the answer follows (a chat turn: its own turn)
  double prefill_ms = 0;        // prompt prefill up to the first token's logits
  double decode_ms = 0;         // every decode step after that
  double first_token_ms = -1;   // wall time from generate()'s start to the first token sampled
                                // (its prefill included unless prefilled before); -1: none
  int64_t kv_entries = 0;       // entries held by the cache at the end
  int64_t kv_bytes = 0;         // bytes of K and V held at the end
  int64_t kv_text_entries = 0;  // entries held at the end whose token is text
  int64_t kv_image_entries = 0; // ... image
  // Eviction (when the runner has an evictor): the policy, M_global (-1: unlimited), the number
  // of compressions, the most entries held after any forward, and the trace (null otherwise).
  std::string policy = "full";
  int64_t budget_global = -1;
  int64_t eviction_events = 0;
  int64_t peak_kv_entries = 0;
  std::shared_ptr<const Trace> trace;
};

// Streaming: `on_text` receives pieces of the final text as they become certain (never half a
// UTF-8 character, never part of a stop string); their concatenation equals result.text.
using TextCallback = std::function<void(const std::string& piece)>;

}  // namespace trimkv
