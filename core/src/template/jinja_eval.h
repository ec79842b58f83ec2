// The evaluator: renders a parsed template against a context, with jinja2's scoping rules
// (a for-loop iteration, macro call, call/filter/set block, with block and generation block
// each get a fresh scope whose parent is where they appear, so `set` inside them does not leak
// out; `if` does not make a scope) and its sandbox's attribute and item lookup rules.
//
// One Interp renders once; it is not shared between threads.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace trimkv::jinja {

// The variables of one scope, in assignment order.
class VarTable {
 public:
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
  void clear();

 private:
  std::vector<std::pair<std::string, Value>> m_vars;
  std::unordered_map<std::string, size_t> m_index;  // built once the table outgrows a scan
};

struct Scope {
  std::shared_ptr<Scope> parent;
  VarTable vars;
};

struct MacroCallable;

class Interp {
 public:
  Interp(SourceRef src, const Node& root, const Options& options);
  ~Interp();  // breaks the reference cycles a render can create (see m_cycle_scopes)
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  std::string render(const nlohmann::ordered_json& context);

  // ---- services for builtins ----
  [[noreturn]] void fail(uint32_t pos, const std::string& message) const;  // Error{Input}
  void charge(int64_t steps);                                              // counts steps against Limits::max_steps
  Value call(const Value& callee, CallArgs& args, uint32_t pos);
  // jinja2 sandbox lookups: getattr tries the Python attribute (a method) and then, when
  // `item_fallback`, the dict key; getitem tries the key/index and then the attribute.
  Value getattr(const Value& obj, const std::string& name, bool item_fallback = true);
  Value getitem(const Value& obj, const Value& key);
  // Filters and tests named at run time (map('upper'), selectattr('x', 'equalto', 1)).
  Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& value, const CallArgs& args);
  Value new_namespace(std::shared_ptr<NamespaceObj> ns);  // registers it for cycle breaking
  const Options& options() const { return m_options; }
  size_t max_bytes() const { return m_options.limits.max_output_bytes; }

  Value call_macro(const MacroCallable& macro, CallArgs& args, uint32_t pos);

 private:
  std::shared_ptr<Scope> macro_scope(const MacroCallable& macro, CallArgs& args);
  [[noreturn]] void fail_recursion(const MacroCallable& macro, uint32_t pos) const;
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  void exec_output(const OutputStmt& s);
  Flow exec_if(const IfStmt& s);
  Flow exec_for(const ForStmt& s);
  std::shared_ptr<const ListObj> loop_items(const ForStmt& s);
  Flow exec_scoped(const Body& body);  // runs `body` in a child scope
  Flow exec_set_block(const SetBlockStmt& s);
  void exec_call_block(const CallBlockStmt& s);
  Flow exec_filter_block(const FilterBlockStmt& s);
  Flow exec_with(const WithStmt& s);
  void exec_set(const Target& target, const std::string& ns_attr, Value value);
  Value eval(const Expr& e);
  Value eval_list(const ListExpr& e);
  Value eval_dict(const DictExpr& e);
  Value eval_item(const ItemExpr& e);
  Value eval_slice(const SliceExpr& e);
  Value eval_test(const TestExpr& e);
  Value eval_unary(const UnaryExpr& e);
  Value eval_binary(const BinaryExpr& e);
  Value eval_compare(const CompareExpr& e);
  Value eval_concat(const ConcatExpr& e);
  Value eval_cond(const CondExpr& e);
  Value eval_call(const CallExpr& c, const Value* caller);
  bool method_call(const CallExpr& c, Value& result_or_callee);
  CallArgs eval_args(const ArgList& list);
  void expand_star_args(const ArgList& list, CallArgs& out);
  Value apply(const FilterCall& f, const Value& value);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  Value lookup(const std::string& name) const;
  void bind(const Target& target, const Value& value, Scope& scope);
  Value make_macro(const MacroDef& def);
  // Renders `body` in `scope` into a string; `flow` receives a break/continue that left it.
  std::string capture(const Body& body, std::shared_ptr<Scope> scope, Flow* flow);
  std::shared_ptr<Scope> child_scope() const;
  void emit(std::string_view data);

  SourceRef m_src;
  const Node& m_root;
  const Options& m_options;
  std::shared_ptr<Scope> m_scope;  // the innermost scope
  std::string* m_out = nullptr;    // where rendered text goes (a macro or block capture, or the result)
  int64_t m_steps = 0;
  int m_depth = 0;       // nested eval/exec frames
  int m_call_depth = 0;  // nested macro calls
  uint32_t m_pos = 0;    // the construct being evaluated, for limit errors raised by builtins
  // Scopes captured by macros (a macro stored in the scope it closes over is a cycle) and
  // namespaces (which may be stored in themselves); cleared when the render ends.
  std::vector<std::shared_ptr<Scope>> m_cycle_scopes;
  std::vector<std::shared_ptr<NamespaceObj>> m_namespaces;

  friend struct DepthGuard;
  friend struct ScopeSwap;
};

}  // namespace trimkv::jinja
