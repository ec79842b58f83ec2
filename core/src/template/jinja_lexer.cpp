#include "template/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "template/jinja_text.h"
#include "trimkv/core/error.h"

namespace trimkv::jinja {

std::string SourceRef::where(uint32_t pos) const { return std::string(name) + ":" + line_col(pos) + ": "; }

std::string SourceRef::line_col(uint32_t pos) const {
  const size_t end = std::min<size_t>(pos, text.size());
  const size_t line =
      1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(end), '\n'));
  const size_t nl = end == 0 ? std::string_view::npos : text.rfind('\n', end - 1);
  const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
  const size_t column = text::length(text.substr(line_start, end - line_start)) + 1;
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string normalize_source(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

bool starts_with(std::string_view s, size_t pos, std::string_view prefix) {
  return s.size() >= pos + prefix.size() && s.compare(pos, prefix.size(), prefix) == 0;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's `\s*` at pos (Unicode whitespace): the position after it.
size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t next = pos;
    if (!text::is_space(text::next_cp(s, next))) break;
    pos = next;
  }
  return pos;
}

// `(\d+_)*\d+` at pos: its end, or pos when there is no digit.
size_t scan_digits(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size() && is_digit(s[i])) {
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) ++i;
  }
  return i;
}

// `e[+\-]?(\d+_)*\d+` (case-insensitive) at pos: its end, or pos when it does not match.
size_t scan_exponent(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != 'e' && s[pos] != 'E')) return pos;
  size_t i = pos + 1;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t end = scan_digits(s, i);
  return end == i ? pos : end;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Lexer::Lexer(SourceRef src, const Options& options) : m_src(src), m_text(src.text), m_options(options) {}

void Lexer::fail(uint32_t pos, const std::string& message) const { TRIMKV_FAIL(Format, m_src.where(pos), message); }

Token Lexer::next() {
  while (m_pending_next >= m_pending.size()) {
    m_pending.clear();
    m_pending_next = 0;
    if (m_state == State::Root)
      lex_root();
    else
      lex_tag();
  }
  return std::move(m_pending[m_pending_next++]);
}

// Whitespace control for the data before a tag (jinja2's OptionalLStrip): "-" strips all
// trailing whitespace; otherwise lstrip_blocks removes spaces and tabs between the last line
// start and a block or comment tag (never before "{{"), unless the tag says "+".
void Lexer::push_text(size_t begin, std::string_view data, char sign, bool before_variable) {
  if (sign == '-') {
    data = text::strip(data, nullptr, false, true);
  } else if (sign != '+' && !before_variable && m_options.lstrip_blocks) {
    const size_t nl = data.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos > 0 || m_line_starting) {
      const bool blank = data.find_first_not_of(" \t", l_pos) == std::string_view::npos;
      if (blank) data = data.substr(0, l_pos);
    }
  }
  if (data.empty()) return;
  Token t;
  t.type = TokenType::Text;
  t.pos = static_cast<uint32_t>(begin);
  t.text = data;
  m_pending.push_back(std::move(t));
}

bool Lexer::match_raw_begin(size_t p, size_t& end) const {
  size_t i = p + 2;
  if (i < m_text.size() && (m_text[i] == '-' || m_text[i] == '+')) ++i;
  i = skip_space(m_text, i);
  if (!starts_with(m_text, i, "raw")) return false;
  i = skip_space(m_text, i + 3);
  if (starts_with(m_text, i, "-%}")) {
    end = skip_space(m_text, i + 3);
    return true;
  }
  if (starts_with(m_text, i, "%}")) {
    end = i + 2;  // jinja2 applies no trim_blocks after `{% raw %}`
    return true;
  }
  return false;
}

void Lexer::lex_raw(size_t body_begin, size_t raw_pos) {
  for (size_t q = body_begin;; ++q) {
    q = m_text.find("{%", q);
    if (q == std::string_view::npos)
      fail(static_cast<uint32_t>(raw_pos), "missing end of raw directive ('{% endraw %}')");
    size_t i = q + 2;
    char sign = 0;
    if (i < m_text.size() && (m_text[i] == '-' || m_text[i] == '+')) sign = m_text[i++];
    i = skip_space(m_text, i);
    if (!starts_with(m_text, i, "endraw")) continue;
    i = skip_space(m_text, i + 6);
    size_t end;
    if (starts_with(m_text, i, "+%}")) {
      end = i + 3;
    } else if (starts_with(m_text, i, "-%}")) {
      end = skip_space(m_text, i + 3);
    } else if (starts_with(m_text, i, "%}")) {
      end = i + 2;
      if (m_options.trim_blocks && end < m_text.size() && m_text[end] == '\n') ++end;
    } else {
      continue;
    }
    push_text(body_begin, m_text.substr(body_begin, q - body_begin), sign, false);
    m_pos = end;
    m_line_starting = m_text[end - 1] == '\n';
    return;
  }
}

