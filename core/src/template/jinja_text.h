// UTF-8 and the parts of Python's str semantics the Jinja interpreter needs: code-point
// indexing, Python's whitespace and line-boundary sets, case mapping, character classes and
// repr() of a string. Strings stay UTF-8 everywhere; these helpers decode on demand.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace trimkv::jinja::text {

// Decodes the code point at s[i] and advances i past it. A byte that does not start a valid
// UTF-8 sequence decodes as U+DC80 + byte (Python's "surrogateescape"), and append_cp turns
// those back into the raw byte, so decoding and re-encoding never changes a string's bytes.
char32_t next_cp(std::string_view s, size_t& i);
void append_cp(std::string& out, char32_t cp);

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
size_t length(std::string_view s);  // number of code points (Python len())
// Byte offset of code point `index` (0 <= index <= length); s.size() for index == length.
size_t byte_offset(std::string_view s, size_t index);
bool is_ascii(std::string_view s);

bool is_space(char32_t c);       // str.isspace(): Unicode White_Space plus U+001C..U+001F
bool is_line_break(char32_t c);  // a boundary of str.splitlines()
bool is_alpha(char32_t c);       // str.isalpha(): general category L*
bool is_decimal(char32_t c);     // str.isdecimal(): category Nd
bool is_digit(char32_t c);       // str.isdigit(): Nd plus the superscript / circled digits
bool is_numeric(char32_t c);     // str.isnumeric(): categories Nd, Nl, No
bool is_upper(char32_t c);
bool is_lower(char32_t c);
bool is_cased(char32_t c);
bool is_printable(char32_t c);  // str.isprintable(): what repr() leaves unescaped
bool is_identifier_start(char32_t c);
bool is_identifier_char(char32_t c);

// Simple (one-to-one) case mappings, except that U+00DF (sharp s) uppercases to "SS" as in
// Python; Python's other multi-character special casings are not reproduced.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string swapcase(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize(): first titlecased, rest lowered
std::string title(std::string_view s);       // str.title(): word starts after any uncased char

// Python str.strip / lstrip / rstrip: `chars` == nullptr strips whitespace (is_space),
// otherwise any code point of *chars.
std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right);

// str.splitlines(keepends)
std::vector<std::string> splitlines(std::string_view s, bool keepends);

// Python repr() of a str: single quotes unless the text has ' and no ", escapes like CPython.
std::string repr(std::string_view s);

}  // namespace trimkv::jinja::text
