// A multi-turn conversation over one KV cache (DESIGN.md "The data path of one turn"). Adding a
// user turn encodes only that turn's images and prefills only its tokens onto the existing cache;
// the assistant's answer is generated (or given as text) and appended; the next turn continues
// from there. No image code here: media enter through a TurnEncoder that vision/ implements per
// family, as token ids plus embedding rows tagged with their modality and layout.
//
// Failure and cancellation: a turn whose encoding fails (bad image, too long) changes nothing; a
// turn cancelled or failing during its prefill is rolled back (the cache is rebuilt from the
// segments before it), so the session stays usable after any error.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/continuation_score.h"
#include "trimkv/core/conversation_types.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/policies.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

// Positions to append to the token stream.
struct StreamSegment {
  std::vector<int32_t> ids;       // [n]; image positions hold the family's image token id
  std::vector<TokenInfo> infos;   // [n] modality, image_id, tile, patch row/col; token_index,
                                  //     rope_position and turn are set by the Session
  at::Tensor image_embeddings;    // [n_image, hidden_size]: rows for the positions whose
                                  //     modality is Image, in stream order; undefined if none
  std::vector<TokenMerge> token_merges;  // image-token reductions (ImageTokenReducer) made in
                                         // this segment; first_token counts from its start
  std::vector<RopeOffset> rope;  // [n] multimodal rotary offsets from the segment's start
                                 // (M-RoPE families), or empty: sequential positions
  std::vector<at::Tensor> deepstack;  // Qwen3-VL: [j] [n_image, hidden_size], added to the image
                                      // positions after decoder layer j (TextRunner), or empty
};

// Reduces the image tokens of one vision-tower pass (an image, or one tile of a tiled image)
// before the decoder (visionzip, METHOD.md §6): attention [n] received per token in the tower's
// last layer, keys [n, dk], embeddings [n, d] (the decoder's rows) -> the tokens kept
// (visionzip_select's result). The Session passes one when its policy is visionzip.
using ImageTokenReducer = std::function<VisionZipResult(
    const at::Tensor& attention, const at::Tensor& keys, const at::Tensor& embeddings)>;

// The chat format and media encoder of one model family (implemented in vision/; text models use
// core's TextTurnEncoder). Each piece of a conversation is rendered by the checkpoint's chat
// template (ChatFormat): `history` is the conversation so far (the Session's transcript).
class TurnEncoder {
 public:
  virtual ~TurnEncoder() = default;
  // A user message after `history`, in the chat template, through the assistant generation
  // prompt (the conversation's opening too when history is empty). Its images are decoded and
  // encoded now; the k-th gets image id first_image_id + k and its record is appended to
  // `images`. Errors name the input and leave nothing changed; `cancel` is polled between images
  // and tiles (Error{Cancelled}). With `reduce` set, each tower pass's image tokens are replaced
  // by the tokens it keeps (the image-token runs of the prompt shrink to match) and every pass
  // that changed is listed in the segment's token_merges; a family without the tower statistics
  // ignores it.
  virtual StreamSegment user_turn(const std::vector<Message>& history, const std::vector<ContentPart>& content,
                                  int first_image_id, std::vector<ImageRecord>& images,
                                  const std::atomic<bool>* cancel,
                                  const ImageTokenReducer& reduce = {}) const = 0;
  // The same content without chat template (a raw prompt, as the processor sees plain text).
  virtual StreamSegment raw_prompt(const std::vector<ContentPart>& content, int first_image_id,
                                   std::vector<ImageRecord>& images,
                                   const std::atomic<bool>* cancel,
                                   const ImageTokenReducer& reduce = {}) const = 0;
  // The conversation opening with a system message `text` (ids, all text positions); the user
  // turn after it has the system message in its history.
  virtual std::vector<int32_t> system_turn(const std::string& text) const = 0;
  // An assistant answer given as text after `history` (which ends with the user message it
  // answers), from the end of the generation prompt through its closing.
  virtual std::vector<int32_t> assistant_turn(const std::vector<Message>& history, const std::string& text) const = 0;
  // What closes an assistant answer whose tokens are already in the stream (its end-of-turn
  // token, if generated, is dropped first); `history` ends with the user message it answers.
  virtual std::vector<int32_t> close_assistant_turn(const std::vector<Message>& history) const = 0;
  // Tokens that end an assistant answer besides the model's EOS ids (the template's
  // end-of-turn token, e.g. <|im_end|>): generation of a chat answer stops at them.
  virtual std::vector<int32_t> end_of_turn_ids() const = 0;
  // The same encoder with other chat-template variables (e.g. enable_thinking=false).
  virtual std::shared_ptr<const TurnEncoder> with_template_variables(const std::vector<TemplateVar>& vars) const = 0;
  // The image tokens (positions of modality Image, before any token reduction) an image of
  // width x height pixels becomes in a turn, from the processor's sizes alone; 0 for encoders
  // that take no images.
  virtual int64_t image_token_count(int width, int height) const {
    (void)width, (void)height;
    return 0;
  }
};