void Lexer::skip_comment(size_t body_begin, size_t comment_pos) {
  for (size_t q = body_begin; q < m_text.size(); ++q) {
    size_t end;
    if (starts_with(m_text, q, "+#}")) {
      end = q + 3;
    } else if (starts_with(m_text, q, "-#}")) {
      end = skip_space(m_text, q + 3);
    } else if (starts_with(m_text, q, "#}")) {
      end = q + 2;
      if (m_options.trim_blocks && end < m_text.size() && m_text[end] == '\n') ++end;
    } else {
      continue;
    }
    m_pos = end;
    m_line_starting = m_text[end - 1] == '\n';
    return;
  }
  fail(static_cast<uint32_t>(comment_pos), "missing end of comment tag ('#}')");
}

void Lexer::lex_root() {
  while (true) {
    if (m_pos >= m_text.size()) {
      Token eof;
      eof.pos = static_cast<uint32_t>(m_text.size());
      m_pending.push_back(std::move(eof));
      return;
    }
    size_t p = m_pos;
    while (true) {
      p = m_text.find('{', p);
      if (p == std::string_view::npos || p + 1 >= m_text.size()) {
        p = std::string_view::npos;
        break;
      }
      const char c = m_text[p + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++p;
    }
    if (p == std::string_view::npos) {  // trailing data: no whitespace control applies
      Token t;
      t.type = TokenType::Text;
      t.pos = static_cast<uint32_t>(m_pos);
      t.text = m_text.substr(m_pos);
      m_pending.push_back(std::move(t));
      m_pos = m_text.size();
      return;
    }
    const char kind = m_text[p + 1];
    const char sign = (p + 2 < m_text.size() && (m_text[p + 2] == '-' || m_text[p + 2] == '+')) ? m_text[p + 2] : 0;
    const std::string_view data = m_text.substr(m_pos, p - m_pos);
    const size_t data_begin = m_pos;
    size_t raw_end = 0;
    if (kind == '%' && match_raw_begin(p, raw_end)) {
      push_text(data_begin, data, sign, false);
      m_line_starting = m_text[raw_end - 1] == '\n';
      lex_raw(raw_end, p);
      if (!m_pending.empty()) return;
      continue;
    }
    push_text(data_begin, data, sign, kind == '{');
    const size_t body = p + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      skip_comment(body, p);
      if (!m_pending.empty()) return;
      continue;
    }
    Token t;
    t.type = kind == '{' ? TokenType::VarBegin : TokenType::BlockBegin;
    t.pos = static_cast<uint32_t>(p);
    t.text = m_text.substr(p, body - p);
    m_pending.push_back(std::move(t));
    m_pos = body;
    m_state = kind == '{' ? State::Variable : State::Block;
    m_tag_pos = static_cast<uint32_t>(p);
    m_brackets.clear();
    return;
  }
}

