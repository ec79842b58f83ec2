// The parsed template: expression and statement nodes. Every node records the byte offset of
// the construct it came from (for "<name>:<line>:<column>: " in errors). Nodes are immutable
// after parsing; the evaluator only reads them. Trees are at most Limits::max_nesting deep
// (the parser refuses deeper ones), so the recursive evaluator and destructors are bounded.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_builtins.h"
#include "template/jinja_value.h"
#include "trimkv/core/jinja.h"

namespace trimkv::jinja {

// ---- expressions ------------------------------------------------------------------------------

enum class ExprKind : uint8_t {
  Literal,  // a constant
  Name,     // a variable
  List,     // [a, b] or a tuple (a, b)
  Dict,     // {k: v}
  Attr,     // x.name
  Item,     // x[key]
  Slice,    // x[a:b:c]
  Call,     // f(args, k=v)
  Filter,   // x | f(args)
  Test,     // x is t(args), x is not t
  Unary,    // -x, +x, not x
  Binary,   // + - * / // % **
  Logical,  // and, or (return an operand, like Python)
  Compare,  // a < b <= c, in, not in
  Concat,   // a ~ b ~ c
  Cond,     // a if c else b
};

struct Expr {
  Expr(ExprKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  uint32_t pos;
  uint32_t depth = 1;  // height of the subtree, bounded by the parser
};
using ExprPtr = std::unique_ptr<Expr>;
using Kwargs = std::vector<std::pair<std::string, ExprPtr>>;

// The arguments of a call, filter or test: f(a, b, k=v, *star, **star_star).
struct ArgList {
  std::vector<ExprPtr> args;
  Kwargs kwargs;
  ExprPtr star;       // `*expr`: its items are appended to the positional arguments
  ExprPtr star_star;  // `**expr`: a dict whose items are appended to the keyword arguments
};

struct LiteralExpr : Expr {
  LiteralExpr(uint32_t p, Value v) : Expr(ExprKind::Literal, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(uint32_t p, std::string n) : Expr(ExprKind::Name, p), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(uint32_t p, bool tuple) : Expr(ExprKind::List, p), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(uint32_t p) : Expr(ExprKind::Dict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttrExpr : Expr {
  AttrExpr(uint32_t p, ExprPtr o, std::string a) : Expr(ExprKind::Attr, p), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct ItemExpr : Expr {
  ItemExpr(uint32_t p, ExprPtr o, ExprPtr k) : Expr(ExprKind::Item, p), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr : Expr {
  explicit SliceExpr(uint32_t p) : Expr(ExprKind::Slice, p) {}
  ExprPtr object;
  ExprPtr start, stop, step;  // null when omitted (None)
};

struct CallExpr : Expr {
  explicit CallExpr(uint32_t p) : Expr(ExprKind::Call, p) {}
  ExprPtr callee;
  ArgList args;
};

// One `| name(args)` application; also the filters of `{% filter %}` and `{% set x | f %}`.
struct FilterCall {
  uint32_t pos = 0;  // the filter's name
  std::string name;
  FilterFn fn = nullptr;  // null: unknown, an error when applied (see parse_template)
  ArgList args;
};

struct FilterExpr : Expr {
  explicit FilterExpr(uint32_t p) : Expr(ExprKind::Filter, p) {}
  ExprPtr operand;
  FilterCall filter;
};

struct TestExpr : Expr {
  explicit TestExpr(uint32_t p) : Expr(ExprKind::Test, p) {}
  ExprPtr operand;
  std::string name;
  TestFn fn = nullptr;  // null: unknown, an error when evaluated (see parse_template)
  ArgList args;
  bool negated = false;
};

struct UnaryExpr : Expr {
  UnaryExpr(uint32_t p, char o, ExprPtr x) : Expr(ExprKind::Unary, p), op(o), operand(std::move(x)) {}
  char op;  // '-', '+', or '!' for `not`
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  BinaryExpr(uint32_t p, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::Binary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  ExprPtr left, right;
};

struct LogicalExpr : Expr {
  LogicalExpr(uint32_t p, bool a, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::Logical, p), is_and(a), left(std::move(l)), right(std::move(r)) {}
  bool is_and;
  ExprPtr left, right;
};

struct CompareExpr : Expr {
  explicit CompareExpr(uint32_t p) : Expr(ExprKind::Compare, p) {}
  ExprPtr first;
  struct Operand {
    CmpOp op;
    uint32_t pos;
    ExprPtr expr;
  };
  std::vector<Operand> rest;  // evaluated left to right, stopping at the first false, like Python
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(uint32_t p) : Expr(ExprKind::Concat, p) {}
  std::vector<ExprPtr> parts;
};

struct CondExpr : Expr {
  explicit CondExpr(uint32_t p) : Expr(ExprKind::Cond, p) {}
  ExprPtr cond, then, otherwise;  // otherwise null: an undefined when the condition is false
};

// ---- statements -------------------------------------------------------------------------------

enum class StmtKind : uint8_t {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Generation,
  Break,
  Continue,
};

struct Stmt {
  Stmt(StmtKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  uint32_t pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: a name, or a tuple of targets to unpack into.
struct Target {
  uint32_t pos = 0;
  std::string name;
  bool is_tuple = false;
  std::vector<Target> items;
};

struct TextStmt : Stmt {
  TextStmt(uint32_t p, uint32_t len) : Stmt(StmtKind::Text, p), length(len) {}
  uint32_t length;  // the data is source[pos, pos + length)
};

struct OutputStmt : Stmt {
  OutputStmt(uint32_t p, ExprPtr e) : Stmt(StmtKind::Output, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(uint32_t p) : Stmt(StmtKind::If, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(uint32_t p) : Stmt(StmtKind::For, p) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`, or null
  Body body;
  Body else_body;  // rendered when no item passed the filter
};

struct SetStmt : Stmt {
  explicit SetStmt(uint32_t p) : Stmt(StmtKind::Set, p) {}
  Target target;
  std::string ns_attr;  // `set ns.attr = ...`: target.name is the namespace variable
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(uint32_t p) : Stmt(StmtKind::SetBlock, p) {}
  Target target;
  std::string ns_attr;
  std::vector<FilterCall> filters;  // applied to the rendered body, in order
  Body body;
};

struct MacroParam {
  uint32_t pos = 0;
  std::string name;
  ExprPtr default_value;  // null: "parameter was not provided" undefined
};

struct MacroDef {
  uint32_t pos = 0;
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  // Whether the body refers to these names (jinja2 decides the macro's signature from that).
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(uint32_t p) : Stmt(StmtKind::Macro, p) {}
  MacroDef def;
};

struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(uint32_t p) : Stmt(StmtKind::CallBlock, p) {}
  MacroDef caller;  // the block body, callable as caller(...)
  ExprPtr call;     // a CallExpr; `caller` is passed to it as a keyword argument
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(uint32_t p) : Stmt(StmtKind::FilterBlock, p) {}
  std::vector<FilterCall> filters;
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(uint32_t p) : Stmt(StmtKind::With, p) {}
  std::vector<std::pair<Target, ExprPtr>> assigns;
  Body body;
};

struct GenerationStmt : Stmt {  // transformers' {% generation %}: renders its body in a new scope
  explicit GenerationStmt(uint32_t p) : Stmt(StmtKind::Generation, p) {}
  Body body;
};

struct LoopControlStmt : Stmt {  // break / continue
  LoopControlStmt(StmtKind k, uint32_t p) : Stmt(k, p) {}
};

// The template root (declared in jinja.h).
struct Node {
  Body body;
};

// Parses normalised source (see normalize_source). Error{Format} on a syntax error, and on an
// unknown filter or test outside `if` statements and conditional expressions (as jinja2).
std::unique_ptr<Node> parse_template(std::string_view name, std::string_view source, const Options& options);

}  // namespace trimkv::jinja
