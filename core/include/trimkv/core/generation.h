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
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

class EntryScorer;
class Evictor;
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
  // Multimodal prefill: positions whose input embeddings are given (the caller merged image
  // features into the token embeddings). ids: [n] (image positions hold the image token id),
  // embeds: [n, hidden_size], infos: [n] (modality, turn, image fields; token_index and
  // rope_position are assigned here). `cancel` is polled between chunks and between the layers of
  // a chunk: Error{Cancelled}, the cache then torn (a chunk's tokens registered, only some layers
  // appended): clear it (the Session rebuilds it from its kept segments). `rope` ([n] or empty):
  // the positions' multimodal rotary offsets from the segment's start (a model with M-RoPE);
  // empty: sequential positions. `deepstack` (Qwen3-VL, or empty): deepstack[j] [n_image, d] is
  // added to the image positions (in stream order) after decoder layer j. Returns [vocab] logits
  // of the last position.
  at::Tensor prefill_embedded(const std::vector<int32_t>& ids, const at::Tensor& embeds,
                              const std::vector<TokenInfo>& infos,
                              const std::atomic<bool>* cancel = nullptr,
                              const std::vector<RopeOffset>& rope = {},
                              const std::vector<at::Tensor>& deepstack = {});

  // Eviction (evictor.h): after every forward the evictor may compress the cache; `scorer`
  // (nullable) gives each new entry its log β (retention gates). Error{Input} before any work
  // when the evictor's policy needs gates and scorer is null. Both must outlive the runner;
  // pass nullptrs to detach.
  void set_eviction(Evictor* evictor, const EntryScorer* scorer = nullptr);
  Evictor* evictor() const { return m_evictor; }

  int64_t n_tokens() const { return m_n_tokens; }  // tokens in the stream so far
  // The rotary position of the next text token: n_tokens() for plain RoPE; with M-RoPE the
  // largest position so far + 1 (images advance by their grid's longer side, not their tokens).
  int64_t next_position() const { return m_next_position; }
  const TextModel& model() const { return *m_model; }
  KvCache& cache() { return *m_cache; }

 private:
  // more_chunks: another chunk of the same prefill follows (eviction trigger, evictor.h).
  // embeds: [n, d] input embeddings (undefined: looked up from ids); per_token: [n] infos
  // replacing info_template (nullable); rope: [n] offsets from rope_base (nullable: sequential
  // from next_position()).
  at::Tensor forward_chunk(const std::vector<int32_t>& ids, const TokenInfo& info_template,
                           bool more_chunks = false, const at::Tensor& embeds = {},
                           const TokenInfo* per_token = nullptr, const RopeOffset* rope = nullptr,
                           int64_t rope_base = 0, const LayerInjection& inject = {},
                           const std::atomic<bool>* cancel = nullptr);
  void check_prompt(const std::vector<int32_t>& ids) const;  // non-empty, fits, in vocabulary

  const TextModel* m_model;
  KvCache* m_cache;
  int m_prefill_chunk;
  int64_t m_n_tokens = 0;
  int64_t m_next_position = 0;
  Evictor* m_evictor = nullptr;
  const EntryScorer* m_scorer = nullptr;
};

// Whether `id` ends an answer as EOS does: one of the model's EOS ids or of params.stop_token_ids
// (whatever params.stop_at_eos says; the generation loop stops at it only when that is set).
bool is_stop_token(const TextConfig& config, const GenerationParams& params, int32_t id);

// Fills r's kv_* fields from what `cache` holds now; the peak becomes max(peak, entries held).
void fill_kv_stats(const KvCache& cache, GenerationResult& r);

// Prefills `prompt` onto the runner's stream and generates. `cancel` (nullable) is polled between
// steps from any thread; a cancelled run returns what it had with stop_reason "cancelled".
GenerationResult generate(TextRunner& runner, const std::vector<int32_t>& prompt,
                          const GenerationParams& params, const TextCallback& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);

// A prompt already prefilled onto the runner's stream (multimodal prompts, conversation turns).
struct PrefilledPrompt {
  at::Tensor logits;             // [vocab] of its last position
  std::vector<int32_t> ids;      // its ids (repetition penalty history; prompt_tokens)
  double prefill_ms = 0;         // reported as the result's prefill_ms
  TokenInfo decode_info;         // metadata template of the generated tokens (turn)
};
// Generates from a prefilled prompt (same contract as above otherwise).
GenerationResult generate(TextRunner& runner, const PrefilledPrompt& prompt,
                          const GenerationParams& params, const TextCallback& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv
