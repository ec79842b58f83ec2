#include "tokenizer/regex.h"

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
  size_t start = 0;
  while (start <= text.size()) {
    // Input was validated once by the caller; re-checking at every offset would be quadratic.
    int rc = pcre2_match(m_code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its frames on the heap
      rc = pcre2_match(m_code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      TRIMKV_FAIL(Input, "regex '", m_pattern, "' failed: ", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= text.size()) break;
      start = begin + utf8::char_length(static_cast<unsigned char>(text[begin]));
    }
  }
  return matches;
}

}  // namespace trimkv