struct SessionOptions {
  int block_size = kDefaultBlockSize;
  int prefill_chunk = 256;
};

class Session {
 public:
  // `model` must outlive the session.
  Session(const TextModel& model, std::shared_ptr<const TurnEncoder> encoder,
          const SessionOptions& options = {});
  ~Session();

  // The system message of the next fresh conversation ("" = none, the default): when the first
  // user turn of a conversation is added (after construction or reset()), the system turn goes
  // before it, as message 0 of the transcript (role "system"). A conversation already started
  // keeps the system message it began with; reset() does not clear this setting.
  void set_system_prompt(std::string text) { m_system_prompt = std::move(text); }
  const std::string& system_prompt() const { return m_system_prompt; }
  // Appends a user message (chat template) and prefills it; the session then awaits an answer.
  // Error{Input} when an answer is still pending or the context would overflow. The first user
  // message of a conversation brings the system turn (set_system_prompt) with it; on error
  // neither is kept.
  void add_user_turn(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel = nullptr);
  // Appends a prompt without chat template (one-shot generation); awaits an answer.
  void add_raw_prompt(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel = nullptr);
  // Generates the answer to the pending prompt and appends it (closed, for chat turns). A
  // cancelled generation keeps what it produced.
  GenerationResult generate(const GenerationParams& params, const TextCallback& on_text = {},
                            const std::atomic<bool>* cancel = nullptr);
  // Appends an assistant answer given as text (conversation replay).
  void add_assistant_text(const std::string& text, const std::atomic<bool>* cancel = nullptr);
  // Generates the answer to the pending prompt as generate() does, then drops it and appends
  // `given` instead (evaluation with gold history). Returns the generated answer (its
  // eviction_events / peak_kv_entries as generated; kv_* as the cache holds after `given`). When
  // decoding fed tokens, the cache is rebuilt from the kept segments first (as a rollback: a
  // fresh evictor replays them).
  GenerationResult generate_then_give(const std::string& given, const GenerationParams& params,
                                      const TextCallback& on_text = {},
                                      const std::atomic<bool>* cancel = nullptr);
  // Perplexity of the last `last` tokens of `ids` under the session's eviction policy
  // (continuation_score.h), as raw text on a fresh stream: the conversation is reset before and
  // after. Error{Input} unless 1 <= last < ids.size().
  ContinuationScore score_tokens(const std::vector<int32_t>& ids, int64_t last,
                                 const std::atomic<bool>* cancel = nullptr);
  // Forgets everything (the cache keeps its capacity).
  void reset();
  // Renders the next conversations with `encoder` (e.g. other template variables): the
  // conversation is reset first.
  void set_encoder(std::shared_ptr<const TurnEncoder> encoder);
  const TurnEncoder& encoder() const { return *m_encoder; }
  // Puts the cache under an eviction policy (TextRunner::set_eviction), for every later turn and
  // after reset. Both must outlive the session; nullptrs detach. A rollback replays the kept
  // segments through the evictor again.
  void set_eviction(Evictor* evictor, const EntryScorer* scorer = nullptr);
  // Same with an evictor the session owns, built from `settings` for this model now (settings,
  // budget and the gates a policy needs are checked here: Error{Input}, nothing changed). The
  // cache keeps what it holds; later forwards run under the policy. reset() and a rollback start
  // a fresh evictor (new trace) and replay the kept segments through it. `scorer` (retention
  // gates, may be null) must outlive the session.
  void set_eviction(const EvictionSettings& settings, const EntryScorer* scorer);
  // The evictor in use (null when none).
  const Evictor* evictor() const { return m_evictor; }

 private:
  struct Conversation;  // defined below

