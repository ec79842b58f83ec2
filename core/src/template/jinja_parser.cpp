// Recursive-descent parser reproducing jinja2/parser.py: the same precedence ladder (which
// differs from Python's: `~` binds tighter than `+`, unary minus tighter than `**`, `**` is
// left-associative, filters and `is` tests bind to the unary operand), the same statement
// grammar, and compile-time rejection of unknown filters and tests.
//
// Recursion is bounded: every nested expression, bracket and block counts against
// Limits::max_nesting, and a node's subtree height (which left-associative chains such as
// `a + a + ... + a` grow without recursing) is bounded the same way.
#include <algorithm>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "trimkv/core/error.h"

namespace trimkv::jinja {

namespace {

uint32_t height(const ExprPtr& e) { return e ? e->depth : 0; }

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Text: return "template data";
    case TokenType::VarBegin: return "'{{'";
    case TokenType::VarEnd: return "'}}'";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "'%}'";
    case TokenType::Name:
    case TokenType::Op: return "'" + std::string(t.text) + "'";
    case TokenType::String: return "string literal";
    case TokenType::Int: return "integer literal";
    case TokenType::Float: return "float literal";
    case TokenType::Eof: return "end of template";
  }
  return "token";
}

// A parsed `[...]` subscript entry: an expression, or a slice a:b:c.
struct Subscript {
  ExprPtr expr;
  bool is_slice = false;
  uint32_t pos = 0;
  ExprPtr start, stop, step;
};

struct OpenBlock {
  std::string_view tag;
  uint32_t pos;
  std::vector<std::string_view> ends;
};

class Parser {
 public:
  Parser(SourceRef src, const Options& options) : m_src(src), m_options(options), m_lexer(src, options) {
    m_cur = m_lexer.next();
  }

  std::unique_ptr<Node> parse() {
    auto root = std::make_unique<Node>();
    root->body = subparse({});
    return root;
  }

 private:
  // ---- token stream ---------------------------------------------------------------------------

  const Token& cur() const { return m_cur; }

  const Token& look() {
    if (!m_has_ahead) {
      m_ahead = m_lexer.next();
      m_has_ahead = true;
    }
    return m_ahead;
  }

  // Token stream accessors return positions and views (into the source), never Token
  // copies: a Token holds a std::string, and a copy in every recursive frame adds up.
  void advance() {
    if (m_has_ahead) {
      m_cur = std::move(m_ahead);
      m_has_ahead = false;
    } else {
      m_cur = m_lexer.next();
    }
  }

  uint32_t advance_pos() {
    const uint32_t pos = m_cur.pos;
    advance();
    return pos;
  }

  std::string_view advance_text() {
    const std::string_view text = m_cur.text;
    advance();
    return text;
  }

  bool skip_op(std::string_view op) {
    if (!cur().is_op(op)) return false;
    advance();
    return true;
  }

  bool skip_name(std::string_view name) {
    if (!cur().is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] __attribute__((noinline)) void fail(uint32_t pos, const std::string& message) const {
    TRIMKV_FAIL(Format, m_src.where(pos), message);
  }

  // "expected <what>, got <the current token>" at the current token.
  [[noreturn]] __attribute__((noinline)) void fail_expected(std::string_view what) const {
    fail(cur().pos, "expected " + std::string(what) + ", got " + describe(cur()));
  }

  [[noreturn]] __attribute__((noinline)) void fail_unexpected() const {
    fail(cur().pos, "unexpected " + describe(cur()));
  }

  void expect_op(std::string_view op) {
    if (!cur().is_op(op)) fail_expected("'" + std::string(op) + "'");
    advance();
  }

  std::string_view expect_name() {
    if (cur().type != TokenType::Name) fail_expected("a name");
    return advance_text();
  }

  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail_expected("'%}' to end the statement");
    advance();
  }

  // Counts one level of nesting for the lifetime of the guard.
  struct NestGuard {
    NestGuard(Parser& p, uint32_t pos) : parser(p) {
      if (++parser.m_nesting > parser.m_options.limits.max_nesting)
        parser.fail(pos, "the template nests too deeply (more than " +
                             std::to_string(parser.m_options.limits.max_nesting) + " levels)");
    }
    ~NestGuard() { --parser.m_nesting; }
    Parser& parser;
  };

  template <typename T>
  ExprPtr finish(std::unique_ptr<T> node, uint32_t child_height) {
    node->depth = child_height + 1;
    if (node->depth > static_cast<uint32_t>(m_options.limits.max_nesting))
      fail(node->pos,
           "the expression nests too deeply (more than " + std::to_string(m_options.limits.max_nesting) + " levels)");
    return node;
  }

