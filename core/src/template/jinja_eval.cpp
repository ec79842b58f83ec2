#include "template/jinja_eval.h"

#include "template/jinja_text.h"
#include "trimkv/core/error.h"

// Work done once per node kind lives in out-of-line functions so that the frames of exec()
// and eval(), which recurse, stay small in every build mode (Limits::max_eval_depth is sized
// on them); an inlined heavy case would widen every recursive frame.
#define TRIMKV_JINJA_OUTLINE __attribute__((noinline))

namespace trimkv::jinja {

// ---- VarTable ---------------------------------------------------------------------------------

namespace {
constexpr size_t kScanLimit = 12;  // a scope with more variables than this gets a hash index
}

const Value* VarTable::find(std::string_view name) const {
  if (!m_index.empty()) {
    const auto it = m_index.find(std::string(name));
    return it == m_index.end() ? nullptr : &m_vars[it->second].second;
  }
  for (const auto& [k, v] : m_vars)
    if (k == name) return &v;
  return nullptr;
}

void VarTable::set(const std::string& name, Value value) {
  if (!m_index.empty()) {
    const auto [it, inserted] = m_index.emplace(name, m_vars.size());
    if (inserted)
      m_vars.emplace_back(name, std::move(value));
    else
      m_vars[it->second].second = std::move(value);
    return;
  }
  for (auto& [k, v] : m_vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  m_vars.emplace_back(name, std::move(value));
  if (m_vars.size() > kScanLimit)
    for (size_t i = 0; i < m_vars.size(); ++i) m_index.emplace(m_vars[i].first, i);
}

void VarTable::clear() {
  // Moved out first: destroying a value can destroy other scopes, never this one twice.
  auto vars = std::move(m_vars);
  m_vars.clear();
  m_index.clear();
}

// ---- callables the evaluator creates ----------------------------------------------------------

struct MacroCallable : CallableObj {
  const MacroDef* def = nullptr;
  std::shared_ptr<Scope> closure;
  Value call(Interp& interp, CallArgs& args, uint32_t pos) const override {
    return interp.call_macro(*this, args, pos);
  }
  std::string repr() const override { return "<Macro " + text::repr(name) + ">"; }
};

namespace {

// loop.cycle(a, b, ...): the argument at loop.index0 modulo their count.
struct LoopCycle : CallableObj {
  Value loop;
  Value call(Interp&, CallArgs& args, uint32_t) const override {
    if (args.args.empty()) throw OpError("no items for cycling given");
    return args.args[loop.loop().index0 % args.args.size()];
  }
  std::string repr() const override { return "<bound method LoopContext.cycle>"; }
};

// loop.changed(*values): true on the first call and whenever the values differ from the last call's.
struct LoopChanged : CallableObj {
  Value loop;
  Value call(Interp&, CallArgs& args, uint32_t) const override {
    if (!args.kwargs.empty()) throw OpError("changed() got an unexpected keyword argument");
    LoopObj& state = loop.loop();
    Value values = Value::list(args.args, SeqKind::Tuple);
    if (state.has_changed_value && equals(state.changed_value, values)) return Value::boolean(false);
    state.has_changed_value = true;
    state.changed_value = std::move(values);
    return Value::boolean(true);
  }
  std::string repr() const override { return "<bound method LoopContext.changed>"; }
};

std::string missing_attribute(const Value& obj, const std::string& name) {
  return text::repr(object_type_repr(obj)) + " has no attribute " + text::repr(name);
}

Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return Value::undefined(missing_attribute(obj, key.str()));
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

Value unsafe_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute " + text::repr(name) + " of " + text::repr(type_name(obj)) +
                          " object is unsafe.");
}

Value loop_attribute(const Value& loop_value, const std::string& name) {
  const LoopObj& loop = loop_value.loop();
  const auto n = static_cast<int64_t>(loop.items->items.size());
  const auto i = static_cast<int64_t>(loop.index0);
  if (name == "index0") return Value::integer(i);
  if (name == "index") return Value::integer(i + 1);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem")
    return i > 0 ? loop.items->items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? loop.items->items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
  if (name == "cycle") {
    auto cycle = std::make_shared<LoopCycle>();
    cycle->name = "cycle";
    cycle->loop = loop_value;
    return Value::object(Type::Callable, std::move(cycle));
  }
  if (name == "changed") {
    auto changed = std::make_shared<LoopChanged>();
    changed->name = "changed";
    changed->loop = loop_value;
    return Value::object(Type::Callable, std::move(changed));
  }
  return Value::undefined(missing_attribute(loop_value, name));
}

}  // namespace

