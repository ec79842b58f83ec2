// The public API app/ uses for vision-language models (STYLE.md §1): plain values in and out, no
// LibTorch header. A ChatEngine owns a loaded VLM and one conversation (a core Session):
// user turns with text and image files, streamed answers, reset, cancel. Errors are
// trimkv::Error values naming the input; after any error the conversation is as before the call.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/continuation_score.h"
#include "trimkv/core/conversation_types.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/generation_types.h"
#include "trimkv/core/snapshot.h"
#include "trimkv/vision/vlm_info.h"

namespace trimkv::vision {

// Where a conversation stands.
struct ConversationState {
  int turns = 0;                    // messages so far
  int64_t tokens = 0;               // positions in the token stream
  int64_t max_tokens = 0;           // max_position_embeddings
  int64_t kv_entries = 0, kv_text_entries = 0, kv_image_entries = 0, kv_special_entries = 0;
  int64_t kv_bytes = 0;
  bool awaiting_answer = false;
  // Eviction (ChatEngine::set_eviction): the policy ("full" when none is set), M_global (-1:
  // unlimited), compressions since the conversation (or the evictor) started, and the most
  // entries held after any forward.
  std::string policy = "full";
  int64_t budget_global = -1;
  int64_t eviction_events = 0;
  int64_t peak_kv_entries = 0;
  std::vector<ImageRecord> images;  // every image of the conversation, by image id
};

// One position of the conversation's token stream, kept or not: what the inspector labels.
struct StreamToken {
  int32_t id = -1;   // vocabulary id; -1 while its answer is still being generated
  std::string text;  // the token decoded alone ("" when id is -1 or the model has no tokenizer)
  TokenInfo info;    // token index, modality, turn (message), image id, tile, patch row/col
};

struct ConversationCheckpoint;  // opaque: ChatEngine::checkpoint()

class ChatEngine {
 public:
  // Whether `dir` is a checkpoint of a known vision-language family (reads config.json only).
  static bool is_vlm_checkpoint(const std::string& dir);
  // The family that runs `model_type` (a VLM's or a text decoder's), "" when none does.
  static std::string family_for_model_type(const std::string& model_type);
  // Loads a checkpoint folder (or a Hugging Face repo id found in the local cache, hf_cache.h):
  // a vision-language one, or a text model (then messages are text
  // only: an image is refused naming it). Conversations render through the checkpoint's own chat
  // template with options.template_vars. Errors name the folder, file, field or tensor.
  static std::unique_ptr<ChatEngine> load(const std::string& dir, const EngineOptions& options = {});
  ~ChatEngine();

  ModelInfo info() const;          // the text decoder, as Engine::info()
  VisionInfo vision_info() const;  // the vision side (takes_images() false for a text model)
  bool takes_images() const { return vision_info().takes_images(); }
  // The image tokens the image file `path` becomes in a turn at this model's resolution (the
  // processor's sizes, before any token reduction; 0 for a text model), so a user sees the cost
  // before sending. Errors name the file.
  int64_t image_token_count(const std::string& path) const;
  int64_t image_token_count(int width, int height) const;  // the same for an image of that size
  // image_token_count(width, height) as a function that outlives this engine and may be called
  // from any thread (it holds the immutable encoder): what a GUI thread shows while the engine
  // works elsewhere.
  std::function<int64_t(int, int)> image_token_counter() const;
  bool has_chat_template() const;
  std::string chat_template_origin() const;  // the file it came from ("" when none)
  // Whether the chat template's generation prompt opens a thinking block ("<think>", Qwen3 /
  // Qwen3-VL Thinking): answers then start inside it (split_thinking's opened_by_prompt).
  bool answers_open_thinking() const;
  // Why conversations cannot be rendered ("" when they can): the folder has no chat template, or
  // its template does not parse (the message names the file, line and column). Raw prompts work.
  std::string chat_template_problem() const;

  // Chat-template variables (e.g. enable_thinking=false) of every later conversation: the
  // conversation is reset (the template renders the whole conversation with them).
  void set_template_variables(const std::vector<TemplateVar>& vars);
  std::vector<TemplateVar> template_variables() const;

  // One-shot generation on a fresh conversation: `prompt` with <image> placeholders filled by
  // `images` in order (none: the images go first). chat_template = false: the prompt is used as
  // is (as the Hugging Face processor does); true: it becomes one user turn of the chat template,
  // after the system message set by set_system_prompt() when there is one.
  GenerationResult generate(const std::string& prompt, const std::vector<std::string>& images,
                            const GenerationParams& params, bool chat_template = false,
                            const TextCallback& on_text = {}, const std::atomic<bool>* cancel = nullptr);

