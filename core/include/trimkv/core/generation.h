// Running a TextModel over one token stream held in a KvCache: chunked prefill onto whatever the
// cache already holds, single-token decode, and the generation loop (sampling, stop rules,
// streaming, cancellation).
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "trimkv/core/kv_types.h"
#include "trimkv/core/generation_types.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

class KvCache;

// Geometry of the cache that `model` needs (layers, KV heads, head_dim).
KvGeometry kv_geometry_of(const TextConfig& cfg, int block_size = 16);

class TextRunner {
 public:
  // `cache` must have the model's geometry and must outlive the runner.
  TextRunner(const TextModel& model, KvCache& cache, int prefill_chunk = 256);

  // Appends `ids` to the stream (metadata from `info_template`: modality, turn...), running the
  // decoder in chunks of at most prefill_chunk tokens; returns the logits of the last token
  // [vocab]. Error{Input} if the stream would exceed max_position_embeddings.
  at::Tensor prefill(const std::vector<int32_t>& ids, const TokenInfo& info_template = {});
  // Same, for one token (decode); returns [vocab] logits.
  at::Tensor step(int32_t id, const TokenInfo& info_template = {});

  int64_t n_tokens() const { return m_n_tokens; }  // tokens in the stream so far
  const TextModel& model() const { return *m_model; }
  KvCache& cache() { return *m_cache; }

 private:
  at::Tensor forward_chunk(const std::vector<int32_t>& ids, const TokenInfo& info_template);

  const TextModel* m_model;
  KvCache* m_cache;
  int m_prefill_chunk;
  int64_t m_n_tokens = 0;
};

// Prefills `prompt` onto the runner's stream and generates. `cancel` (nullable) is polled between
// steps from any thread; a cancelled run returns what it had with stop_reason "cancelled".
GenerationResult generate(TextRunner& runner, const std::vector<int32_t>& prompt,
                          const GenerationParams& params, const TextCallback& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv
