#include "template/jinja_text.h"

#include <utf8proc.h>

namespace trimkv::jinja::text {

namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // surrogateescape: byte b <-> U+DC00 + b

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

char32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t n = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  }
  if (n == 0 || i + n > s.size()) {
    ++i;
    return kEscapeBase + b0;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!is_continuation(b)) {
      ++i;
      return kEscapeBase + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return kEscapeBase + b0;
  }
  i += n;
  return cp;
}

void append_cp(std::string& out, char32_t cp) {
  if (cp >= kEscapeBase + 0x80 && cp <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(cp - kEscapeBase));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, i));
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_cp(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_cp(s, i);
  return n;
}

size_t byte_offset(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) next_cp(s, i);
  return i;
}

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool is_decimal(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return category(c) == UTF8PROC_CATEGORY_ND;
}

bool is_digit(char32_t c) {
  if (is_decimal(c)) return true;
  // Numeric_Type=Digit code points that are not decimal (superscripts, subscripts, circled).
  return c == 0xB2 || c == 0xB3 || c == 0xB9 || c == 0x2070 || (c >= 0x2074 && c <= 0x2079) ||
         (c >= 0x2080 && c <= 0x2089) || (c >= 0x2460 && c <= 0x2468) || (c >= 0x2474 && c <= 0x247C) ||
         (c >= 0x2488 && c <= 0x2490) || c == 0x24EA || (c >= 0x24F5 && c <= 0x24FD) || (c >= 0x2776 && c <= 0x277E) ||
         (c >= 0x2780 && c <= 0x2788) || (c >= 0x278A && c <= 0x2792) || (c >= 0x1369 && c <= 0x1371);
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_upper(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  return utf8proc_isupper(static_cast<utf8proc_int32_t>(c)) != 0;
}

bool is_lower(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  return utf8proc_islower(static_cast<utf8proc_int32_t>(c)) != 0;
}

bool is_cased(char32_t c) { return is_upper(c) || is_lower(c) || category(c) == UTF8PROC_CATEGORY_LT; }

bool is_printable(char32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7F;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    default: return true;
  }
}

bool is_identifier_start(char32_t c) {
  if (c < 0x80) return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  const auto cat = category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || cat == UTF8PROC_CATEGORY_NL;
}

bool is_identifier_char(char32_t c) {
  if (c < 0x80) return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9');
  if (is_identifier_start(c)) return true;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ND ||
         cat == UTF8PROC_CATEGORY_PC;
}

namespace {

char32_t to_upper_cp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower_cp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title_cp(char32_t c) {
  if (c < 0x80) return to_upper_cp(c);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "SS";
    return;
  }
  append_cp(out, to_upper_cp(c));
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_cp(s, i));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_cp(out, to_lower_cp(next_cp(s, i)));
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (is_upper(c))
      append_cp(out, to_lower_cp(c));
    else if (is_lower(c))
      append_upper(out, c);
    else
      append_cp(out, c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (first) {
      if (c == 0xDF)
        out += "Ss";
      else
        append_cp(out, to_title_cp(c));
    } else {
      append_cp(out, to_lower_cp(c));
    }
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  // CPython's do_title: a character after a cased one is lowered, any other is titlecased.
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (previous_cased)
      append_cp(out, to_lower_cp(c));
    else if (c == 0xDF)
      out += "Ss";
    else
      append_cp(out, to_title_cp(c));
    previous_cased = is_cased(c);
  }
  return out;
}

std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string set;
  if (chars) set = decode(*chars);
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t j = begin;
      if (!strippable(next_cp(s, j))) break;
      begin = j;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && is_continuation(static_cast<unsigned char>(s[start]))) --start;
      size_t j = start;
      const char32_t c = next_cp(s, j);
      if (j != end) {  // the trailing bytes were not one well-formed character: a single byte
        start = end - 1;
        j = start;
        if (!strippable(next_cp(s, j))) break;
      } else if (!strippable(c)) {
        break;
      }
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t line_start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = next_cp(s, i);
    if (!is_line_break(c)) continue;
    size_t end = i;
    if (c == '\r' && i < s.size() && s[i] == '\n') end = ++i;
    lines.emplace_back(s.substr(line_start, (keepends ? end : at) - line_start));
    line_start = end;
  }
  if (line_start < s.size()) lines.emplace_back(s.substr(line_start));
  return lines;
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_cp(out, c);
    } else {
      int digits = 8;
      if (c <= 0xFF) {
        out += "\\x", digits = 2;
      } else if (c <= 0xFFFF) {
        out += "\\u", digits = 4;
      } else {
        out += "\\U";
      }
      for (int k = digits - 1; k >= 0; --k) out.push_back(kHex[(c >> (4 * k)) & 0xF]);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace trimkv::jinja::text
