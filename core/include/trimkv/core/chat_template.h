// A checkpoint's own chat template (Jinja, run by jinja.h) and where it lives: the same file and
// variables transformers' apply_chat_template uses, so new checkpoints chat without code.
//
// Where a template is looked for, first found wins (transformers 5's order):
//   <dir>/chat_template.jinja, <dir>/chat_template.json ("chat_template"),
//   <dir>/tokenizer_config.json "chat_template" (a string, or a list of {"name", "template"}:
//   the one named "default"), <dir>/processor_config.json "chat_template" (VLMs).
// Variables: messages, add_generation_prompt, bos_token / eos_token (tokenizer_config.json's),
// and the caller's own (e.g. enable_thinking=false), which override those.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trimkv/core/conversation_types.h"

namespace trimkv {

namespace jinja {
class Template;
}

// How messages reach the template: `Parts` gives every content as a list of
// {"type": "text", "text": ...} / {"type": "image"} items (what VLM processors' templates
// expect); `Strings` gives a text-only message's content as one string (text models' templates),
// and refuses images.
enum class ContentStyle { Parts, Strings };

// A variable as the user typed it (`--template-var name=value`): the value is read as a JSON
// literal when it is one (true, false, null, numbers, "quoted", [..], {..}), else as a string.
struct TemplateVar {
  std::string name;
  std::string value;
};
// Parses "name=value". Error{Input} naming the text when there is no '=' or the name is empty.
TemplateVar parse_template_var(const std::string& text);

class ChatTemplate {
 public:
  // Finds and parses <dir>'s template (see above); nullopt when the folder has none. Errors (a
  // malformed JSON file, a template with a syntax error) name the file and the line.
  static std::optional<ChatTemplate> from_folder(const std::string& dir);
  // Parses `source`; `origin` names it in errors.
  static ChatTemplate from_source(const std::string& source, const std::string& origin);

  // Sets a variable passed to every render (later calls override; Error{Input} for a bad JSON
  // value is impossible: non-JSON text becomes a string).
  void set_variable(const TemplateVar& var);
  // bos_token / eos_token from a tokenizer_config.json's fields ("" leaves a token unset).
  void set_special_tokens(const std::string& bos, const std::string& eos);

  // The template applied to `messages`. Error{Input} (naming the origin, line and column) when
  // the template raises or fails; Error{Input} for an image under ContentStyle::Strings.
  std::string render(const std::vector<Message>& messages, bool add_generation_prompt,
                     ContentStyle style) const;

  const std::string& origin() const;  // the file (and field) it came from
  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> m_impl;  // copy-on-write: set_variable copies a shared Impl first
};

// The text a new piece of a KV-cached conversation adds: rendering the conversation before and
// after the piece, the part of `after` that follows `before`. When the template renders the
// end of `before` differently once more follows (Qwen3 drops the thinking of an answer that is
// no longer the last one), the conversation keeps what it has: the new text is what follows the
// longest tail of `before` that `after` repeats past their common prefix. Error{Unsupported}
// naming `origin` when `after` shares no such tail with `before` (the template rewrote more than
// the last message: the cached conversation cannot continue it).
std::string rendered_delta(const std::string& before, const std::string& after, const std::string& origin);

// A ChatTemplate bound to a content style, producing the text of each piece of a conversation
// that is prefilled one turn at a time (Session's TurnEncoder contract).
class ChatFormat {
 public:
  ChatFormat(ChatTemplate tmpl, ContentStyle style);

  // The opening of a conversation whose first message is the system message `text`.
  std::string system_text(const std::string& text) const;
  // A user message after `history` (the messages so far, possibly none), through the
  // generation prompt.
  std::string user_text(const std::vector<Message>& history, const std::vector<ContentPart>& content) const;
  // How an assistant answer is rendered after `history` (which ends with the user message it
  // answers): before + answer + after, `before` following the generation prompt.
  struct AnswerFrame {
    std::string before, after;
  };
  AnswerFrame answer_frame(const std::vector<Message>& history) const;

  const ChatTemplate& chat_template() const { return m_template; }
  ContentStyle style() const { return m_style; }

 private:
  ChatTemplate m_template;
  ContentStyle m_style;
};

}  // namespace trimkv