void Lexer::lex_tag() {
  while (true) {
    // An end tag only closes the tag when brackets are balanced (`{{ {'a': 1}}}` works).
    if (m_brackets.empty()) {
      size_t end = 0;
      const size_t at = m_pos;
      if (m_state == State::Block) {
        if (starts_with(m_text, m_pos, "+%}")) {
          end = m_pos + 3;
        } else if (starts_with(m_text, m_pos, "-%}")) {
          end = skip_space(m_text, m_pos + 3);
        } else if (starts_with(m_text, m_pos, "%}")) {
          end = m_pos + 2;
          if (m_options.trim_blocks && end < m_text.size() && m_text[end] == '\n') ++end;
        }
      } else {
        if (starts_with(m_text, m_pos, "-}}"))
          end = skip_space(m_text, m_pos + 3);
        else if (starts_with(m_text, m_pos, "}}"))
          end = m_pos + 2;
      }
      if (end) {
        Token t;
        t.type = m_state == State::Block ? TokenType::BlockEnd : TokenType::VarEnd;
        t.pos = static_cast<uint32_t>(at);
        t.text = m_text.substr(at, end - at);
        m_pending.push_back(std::move(t));
        m_pos = end;
        m_line_starting = m_text[end - 1] == '\n';
        m_state = State::Root;
        return;
      }
    }
    const size_t after_space = skip_space(m_text, m_pos);
    if (after_space != m_pos) {
      m_pos = after_space;
      continue;
    }
    break;
  }
  if (m_pos >= m_text.size()) {
    fail(m_tag_pos, std::string("unexpected end of template: this tag is not closed (expected '") +
                        (m_state == State::Block ? "%}" : "}}") + "')");
  }
  const char c = m_text[m_pos];
  if (is_digit(c)) {
    m_pending.push_back(lex_number());
    return;
  }
  if (c == '\'' || c == '"') {
    m_pending.push_back(lex_string());
    return;
  }
  size_t i = m_pos;
  const char32_t cp = text::next_cp(m_text, i);
  if (text::is_identifier_start(cp)) {
    while (i < m_text.size()) {
      size_t j = i;
      if (!text::is_identifier_char(text::next_cp(m_text, j))) break;
      i = j;
    }
    Token t;
    t.type = TokenType::Name;
    t.pos = static_cast<uint32_t>(m_pos);
    t.text = m_text.substr(m_pos, i - m_pos);
    m_pending.push_back(std::move(t));
    m_pos = i;
    return;
  }
  static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  size_t len = 0;
  for (auto op : kTwo)
    if (starts_with(m_text, m_pos, op)) len = 2;
  if (!len && std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) len = 1;
  if (!len) {
    std::string shown;
    text::append_cp(shown, cp);
    fail(static_cast<uint32_t>(m_pos), "unexpected character '" + shown + "'");
  }
  if (c == '(' || c == '[' || c == '{') {
    m_brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  } else if (c == ')' || c == ']' || c == '}') {
    if (m_brackets.empty()) fail(static_cast<uint32_t>(m_pos), std::string("unexpected '") + c + "'");
    if (m_brackets.back() != c)
      fail(static_cast<uint32_t>(m_pos), std::string("unexpected '") + c + "', expected '" + m_brackets.back() + "'");
    m_brackets.pop_back();
  }
  Token t;
  t.type = TokenType::Op;
  t.pos = static_cast<uint32_t>(m_pos);
  t.text = m_text.substr(m_pos, len);
  m_pending.push_back(std::move(t));
  m_pos += len;
}

// jinja2's float_re `(?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)` is tried
// before integer_re `0b(_?[01])+|0o(_?[0-7])+|0x(_?[\da-f])+|[1-9](_?\d)*|0(_?0)*`.
Token Lexer::lex_number() {
  Token t;
  t.pos = static_cast<uint32_t>(m_pos);
  const size_t start = m_pos;
  const size_t int_end = scan_digits(m_text, start);
  size_t float_end = start;
  if (start == 0 || m_text[start - 1] != '.') {
    size_t frac_end = int_end;
    if (int_end + 1 < m_text.size() && m_text[int_end] == '.' && is_digit(m_text[int_end + 1]))
      frac_end = scan_digits(m_text, int_end + 1);
    const size_t exp_end = scan_exponent(m_text, frac_end);
    if (exp_end != frac_end)
      float_end = exp_end;
    else if (frac_end != int_end)
      float_end = frac_end;
    else if (scan_exponent(m_text, int_end) != int_end)
      float_end = scan_exponent(m_text, int_end);
  }
  if (float_end != start) {
    std::string spelled;
    for (size_t k = start; k < float_end; ++k)
      if (m_text[k] != '_') spelled.push_back(m_text[k]);
    double value = 0;
    const auto res = std::from_chars(spelled.data(), spelled.data() + spelled.size(), value);
    if (res.ec == std::errc::result_out_of_range) {
      const size_t e = spelled.find_first_of("eE");
      value = (e != std::string::npos && e + 1 < spelled.size() && spelled[e + 1] == '-') ? 0.0 : HUGE_VAL;
    }
    t.type = TokenType::Float;
    t.float_value = value;
    t.text = m_text.substr(start, float_end - start);
    m_pos = float_end;
    return t;
  }
  int base = 10;
  size_t digits_begin = start;
  size_t end = start;
  if (m_text[start] == '0' && start + 1 < m_text.size()) {
    const char p = static_cast<char>(m_text[start + 1] | 0x20);
    base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
    if (base != 10) {
      size_t i = start + 2;
      while (true) {
        size_t j = i;
        if (j < m_text.size() && m_text[j] == '_') ++j;
        const int v = j < m_text.size() ? hex_value(m_text[j]) : -1;
        if (v < 0 || v >= base) break;
        i = j + 1;
      }
      if (i == start + 2)
        base = 10;  // "0x" without digits: just the integer 0
      else
        digits_begin = start + 2, end = i;
    }
  }
  if (base == 10) {
    end = start + 1;
    if (m_text[start] == '0') {
      while (end < m_text.size()) {
        size_t j = end;
        if (m_text[j] == '_') ++j;
        if (j < m_text.size() && m_text[j] == '0')
          end = j + 1;
        else
          break;
      }
    } else {
      end = int_end;
    }
  }
  int64_t value = 0;
  for (size_t k = digits_begin; k < end; ++k) {
    if (m_text[k] == '_') continue;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, hex_value(m_text[k]), &value))
      fail(t.pos, "integer literal does not fit in 64 bits");
  }
  t.type = TokenType::Int;
  t.int_value = value;
  t.text = m_text.substr(start, end - start);
  m_pos = end;
  return t;
}

