// Tokenizer of Jinja template source, reproducing jinja2's lexer (jinja2/lexer.py) with the
// settings transformers uses: trim_blocks, lstrip_blocks, keep_trailing_newline=False.
//
// The source is first normalised as jinja2 does: every "\r\n" and "\r" becomes "\n" and one
// trailing newline is dropped (normalize_source). Positions are byte offsets into that
// normalised text; line and column do not change under the normalisation.
//
// The lexer is pulled one token at a time (the parser needs two tokens of lookahead), so a
// 10 MB template is never held as a token vector.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trimkv/core/jinja.h"

namespace trimkv::jinja {

// The template's name and normalised text, for "<name>:<line>:<column>: " prefixes.
struct SourceRef {
  std::string_view name;
  std::string_view text;
  std::string where(uint32_t pos) const;     // "<name>:<line>:<column>: "
  std::string line_col(uint32_t pos) const;  // "<line>:<column>", 1-based, column in code points
};

std::string normalize_source(std::string_view source, bool keep_trailing_newline);

enum class TokenType : uint8_t {
  Text,        // template data, whitespace control already applied
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,
  Int,
  Float,
  Op,
  Eof,
};

struct Token {
  TokenType type = TokenType::Eof;
  uint32_t pos = 0;       // byte offset of the token
  std::string_view text;  // Text: the data; Name/Op: the spelling; String: the literal with quotes
  std::string str;        // String: the decoded value
  int64_t int_value = 0;
  double float_value = 0;

  bool is_op(std::string_view op) const { return type == TokenType::Op && text == op; }
  bool is_name(std::string_view name) const { return type == TokenType::Name && text == name; }
};

class Lexer {
 public:
  // `src.text` must be normalised and outlive the lexer. Errors are Error{Format}.
  Lexer(SourceRef src, const Options& options);
  Token next();

 private:
  enum class State { Root, Variable, Block };

  void lex_root();
  void lex_tag();
  void lex_raw(size_t body_begin, size_t raw_pos);
  void skip_comment(size_t body_begin, size_t comment_pos);
  void push_text(size_t begin, std::string_view data, char sign, bool before_variable);
  bool match_raw_begin(size_t p, size_t& end) const;
  Token lex_number();
  Token lex_string();
  [[noreturn]] void fail(uint32_t pos, const std::string& message) const;

  SourceRef m_src;
  std::string_view m_text;
  const Options& m_options;
  size_t m_pos = 0;
  State m_state = State::Root;
  uint32_t m_tag_pos = 0;        // where the open tag began (for "not closed" errors)
  bool m_line_starting = true;   // jinja2's line_starting: the last match ended with "\n"
  std::vector<char> m_brackets;  // expected closers while inside a tag; end tags only match when empty
  std::vector<Token> m_pending;  // tokens produced ahead (a Text and the tag that follows it)
  size_t m_pending_next = 0;
};

}  // namespace trimkv::jinja
