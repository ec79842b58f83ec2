#include "trimkv/vision/chat_engine.h"

#include <ATen/Parallel.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_stats.h"
#include "trimkv/core/session.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

struct ChatEngine::Impl {
  std::shared_ptr<VlmModel> model;
  EngineOptions options;
  std::unique_ptr<Session> session;

  SessionOptions session_options() const { return {options.block_size, options.prefill_chunk}; }
};

ChatEngine::ChatEngine(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ChatEngine::~ChatEngine() = default;

bool ChatEngine::is_vlm_checkpoint(const std::string& dir) { return vision::is_vlm_checkpoint(dir); }

std::unique_ptr<ChatEngine> ChatEngine::load(const std::string& dir, const EngineOptions& options) {
  TRIMKV_CHECK(options.threads >= 0, Input, "threads must be >= 0, got ", options.threads);
  TRIMKV_CHECK(options.prefill_chunk > 0, Input, "prefill chunk must be > 0, got ", options.prefill_chunk);
  TRIMKV_CHECK(options.block_size > 0, Input, "block size must be > 0, got ", options.block_size);
  if (options.threads > 0) at::set_num_threads(options.threads);
  auto impl = std::make_unique<Impl>();
  impl->model = load_vlm(dir);
  impl->options = options;
  impl->session = std::make_unique<Session>(impl->model->text, impl->model->encoder, impl->session_options());
  return std::unique_ptr<ChatEngine>(new ChatEngine(std::move(impl)));
}

ModelInfo ChatEngine::info() const {
  const TextModel& m = m_impl->model->text;
  const TextConfig& c = m.config;
  ModelInfo i;
  i.dir = m.dir;
  i.architecture = c.architecture;
  i.model_type = m_impl->model->info.model_type;
  i.family = m_impl->model->info.family;
  i.family_description = m_impl->model->info.description + " (text: " + m.family->name + ")";
  i.weight_dtype = dtype_name(m.weight_dtype);
  i.weight_bytes = static_cast<int64_t>(m.weight_bytes);
  i.parameters = m.decoder->parameter_count() + m_impl->model->info.vision_parameters;
  i.n_layer = c.n_layer;
  i.hidden_size = c.hidden_size;
  i.intermediate_size = c.intermediate_size;
  i.n_head = c.n_head;
  i.n_kv_head = c.n_kv_head;
  i.head_dim = c.head_dim;
  i.vocab_size = c.vocab_size;
  i.max_position_embeddings = c.max_position_embeddings;
  i.tie_word_embeddings = c.tie_word_embeddings;
  i.rope_type = c.rope.type;
  i.rope_theta = c.rope.theta;
  i.has_tokenizer = m.tokenizer != nullptr;
  i.tokenizer_vocab_size = m.tokenizer ? m.tokenizer->vocab_size() : 0;
  i.eos_token_ids = c.eos_token_ids;
  i.kv_bytes_per_token = c.n_layer * c.n_kv_head * c.head_dim * 2 * static_cast<int64_t>(sizeof(float));
  return i;
}

VisionInfo ChatEngine::vision_info() const { return m_impl->model->info; }

GenerationResult ChatEngine::generate(const std::string& prompt, const std::vector<std::string>& images,
                                      const GenerationParams& params, bool chat_template,
                                      const TextCallback& on_text, const std::atomic<bool>* cancel) {
  // A fresh conversation of its own: the engine's conversation is left as it was.
  Session one(m_impl->model->text, m_impl->model->encoder, m_impl->session_options());
  const std::vector<ContentPart> content = content_from_prompt(prompt, images);
  if (chat_template) one.add_user_turn(content, cancel);
  else one.add_raw_prompt(content, cancel);
  return one.generate(params, on_text, cancel);
}

void ChatEngine::add_user_turn(const std::string& text, const std::vector<std::string>& images,
                               const std::atomic<bool>* cancel) {
  add_user_turn(content_from_prompt(text, images), cancel);
}

void ChatEngine::add_user_turn(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel) {
  m_impl->session->add_user_turn(content, cancel);
}

GenerationResult ChatEngine::respond(const GenerationParams& params, const TextCallback& on_text,
                                     const std::atomic<bool>* cancel) {
  return m_impl->session->generate(params, on_text, cancel);
}

void ChatEngine::add_assistant_text(const std::string& text) { m_impl->session->add_assistant_text(text); }

void ChatEngine::reset() { m_impl->session->reset(); }

ConversationState ChatEngine::state() const {
  const Session& s = *m_impl->session;
  ConversationState st;
  st.turns = s.turn();
  st.tokens = static_cast<int64_t>(s.ids().size());
  st.max_tokens = m_impl->model->text.config.max_position_embeddings;
  st.awaiting_answer = s.awaiting_answer();
  st.images = s.images();
  const KvBookkeeping& kv = s.cache().bookkeeping();
  st.kv_entries = kv.total_entries();
  st.kv_bytes = s.cache().bytes_held();
  const ModalityCounts counts = count_entries_by_modality(kv);
  st.kv_text_entries = counts.text;
  st.kv_image_entries = counts.image;
  st.kv_special_entries = counts.special;
  return st;
}

const std::vector<Message>& ChatEngine::transcript() const { return m_impl->session->transcript(); }

std::string ChatEngine::transcript_json() const {
  nlohmann::json messages = nlohmann::json::array();
  for (const Message& m : transcript()) {
    nlohmann::json content = nlohmann::json::array();
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::Text) content.push_back({{"type", "text"}, {"text", p.text}});
      else content.push_back({{"type", "image"}, {"path", p.path}});
    }
    messages.push_back({{"role", m.role}, {"content", content}});
  }
  nlohmann::json j = {{"model", m_impl->model->text.dir}, {"messages", messages}};
  return j.dump(2);
}

void ChatEngine::save_transcript(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TRIMKV_CHECK(out.good(), Io, "cannot write '", path, "'");
  out << transcript_json() << "\n";
  TRIMKV_CHECK(out.good(), Io, "cannot write '", path, "'");
}

}  // namespace trimkv::vision