// ---- Interp -----------------------------------------------------------------------------------

struct DepthGuard {
  DepthGuard(Interp& in, uint32_t pos) : interp(in) {
    if (++interp.m_depth > interp.m_options.limits.max_eval_depth)
      interp.fail(pos, "the template nests too deeply while rendering (more than " +
                           std::to_string(interp.m_options.limits.max_eval_depth) + " nested evaluations)");
  }
  ~DepthGuard() { --interp.m_depth; }
  Interp& interp;
};

// Makes `scope` the innermost scope for its lifetime.
struct ScopeSwap {
  ScopeSwap(Interp& in, std::shared_ptr<Scope> scope) : interp(in), saved(std::move(in.m_scope)) {
    interp.m_scope = std::move(scope);
  }
  ~ScopeSwap() { interp.m_scope = std::move(saved); }
  Interp& interp;
  std::shared_ptr<Scope> saved;
};

Interp::Interp(SourceRef src, const Node& root, const Options& options)
    : m_src(src), m_root(root), m_options(options) {}

Interp::~Interp() {
  m_scope.reset();
  for (auto& ns : m_namespaces) {
    auto items = std::move(ns->attrs.items);
    ns->attrs = DictObj();
  }
  for (auto& scope : m_cycle_scopes) scope->vars.clear();
}

void Interp::fail(uint32_t pos, const std::string& message) const { TRIMKV_FAIL(Input, m_src.where(pos), message); }

void Interp::charge(int64_t steps) {
  m_steps += steps;
  if (m_steps > m_options.limits.max_steps)
    fail(m_pos, "the template ran for more than " + std::to_string(m_options.limits.max_steps) +
                    " steps (Limits::max_steps); it may loop forever");
}

std::string Interp::render(const nlohmann::ordered_json& context) {
  auto globals = std::make_shared<Scope>();
  for (auto& [name, value] : make_globals()) globals->vars.set(name, std::move(value));
  auto ctx = std::make_shared<Scope>();
  ctx->parent = globals;
  if (context.is_object()) {
    for (const auto& [key, value] : context.items()) {
      try {
        ctx->vars.set(key, Value::from_json(value));
      } catch (const OpError& e) {
        fail(0, "context variable '" + key + "': " + e.what());
      }
    }
  }
  m_scope = std::make_shared<Scope>();
  m_scope->parent = ctx;
  std::string out;
  m_out = &out;
  exec_body(m_root.body);
  m_out = nullptr;
  return out;
}

Value Interp::new_namespace(std::shared_ptr<NamespaceObj> ns) {
  m_namespaces.push_back(ns);
  return Value::object(Type::Namespace, std::move(ns));
}

std::shared_ptr<Scope> Interp::child_scope() const {
  auto scope = std::make_shared<Scope>();
  scope->parent = m_scope;
  return scope;
}

Value Interp::lookup(const std::string& name) const {
  for (const Scope* s = m_scope.get(); s; s = s->parent.get())
    if (const Value* v = s->vars.find(name)) return *v;
  return Value::undefined(text::repr(name) + " is undefined");
}

void Interp::emit(std::string_view data) {
  m_out->append(data);
  if (m_out->size() > m_options.limits.max_output_bytes)
    fail(m_pos, "the output exceeds " + std::to_string(m_options.limits.max_output_bytes) +
                    " bytes (Limits::max_output_bytes)");
}

