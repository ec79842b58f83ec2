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

  Token advance() {
    Token t = std::move(m_cur);
    if (m_has_ahead) {
      m_cur = std::move(m_ahead);
      m_has_ahead = false;
    } else {
      m_cur = m_lexer.next();
    }
    return t;
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

  [[noreturn]] void fail(uint32_t pos, const std::string& message) const {
    TRIMKV_FAIL(Format, m_src.where(pos), message);
  }

  Token expect_op(std::string_view op) {
    if (!cur().is_op(op)) fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
    return advance();
  }

  Token expect_name() {
    if (cur().type != TokenType::Name) fail(cur().pos, "expected a name, got " + describe(cur()));
    return advance();
  }

  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail(cur().pos, "expected '%}' to end the statement, got " + describe(cur()));
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
      fail(node->pos, "the expression nests too deeply (more than " + std::to_string(m_options.limits.max_nesting) +
                          " levels)");
    return node;
  }

  // ---- statements -----------------------------------------------------------------------------

  // Parses until `{% <one of ends>`, leaving the current token at that name.
  Body subparse(std::vector<std::string_view> ends) {
    Body body;
    while (true) {
      switch (cur().type) {
        case TokenType::Text: {
          const Token t = advance();
          body.push_back(std::make_unique<TextStmt>(t.pos, static_cast<uint32_t>(t.text.size())));
          break;
        }
        case TokenType::VarBegin: {
          const uint32_t pos = advance().pos;
          ExprPtr e = parse_tuple(false, true, {}, false);
          if (cur().type != TokenType::VarEnd) fail(cur().pos, "expected '}}' to end the print statement, got " + describe(cur()));
          advance();
          body.push_back(std::make_unique<OutputStmt>(pos, std::move(e)));
          break;
        }
        case TokenType::BlockBegin: {
          advance();
          if (cur().type == TokenType::Name &&
              std::find(ends.begin(), ends.end(), cur().text) != ends.end())
            return body;
          body.push_back(parse_statement());
          break;
        }
        case TokenType::Eof: {
          if (ends.empty()) return body;
          const OpenBlock& open = m_open.back();
          std::string_view closer = open.ends.back();
          for (auto end : open.ends)
            if (end.substr(0, 3) == "end") closer = end;
          fail(open.pos, "the '" + std::string(open.tag) + "' block is not closed (expected '{% " + std::string(closer) +
                             " %}' before the end of the template)");
        }
        default: fail(cur().pos, "unexpected " + describe(cur()));
      }
    }
  }

  // Parses the body of a block opened by `tag` at `pos`, up to one of `ends`.
  Body block_body(std::string_view tag, uint32_t pos, std::vector<std::string_view> ends) {
    m_open.push_back({tag, pos, ends});
    Body body = subparse(std::move(ends));
    m_open.pop_back();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::Name) fail(cur().pos, "expected a tag name after '{%', got " + describe(cur()));
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
    static constexpr std::string_view kUnsupported[] = {"extends", "include", "import", "from", "block",
                                                        "autoescape", "do", "trans", "raw"};
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
      fail(cur().pos, "unexpected '" + std::string(tag) + "' inside the '" + std::string(open.tag) + "' block opened at " +
                          m_src.line_col(open.pos) + " (expected " + expected + ")");
    }
    fail(cur().pos, "unknown tag '" + std::string(tag) + "'");
  }

  StmtPtr parse_if() {
    const uint32_t pos = advance().pos;
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

  StmtPtr parse_for() {
    const uint32_t pos = advance().pos;
    auto node = std::make_unique<ForStmt>(pos);
    node->target = parse_target("in");
    if (!skip_name("in")) fail(cur().pos, "expected 'in' in the for loop, got " + describe(cur()));
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

  StmtPtr parse_set() {
    const uint32_t pos = advance().pos;
    Target target;
    std::string ns_attr;
    if (cur().type == TokenType::Name && look().is_op(".")) {
      const Token name = advance();
      advance();
      target.pos = name.pos;
      target.name = std::string(name.text);
      ns_attr = std::string(expect_name().text);
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

  void parse_signature(MacroDef& def) {
    expect_op("(");
    bool seen_default = false;
    while (!cur().is_op(")")) {
      if (!def.params.empty()) expect_op(",");
      const Token name = expect_name();
      MacroParam param;
      param.pos = name.pos;
      param.name = std::string(name.text);
      if (skip_op("=")) {
        param.default_value = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail(name.pos, "non-default argument follows default argument");
      }
      if (param.name == "caller") def.uses_caller = true;
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
    return body;
  }

  StmtPtr parse_macro() {
    const uint32_t pos = advance().pos;
    auto node = std::make_unique<MacroStmt>(pos);
    const Token name = expect_name();
    node->def.pos = name.pos;
    node->def.name = std::string(name.text);
    parse_signature(node->def);
    expect_block_end();
    node->def.body = function_body(node->def, "macro", pos, "endmacro");
    return node;
  }

  StmtPtr parse_call_block() {
    const uint32_t pos = advance().pos;
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

  StmtPtr parse_filter_block() {
    const uint32_t pos = advance().pos;
    auto node = std::make_unique<FilterBlockStmt>(pos);
    node->filters = parse_filter_chain(true);
    expect_block_end();
    node->body = block_body("filter", pos, {"endfilter"});
    advance();
    expect_block_end();
    return node;
  }

  StmtPtr parse_with() {
    const uint32_t pos = advance().pos;
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

  StmtPtr parse_generation() {
    const uint32_t pos = advance().pos;
    auto node = std::make_unique<GenerationStmt>(pos);
    expect_block_end();
    // transformers compiles the body into a caller() function, like a call block.
    MacroDef scratch;
    node->body = function_body(scratch, "generation", pos, "endgeneration");
    return node;
  }

  StmtPtr parse_loop_control() {
    const Token tag = advance();
    if (m_loop_depth == 0) fail(tag.pos, "'" + std::string(tag.text) + "' outside a for loop");
    expect_block_end();
    return std::make_unique<LoopControlStmt>(tag.text == "break" ? StmtKind::Break : StmtKind::Continue, tag.pos);
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
      if (cur().is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (items.empty()) fail(cur().pos, "expected an assignment target, got " + describe(cur()));
      return std::move(items[0]);
    }
    tuple.is_tuple = true;
    tuple.items = std::move(items);
    return tuple;
  }

  Target parse_target_primary() {
    const Token& t = cur();
    if (t.type == TokenType::Name) {
      static constexpr std::string_view kConstants[] = {"true", "false", "True", "False", "none", "None"};
      if (std::find(std::begin(kConstants), std::end(kConstants), t.text) != std::end(kConstants))
        fail(t.pos, "can't assign to the constant '" + std::string(t.text) + "'");
      Target target;
      target.pos = t.pos;
      target.name = std::string(t.text);
      advance();
      return target;
    }
    if (t.is_op("(")) {
      NestGuard guard(*this, t.pos);
      advance();
      Target inner = parse_target({});
      expect_op(")");
      return inner;
    }
    fail(t.pos, "can't assign to " + describe(t));
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
      if (cur().is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().pos, "expected an expression, got " + describe(cur()));
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
      const uint32_t pos = advance().pos;
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
      if (t.is_op("==")) op = CmpOp::Eq;
      else if (t.is_op("!=")) op = CmpOp::Ne;
      else if (t.is_op("<")) op = CmpOp::Lt;
      else if (t.is_op("<=")) op = CmpOp::Le;
      else if (t.is_op(">")) op = CmpOp::Gt;
      else if (t.is_op(">=")) op = CmpOp::Ge;
      else if (t.is_name("in")) op = CmpOp::In;
      else if (t.is_name("not") && look().is_name("in")) op = CmpOp::NotIn;
      else break;
      const uint32_t op_pos = advance().pos;
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
      const Token t = advance();
      left = binary(t.pos, t.text == "+" ? BinOp::Add : BinOp::Sub, std::move(left), parse_concat());
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
      if (t.is_op("*")) op = BinOp::Mul;
      else if (t.is_op("/")) op = BinOp::Div;
      else if (t.is_op("//")) op = BinOp::FloorDiv;
      else if (t.is_op("%")) op = BinOp::Mod;
      else break;
      const uint32_t pos = advance().pos;
      left = binary(pos, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (cur().is_op("**")) {
      const uint32_t pos = advance().pos;
      left = binary(pos, BinOp::Pow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (cur().is_op("-") || cur().is_op("+")) {
      const Token t = advance();
      NestGuard guard(*this, t.pos);
      ExprPtr operand = parse_unary(false);
      const uint32_t h = height(operand);
      node = finish(std::make_unique<UnaryExpr>(t.pos, t.text[0], std::move(operand)), h);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::Name: {
        const Token name = advance();
        if (name.text == "true" || name.text == "True") return std::make_unique<LiteralExpr>(name.pos, Value::boolean(true));
        if (name.text == "false" || name.text == "False") return std::make_unique<LiteralExpr>(name.pos, Value::boolean(false));
        if (name.text == "none" || name.text == "None") return std::make_unique<LiteralExpr>(name.pos, Value::none());
        if (!m_macros.empty()) {
          if (name.text == "caller") m_macros.back()->uses_caller = true;
          if (name.text == "varargs") m_macros.back()->uses_varargs = true;
          if (name.text == "kwargs") m_macros.back()->uses_kwargs = true;
        }
        return std::make_unique<NameExpr>(name.pos, std::string(name.text));
      }
      case TokenType::String: {
        const uint32_t pos = t.pos;
        std::string value = advance().str;
        while (cur().type == TokenType::String) value += advance().str;  // "a" "b" == "ab"
        return std::make_unique<LiteralExpr>(pos, Value::string(std::move(value)));
      }
      case TokenType::Int: {
        const Token n = advance();
        return std::make_unique<LiteralExpr>(n.pos, Value::integer(n.int_value));
      }
      case TokenType::Float: {
        const Token n = advance();
        return std::make_unique<LiteralExpr>(n.pos, Value::real(n.float_value));
      }
      case TokenType::Op:
        if (t.is_op("(")) {
          advance();
          ExprPtr node = parse_tuple(false, true, {}, true);
          expect_op(")");
          return node;
        }
        if (t.is_op("[")) return parse_list();
        if (t.is_op("{")) return parse_dict();
        break;
      default: break;
    }
    fail(t.pos, "unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    const uint32_t pos = advance().pos;
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

  ExprPtr parse_dict() {
    const uint32_t pos = advance().pos;
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
      if (cur().is_op(".") || cur().is_op("[")) node = parse_subscript(std::move(node));
      else if (cur().is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (cur().is_op("|")) node = parse_filter(std::move(node));
      else if (cur().is_name("is")) node = parse_test(std::move(node));
      else if (cur().is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token t = advance();
    if (t.text == ".") {
      const Token attr = advance();
      const uint32_t h = height(node);
      if (attr.type == TokenType::Name)
        return finish(std::make_unique<AttrExpr>(t.pos, std::move(node), std::string(attr.text)), h);
      if (attr.type == TokenType::Int)
        return finish(std::make_unique<ItemExpr>(t.pos, std::move(node),
                                                 std::make_unique<LiteralExpr>(attr.pos, Value::integer(attr.int_value))),
                      h);
      fail(attr.pos, "expected a name or a number after '.', got " + describe(attr));
    }
    NestGuard guard(*this, t.pos);
    std::vector<Subscript> subs;
    while (!cur().is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    advance();
    if (subs.size() == 1 && subs[0].is_slice) {
      auto slice = std::make_unique<SliceExpr>(t.pos);
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
      auto tuple = std::make_unique<ListExpr>(t.pos, true);
      uint32_t th = 0;
      for (auto& s : subs) {
        if (s.is_slice) fail(s.pos, "a slice inside a tuple subscript is not supported");
        th = std::max(th, height(s.expr));
        tuple->items.push_back(std::move(s.expr));
      }
      key = finish(std::move(tuple), th);
    }
    const uint32_t h = std::max(height(node), height(key));
    return finish(std::make_unique<ItemExpr>(t.pos, std::move(node), std::move(key)), h);
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

  void parse_call_args(std::vector<ExprPtr>& args, Kwargs& kwargs, uint32_t& h) {
    const Token open = expect_op("(");
    NestGuard guard(*this, open.pos);
    bool require_comma = false;
    while (!cur().is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (cur().is_op(")")) break;
      }
      if (cur().is_op("*") || cur().is_op("**")) fail(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::Name && look().is_op("=")) {
        const Token key = advance();
        advance();
        kwargs.emplace_back(std::string(key.text), parse_expression(true));
        h = std::max(h, height(kwargs.back().second));
      } else {
        if (!kwargs.empty()) fail(cur().pos, "a positional argument follows a keyword argument");
        args.push_back(parse_expression(true));
        h = std::max(h, height(args.back()));
      }
      require_comma = true;
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto call = std::make_unique<CallExpr>(node->pos);  // errors point at the callee
    uint32_t h = height(node);
    parse_call_args(call->args, call->kwargs, h);
    call->callee = std::move(node);
    return finish(std::move(call), h);
  }

  FilterCall parse_filter_call(uint32_t& h) {
    const Token name = expect_name();
    FilterCall fc;
    fc.pos = name.pos;
    fc.name = std::string(name.text);
    while (skip_op(".")) fc.name += "." + std::string(expect_name().text);
    fc.fn = find_filter(fc.name);
    if (!fc.fn) fail(name.pos, "unknown filter '" + fc.name + "'");
    if (cur().is_op("(")) parse_call_args(fc.args, fc.kwargs, h);
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

  ExprPtr parse_filter(ExprPtr node) {
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

  ExprPtr parse_test(ExprPtr node) {
    const Token is = advance();
    auto test = std::make_unique<TestExpr>(is.pos);
    test->negated = skip_name("not");
    const Token name = expect_name();
    test->pos = name.pos;
    test->name = std::string(name.text);
    while (skip_op(".")) test->name += "." + std::string(expect_name().text);
    test->fn = find_test(test->name);
    if (!test->fn) fail(name.pos, "unknown test '" + test->name + "'");
    uint32_t h = height(node);
    const Token& t = cur();
    if (t.is_op("(")) {
      parse_call_args(test->args, test->kwargs, h);
    } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Int ||
                t.type == TokenType::Float || t.is_op("[") || t.is_op("{")) &&
               !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
      if (t.is_name("is")) fail(t.pos, "you cannot chain multiple tests with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());  // `x is divisibleby 3`, `x is sameas none`
      h = std::max(h, height(arg));
      test->args.push_back(std::move(arg));
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
  int m_loop_depth = 0;            // enclosing for loops within the current function body
  std::vector<MacroDef*> m_macros;  // macro-like bodies being parsed, innermost last
  std::vector<OpenBlock> m_open;    // blocks being parsed, innermost last (for error messages)
};

}  // namespace

std::unique_ptr<Node> parse_template(std::string_view name, std::string_view source, const Options& options) {
  Parser parser(SourceRef{name, source}, options);
  return parser.parse();
}

}  // namespace trimkv::jinja
