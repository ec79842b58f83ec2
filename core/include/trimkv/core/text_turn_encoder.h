// The TurnEncoder of a text model, and the template-driven part every family shares: each piece
// of the conversation is the checkpoint's chat template rendered on the transcript (ChatFormat)
// and tokenized. VLM families derive from it and add their images to user turns.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/session.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv {

struct TextModel;

// A checkpoint's chat format as loaded: the format, or (a template that does not parse) the
// error naming its file and line, or neither (the folder has no template).
struct LoadedChatFormat {
  std::optional<ChatFormat> format;
  std::string error;
};

class TextTurnEncoder : public TurnEncoder {
 public:
  // Without a usable format (no template, or one that does not parse) raw prompts still work
  // and every chat piece fails with Error{Config} saying why (chat_template_problem()).
  // `format` carries the template with its bos/eos tokens only; `vars` are applied on top.
  TextTurnEncoder(std::string model_dir, std::shared_ptr<const Tokenizer> tokenizer, LoadedChatFormat format,
                  std::vector<TemplateVar> vars = {});

  StreamSegment user_turn(const std::vector<Message>& history, const std::vector<ContentPart>& content,
                          int first_image_id, std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                          const ImageTokenReducer& reduce) const override;
  StreamSegment raw_prompt(const std::vector<ContentPart>& content, int first_image_id,
                           std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                           const ImageTokenReducer& reduce) const override;
  std::vector<int32_t> system_turn(const std::string& text) const override;
  std::vector<int32_t> assistant_turn(const std::vector<Message>& history, const std::string& text) const override;
  std::vector<int32_t> close_assistant_turn(const std::vector<Message>& history) const override;
  std::vector<int32_t> end_of_turn_ids() const override { return m_end_of_turn; }

  // A copy whose template variables are `vars` (replacing the earlier ones; bos/eos stay).
  std::shared_ptr<const TurnEncoder> with_template_variables(const std::vector<TemplateVar>& vars) const override;
  const std::vector<TemplateVar>& template_variables() const { return m_vars; }

  // The chat format (Error{Config} naming the model folder when it has no template).
  const ChatFormat& format() const;
  bool has_chat_template() const { return m_format.has_value(); }
  // Why the model cannot chat ("" when it can): no template, or the template's parse error.
  std::string chat_template_problem() const;
  const Tokenizer& tokenizer() const { return *m_tokenizer; }

 protected:
  // A copy of the derived encoder (with_template_variables then replaces its format).
  virtual std::shared_ptr<TextTurnEncoder> clone() const { return std::make_shared<TextTurnEncoder>(*this); }
  // Ids of rendered template text. Rendered pieces carry their special tokens as text (a BOS
  // the template writes), so the tokenizer adds none (transformers' apply_chat_template).
  std::vector<int32_t> encode(const std::string& text) const { return m_tokenizer->encode(text, false); }
  const std::string& model_dir() const { return m_dir; }

 private:
  std::string m_dir;
  std::shared_ptr<const Tokenizer> m_tokenizer;
  std::optional<ChatFormat> m_base;    // the template with bos/eos only
  std::string m_load_error;            // the template did not parse
  std::vector<TemplateVar> m_vars;
  std::optional<ChatFormat> m_format;  // m_base with m_vars
  std::vector<int32_t> m_end_of_turn;
  void apply_variables();  // the special tokens of an answer's closing text
};

// The chat format of the checkpoint in `dir`: its template (ChatTemplate::from_folder; a VLM's,
// ContentStyle::Parts, looks at the processor's first) with the tokenizer's bos/eos tokens. A
// template that cannot be read or parsed is kept as its error (the message names the file).
LoadedChatFormat load_chat_format(const std::string& dir, const Tokenizer& tokenizer, ContentStyle style);
// How a template carried inside the model file `model_path` is named in messages and reports.
std::string embedded_chat_template_origin(const std::string& model_path);
// The same for a template carried as text (a GGUF file's tokenizer.chat_template); `origin` names it.
LoadedChatFormat embedded_chat_format(const std::string& source, const std::string& origin, const Tokenizer& tokenizer,
                                      ContentStyle style);

// A text model's encoder: load_chat_format(model.dir, ..., ContentStyle::Strings, vars).
// Error{Config} when the model has no tokenizer.
std::shared_ptr<const TextTurnEncoder> make_text_turn_encoder(const TextModel& model,
                                                              const std::vector<TemplateVar>& vars);

}  // namespace trimkv