  // ---- statements -----------------------------------------------------------------------------

  // Parses until `{% <one of ends>`, leaving the current token at that name.
  Body subparse(std::vector<std::string_view> ends) {
    Body body;
    while (true) {
      switch (cur().type) {
        case TokenType::Text: {
          const uint32_t pos = cur().pos;
          const auto length = static_cast<uint32_t>(advance_text().size());
          body.push_back(std::make_unique<TextStmt>(pos, length));
          break;
        }
        case TokenType::VarBegin: body.push_back(parse_output()); break;
        case TokenType::BlockBegin: {
          advance();
          if (cur().type == TokenType::Name && std::find(ends.begin(), ends.end(), cur().text) != ends.end())
            return body;
          body.push_back(parse_statement());
          break;
        }
        case TokenType::Eof:
          if (ends.empty()) return body;
          fail_unclosed();
        default: fail_unexpected();
      }
    }
  }

  __attribute__((noinline)) StmtPtr parse_output() {
    const uint32_t pos = advance_pos();
    ExprPtr e = parse_tuple(false, true, {}, false);
    if (cur().type != TokenType::VarEnd) fail_expected("'}}' to end the print statement");
    advance();
    return std::make_unique<OutputStmt>(pos, std::move(e));
  }

  [[noreturn]] __attribute__((noinline)) void fail_unclosed() const {
    const OpenBlock& open = m_open.back();
    std::string_view closer = open.ends.back();
    for (auto end : open.ends)
      if (end.substr(0, 3) == "end") closer = end;
    fail(open.pos, "the '" + std::string(open.tag) + "' block is not closed (expected '{% " + std::string(closer) +
                       " %}' before the end of the template)");
  }

