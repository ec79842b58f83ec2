// UTF-8 helpers and the Unicode character classes the `tokenizers` crate relies on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trimkv::utf8 {

// Code point starting at s[i]; advances i past it. Precondition: s is valid UTF-8 and
// i < s.size() is the start of a character.
char32_t next(std::string_view s, size_t& i);
// Byte length of the character whose lead byte is `lead` (1 for a stray byte).
size_t char_length(unsigned char lead);
void append(std::string& out, char32_t cp);

// Length of the longest valid UTF-8 prefix of s (== s.size() iff s is valid).
size_t valid_prefix_length(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix_length(s) == s.size(); }

// Appends s to out, replacing each maximal invalid subsequence with U+FFFD exactly like Rust's
// String::from_utf8_lossy (the Unicode "maximal subpart" practice that HF's decode uses).
// With final == false a trailing sequence that is incomplete but could still become valid is
// left unconsumed, so feeding the rest later gives the same text as one final call.
// Returns the number of bytes of s consumed.
size_t append_lossy(std::string& out, std::string_view s, bool final);

bool is_whitespace(char32_t c);  // Rust char::is_whitespace (Unicode White_Space)
bool is_numeric(char32_t c);     // Rust char::is_numeric (general category Nd, Nl or No)
bool is_word_char(char32_t c);   // regex `\w` with Unicode: letters, marks, Nd, Nl, Pc, ZWJ/ZWNJ

}  // namespace trimkv::utf8
