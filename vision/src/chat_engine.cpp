#include "trimkv/vision/chat_engine.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trimkv/core/atomic_write.h"
#include "trimkv/core/budget.h"
#include "trimkv/core/engine_support.h"
#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/hf_cache.h"
#include "trimkv/core/kv_stats.h"
#include "trimkv/core/session.h"
#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

struct ChatEngine::Impl {
  std::shared_ptr<VlmModel> model;
  EngineOptions options;
  std::shared_ptr<const RetentionGates> gates;  // null when the model runs without gates
  std::string gates_path;
  EvictionSettings eviction;  // of the conversation
  std::unique_ptr<Session> session;

  SessionOptions session_options() const { return {options.block_size, options.prefill_chunk}; }
  // Entries carry log β when the model has gates; `ev` (null: none) puts the cache under a policy.
  void configure(Session& s, const EvictionSettings* ev) const {
    if (ev) s.set_eviction(*ev, gates.get());  // validates before changing anything
    else s.set_eviction(nullptr, gates.get());
  }
};

ChatEngine::ChatEngine(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ChatEngine::~ChatEngine() = default;

bool ChatEngine::is_vlm_checkpoint(const std::string& dir) { return vision::is_vlm_checkpoint(dir); }

std::string ChatEngine::family_for_model_type(const std::string& model_type) {
  return vision::family_for_model_type(model_type);
}

std::unique_ptr<ChatEngine> ChatEngine::load(const std::string& spec, const EngineOptions& options) {
  const std::string dir = resolve_model_dir(spec);  // a folder, or a repo id in the local HF cache
  apply_engine_options(options);
  auto impl = std::make_unique<Impl>();
  if (vision::is_vlm_checkpoint(dir)) {
    impl->model = load_vlm(dir, options.template_vars, model_load_options(options));
  } else {  // a text model: the same conversation, text only
    if (std::filesystem::is_directory(dir) &&
        load_text_config((std::filesystem::path(dir) / "config.json").string()).has_vision_tower) {
      std::string known;
      for (const auto& t : vision::supported_vlm_model_types()) known += (known.empty() ? "" : ", ") + t;
      TRIMKV_FAIL(Unsupported, "'", dir, "' is a vision-language checkpoint of a type this program cannot run (model_type '",
                  checkpoint_model_type(dir), "'; supported: ", known,
                  "); refusing to load only its text decoder, which would drop its images without a word");
    }
    impl->model = std::make_shared<VlmModel>();
    impl->model->text = load_text_model(dir, model_load_options(options));
    impl->model->encoder = make_text_turn_encoder(impl->model->text, options.template_vars);
  }
  impl->options = options;
  LoadedGates loaded = load_engine_gates(options, dir, impl->model->text);
  impl->gates = std::move(loaded.gates);
  impl->gates_path = std::move(loaded.path);
  impl->session = std::make_unique<Session>(impl->model->text, impl->model->encoder, impl->session_options());
  impl->configure(*impl->session, nullptr);
  return std::unique_ptr<ChatEngine>(new ChatEngine(std::move(impl)));
}

ModelInfo ChatEngine::info() const {
  const TextModel& m = m_impl->model->text;
  ModelInfo i = describe_text_model(m, {m_impl->gates, m_impl->gates_path});
  if (!takes_images()) return i;
  i.model_type = m_impl->model->info.model_type;
  i.family = m_impl->model->info.family;
  i.family_description = m_impl->model->info.description + " (text: " + m.family->name + ")";
  i.parameters += m_impl->model->info.vision_parameters;
  return i;
}

VisionInfo ChatEngine::vision_info() const { return m_impl->model->info; }

int64_t ChatEngine::image_token_count(const std::string& path) const {
  if (!takes_images()) return 0;
  const RgbImage img = decode_image_file(path);
  return image_token_count(img.width, img.height);
}

std::function<int64_t(int, int)> ChatEngine::image_token_counter() const {
  if (!takes_images()) return [](int, int) { return int64_t{0}; };
  std::shared_ptr<const TurnEncoder> encoder = m_impl->model->encoder;
  return [encoder](int width, int height) { return encoder->image_token_count(width, height); };
}

int64_t ChatEngine::image_token_count(int width, int height) const {
  return takes_images() ? m_impl->model->encoder->image_token_count(width, height) : 0;
}

namespace {
const TextTurnEncoder* template_encoder(const TurnEncoder& e) { return dynamic_cast<const TextTurnEncoder*>(&e); }
}  // namespace

bool ChatEngine::has_chat_template() const {
  const TextTurnEncoder* e = template_encoder(*m_impl->model->encoder);
  return e && e->has_chat_template();
}

std::string ChatEngine::chat_template_problem() const {
  const TextTurnEncoder* e = template_encoder(*m_impl->model->encoder);
  return e ? e->chat_template_problem() : std::string("this model's encoder has no chat template");
}

std::string ChatEngine::chat_template_origin() const {
  return has_chat_template() ? template_encoder(*m_impl->model->encoder)->format().chat_template().origin() : "";
}

void ChatEngine::set_template_variables(const std::vector<TemplateVar>& vars) {
  std::shared_ptr<const TurnEncoder> enc = m_impl->model->encoder->with_template_variables(vars);
  m_impl->session->set_encoder(enc);
  m_impl->model->encoder = std::move(enc);
  m_impl->options.template_vars = vars;
}

std::vector<TemplateVar> ChatEngine::template_variables() const { return m_impl->options.template_vars; }

GenerationResult ChatEngine::generate(const std::string& prompt, const std::vector<std::string>& images,
                                      const GenerationParams& params, bool chat_template,
                                      const TextCallback& on_text, const std::atomic<bool>* cancel) {
  // A fresh conversation of its own: the engine's conversation is left as it was.
  return run_one(prompt, images, params, nullptr, chat_template, on_text, cancel);
}

GenerationResult ChatEngine::generate(const std::string& prompt, const std::vector<std::string>& images,
                                      const GenerationParams& params, const EvictionSettings& eviction,
                                      bool chat_template, const TextCallback& on_text,
                                      const std::atomic<bool>* cancel) {
  return run_one(prompt, images, params, &eviction, chat_template, on_text, cancel);
}

GenerationResult ChatEngine::run_one(const std::string& prompt, const std::vector<std::string>& images,
                                     const GenerationParams& params, const EvictionSettings* eviction,
                                     bool chat_template, const TextCallback& on_text,
                                     const std::atomic<bool>* cancel) {
  Session one(m_impl->model->text, m_impl->model->encoder, m_impl->session_options());
  m_impl->configure(one, eviction);  // before any image is read
  one.set_system_prompt(m_impl->session->system_prompt());
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

std::vector<float> ChatEngine::pending_logits() const {
  const at::Tensor& l = m_impl->session->pending_logits();
  if (!l.defined()) return {};
  const at::Tensor c = l.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

void ChatEngine::add_assistant_text(const std::string& text, const std::atomic<bool>* cancel) {
  m_impl->session->add_assistant_text(text, cancel);
}

GenerationResult ChatEngine::respond_then_give(const std::string& given, const GenerationParams& params,
                                               const TextCallback& on_text, const std::atomic<bool>* cancel) {
  return m_impl->session->generate_then_give(given, params, on_text, cancel);
}

ContinuationScore ChatEngine::score_text(const std::string& text, int64_t last_tokens,
                                         const std::atomic<bool>* cancel) {
  const Tokenizer* tok = m_impl->model->text.tokenizer.get();
  TRIMKV_CHECK(tok, Input, "model '", m_impl->model->text.dir, "' has no tokenizer: cannot score text");
  Session one(m_impl->model->text, m_impl->model->encoder, m_impl->session_options());
  m_impl->configure(one, &m_impl->eviction);
  return one.score_tokens(tok->encode(text, true), last_tokens, cancel);
}

void ChatEngine::reset() { m_impl->session->reset(); }

struct ConversationCheckpoint {
  Session::Checkpoint of_session;
};

std::shared_ptr<const ConversationCheckpoint> ChatEngine::checkpoint() const {
  return std::make_shared<const ConversationCheckpoint>(ConversationCheckpoint{m_impl->session->checkpoint()});
}

void ChatEngine::restore(const ConversationCheckpoint& c) { m_impl->session->restore(c.of_session); }

void ChatEngine::catch_up(const std::atomic<bool>* cancel) { m_impl->session->catch_up(cancel); }

bool ChatEngine::cache_current() const { return m_impl->session->cache_current(); }

bool ChatEngine::answers_open_thinking() const {
  const Tokenizer* tok = m_impl->model->text.tokenizer.get();
  if (!tok || !has_chat_template()) return false;
  try {  // a probe turn through the template: does its generation prompt end with <think>?
    std::vector<ImageRecord> images;
    const StreamSegment seg =
        m_impl->session->encoder().user_turn({}, {ContentPart::text_part("hi")}, 0, images, nullptr);
    std::string tail = tok->decode(seg.ids);
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    return tail.size() >= 7 && tail.compare(tail.size() - 7, 7, "<think>") == 0;
  } catch (const Error&) {
    return false;  // a template that cannot render a probe turn: no thinking to show
  }
}

void ChatEngine::set_system_prompt(const std::string& text) { m_impl->session->set_system_prompt(text); }

const std::string& ChatEngine::system_prompt() const { return m_impl->session->system_prompt(); }

std::vector<StreamToken> ChatEngine::tokens(int64_t first) const {
  const Session& s = *m_impl->session;
  const std::vector<TokenInfo>& infos = s.cache().bookkeeping().tokens();
  const std::vector<int32_t>& ids = s.ids();  // the stored stream: lacks the answer in flight
  const Tokenizer* tok = m_impl->model->text.tokenizer.get();
  std::vector<StreamToken> out;
  const int64_t n = static_cast<int64_t>(infos.size());
  first = std::clamp<int64_t>(first, 0, n);
  out.reserve(static_cast<size_t>(n - first));
  for (int64_t t = first; t < n; ++t) {
    StreamToken st;
    st.info = infos[static_cast<size_t>(t)];
    if (t < static_cast<int64_t>(ids.size())) {
      st.id = ids[static_cast<size_t>(t)];
      if (tok) st.text = tok->decode({st.id});
    }
    out.push_back(std::move(st));
  }
  return out;
}

void ChatEngine::set_eviction(const EvictionSettings& eviction) {
  m_impl->configure(*m_impl->session, &eviction);  // throws before changing anything
  m_impl->eviction = eviction;
}

const EvictionSettings& ChatEngine::eviction() const { return m_impl->eviction; }

Trace ChatEngine::trace() const {
  if (const Evictor* ev = m_impl->session->evictor()) return ev->trace();
  Trace t;
  t.geometry = m_impl->session->cache().geometry();
  return t;
}

KvSnapshot ChatEngine::snapshot() const {
  const Session& s = *m_impl->session;
  if (const Evictor* ev = s.evictor()) return ev->snapshot(s.cache());
  KvSnapshot snap = make_snapshot(s.cache().bookkeeping(), {},
                                  kv_bytes_per_entry(s.cache().geometry(),
                                                     static_cast<int>(s.cache().k_pool().element_size())));
  snap.policy = "full";
  return snap;
}

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
  st.peak_kv_entries = st.kv_entries;
  if (const Evictor* ev = s.evictor()) {
    st.policy = ev->policy().name();
    st.budget_global = ev->budget_global();
    st.eviction_events = ev->n_events();
    st.peak_kv_entries = std::max(ev->peak_entries(), st.kv_entries);
  }
  return st;
}

const std::vector<Message>& ChatEngine::transcript() const { return m_impl->session->transcript(); }

std::string ChatEngine::transcript_json() const {
  nlohmann::json messages = nlohmann::json::array();
  for (const Message& m : transcript()) {
    nlohmann::json content = nlohmann::json::array();
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::Text) content.push_back({{"type", "text"}, {"text", p.text}});
      else  // absolute: the file can be read back from anywhere (trimkv generate --messages)
        content.push_back({{"type", "image"}, {"path", std::filesystem::absolute(p.path).lexically_normal().string()}});
    }
    messages.push_back({{"role", m.role}, {"content", content}});
  }
  nlohmann::json j = {{"model", m_impl->model->text.dir}, {"messages", messages}};
  return j.dump(2);
}

void ChatEngine::save_transcript(const std::string& path) const { write_file_atomic(path, transcript_json() + "\n"); }

}  // namespace trimkv::vision
