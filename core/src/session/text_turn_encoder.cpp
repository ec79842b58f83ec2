#include "trimkv/core/text_turn_encoder.h"

#include "trimkv/core/error.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

namespace {

StreamSegment text_segment(std::vector<int32_t> ids) {
  StreamSegment seg;
  seg.infos.assign(ids.size(), TokenInfo{});
  seg.ids = std::move(ids);
  return seg;
}

std::string joined_text(const std::vector<ContentPart>& content, const std::string& model_dir) {
  std::string text;
  for (const ContentPart& p : content) {
    TRIMKV_CHECK(p.kind == ContentPart::Kind::Text, Input, "model '", model_dir,
                 "' is a text model: it cannot take images ('", p.path, "')");
    text += p.text;
  }
  return text;
}

}  // namespace

TextTurnEncoder::TextTurnEncoder(std::string model_dir, std::shared_ptr<const Tokenizer> tokenizer,
                                 LoadedChatFormat format, std::vector<TemplateVar> vars)
    : m_dir(std::move(model_dir)),
      m_tokenizer(std::move(tokenizer)),
      m_base(std::move(format.format)),
      m_load_error(std::move(format.error)),
      m_vars(std::move(vars)) {
  TRIMKV_ASSERT(m_tokenizer);
  apply_variables();
}

std::shared_ptr<const TurnEncoder> TextTurnEncoder::with_template_variables(const std::vector<TemplateVar>& vars) const {
  std::shared_ptr<TextTurnEncoder> copy = clone();
  copy->m_vars = vars;
  copy->apply_variables();
  return copy;
}

void TextTurnEncoder::apply_variables() {
  m_format.reset();
  m_end_of_turn.clear();
  if (!m_base) return;
  ChatTemplate t = m_base->chat_template();
  for (const TemplateVar& v : m_vars) t.set_variable(v);
  m_format.emplace(std::move(t), m_base->style());
  // The template's end-of-turn token: the special tokens of what closes an answer (e.g.
  // "<|im_end|>\n" -> <|im_end|>). Found by rendering a one-message conversation; a template
  // that cannot render one (it demands a system message, say) just has none.
  try {
    for (int32_t id : encode(m_format->answer_close({{"user", {ContentPart::text_part("Hi")}}})))
      if (m_tokenizer->is_special(id) || m_tokenizer->id_to_token(id) == m_tokenizer->config().eos_token)
        m_end_of_turn.push_back(id);
  } catch (const Error&) {
  }
}

std::string TextTurnEncoder::chat_template_problem() const {
  if (m_format) return "";
  if (!m_load_error.empty()) return "the chat template of '" + m_dir + "' cannot be used: " + m_load_error;
  return "checkpoint '" + m_dir +
         "' has no chat template (looked for chat_template.jinja, chat_template.json and the 'chat_template' of "
         "tokenizer_config.json / processor_config.json): use a raw prompt";
}

const ChatFormat& TextTurnEncoder::format() const {
  TRIMKV_CHECK(m_format, Config, chat_template_problem());
  return *m_format;
}

StreamSegment TextTurnEncoder::user_turn(const std::vector<Message>& history, const std::vector<ContentPart>& content,
                                         int, std::vector<ImageRecord>&, const std::atomic<bool>*,
                                         const ImageTokenReducer&) const {
  TRIMKV_CHECK(!content.empty(), Input, "an empty user message");
  joined_text(content, m_dir);  // images are refused before the template sees them
  return text_segment(encode(format().user_text(history, content)));
}

StreamSegment TextTurnEncoder::raw_prompt(const std::vector<ContentPart>& content, int, std::vector<ImageRecord>&,
                                          const std::atomic<bool>*, const ImageTokenReducer&) const {
  return text_segment(m_tokenizer->encode(joined_text(content, m_dir)));
}

std::vector<int32_t> TextTurnEncoder::system_turn(const std::string& text) const {
  return encode(format().system_text(text));
}

std::vector<int32_t> TextTurnEncoder::assistant_turn(const std::vector<Message>& history, const std::string& text) const {
  return encode(format().assistant_text(history, text));
}

std::vector<int32_t> TextTurnEncoder::close_assistant_turn(const std::vector<Message>& history) const {
  return encode(format().answer_close(history));
}

namespace {
// A loaded (or absent) template with the tokenizer's special tokens; `find` may throw.
template <class Find>
LoadedChatFormat chat_format_from(Find&& find, const Tokenizer& tokenizer, ContentStyle style) {
  LoadedChatFormat out;
  std::optional<ChatTemplate> t;
  try {
    t = find();
  } catch (const Error& e) {
    // A template this interpreter cannot parse (too large, a malformed field): the model still
    // runs raw prompts; chat says why.
    out.error = e.what();
    return out;
  }
  if (!t) return out;
  t->set_special_tokens(tokenizer.config().bos_token, tokenizer.config().eos_token);
  out.format.emplace(std::move(*t), style);
  return out;
}
}  // namespace

LoadedChatFormat load_chat_format(const std::string& dir, const Tokenizer& tokenizer, ContentStyle style) {
  return chat_format_from([&] { return ChatTemplate::from_folder(dir, style == ContentStyle::Parts); }, tokenizer,
                          style);
}

std::string embedded_chat_template_origin(const std::string& model_path) {
  return model_path + " (tokenizer.chat_template)";
}

LoadedChatFormat embedded_chat_format(const std::string& source, const std::string& origin, const Tokenizer& tokenizer,
                                      ContentStyle style) {
  return chat_format_from([&] { return std::optional<ChatTemplate>(ChatTemplate::from_source(source, origin)); },
                          tokenizer, style);
}

std::shared_ptr<const TextTurnEncoder> make_text_turn_encoder(const TextModel& model,
                                                              const std::vector<TemplateVar>& vars) {
  TRIMKV_CHECK(model.tokenizer, Config, "model folder '", model.dir, "' has no tokenizer.json: it cannot chat");
  return std::make_shared<TextTurnEncoder>(
      model.dir, model.tokenizer,
      model.embedded_chat_template.empty()
          ? load_chat_format(model.dir, *model.tokenizer, ContentStyle::Strings)
          : embedded_chat_format(model.embedded_chat_template, embedded_chat_template_origin(model.dir),
                                 *model.tokenizer, ContentStyle::Strings),
      vars);
}

}  // namespace trimkv