  // Same under an eviction policy and budget (a fresh evictor of its own). The settings are
  // checked against the model (budget, policy options, gates the policy needs) before any image
  // is read: Error{Input}. The result carries the policy, budget, eviction count and trace.
  GenerationResult generate(const std::string& prompt, const std::vector<std::string>& images,
                            const GenerationParams& params, const EvictionSettings& eviction,
                            bool chat_template = false, const TextCallback& on_text = {},
                            const std::atomic<bool>* cancel = nullptr);

  // Perplexity of the last `last_tokens` tokens of `text` (tokenized as raw text, with the
  // tokenizer's own special tokens) under the conversation's eviction policy (set_eviction), on a
  // fresh stream of its own: the conversation is not touched. Error{Input} for a model without a
  // tokenizer, a text too short to score that many tokens after one of context, or one past the
  // position limit.
  ContinuationScore score_text(const std::string& text, int64_t last_tokens,
                               const std::atomic<bool>* cancel = nullptr);

  // --- the conversation -----------------------------------------------------------------------
  // Puts the conversation's KV cache under an eviction policy from now on (checked as above;
  // on error nothing changes). The cache keeps what it holds; reset() and a rollback after a
  // failed turn start a fresh evictor (new trace). Until called: the plain full cache.
  void set_eviction(const EvictionSettings& eviction);
  const EvictionSettings& eviction() const;
  // The eviction trace of the conversation so far (empty, policy "full", when none is set).
  Trace trace() const;
  // What the cache holds now, per layer and KV head (the GUI's view).
  KvSnapshot snapshot() const;
  // The system message of the next fresh conversation ("" = none): applied when the first user
  // turn after load() or reset() is added, as message 0 (role "system") rendered by the family's
  // chat template. A conversation already started keeps its own (Session::set_system_prompt).
  void set_system_prompt(const std::string& text);
  const std::string& system_prompt() const;
  // Positions [first, n) of the token stream (n: tokens the cache has seen, including the answer
  // in flight when called from a TextCallback), kept or evicted.
  std::vector<StreamToken> tokens(int64_t first = 0) const;
  // Adds a user turn (text with optional <image> placeholders; images without placeholders go
  // first): only its images are encoded and only its tokens prefilled.
  void add_user_turn(const std::string& text, const std::vector<std::string>& images,
                     const std::atomic<bool>* cancel = nullptr);
  void add_user_turn(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel = nullptr);
  // The logits [vocab_size] the pending answer starts from (empty when none is pending).
  std::vector<float> pending_logits() const;
  // Generates and appends the assistant's answer, streaming its text.
  GenerationResult respond(const GenerationParams& params, const TextCallback& on_text = {},
                           const std::atomic<bool>* cancel = nullptr);
  // Appends an assistant answer given as text (replaying a saved conversation).
  void add_assistant_text(const std::string& text, const std::atomic<bool>* cancel = nullptr);
  // Generates an answer to the pending turn (returned) but appends `given` to the conversation
  // instead (evaluation with gold history; Session::generate_then_give).
  GenerationResult respond_then_give(const std::string& given, const GenerationParams& params,
                                     const TextCallback& on_text = {},
                                     const std::atomic<bool>* cancel = nullptr);
  void reset();
  // The conversation as it stands, to go back to after a request that failed or was stopped
  // (Session::checkpoint): restore() is immediate; the cache is rebuilt before it is next used,
  // or now by catch_up(cancel) (Error{Cancelled} leaves it for later). cache_current(): whether
  // state(), snapshot() and tokens() describe the conversation, not a cache still to be rebuilt.
  std::shared_ptr<const ConversationCheckpoint> checkpoint() const;
  void restore(const ConversationCheckpoint& c);
  void catch_up(const std::atomic<bool>* cancel = nullptr);
  bool cache_current() const;
  ConversationState state() const;
  const std::vector<Message>& transcript() const;
  // The transcript as JSON (Hugging Face messages: role + content parts with "text" / "image").
  std::string transcript_json() const;
  void save_transcript(const std::string& path) const;  // Error{Io} naming the file

 private:
  GenerationResult run_one(const std::string& prompt, const std::vector<std::string>& images,
                           const GenerationParams& params, const EvictionSettings* eviction,
                           bool chat_template, const TextCallback& on_text,
                           const std::atomic<bool>* cancel);
  struct Impl;
  explicit ChatEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace trimkv::vision