std::string Interp::capture(const Body& body, std::shared_ptr<Scope> scope, Flow* flow) {
  std::string buffer;
  struct RestoreOut {
    std::string*& out;
    std::string* saved;
    ~RestoreOut() { out = saved; }
  } restore{m_out, m_out};
  m_out = &buffer;
  ScopeSwap swap(*this, std::move(scope));
  const Flow f = exec_body(body);
  if (flow) *flow = f;
  return buffer;
}

// ---- statements -------------------------------------------------------------------------------

Interp::Flow Interp::exec_body(const Body& body) {
  for (const auto& stmt : body) {
    const Flow f = exec(*stmt);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interp::Flow Interp::exec(const Stmt& s) {
  DepthGuard guard(*this, s.pos);
  m_pos = s.pos;
  charge(1);
  try {
    switch (s.kind) {
      case StmtKind::Text: {
        const auto& t = static_cast<const TextStmt&>(s);
        emit(m_src.text.substr(t.pos, t.length));
        return Flow::Normal;
      }
      case StmtKind::Output: exec_output(static_cast<const OutputStmt&>(s)); return Flow::Normal;
      case StmtKind::If: return exec_if(static_cast<const IfStmt&>(s));
      case StmtKind::For: return exec_for(static_cast<const ForStmt&>(s));
      case StmtKind::Set: {
        const auto& node = static_cast<const SetStmt&>(s);
        exec_set(node.target, node.ns_attr, eval(*node.value));
        return Flow::Normal;
      }
      case StmtKind::SetBlock: return exec_set_block(static_cast<const SetBlockStmt&>(s));
      case StmtKind::Macro: {
        const auto& def = static_cast<const MacroStmt&>(s).def;
        m_scope->vars.set(def.name, make_macro(def));
        m_cycle_scopes.push_back(m_scope);  // the scope now holds a macro that holds the scope
        return Flow::Normal;
      }
      case StmtKind::CallBlock: exec_call_block(static_cast<const CallBlockStmt&>(s)); return Flow::Normal;
      case StmtKind::FilterBlock: return exec_filter_block(static_cast<const FilterBlockStmt&>(s));
      case StmtKind::With: return exec_with(static_cast<const WithStmt&>(s));
      case StmtKind::Generation: {
        emit(capture(static_cast<const GenerationStmt&>(s).body, child_scope(), nullptr));
        return Flow::Normal;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (const OpError& e) {
    fail(s.pos, e.what());
  }
  return Flow::Normal;
}

TRIMKV_JINJA_OUTLINE void Interp::exec_output(const OutputStmt& s) {
  const Value v = eval(*s.expr);
  m_pos = s.pos;
  if (v.is_string()) {
    emit(v.str());
  } else {
    std::string text;
    append_str(text, v);
    emit(text);
  }
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_if(const IfStmt& s) {
  for (const auto& [cond, body] : s.branches)
    if (truthy(eval(*cond))) return exec_body(body);
  return exec_body(s.else_body);
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_set_block(const SetBlockStmt& s) {
  Flow flow = Flow::Normal;
  Value v = Value::string(capture(s.body, child_scope(), &flow));
  if (flow != Flow::Normal) return flow;  // a break inside skips the assignment, as in jinja2
  for (const auto& f : s.filters) v = apply(f, v);
  exec_set(s.target, s.ns_attr, std::move(v));
  return Flow::Normal;
}

TRIMKV_JINJA_OUTLINE void Interp::exec_call_block(const CallBlockStmt& s) {
  const Value caller = make_macro(s.caller);
  const Value result = eval_call(static_cast<const CallExpr&>(*s.call), &caller);
  emit(to_str(result));
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_filter_block(const FilterBlockStmt& s) {
  Flow flow = Flow::Normal;
  Value v = Value::string(capture(s.body, child_scope(), &flow));
  if (flow != Flow::Normal) return flow;
  for (const auto& f : s.filters) v = apply(f, v);
  emit(to_str(v));
  return Flow::Normal;
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_with(const WithStmt& s) {
  auto scope = child_scope();
  for (const auto& [target, expr] : s.assigns) bind(target, eval(*expr), *scope);  // values see the outer scope
  ScopeSwap swap(*this, std::move(scope));
  return exec_body(s.body);
}

Value Interp::make_macro(const MacroDef& def) {
  auto macro = std::make_shared<MacroCallable>();
  macro->name = def.name;
  macro->def = &def;
  macro->closure = m_scope;
  return Value::object(Type::Callable, std::move(macro));
}

void Interp::bind(const Target& target, const Value& value, Scope& scope) {
  if (!target.is_tuple) {
    scope.vars.set(target.name, value);
    return;
  }
  std::shared_ptr<const ListObj> items;
  if (value.is_list() || value.is_dict() || value.is_string() || value.is_undefined()) {
    items = iterate(value);
  } else {
    fail(target.pos, std::string("cannot unpack non-iterable ") + type_name(value) + " object");
  }
  const size_t want = target.items.size();
  if (items->items.size() > want) fail(target.pos, "too many values to unpack (expected " + std::to_string(want) + ")");
  if (items->items.size() < want)
    fail(target.pos, "not enough values to unpack (expected " + std::to_string(want) + ", got " +
                         std::to_string(items->items.size()) + ")");
  for (size_t i = 0; i < want; ++i) bind(target.items[i], items->items[i], scope);
}

void Interp::exec_set(const Target& target, const std::string& ns_attr, Value value) {
  if (ns_attr.empty()) {
    bind(target, value, *m_scope);
    return;
  }
  const Value ns = lookup(target.name);
  if (ns.type() != Type::Namespace) fail(target.pos, "cannot assign attribute on non-namespace object");
  if (ns_attr[0] == '_')
    fail(target.pos, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
                         text::repr(ns_attr) + ". Please rename the attribute.");
  ns.ns().attrs.set(Value::string(ns_attr), std::move(value));
}

// The items a for loop visits: `for x in xs if cond` filters first, so loop.index and
// loop.length count the kept items only.
TRIMKV_JINJA_OUTLINE std::shared_ptr<const ListObj> Interp::loop_items(const ForStmt& s) {
  const Value iterable = eval(*s.iter);
  std::shared_ptr<const ListObj> items;
  try {
    items = iterate(iterable);
  } catch (const OpError& e) {
    fail(s.iter->pos, e.what());
  }
  if (!s.filter) return items;
  auto kept = std::make_shared<ListObj>();
  for (const auto& item : items->items) {
    charge(1);
    auto scope = child_scope();
    bind(s.target, item, *scope);
    ScopeSwap swap(*this, std::move(scope));
    if (truthy(eval(*s.filter))) kept->items.push_back(item);
  }
  return kept;
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_for(const ForStmt& s) {
  const std::shared_ptr<const ListObj> items = loop_items(s);
  auto loop = std::make_shared<LoopObj>();
  loop->items = items;
  const Value loop_value = Value::object(Type::Loop, loop);
  const std::shared_ptr<Scope> outer = m_scope;
  for (size_t i = 0; i < items->items.size(); ++i) {
    m_pos = s.pos;
    charge(1);
    loop->index0 = i;
    auto scope = std::make_shared<Scope>();
    scope->parent = outer;
    scope->vars.set("loop", loop_value);
    bind(s.target, items->items[i], *scope);
    ScopeSwap swap(*this, std::move(scope));
    if (exec_body(s.body) == Flow::Break) break;
  }
  if (items->items.empty() && !s.else_body.empty()) return exec_scoped(s.else_body);
  return Flow::Normal;
}

TRIMKV_JINJA_OUTLINE Interp::Flow Interp::exec_scoped(const Body& body) {
  ScopeSwap swap(*this, child_scope());
  return exec_body(body);
}

// ---- macros -----------------------------------------------------------------------------------

Value Interp::call_macro(const MacroCallable& macro, CallArgs& args, uint32_t pos) {
  if (m_call_depth >= m_options.limits.max_call_depth) fail_recursion(macro, pos);
  struct CallDepth {
    int& depth;
    explicit CallDepth(int& d) : depth(d) { ++depth; }
    ~CallDepth() { --depth; }
  } call_depth(m_call_depth);
  charge(1);
  return Value::string(capture(macro.def->body, macro_scope(macro, args), nullptr));
}

TRIMKV_JINJA_OUTLINE void Interp::fail_recursion(const MacroCallable& macro, uint32_t pos) const {
  fail(pos, "macro " + text::repr(macro.def->name) + " recursed too deeply (more than " +
                std::to_string(m_options.limits.max_call_depth) + " nested calls)");
}

// The scope a macro body runs in, with its parameters bound like jinja2.runtime.Macro.__call__.
TRIMKV_JINJA_OUTLINE std::shared_ptr<Scope> Interp::macro_scope(const MacroCallable& macro, CallArgs& args) {
  const MacroDef& def = *macro.def;
  const size_t n_params = def.params.size();
  std::vector<const Value*> bound(n_params, nullptr);
  std::vector<bool> used(args.kwargs.size(), false);
  for (size_t i = 0; i < n_params && i < args.args.size(); ++i) bound[i] = &args.args[i];
  bool found_caller = false;
  if (args.args.size() < n_params) {
    for (size_t i = args.args.size(); i < n_params; ++i) {
      for (size_t k = 0; k < args.kwargs.size(); ++k) {
        if (!used[k] && args.kwargs[k].first == def.params[i].name) {
          bound[i] = &args.kwargs[k].second;
          used[k] = true;
        }
      }
      if (def.params[i].name == "caller") found_caller = true;
    }
  } else {
    for (const auto& p : def.params)
      if (p.name == "caller") found_caller = true;
  }
  Value caller = Value::undefined("No caller defined");  // also when caller=None is passed
  if (def.uses_caller && !found_caller) {
    for (size_t k = 0; k < args.kwargs.size(); ++k) {
      if (!used[k] && args.kwargs[k].first == "caller") {
        if (!args.kwargs[k].second.is_none()) caller = args.kwargs[k].second;
        used[k] = true;
      }
    }
  }
  auto extra_kwargs = std::make_shared<DictObj>();
  for (size_t k = 0; k < args.kwargs.size(); ++k) {
    if (used[k]) continue;
    if (!def.uses_kwargs) {
      if (args.kwargs[k].first == "caller")
        throw OpError("macro " + text::repr(def.name) +
                      " was invoked with two values for the special caller argument. This is most likely a bug.");
      throw OpError("macro " + text::repr(def.name) + " takes no keyword argument " + text::repr(args.kwargs[k].first));
    }
    extra_kwargs->set(Value::string(args.kwargs[k].first), args.kwargs[k].second);
  }
  if (!def.uses_varargs && args.args.size() > n_params)
    throw OpError("macro " + text::repr(def.name) + " takes not more than " + std::to_string(n_params) +
                  " argument(s)");

  auto scope = std::make_shared<Scope>();
  scope->parent = macro.closure;
  {
    ScopeSwap swap(*this, scope);
    for (size_t i = 0; i < n_params; ++i) {
      const MacroParam& p = def.params[i];
      if (bound[i])
        scope->vars.set(p.name, *bound[i]);
      else if (p.default_value)
        scope->vars.set(p.name, eval(*p.default_value));  // sees earlier parameters
      else
        scope->vars.set(p.name, Value::undefined("parameter " + text::repr(p.name) + " was not provided"));
    }
    if (def.uses_varargs) {
      std::vector<Value> rest;
      for (size_t i = n_params; i < args.args.size(); ++i) rest.push_back(args.args[i]);
      scope->vars.set("varargs", Value::list(std::move(rest), SeqKind::Tuple));
    }
    if (def.uses_kwargs) scope->vars.set("kwargs", Value::dict(std::move(extra_kwargs)));
    if (def.uses_caller && !found_caller) scope->vars.set("caller", caller);
  }
  return scope;
}

// ---- expressions ------------------------------------------------------------------------------

CallArgs Interp::eval_args(const ArgList& list) {
  CallArgs out;
  out.args.reserve(list.args.size());
  for (const auto& a : list.args) out.args.push_back(eval(*a));
  for (const auto& [k, v] : list.kwargs) out.kwargs.emplace_back(k, eval(*v));
  if (list.star || list.star_star) expand_star_args(list, out);
  return out;
}

// f(*xs, **kw) as Python: the items of xs after the positional arguments, the string-keyed
// items of kw after the keywords, each keyword at most once.
TRIMKV_JINJA_OUTLINE void Interp::expand_star_args(const ArgList& list, CallArgs& out) {
  if (list.star) {
    const Value v = eval(*list.star);
    try {
      for (const auto& item : iterate(v)->items) out.args.push_back(item);
    } catch (const OpError& e) {
      fail(list.star->pos, std::string("argument after * must be an iterable: ") + e.what());
    }
  }
  if (list.star_star) {
    const Value v = eval(*list.star_star);
    if (!v.is_dict()) fail(list.star_star->pos, std::string("argument after ** must be a mapping, not ") + type_name(v));
    for (const auto& [k, val] : v.dict().items) {
      if (!k.is_string()) fail(list.star_star->pos, "keywords must be strings");
      for (const auto& existing : out.kwargs)
        if (existing.first == k.str()) fail(list.star_star->pos, "got multiple values for keyword argument " + text::repr(k.str()));
      out.kwargs.emplace_back(k.str(), val);
    }
  }
}

Value Interp::call(const Value& callee, CallArgs& args, uint32_t pos) {
  charge(1);
  switch (callee.type()) {
    case Type::Callable: return callee.callable().call(*this, args, pos);
    case Type::Undefined: throw_undefined(callee);
    default: throw OpError(std::string("'") + type_name(callee) + "' object is not callable");
  }
}

// `obj.name(...)`: a str/list/dict method is called directly, anything else is looked up.
TRIMKV_JINJA_OUTLINE bool Interp::method_call(const CallExpr& c, Value& result_or_callee) {
  const auto& attr = static_cast<const AttrExpr&>(*c.callee);
  const Value obj = eval(*attr.object);
  if ((obj.is_string() || obj.is_list() || obj.is_dict()) && method_kind(obj, attr.attr) == MethodKind::Safe) {
    CallArgs args = eval_args(c.args);
    m_pos = c.pos;
    charge(1);
    result_or_callee = call_method(*this, obj, attr.attr, args);
    return true;
  }
  try {
    result_or_callee = getattr(obj, attr.attr);
  } catch (const OpError& e) {
    fail(attr.pos, e.what());
  }
  return false;
}

Value Interp::eval_call(const CallExpr& c, const Value* caller) {
  Value callee;
  if (c.callee->kind == ExprKind::Attr) {
    if (method_call(c, callee)) return callee;
  } else {
    callee = eval(*c.callee);
  }
  CallArgs args = eval_args(c.args);
  if (caller) args.kwargs.emplace_back("caller", *caller);
  m_pos = c.pos;
  return call(callee, args, c.pos);
}

Value Interp::apply(const FilterCall& f, const Value& value) {
  if (!f.fn) fail(f.pos, "unknown filter '" + f.name + "'");  // one jinja2 only rejects when it runs
  CallArgs args = eval_args(f.args);
  m_pos = f.pos;
  charge(1);
  try {
    return f.fn(*this, value, args);
  } catch (const OpError& e) {
    fail(f.pos, e.what());
  }
}

Value Interp::apply_filter(const std::string& name, const Value& value, const CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) throw OpError("No filter named " + text::repr(name) + ".");
  charge(1);
  return fn(*this, value, args);
}

bool Interp::apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) throw OpError("No test named " + text::repr(name) + ".");
  charge(1);
  return fn(*this, value, args);
}

Value Interp::getattr(const Value& obj, const std::string& name, bool item_fallback) {
  switch (obj.type()) {
    case Type::Undefined: throw_undefined(obj);
    case Type::String:
    case Type::List:
    case Type::Dict: {
      const MethodKind kind = method_kind(obj, name);
      if (kind == MethodKind::Safe) return bind_method(obj, name);
      if (kind == MethodKind::Unsafe) return unsafe_attribute(obj, name);
      if (item_fallback && obj.is_dict())
        if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      return Value::undefined(missing_attribute(obj, name));
    }
    case Type::Namespace: {
      const Value* v = obj.ns().attrs.find(std::string_view(name));
      if (v && name[0] == '_') return unsafe_attribute(obj, name);
      return v ? *v : Value::undefined(missing_attribute(obj, name));
    }
    case Type::Loop: return loop_attribute(obj, name);
    default: return Value::undefined(missing_attribute(obj, name));
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Type::Undefined: throw_undefined(obj);
    case Type::Dict: {
      const Value* v = nullptr;
      try {
        v = obj.dict().find(key);
      } catch (const OpError&) {  // an unhashable key: Python's TypeError, which jinja2 swallows
      }
      if (v) return *v;
      if (key.is_string()) return getattr(obj, key.str(), false);
      return missing_item(obj, key);
    }
    case Type::List: {
      const ListObj& l = obj.list();
      if ((l.kind == SeqKind::List || l.kind == SeqKind::Tuple) && key.is_int_like()) {
        int64_t i = key.as_int();
        const auto n = static_cast<int64_t>(l.items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return l.items[static_cast<size_t>(i)];
        return missing_item(obj, key);
      }
      break;
    }
    case Type::String: {
      if (!key.is_int_like()) break;
      const std::string& s = obj.str();
      const auto n = static_cast<int64_t>(text::length(s));
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing_item(obj, key);
      const size_t begin = text::byte_offset(s, static_cast<size_t>(i));
      size_t end = begin;
      text::next_cp(s, end);
      return Value::string(s.substr(begin, end - begin));
    }
    default: break;
  }
  if (key.is_string()) return getattr(obj, key.str(), false);
  return missing_item(obj, key);
}

Value Interp::slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) throw_undefined(obj);
  auto index_like = [](const Value& v) { return v.is_none() || v.is_int_like(); };
  const bool sliceable =
      obj.is_string() || (obj.is_list() && (obj.list().kind == SeqKind::List || obj.list().kind == SeqKind::Tuple));
  if (!sliceable || !index_like(start) || !index_like(stop) || !index_like(step))
    return Value::undefined(object_type_repr(obj) + " has no element slice(" + repr(start) + ", " + repr(stop) + ", " +
                            repr(step) + ")");
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (text::is_ascii(s)) {
      const auto idx = slice_indices(static_cast<int64_t>(s.size()), start, stop, step);
      std::string out;
      out.reserve(idx.size());
      for (int64_t i : idx) out.push_back(s[static_cast<size_t>(i)]);
      return Value::string(std::move(out));
    }
    const std::u32string cps = text::decode(s);
    const auto idx = slice_indices(static_cast<int64_t>(cps.size()), start, stop, step);
    std::string out;
    for (int64_t i : idx) text::append_cp(out, cps[static_cast<size_t>(i)]);
    return Value::string(std::move(out));
  }
  const ListObj& l = obj.list();
  const auto idx = slice_indices(static_cast<int64_t>(l.items.size()), start, stop, step);
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(l.items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), l.kind);
}

Value Interp::eval(const Expr& e) {
  DepthGuard guard(*this, e.pos);
  try {
    switch (e.kind) {
      case ExprKind::Literal: return static_cast<const LiteralExpr&>(e).value;
      case ExprKind::Name: return lookup(static_cast<const NameExpr&>(e).name);
      case ExprKind::List: return eval_list(static_cast<const ListExpr&>(e));
      case ExprKind::Dict: return eval_dict(static_cast<const DictExpr&>(e));
      case ExprKind::Attr: {
        const auto& node = static_cast<const AttrExpr&>(e);
        return getattr(eval(*node.object), node.attr);
      }
      case ExprKind::Item: return eval_item(static_cast<const ItemExpr&>(e));
      case ExprKind::Slice: return eval_slice(static_cast<const SliceExpr&>(e));
      case ExprKind::Call: return eval_call(static_cast<const CallExpr&>(e), nullptr);
      case ExprKind::Filter: {
        const auto& node = static_cast<const FilterExpr&>(e);
        return apply(node.filter, eval(*node.operand));
      }
      case ExprKind::Test: return eval_test(static_cast<const TestExpr&>(e));
      case ExprKind::Unary: return eval_unary(static_cast<const UnaryExpr&>(e));
      case ExprKind::Binary: return eval_binary(static_cast<const BinaryExpr&>(e));
      case ExprKind::Logical: {
        const auto& node = static_cast<const LogicalExpr&>(e);
        Value left = eval(*node.left);
        if (truthy(left) == node.is_and) return eval(*node.right);
        return left;
      }
      case ExprKind::Compare: return eval_compare(static_cast<const CompareExpr&>(e));
      case ExprKind::Concat: return eval_concat(static_cast<const ConcatExpr&>(e));
      case ExprKind::Cond: return eval_cond(static_cast<const CondExpr&>(e));
    }
  } catch (const OpError& err) {
    fail(e.pos, err.what());
  }
  return Value();
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_list(const ListExpr& e) {
  std::vector<Value> items;
  items.reserve(e.items.size());
  for (const auto& item : e.items) items.push_back(eval(*item));
  return Value::list(std::move(items), e.is_tuple ? SeqKind::Tuple : SeqKind::List);
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_dict(const DictExpr& e) {
  auto d = std::make_shared<DictObj>();
  for (const auto& [k, v] : e.items) {
    Value key = eval(*k);
    d->set(std::move(key), eval(*v));
  }
  return Value::dict(std::move(d));
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_item(const ItemExpr& e) {
  const Value obj = eval(*e.object);
  return getitem(obj, eval(*e.key));
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_slice(const SliceExpr& e) {
  const Value obj = eval(*e.object);
  const Value start = e.start ? eval(*e.start) : Value::none();
  const Value stop = e.stop ? eval(*e.stop) : Value::none();
  const Value step = e.step ? eval(*e.step) : Value::none();
  charge(1);
  return slice(obj, start, stop, step);
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_test(const TestExpr& e) {
  if (!e.fn) fail(e.pos, "unknown test '" + e.name + "'");  // one jinja2 only rejects when it runs
  const Value v = eval(*e.operand);
  const CallArgs args = eval_args(e.args);
  m_pos = e.pos;
  charge(1);
  return Value::boolean(e.fn(*this, v, args) != e.negated);
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_unary(const UnaryExpr& e) {
  const Value v = eval(*e.operand);
  if (e.op == '!') return Value::boolean(!truthy(v));
  return e.op == '-' ? negate(v) : unary_plus(v);
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_binary(const BinaryExpr& e) {
  const Value left = eval(*e.left);
  const Value right = eval(*e.right);
  Value result = binary_op(e.op, left, right, max_bytes());
  if (result.is_string()) charge(static_cast<int64_t>(result.str().size() >> 6));  // copying costs steps too
  return result;
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_compare(const CompareExpr& e) {
  Value left = eval(*e.first);
  for (const auto& operand : e.rest) {
    Value right = eval(*operand.expr);
    bool holds = false;
    try {
      holds = compare(operand.op, left, right);
    } catch (const OpError& err) {
      fail(operand.pos, err.what());
    }
    if (!holds) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_concat(const ConcatExpr& e) {
  std::string out;
  for (const auto& part : e.parts) {
    const Value v = eval(*part);
    append_str(out, v);
    if (out.size() > max_bytes())
      throw OpError("string concatenation would exceed the output limit of " + std::to_string(max_bytes()) + " bytes");
  }
  charge(static_cast<int64_t>(out.size() >> 6));
  return Value::string(std::move(out));
}

TRIMKV_JINJA_OUTLINE Value Interp::eval_cond(const CondExpr& e) {
  if (truthy(eval(*e.cond))) return eval(*e.then);
  if (e.otherwise) return eval(*e.otherwise);
  const std::string where = m_src.line_col(e.pos);
  return Value::undefined("the inline if-expression on line " + where.substr(0, where.find(':')) +
                          " evaluated to false and no else section was defined.");
}

}  // namespace trimkv::jinja
