// The dynamic value of the Jinja interpreter, with Python semantics (jinja2 compiles templates
// to Python, so "what Jinja does" is "what Python does" on these values).
//
// A Value is a small tagged handle (32 bytes): scalars inline, everything else behind a
// shared_ptr. Strings, lists and dicts are immutable once built (ImmutableSandboxedEnvironment
// forbids mutating them); only a namespace() and the loop object change while rendering.
// Values are not shared between renders, except literal constants owned by the parsed
// template, which are never mutated, so concurrent renders of one Template are safe.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trimkv::jinja {

class Interp;
class Value;
struct ListObj;
struct DictObj;
struct NamespaceObj;
struct LoopObj;
struct CallableObj;

// A failed Python operation on values (TypeError, ValueError, ZeroDivisionError, jinja2's
// UndefinedError...). Thrown without a position: the evaluator catches it at the expression or
// statement being evaluated and rethrows Error{Input} "<name>:<line>:<column>: <what()>".
struct OpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Lists and dicts nest at most this deep (Python's own recursion limit is about 1000, so a
// deeper value could not be printed or serialised by transformers either). The bound keeps
// repr, equality, tojson and destruction, which recurse, off the end of the C++ stack.
constexpr uint32_t kMaxValueDepth = 1000;

enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Loop, Callable };

// What a sequence is in Python terms. They differ only in repr(), equality, len() and
// subscripting: an Iterator (what jinja's map/select/items/unique filters return, a generator
// in Python) is always truthy, has no len() and cannot be indexed; dict views cannot be indexed.
enum class SeqKind : uint8_t { List, Tuple, Iterator, DictItems, DictKeys, DictValues };

enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Object {
  virtual ~Object() = default;
};

class Value {
 public:
  Value() = default;  // undefined, with a generic hint
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, SeqKind kind = SeqKind::List);  // OpError past kMaxValueDepth
  static Value dict(std::shared_ptr<DictObj> d);
  static Value object(Type type, std::shared_ptr<Object> obj);
  // JSON -> Value: objects keep their key order. OpError for integers beyond int64 (Python's
  // exact big integers have no counterpart here), binary values and nesting past kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);
  uint32_t depth() const;  // nesting depth of a list/dict, 0 for anything else

  Type type() const { return m_type; }
  bool is_undefined() const { return m_type == Type::Undefined; }
  bool is_none() const { return m_type == Type::None; }
  bool is_string() const { return m_type == Type::String; }
  bool is_list() const { return m_type == Type::List; }
  bool is_dict() const { return m_type == Type::Dict; }
  bool is_int_like() const { return m_type == Type::Int || m_type == Type::Bool; }  // Python: bool is an int
  bool is_number() const { return is_int_like() || m_type == Type::Float; }

  // Accessors; each requires the matching type.
  bool as_bool() const { return m_u.b; }
  int64_t as_int() const { return m_type == Type::Bool ? (m_u.b ? 1 : 0) : m_u.i; }  // Int or Bool
  double as_float() const;                                                           // any number
  const std::string& str() const;
  const ListObj& list() const;
  std::shared_ptr<const ListObj> list_ptr() const;
  const DictObj& dict() const;
  NamespaceObj& ns() const;
  LoopObj& loop() const;
  const CallableObj& callable() const;
  const std::string& undefined_hint() const;
  const Object* identity() const { return m_obj.get(); }  // for `is sameas` and container equality

 private:
  Type m_type = Type::Undefined;
  union {
    bool b;
    int64_t i;
    double f;
  } m_u{};
  std::shared_ptr<Object> m_obj;
};

struct StringObj : Object {
  std::string s;
};

struct ListObj : Object {
  std::vector<Value> items;
  SeqKind kind = SeqKind::List;
  uint32_t depth = 1;  // 1 + the deepest list/dict item
};

// An insertion-ordered dict. Keys are scalars (str, int, float, bool, None) and collide like
// Python dict keys (1, 1.0 and True are one key). Built once, then read-only.
struct DictObj : Object {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;  // OpError "unhashable type" for a list/dict key
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // overwrites an existing key in place; OpError past kMaxValueDepth
  uint32_t depth = 1;                // 1 + the deepest list/dict value

 private:
  std::unordered_map<std::string, size_t> m_str_index;  // built once the dict outgrows a scan
};

struct NamespaceObj : Object {
  DictObj attrs;
};

struct UndefinedObj : Object {
  std::string hint;  // the UndefinedError message raised when the value is used
};

// jinja2's LoopContext; the evaluator advances index0 before each iteration.
struct LoopObj : Object {
  std::shared_ptr<const ListObj> items;
  size_t index0 = 0;
  bool has_changed_value = false;  // loop.changed(...) was called before
  Value changed_value;             // the arguments of that call, as a tuple
};

struct CallableObj : Object {
  std::string name;
  virtual Value call(Interp& interp, CallArgs& args, uint32_t pos) const = 0;
  virtual std::string repr() const;
};

// Python semantics. Operations that Python would reject throw OpError with Python's message.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(); an undefined renders as ""
std::string repr(const Value& v);
void append_str(std::string& out, const Value& v);
std::string format_float(double d);            // float.__repr__: shortest round-trip
const char* type_name(const Value& v);         // type(v).__name__
std::string object_type_repr(const Value& v);  // jinja2's "'dict object'" for error messages
[[noreturn]] void throw_undefined(const Value& v);

bool equals(const Value& a, const Value& b);
bool compare(CmpOp op, const Value& a, const Value& b);  // Eq..Ge, and In/NotIn (`a in b`)
bool contains(const Value& container, const Value& item);
// `max_bytes` bounds strings and lists a repetition or concatenation may build.
Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& v);
Value unary_plus(const Value& v);

// The items a for loop / list() sees: list items, dict keys, string characters; an undefined
// iterates as empty. OpError "'int' object is not iterable" otherwise.
std::shared_ptr<const ListObj> iterate(const Value& v);
int64_t length(const Value& v);  // len(); an undefined has length 0

// Python's slice.indices + element selection on a sequence of n items: the selected indices.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step);

}  // namespace trimkv::jinja
