// The built-in filters, tests, methods and globals of the Jinja interpreter (what jinja2's
// default environment and transformers' chat-template environment provide, restricted to what
// chat templates use; see jinja_builtins.cpp for the list). Builtins report failures as
// OpError; the evaluator adds the position of the filter, test or call.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace trimkv::jinja {

using FilterFn = Value (*)(Interp& interp, const Value& value, const CallArgs& args);
using TestFn = bool (*)(Interp& interp, const Value& value, const CallArgs& args);

// nullptr for a name jinja2 would not know (or that this interpreter does not implement).
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The globals every render starts with: range, dict, namespace, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> make_globals();

// Attributes of str / list / dict values that are Python methods. Safe ones can be called;
// unsafe ones (list.append, dict.update, ...) are refused as ImmutableSandboxedEnvironment
// refuses them.
enum class MethodKind { None, Safe, Unsafe };
MethodKind method_kind(const Value& self, std::string_view name);
Value call_method(Interp& interp, const Value& self, const std::string& name, const CallArgs& args);
// A bound method as a value (`x.startswith` without a call).
Value bind_method(const Value& self, const std::string& name);

// str.replace(old, new, count) with Python's semantics (an empty `old` inserts `repl` between
// characters); OpError when the result would exceed max_bytes.
std::string str_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                        size_t max_bytes);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // one level of indentation (json.dumps turns an int n into n spaces)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonOptions& options);

// Binds a builtin's arguments to parameter names like a Python signature: positional
// arguments first, then keywords; surplus or unknown arguments are an OpError.
class Params {
 public:
  Params(std::string_view what, const CallArgs& args, std::initializer_list<const char*> names);
  const Value* get(size_t i) const { return i < m_bound.size() ? m_bound[i] : nullptr; }
  Value get_or(size_t i, const Value& fallback) const {
    const Value* v = get(i);
    return v ? *v : fallback;
  }

 private:
  std::vector<const Value*> m_bound;
};

}  // namespace trimkv::jinja
