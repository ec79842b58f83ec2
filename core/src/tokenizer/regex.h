// RAII PCRE2 regex with the find-all semantics the `tokenizers` crate gets from onig:
// UTF-8, Unicode properties (\p{L}, \p{N}, \s with PCRE2_UCP), look-ahead; JIT when available.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trimkv {

class Regex {
 public:
  // Throws Error Format naming `where` (e.g. the tokenizer.json path) when pattern is invalid.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) from left to right, each search starting where the
  // previous match ended (with the whole text visible to look-around), exactly as the Rust onig
  // crate's find_iter: an empty match is reported unless it sits where the previous match
  // ended, in which case the search moves on by one character. Precondition: text is valid
  // UTF-8. Thread-safe.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // A pattern matching `literal` verbatim (what HF's regex::escape is used for).
  static std::string escape(std::string_view literal);

 private:
  pcre2_code* m_code = nullptr;  // owned
  std::string m_pattern;
};

}  // namespace trimkv