 public:
  // The conversation as it stands (segments, token stream, images, transcript, pending answer),
  // without the cache. restore() puts it back at once and leaves the cache to be rebuilt from it
  // (catch_up): a request that failed or was stopped after several turns is undone without
  // prefilling them again first. Cheap to take: tensors are shared, not copied.
  class Checkpoint {
   private:
    friend class Session;
    std::shared_ptr<const Conversation> m_conv;
  };
  Checkpoint checkpoint() const;
  void restore(const Checkpoint& c);
  // Whether the cache holds exactly the conversation. A failed or stopped request (and
  // restore()) after earlier turns leaves it holding more or other entries; they are replaced
  // before the cache is next used (every request catches up first, with its own cancel) or by
  // catch_up() now. Until then cache() shows what the cache still holds. (With no earlier turns
  // there is nothing to prefill: the cache is emptied at once.)
  bool cache_current() const { return !m_stale; }
  // Rebuilds the cache from the kept segments (a fresh owned evictor replays them) unless it is
  // current. Cancelled: Error{Cancelled}, the cache still not current.
  void catch_up(const std::atomic<bool>* cancel = nullptr);

  bool awaiting_answer() const { return m_conv.pending.logits.defined(); }
  int turn() const { return m_conv.turn; }                        // messages so far
  const std::vector<int32_t>& ids() const { return m_conv.ids; }  // the whole token stream
  const std::vector<ImageRecord>& images() const { return m_conv.images; }
  const std::vector<Message>& transcript() const { return m_conv.transcript; }
  const KvCache& cache() const { return m_cache; }
  const TextModel& model() const { return *m_model; }
  // Logits [vocab] of the last prefilled position (undefined when no answer is pending).
  const at::Tensor& pending_logits() const { return m_conv.pending.logits; }

 private:
  struct Stored {  // a prefilled segment, kept to rebuild the cache after a rollback
    std::vector<int32_t> ids;     // [n]
    std::vector<TokenInfo> infos; // [n]
    // [image rows of infos, hidden_size], the image features (undefined when there are none).
    // Text rows are embedded again from ids when the segment is prefilled (a table lookup), so a
    // long conversation keeps a few bytes per text token here, not a hidden-size row.
    at::Tensor image_embeds;
    std::vector<TokenMerge> merges;  // token_merges of the segment, first_token absolute
    std::vector<RopeOffset> rope;    // as StreamSegment::rope
    std::vector<at::Tensor> deepstack;  // as StreamSegment::deepstack
  };
  // What a checkpoint holds: the conversation, everything the cache is rebuilt from.
  struct Conversation {
    std::vector<Stored> stored;
    std::vector<int32_t> ids;
    std::vector<ImageRecord> images;
    std::vector<Message> transcript;
    int turn = 0;
    bool chat_turn = false;  // the pending prompt is a chat turn (its answer gets closed)
    PrefilledPrompt pending;
  };
  // Prefills `seg` as message `turn` (catching the cache up first); on any error the segment is
  // not kept, the cache is left to catch up, and the error is rethrown. Returns [vocab].
  at::Tensor append(const StreamSegment& seg, int turn, const std::atomic<bool>* cancel);
  // invalidate_cache() when the runner holds other than the kept segments.
  void drop_unkept();
  // The cache no longer holds the conversation: catch_up() rebuilds it when it is next used (at
  // once when there is nothing to prefill).
  void invalidate_cache();
  int64_t positions_left() const;  // max_position_embeddings - positions used: what append() accepts
  at::Tensor embeds_of(const Stored& s) const;  // [n, hidden_size]: ids embedded, image rows filled
  // Generates the answer to the pending prompt; on failure the cache is rolled back to the mark
  // before the answer and the prompt stays pending.
  // `params` for the pending answer: a chat turn's also ends at the template's end-of-turn token.
  GenerationParams answer_params(const GenerationParams& params) const;
  GenerationResult generate_pending(const GenerationParams& params, const TextCallback& on_text,
                                    const std::atomic<bool>* cancel);
  void new_runner();
  void add_prompt(const std::vector<ContentPart>& content, bool chat, const std::atomic<bool>* cancel);
  ImageTokenReducer image_token_reducer() const;  // empty unless the policy is visionzip

  const TextModel* m_model;
  std::shared_ptr<const TurnEncoder> m_encoder;
  SessionOptions m_options;
  Evictor* m_evictor = nullptr;
  std::unique_ptr<EvictionSettings> m_owned_settings;  // set: m_evictor is m_owned_evictor
  std::unique_ptr<Evictor> m_owned_evictor;
  const EntryScorer* m_scorer = nullptr;
  KvCache m_cache;
  std::unique_ptr<TextRunner> m_runner;
  Conversation m_conv;
  bool m_stale = false;  // the cache is not m_conv's: catch_up() rebuilds it
  std::string m_system_prompt;
};

}  // namespace trimkv