// A quoted literal, decoded like jinja2 does (Python's "unicode-escape" codec).
Token Lexer::lex_string() {
  const char quote = m_text[m_pos];
  size_t i = m_pos + 1;
  while (i < m_text.size() && m_text[i] != quote) i += m_text[i] == '\\' ? 2 : 1;
  if (i >= m_text.size()) fail(static_cast<uint32_t>(m_pos), "unterminated string literal");
  Token t;
  t.type = TokenType::String;
  t.pos = static_cast<uint32_t>(m_pos);
  t.text = m_text.substr(m_pos, i + 1 - m_pos);
  const std::string_view body = m_text.substr(m_pos + 1, i - m_pos - 1);
  std::string out;
  out.reserve(body.size());
  char32_t pending_high = 0;  // a \uD800-\uDBFF escape waiting for its low surrogate
  auto emit = [&](char32_t cp, size_t at) {
    if (pending_high) {
      if (cp >= 0xDC00 && cp <= 0xDFFF) {
        text::append_cp(out, 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00));
        pending_high = 0;
        return;
      }
      fail(static_cast<uint32_t>(at), "lone surrogate escape in a string literal");
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      pending_high = cp;
      return;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail(static_cast<uint32_t>(at), "lone surrogate escape in a string literal");
    text::append_cp(out, cp);
  };
  for (size_t k = 0; k < body.size();) {
    const size_t at = m_pos + 1 + k;
    if (body[k] != '\\') {
      const size_t start = k;
      text::next_cp(body, k);
      if (pending_high) fail(static_cast<uint32_t>(at), "lone surrogate escape in a string literal");
      out.append(body.substr(start, k - start));
      continue;
    }
    const char e = body[k + 1];
    k += 2;
    auto hex_escape = [&](int n) {
      char32_t cp = 0;
      for (int d = 0; d < n; ++d) {
        const int v = k < body.size() ? hex_value(body[k]) : -1;
        if (v < 0) fail(static_cast<uint32_t>(at), "truncated \\" + std::string(1, e) + " escape in a string literal");
        cp = cp * 16 + static_cast<char32_t>(v);
        ++k;
      }
      if (cp > 0x10FFFF) fail(static_cast<uint32_t>(at), "illegal Unicode character in a string literal");
      emit(cp, at);
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': emit('\\', at); break;
      case '\'': emit('\'', at); break;
      case '"': emit('"', at); break;
      case 'a': emit(0x07, at); break;
      case 'b': emit(0x08, at); break;
      case 'f': emit(0x0C, at); break;
      case 'n': emit('\n', at); break;
      case 'r': emit('\r', at); break;
      case 't': emit('\t', at); break;
      case 'v': emit(0x0B, at); break;
      case 'x': hex_escape(2); break;
      case 'u': hex_escape(4); break;
      case 'U': hex_escape(8); break;
      case 'N': fail(static_cast<uint32_t>(at), "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int d = 0; d < 2 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++d, ++k)
            cp = cp * 8 + static_cast<char32_t>(body[k] - '0');
          emit(cp, at);
        } else {  // Python keeps an unknown escape as written
          emit('\\', at);
          k -= 1;
        }
    }
  }
  if (pending_high) fail(t.pos, "lone surrogate escape in a string literal");
  t.str = std::move(out);
  m_pos = i + 1;
  return t;
}

}  // namespace trimkv::jinja
