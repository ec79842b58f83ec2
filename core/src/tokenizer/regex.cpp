#include "tokenizer/regex.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include "tokenizer/utf8.h"
#include "trimkv/core/error.h"

namespace trimkv {

Regex::Regex(const std::string& pattern, const std::string& where) : m_pattern(pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  m_code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (m_code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    TRIMKV_FAIL(Format, where, ": invalid regex '", pattern, "' at offset ", error_offset, ": ",
                reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only: when it is unavailable pcre2_match interprets.
  pcre2_jit_compile(m_code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(m_code); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(m_code, nullptr), &pcre2_match_data_free);
  TRIMKV_CHECK(data != nullptr, Internal, "pcre2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool has_last_end = false;
  size_t last_end = 0;  // end of the last reported match
  while (search_from <= text.size()) {
    // Input was validated once by the caller; re-checking at every offset would be quadratic.
    int rc = pcre2_match(m_code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its frames on the heap
      rc = pcre2_match(m_code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      TRIMKV_FAIL(Input, "regex '", m_pattern, "' failed: ", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = std::max(ovector[0], ovector[1]);
    if (begin == end && has_last_end && last_end == end) {
      // onig's FindMatches: an empty match right where the last match ended is skipped and the
      // search moves on by one character (this is what stops the loop on empty matches).
      if (search_from >= text.size()) break;
      search_from += utf8::char_length(static_cast<unsigned char>(text[search_from]));
      continue;
    }
    matches.emplace_back(begin, end);
    search_from = end;
    last_end = end;
    has_last_end = true;
  }
  return matches;
}

std::string Regex::escape(std::string_view literal) {
  std::string pattern;
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) pattern += '\\';  // PCRE2: \ + any ASCII symbol is literal
    pattern += c;
  }
  return pattern;
}

}  // namespace trimkv
