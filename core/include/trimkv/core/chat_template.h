// A checkpoint's own chat template (Jinja, run by jinja.h) and where it lives: the same file and
// variables transformers' apply_chat_template uses, so new checkpoints chat without code.
//
// Where a template is looked for, first found wins (transformers 5's order):
//   <dir>/chat_template.jinja, <dir>/chat_template.json ("chat_template"),
//   <dir>/tokenizer_config.json "chat_template" (a string, or a list of {"name", "template"}:
//   the one named "default"), <dir>/processor_config.json "chat_template"; for a VLM (whose
//   processor renders the conversation) processor_config.json comes before tokenizer_config.json.
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
// Parses "name=value" (spaces around either trimmed; Python's True/False/None are read as
// true/false/null). Error{Input} naming the text when there is no '=' or the name is not an
// identifier.
TemplateVar parse_template_var(const std::string& text);

class ChatTemplate {
 public:
  // Finds and parses <dir>'s template (see above); nullopt when the folder has none. Errors (a
  // malformed JSON file, a template with a syntax error) name the file and the line.
  static std::optional<ChatTemplate> from_folder(const std::string& dir, bool processor_first = false);
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

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> m_impl;  // copy-on-write: set_variable copies a shared Impl first
};

// A ChatTemplate bound to a content style, producing the text of each piece of a conversation
// that is prefilled one turn at a time (Session's TurnEncoder contract). The pieces are found by
// rendering: a message's closing is what the template writes after its text when another
// message follows (a content sentinel marks the text); a new user turn is what the template adds
// after the conversation so far. Templates that render earlier messages differently once more
// follow keep what the cache holds: Qwen3 and DeepSeek-R1 drop an earlier answer's thinking,
// Mistral v0.3 moves the system message to the newest user turn, Phi-3.5 ends a conversation
// with <|endoftext|> only while it ends there; the new piece is then what follows the last
// message's closing in a rendering where that message's text is the sentinel. Error{Unsupported}
// naming the template when a piece cannot be found (its text missing from the rendering).
class ChatFormat {
 public:
  ChatFormat(ChatTemplate tmpl, ContentStyle style);

  // The opening of a conversation whose first message is the system message `text`, through
  // its closing (some templates fold it into the first user turn: then only their opening).
  std::string system_text(const std::string& text) const;
  // A user message after `history` (the messages so far, possibly none), through the
  // generation prompt.
  std::string user_text(const std::vector<Message>& history, const std::vector<ContentPart>& content) const;
  // An assistant answer given as text after `history` (which ends with the user message it
  // answers): from the end of the generation prompt through the answer's closing, rendered with
  // the answer's own text (a template may trim it or split its thinking off).
  std::string assistant_text(const std::vector<Message>& history, const std::string& text) const;
  // What closes an answer that is already in the stream (e.g. "<|im_end|>\n").
  std::string answer_close(const std::vector<Message>& history) const;

  const ChatTemplate& chat_template() const { return m_template; }
  ContentStyle style() const { return m_style; }

 private:
  struct Closing {
    std::string last;      // after the message's text when it ends the conversation
    std::string followed;  // the part of that which stays when another message follows
  };
  // The closing of a `role` message after `before`; nullopt when the template does not write
  // the message's text where it stands (Gemma 3 folds a system message into the next turn).
  std::optional<Closing> closing(const std::vector<Message>& before, const std::string& role) const;
  Closing answer_closing(const std::vector<Message>& history) const;  // Error{Unsupported} if none
  std::string render(const std::vector<Message>& messages, bool add_generation_prompt) const {
    return m_template.render(messages, add_generation_prompt, m_style);
  }

  ChatTemplate m_template;
  ContentStyle m_style;
};

}  // namespace trimkv
