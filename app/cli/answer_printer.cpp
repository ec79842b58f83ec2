#include "answer_printer.h"

#include <algorithm>
#include <ostream>

#include "trimkv/core/thinking.h"

namespace trimkv::cli {

namespace {
constexpr size_t kHold = 8;  // bytes that may be the start of "</think>" or "<think>"

// `n` backed off to the start of a UTF-8 character of `s`.
size_t char_boundary(const std::string& s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}
}  // namespace

AnswerPrinter::AnswerPrinter(std::ostream& out, bool opens_thinking, bool dim)
    : m_out(out), m_opens(opens_thinking), m_dim(dim) {}

void AnswerPrinter::push(const std::string& piece) {
  m_text += piece;
  show(false);
}

void AnswerPrinter::finish() { show(true); }

void AnswerPrinter::write(const std::string& text, size_t& shown, size_t upto, bool faint) {
  upto = char_boundary(text, std::min(upto, text.size()));
  if (upto <= shown) return;
  if (faint && m_dim) m_out << "\x1b[2m";
  m_out << text.substr(shown, upto - shown);
  if (faint && m_dim) m_out << "\x1b[0m";
  m_out << std::flush;
  shown = upto;
}

void AnswerPrinter::show(bool final) {
  const ThinkingSplit s = split_thinking(m_text, m_opens);
  if (!s.has_thinking) {
    // Without a prompt-opened block, text that could still become "<think>" waits.
    const bool maybe_tag = !m_opens && m_text.size() < kHold && std::string("<think>").rfind(m_text, 0) == 0;
    if (!maybe_tag || final) write(s.answer, m_answer_shown, s.answer.size(), false);
    return;
  }
  if (!m_label_shown) {
    if (m_dim) m_out << "\x1b[2m";
    m_out << "(thinking) ";
    if (m_dim) m_out << "\x1b[0m";
    m_label_shown = true;
  }
  const size_t held = s.closed || final ? s.thinking.size() : (s.thinking.size() > kHold ? s.thinking.size() - kHold : 0);
  write(s.thinking, m_thinking_shown, held, true);
  if (!s.closed) return;
  if (!m_close_shown) {
    m_out << "\n\n";
    m_close_shown = true;
  }
  write(s.answer, m_answer_shown, s.answer.size(), false);
}

}  // namespace trimkv::cli
