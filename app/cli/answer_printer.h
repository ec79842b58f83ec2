// `trimkv chat`'s streamed answer on the terminal: a thinking model's reasoning (the <think>
// block, thinking.h) printed dimmed and labelled "(thinking)", then the answer; other answers as
// they come. Pieces are held back while they could still turn out to be a tag.
#pragma once
#include <cstddef>
#include <iosfwd>
#include <string>

namespace trimkv::cli {

class AnswerPrinter {
 public:
  // `opens_thinking`: the template's generation prompt wrote <think> (ChatEngine::answers_open_thinking);
  // `dim`: use the terminal's faint style (when stdout is a terminal).
  AnswerPrinter(std::ostream& out, bool opens_thinking, bool dim);
  void push(const std::string& piece);
  void finish();  // prints what was held back

 private:
  void show(bool final);
  void write(const std::string& text, size_t& shown, size_t upto, bool faint);

  std::ostream& m_out;
  bool m_opens, m_dim;
  std::string m_text;
  size_t m_thinking_shown = 0, m_answer_shown = 0;
  bool m_label_shown = false, m_close_shown = false;
};

}  // namespace trimkv::cli