  // Parses the body of a block opened by `tag` at `pos`, up to one of `ends`.
  Body block_body(std::string_view tag, uint32_t pos, std::vector<std::string_view> ends) {
    m_open.push_back({tag, pos, ends});
    Body body = subparse(std::move(ends));
    m_open.pop_back();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::Name) fail_expected("a tag name after '{%'");
    NestGuard guard(*this, cur().pos);
    const std::string_view tag = cur().text;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") return parse_loop_control();
    fail_tag(tag);
  }

  [[noreturn]] __attribute__((noinline)) void fail_tag(std::string_view tag) const {
    static constexpr std::string_view kUnsupported[] = {"extends",    "include", "import", "from", "block",
                                                        "autoescape", "do",      "trans",  "raw"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), tag) != std::end(kUnsupported)) {
      if (tag == "raw") fail(cur().pos, "malformed '{% raw %}' tag");
      fail(cur().pos, "the '{% " + std::string(tag) + " %}' tag is not supported");
    }
    if (tag.substr(0, 3) == "end" || tag == "elif" || tag == "else") {
      if (m_open.empty()) fail(cur().pos, "unexpected '" + std::string(tag) + "': no block is open");
      const OpenBlock& open = m_open.back();
      std::string expected;
      for (size_t i = 0; i < open.ends.size(); ++i)
        expected += (i ? (i + 1 == open.ends.size() ? " or '" : ", '") : "'") + std::string(open.ends[i]) + "'";
      fail(cur().pos, "unexpected '" + std::string(tag) + "' inside the '" + std::string(open.tag) +
                          "' block opened at " + m_src.line_col(open.pos) + " (expected " + expected + ")");
    }
    fail(cur().pos, "unknown tag '" + std::string(tag) + "'");
  }

  __attribute__((noinline)) StmtPtr parse_if() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<IfStmt>(pos);
    ExprPtr cond = parse_tuple(false, false, {}, false);
    expect_block_end();
    Body body = block_body("if", pos, {"elif", "else", "endif"});
    node->branches.emplace_back(std::move(cond), std::move(body));
    while (true) {
      if (skip_name("elif")) {
        ExprPtr c = parse_tuple(false, false, {}, false);
        expect_block_end();
        Body b = block_body("if", pos, {"elif", "else", "endif"});
        node->branches.emplace_back(std::move(c), std::move(b));
      } else if (skip_name("else")) {
        expect_block_end();
        node->else_body = block_body("if", pos, {"endif"});
      } else {
        advance();  // endif
        expect_block_end();
        return node;
      }
    }
  }

  __attribute__((noinline)) StmtPtr parse_for() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<ForStmt>(pos);
    node->target = parse_target("in");
    if (!skip_name("in")) fail_expected("'in' in the for loop");
    node->iter = parse_tuple(false, false, "recursive", false);
    if (skip_name("if")) node->filter = parse_expression(true);
    if (cur().is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++m_loop_depth;
    node->body = block_body("for", pos, {"endfor", "else"});
    --m_loop_depth;
    if (skip_name("else")) {
      expect_block_end();
      node->else_body = block_body("for", pos, {"endfor"});
    }
    advance();  // endfor
    expect_block_end();
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_set() {
    const uint32_t pos = advance_pos();
    Target target;
    std::string ns_attr;
    if (cur().type == TokenType::Name && look().is_op(".")) {
      target.pos = cur().pos;
      target.name = std::string(advance_text());
      advance();
      ns_attr = std::string(expect_name());
    } else {
      target = parse_target({});
    }
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(pos);
      node->target = std::move(target);
      node->ns_attr = std::move(ns_attr);
      node->value = parse_tuple(false, true, {}, false);
      expect_block_end();
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(pos);
    node->target = std::move(target);
    node->ns_attr = std::move(ns_attr);
    if (cur().is_op("|")) node->filters = parse_filter_chain(false);
    expect_block_end();
    node->body = block_body("set", pos, {"endset"});
    advance();
    expect_block_end();
    return node;
  }

  __attribute__((noinline)) void parse_signature(MacroDef& def) {
    expect_op("(");
    bool seen_default = false;
    while (!cur().is_op(")")) {
      if (!def.params.empty()) expect_op(",");
      MacroParam param;
      param.pos = cur().pos;
      param.name = std::string(expect_name());
      if (skip_op("=")) {
        param.default_value = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail(param.pos, "non-default argument follows default argument");
      }
      def.params.push_back(std::move(param));
    }
    advance();
  }

  // Parses a macro-like body (a function in jinja2's generated code): loop controls inside do
  // not reach an enclosing loop, and references to caller/varargs/kwargs are recorded.
  Body function_body(MacroDef& def, std::string_view tag, uint32_t pos, std::string_view end) {
    const int saved_loops = m_loop_depth;
    m_loop_depth = 0;
    m_macros.push_back(&def);
    Body body = block_body(tag, pos, {end});
    m_macros.pop_back();
    m_loop_depth = saved_loops;
    advance();
    expect_block_end();
    // As jinja2's macro_body: a parameter named like a special variable is an ordinary one, and
    // a `caller` parameter the body uses must have a default.
    for (const auto& p : def.params) {
      if (p.name == "kwargs") def.uses_kwargs = false;
      if (p.name == "varargs") def.uses_varargs = false;
      if (p.name == "caller" && def.uses_caller && !p.default_value)
        fail(pos, "When defining macros or call blocks the special \"caller\" argument must be omitted or be given a "
                  "default.");
    }
    return body;
  }

  __attribute__((noinline)) StmtPtr parse_macro() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<MacroStmt>(pos);
    node->def.pos = cur().pos;
    node->def.name = std::string(expect_name());
    parse_signature(node->def);
    expect_block_end();
    node->def.body = function_body(node->def, "macro", pos, "endmacro");
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_call_block() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<CallBlockStmt>(pos);
    node->caller.pos = pos;
    node->caller.name = "caller";
    if (cur().is_op("(")) parse_signature(node->caller);
    const uint32_t call_pos = cur().pos;
    node->call = parse_expression(true);
    if (node->call->kind != ExprKind::Call) fail(call_pos, "expected a call after '{% call', such as '{% call m() %}'");
    expect_block_end();
    node->caller.body = function_body(node->caller, "call", pos, "endcall");
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_filter_block() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<FilterBlockStmt>(pos);
    node->filters = parse_filter_chain(true);
    expect_block_end();
    node->body = block_body("filter", pos, {"endfilter"});
    advance();
    expect_block_end();
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_with() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<WithStmt>(pos);
    while (cur().type != TokenType::BlockEnd) {
      if (!node->assigns.empty()) expect_op(",");
      Target target = parse_target({});
      expect_op("=");
      node->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    advance();
    node->body = block_body("with", pos, {"endwith"});
    advance();
    expect_block_end();
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_generation() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<GenerationStmt>(pos);
    expect_block_end();
    // transformers compiles the body into a caller() function, like a call block.
    MacroDef scratch;
    node->body = function_body(scratch, "generation", pos, "endgeneration");
    return node;
  }

  __attribute__((noinline)) StmtPtr parse_loop_control() {
    const uint32_t pos = cur().pos;
    const std::string_view tag = advance_text();
    if (m_loop_depth == 0) fail(pos, "'" + std::string(tag) + "' outside a for loop");
    expect_block_end();
    return std::make_unique<LoopControlStmt>(tag == "break" ? StmtKind::Break : StmtKind::Continue, pos);
  }

  // ---- assignment targets ---------------------------------------------------------------------

  bool is_tuple_end(std::string_view extra_end) const {
    return cur().type == TokenType::VarEnd || cur().type == TokenType::BlockEnd || cur().is_op(")") ||
           (!extra_end.empty() && cur().is_name(extra_end));
  }

  // jinja2's parse_assign_target: a name, or a (possibly parenthesised) tuple of targets.
  Target parse_target(std::string_view extra_end) {
    Target tuple;
    tuple.pos = cur().pos;
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_target_primary());
      if (cur().is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (items.empty()) fail_expected("an assignment target");
      return std::move(items[0]);
    }
    tuple.is_tuple = true;
    tuple.items = std::move(items);
    return tuple;
  }

  Target parse_target_primary() {
    if (cur().type == TokenType::Name) {
      static constexpr std::string_view kConstants[] = {"true", "false", "True", "False", "none", "None"};
      if (std::find(std::begin(kConstants), std::end(kConstants), cur().text) != std::end(kConstants))
        fail(cur().pos, "can't assign to the constant '" + std::string(cur().text) + "'");
      Target target;
      target.pos = cur().pos;
      target.name = std::string(advance_text());
      return target;
    }
    if (cur().is_op("(")) {
      NestGuard guard(*this, cur().pos);
      advance();
      Target inner = parse_target({});
      expect_op(")");
      return inner;
    }
    fail(cur().pos, "can't assign to " + describe(cur()));
  }

  // ---- expressions ----------------------------------------------------------------------------

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::string_view extra_end, bool explicit_parens) {
    const uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (cur().is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_expected("an expression");
    }
    auto node = std::make_unique<ListExpr>(pos, true);
    uint32_t h = 0;
    for (const auto& item : items) h = std::max(h, height(item));
    node->items = std::move(items);
    return finish(std::move(node), h);
  }

  ExprPtr parse_expression(bool with_condexpr) {
    NestGuard guard(*this, cur().pos);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    NestGuard guard(*this, cur().pos);
    const uint32_t pos = cur().pos;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto node = std::make_unique<CondExpr>(pos);
      node->cond = parse_or();
      if (skip_name("else")) node->otherwise = parse_condexpr();
      node->then = std::move(expr);
      const uint32_t h = std::max({height(node->cond), height(node->then), height(node->otherwise)});
      expr = finish(std::move(node), h);
    }
    return expr;
  }

  ExprPtr parse_or() {
    const uint32_t pos = cur().pos;
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      ExprPtr right = parse_and();
      const uint32_t h = std::max(height(left), height(right));
      left = finish(std::make_unique<LogicalExpr>(pos, false, std::move(left), std::move(right)), h);
    }
    return left;
  }

  ExprPtr parse_and() {
    const uint32_t pos = cur().pos;
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      ExprPtr right = parse_not();
      const uint32_t h = std::max(height(left), height(right));
      left = finish(std::make_unique<LogicalExpr>(pos, true, std::move(left), std::move(right)), h);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (cur().is_name("not")) {
      const uint32_t pos = advance_pos();
      NestGuard guard(*this, pos);
      ExprPtr operand = parse_not();
      const uint32_t h = height(operand);
      return finish(std::make_unique<UnaryExpr>(pos, '!', std::move(operand)), h);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const uint32_t pos = cur().pos;
    ExprPtr expr = parse_math1();
    std::vector<CompareExpr::Operand> rest;
    while (true) {
      const Token& t = cur();
      CmpOp op;
      if (t.is_op("=="))
        op = CmpOp::Eq;
      else if (t.is_op("!="))
        op = CmpOp::Ne;
      else if (t.is_op("<"))
        op = CmpOp::Lt;
      else if (t.is_op("<="))
        op = CmpOp::Le;
      else if (t.is_op(">"))
        op = CmpOp::Gt;
      else if (t.is_op(">="))
        op = CmpOp::Ge;
      else if (t.is_name("in"))
        op = CmpOp::In;
      else if (t.is_name("not") && look().is_name("in"))
        op = CmpOp::NotIn;
      else
        break;
      const uint32_t op_pos = advance_pos();
      if (op == CmpOp::NotIn) advance();
      rest.push_back({op, op_pos, parse_math1()});
    }
    if (rest.empty()) return expr;
    auto node = std::make_unique<CompareExpr>(pos);
    uint32_t h = height(expr);
    for (const auto& r : rest) h = std::max(h, height(r.expr));
    node->first = std::move(expr);
    node->rest = std::move(rest);
    return finish(std::move(node), h);
  }

  ExprPtr binary(uint32_t pos, BinOp op, ExprPtr left, ExprPtr right) {
    const uint32_t h = std::max(height(left), height(right));
    return finish(std::make_unique<BinaryExpr>(pos, op, std::move(left), std::move(right)), h);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (cur().is_op("+") || cur().is_op("-")) {
      const BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
      const uint32_t pos = advance_pos();
      left = binary(pos, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!cur().is_op("~")) return first;
    auto node = std::make_unique<ConcatExpr>(pos);
    uint32_t h = height(first);
    node->parts.push_back(std::move(first));
    while (skip_op("~")) {
      node->parts.push_back(parse_math2());
      h = std::max(h, height(node->parts.back()));
    }
    return finish(std::move(node), h);
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      const Token& t = cur();
      BinOp op;
      if (t.is_op("*"))
        op = BinOp::Mul;
      else if (t.is_op("/"))
        op = BinOp::Div;
      else if (t.is_op("//"))
        op = BinOp::FloorDiv;
      else if (t.is_op("%"))
        op = BinOp::Mod;
      else
        break;
      const uint32_t pos = advance_pos();
      left = binary(pos, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (cur().is_op("**")) {
      const uint32_t pos = advance_pos();
      left = binary(pos, BinOp::Pow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (cur().is_op("-") || cur().is_op("+")) {
      const char op = cur().text[0];
      const uint32_t pos = advance_pos();
      NestGuard guard(*this, pos);
      ExprPtr operand = parse_unary(false);
      const uint32_t h = height(operand);
      node = finish(std::make_unique<UnaryExpr>(pos, op, std::move(operand)), h);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  __attribute__((noinline)) ExprPtr parse_primary() {
    const uint32_t pos = cur().pos;
    switch (cur().type) {
      case TokenType::Name: return parse_name();
      case TokenType::String: {
        std::string value = std::move(m_cur.str);
        advance();
        while (cur().type == TokenType::String) {  // "a" "b" == "ab"
          value += m_cur.str;
          advance();
        }
        return std::make_unique<LiteralExpr>(pos, Value::string(std::move(value)));
      }
      case TokenType::Int: {
        const int64_t v = cur().int_value;
        advance();
        return std::make_unique<LiteralExpr>(pos, Value::integer(v));
      }
      case TokenType::Float: {
        const double v = cur().float_value;
        advance();
        return std::make_unique<LiteralExpr>(pos, Value::real(v));
      }
      case TokenType::Op:
        if (cur().is_op("(")) {
          advance();
          ExprPtr node = parse_tuple(false, true, {}, true);
          expect_op(")");
          return node;
        }
        if (cur().is_op("[")) return parse_list();
        if (cur().is_op("{")) return parse_dict();
        break;
      default: break;
    }
    fail_unexpected();
  }

  ExprPtr parse_name() {
    const uint32_t pos = cur().pos;
    const std::string_view name = advance_text();
    if (name == "true" || name == "True") return std::make_unique<LiteralExpr>(pos, Value::boolean(true));
    if (name == "false" || name == "False") return std::make_unique<LiteralExpr>(pos, Value::boolean(false));
    if (name == "none" || name == "None") return std::make_unique<LiteralExpr>(pos, Value::none());
    if (!m_macros.empty()) {
      if (name == "caller") m_macros.back()->uses_caller = true;
      if (name == "varargs") m_macros.back()->uses_varargs = true;
      if (name == "kwargs") m_macros.back()->uses_kwargs = true;
    }
    return std::make_unique<NameExpr>(pos, std::string(name));
  }

  __attribute__((noinline)) ExprPtr parse_list() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<ListExpr>(pos, false);
    uint32_t h = 0;
    while (!cur().is_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (cur().is_op("]")) break;
      node->items.push_back(parse_expression(true));
      h = std::max(h, height(node->items.back()));
    }
    advance();
    return finish(std::move(node), h);
  }

  __attribute__((noinline)) ExprPtr parse_dict() {
    const uint32_t pos = advance_pos();
    auto node = std::make_unique<DictExpr>(pos);
    uint32_t h = 0;
    while (!cur().is_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (cur().is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      ExprPtr value = parse_expression(true);
      h = std::max({h, height(key), height(value)});
      node->items.emplace_back(std::move(key), std::move(value));
    }
    advance();
    return finish(std::move(node), h);
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (cur().is_op(".") || cur().is_op("["))
        node = parse_subscript(std::move(node));
      else if (cur().is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (cur().is_op("|"))
        node = parse_filter(std::move(node));
      else if (cur().is_name("is"))
        node = parse_test(std::move(node));
      else if (cur().is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  __attribute__((noinline)) ExprPtr parse_subscript(ExprPtr node) {
    const bool dot = cur().is_op(".");
    const uint32_t pos = advance_pos();
    if (dot) {
      const uint32_t h = height(node);
      const uint32_t attr_pos = cur().pos;
      if (cur().type == TokenType::Name)
        return finish(std::make_unique<AttrExpr>(pos, std::move(node), std::string(advance_text())), h);
      if (cur().type == TokenType::Int) {
        const int64_t index = cur().int_value;
        advance();
        return finish(std::make_unique<ItemExpr>(pos, std::move(node),
                                                 std::make_unique<LiteralExpr>(attr_pos, Value::integer(index))),
                      h);
      }
      fail_expected("a name or a number after '.'");
    }
    return parse_brackets(std::move(node), pos);
  }

  ExprPtr parse_brackets(ExprPtr node, uint32_t pos) {
    NestGuard guard(*this, pos);
    std::vector<Subscript> subs;
    while (!cur().is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    advance();
    if (subs.size() == 1 && subs[0].is_slice) {
      auto slice = std::make_unique<SliceExpr>(pos);
      const uint32_t h = std::max({height(node), height(subs[0].start), height(subs[0].stop), height(subs[0].step)});
      slice->object = std::move(node);
      slice->start = std::move(subs[0].start);
      slice->stop = std::move(subs[0].stop);
      slice->step = std::move(subs[0].step);
      return finish(std::move(slice), h);
    }
    ExprPtr key;
    if (subs.size() == 1) {
      key = std::move(subs[0].expr);
    } else {
      auto tuple = std::make_unique<ListExpr>(pos, true);
      uint32_t th = 0;
      for (auto& s : subs) {
        if (s.is_slice) fail(s.pos, "a slice inside a tuple subscript is not supported");
        th = std::max(th, height(s.expr));
        tuple->items.push_back(std::move(s.expr));
      }
      key = finish(std::move(tuple), th);
    }
    const uint32_t h = std::max(height(node), height(key));
    return finish(std::make_unique<ItemExpr>(pos, std::move(node), std::move(key)), h);
  }

  Subscript parse_subscribed() {
    Subscript s;
    s.pos = cur().pos;
    if (cur().is_op(":")) {
      advance();
    } else {
      ExprPtr e = parse_expression(true);
      if (!cur().is_op(":")) {
        s.expr = std::move(e);
        return s;
      }
      advance();
      s.start = std::move(e);
    }
    s.is_slice = true;
    if (!cur().is_op(":") && !cur().is_op("]") && !cur().is_op(",")) s.stop = parse_expression(true);
    if (skip_op(":")) {
      if (!cur().is_op("]") && !cur().is_op(",")) s.step = parse_expression(true);
    }
    return s;
  }

  // jinja2's parse_call_args: positional arguments, then keywords, then `*x` and `**y`, with
  // an optional trailing comma.
  void parse_call_args(ArgList& out, uint32_t& h) {
    const uint32_t open = cur().pos;
    expect_op("(");
    NestGuard guard(*this, open);
    bool require_comma = false;
    auto misplaced = [&](bool bad) {
      if (bad) fail(cur().pos, "invalid syntax for function call expression");
    };
    while (!cur().is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (cur().is_op(")")) break;
      }
      if (cur().is_op("*")) {
        misplaced(out.star || out.star_star);
        advance();
        out.star = parse_expression(true);
        h = std::max(h, height(out.star));
      } else if (cur().is_op("**")) {
        misplaced(out.star_star != nullptr);
        advance();
        out.star_star = parse_expression(true);
        h = std::max(h, height(out.star_star));
      } else if (cur().type == TokenType::Name && look().is_op("=")) {
        misplaced(out.star_star != nullptr);
        std::string key(advance_text());
        advance();
        out.kwargs.emplace_back(std::move(key), parse_expression(true));
        h = std::max(h, height(out.kwargs.back().second));
      } else {
        misplaced(out.star || out.star_star || !out.kwargs.empty());
        out.args.push_back(parse_expression(true));
        h = std::max(h, height(out.args.back()));
      }
      require_comma = true;
    }
    advance();
  }

  __attribute__((noinline)) ExprPtr parse_call(ExprPtr node) {
    auto call = std::make_unique<CallExpr>(node->pos);  // errors point at the callee
    uint32_t h = height(node);
    parse_call_args(call->args, h);
    call->callee = std::move(node);
    return finish(std::move(call), h);
  }

  FilterCall parse_filter_call(uint32_t& h) {
    FilterCall fc;
    fc.pos = cur().pos;
    fc.name = std::string(expect_name());
    while (skip_op(".")) fc.name += "." + std::string(expect_name());
    fc.fn = find_filter(fc.name);  // null when unknown: see NameCheck
    if (cur().is_op("(")) parse_call_args(fc.args, h);
    return fc;
  }

  std::vector<FilterCall> parse_filter_chain(bool start_inline) {
    std::vector<FilterCall> chain;
    uint32_t h = 0;
    while (cur().is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      chain.push_back(parse_filter_call(h));
    }
    return chain;
  }

  __attribute__((noinline)) ExprPtr parse_filter(ExprPtr node) {
    while (skip_op("|")) {
      uint32_t h = height(node);
      FilterCall fc = parse_filter_call(h);
      auto f = std::make_unique<FilterExpr>(fc.pos);
      f->operand = std::move(node);
      f->filter = std::move(fc);
      node = finish(std::move(f), h);
    }
    return node;
  }

  __attribute__((noinline)) ExprPtr parse_test(ExprPtr node) {
    advance();  // is
    auto test = std::make_unique<TestExpr>(cur().pos);
    test->negated = skip_name("not");
    test->pos = cur().pos;
    test->name = std::string(expect_name());
    while (skip_op(".")) test->name += "." + std::string(expect_name());
    test->fn = find_test(test->name);  // null when unknown: see NameCheck
    uint32_t h = height(node);
    const Token& t = cur();
    if (t.is_op("(")) {
      parse_call_args(test->args, h);
    } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Int ||
                t.type == TokenType::Float || t.is_op("[") || t.is_op("{")) &&
               !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
      if (t.is_name("is")) fail(t.pos, "you cannot chain multiple tests with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());  // `x is divisibleby 3`, `x is sameas none`
      h = std::max(h, height(arg));
      test->args.args.push_back(std::move(arg));
    }
    test->operand = std::move(node);
    return finish(std::move(test), h);
  }

  SourceRef m_src;
  const Options& m_options;
  Lexer m_lexer;
  Token m_cur;
  Token m_ahead;
  bool m_has_ahead = false;
  int m_nesting = 0;
  int m_loop_depth = 0;             // enclosing for loops within the current function body
  std::vector<MacroDef*> m_macros;  // macro-like bodies being parsed, innermost last
  std::vector<OpenBlock> m_open;    // blocks being parsed, innermost last (for error messages)
};

// jinja2 rejects an unknown filter or test when it compiles the template, except inside an
// `if` statement or a conditional expression (a "soft frame" in jinja2/compiler.py), where the
// error is raised only if that code runs; for loop bodies, macros and blocks start hard again.
// This pass applies the same rule to the finished tree; the evaluator raises the soft ones.
class NameCheck {
 public:
  explicit NameCheck(SourceRef src) : m_src(src) {}

  void body(const Body& b, bool soft) {
    for (const auto& s : b) stmt(*s, soft);
  }

 private:
  [[noreturn]] void unknown(uint32_t pos, const char* what, const std::string& name) const {
    TRIMKV_FAIL(Format, m_src.where(pos), "unknown ", what, " '", name, "'");
  }

  void filter(const FilterCall& f, bool soft) {
    if (!f.fn && !soft) unknown(f.pos, "filter", f.name);
    args(f.args, soft);
  }

  void args(const ArgList& a, bool soft) {
    for (const auto& x : a.args) expr(x.get(), soft);
    for (const auto& [k, v] : a.kwargs) expr(v.get(), soft);
    expr(a.star.get(), soft);
    expr(a.star_star.get(), soft);
  }

  void params(const MacroDef& def) {
    for (const auto& p : def.params) expr(p.default_value.get(), false);
    body(def.body, false);
  }

  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::Output: expr(static_cast<const OutputStmt&>(s).expr.get(), soft); return;
      case StmtKind::If: {
        const auto& n = static_cast<const IfStmt&>(s);
        for (const auto& [cond, b] : n.branches) {
          expr(cond.get(), true);
          body(b, true);
        }
        body(n.else_body, true);
        return;
      }
      case StmtKind::For: {
        const auto& n = static_cast<const ForStmt&>(s);
        expr(n.iter.get(), soft);
        expr(n.filter.get(), false);
        body(n.body, false);
        body(n.else_body, false);
        return;
      }
      case StmtKind::Set: expr(static_cast<const SetStmt&>(s).value.get(), soft); return;
      case StmtKind::SetBlock: {
        const auto& n = static_cast<const SetBlockStmt&>(s);
        for (const auto& f : n.filters) filter(f, false);
        body(n.body, false);
        return;
      }
      case StmtKind::Macro: params(static_cast<const MacroStmt&>(s).def); return;
      case StmtKind::CallBlock: {
        const auto& n = static_cast<const CallBlockStmt&>(s);
        expr(n.call.get(), soft);
        params(n.caller);
        return;
      }
      case StmtKind::FilterBlock: {
        const auto& n = static_cast<const FilterBlockStmt&>(s);
        for (const auto& f : n.filters) filter(f, false);
        body(n.body, false);
        return;
      }
      case StmtKind::With: {
        const auto& n = static_cast<const WithStmt&>(s);
        for (const auto& [target, value] : n.assigns) expr(value.get(), soft);
        body(n.body, false);
        return;
      }
      case StmtKind::Generation: body(static_cast<const GenerationStmt&>(s).body, false); return;
      default: return;
    }
  }

  void expr(const Expr* e, bool soft) {
    if (!e) return;
    switch (e->kind) {
      case ExprKind::Literal:
      case ExprKind::Name: return;
      case ExprKind::List:
        for (const auto& item : static_cast<const ListExpr*>(e)->items) expr(item.get(), soft);
        return;
      case ExprKind::Dict:
        for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
          expr(k.get(), soft);
          expr(v.get(), soft);
        }
        return;
      case ExprKind::Attr: expr(static_cast<const AttrExpr*>(e)->object.get(), soft); return;
      case ExprKind::Item: {
        const auto* n = static_cast<const ItemExpr*>(e);
        expr(n->object.get(), soft);
        expr(n->key.get(), soft);
        return;
      }
      case ExprKind::Slice: {
        const auto* n = static_cast<const SliceExpr*>(e);
        for (const Expr* part : {n->object.get(), n->start.get(), n->stop.get(), n->step.get()}) expr(part, soft);
        return;
      }
      case ExprKind::Call: {
        const auto* n = static_cast<const CallExpr*>(e);
        expr(n->callee.get(), soft);
        args(n->args, soft);
        return;
      }
      case ExprKind::Filter: {
        const auto* n = static_cast<const FilterExpr*>(e);
        expr(n->operand.get(), soft);
        filter(n->filter, soft);
        return;
      }
      case ExprKind::Test: {
        const auto* n = static_cast<const TestExpr*>(e);
        expr(n->operand.get(), soft);
        if (!n->fn && !soft) unknown(n->pos, "test", n->name);
        args(n->args, soft);
        return;
      }
      case ExprKind::Unary: expr(static_cast<const UnaryExpr*>(e)->operand.get(), soft); return;
      case ExprKind::Binary: {
        const auto* n = static_cast<const BinaryExpr*>(e);
        expr(n->left.get(), soft);
        expr(n->right.get(), soft);
        return;
      }
      case ExprKind::Logical: {
        const auto* n = static_cast<const LogicalExpr*>(e);
        expr(n->left.get(), soft);
        expr(n->right.get(), soft);
        return;
      }
      case ExprKind::Compare: {
        const auto* n = static_cast<const CompareExpr*>(e);
        expr(n->first.get(), soft);
        for (const auto& r : n->rest) expr(r.expr.get(), soft);
        return;
      }
      case ExprKind::Concat:
        for (const auto& part : static_cast<const ConcatExpr*>(e)->parts) expr(part.get(), soft);
        return;
      case ExprKind::Cond: {
        const auto* n = static_cast<const CondExpr*>(e);
        expr(n->cond.get(), true);
        expr(n->then.get(), true);
        expr(n->otherwise.get(), true);
        return;
      }
    }
  }

  SourceRef m_src;
};

}  // namespace

std::unique_ptr<Node> parse_template(std::string_view name, std::string_view source, const Options& options) {
  const SourceRef src{name, source};
  Parser parser(src, options);
  std::unique_ptr<Node> root = parser.parse();
  NameCheck(src).body(root->body, false);
  return root;
}

}  // namespace trimkv::jinja
