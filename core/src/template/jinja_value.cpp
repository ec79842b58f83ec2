#include "template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "template/jinja_text.h"

namespace trimkv::jinja {

namespace {

constexpr size_t kIndexThreshold = 8;  // dicts larger than this get a hash index for str keys

std::string overflow_message() {
  return "integer overflow: the result does not fit in 64 bits (Python's big integers are not supported)";
}

bool is_view_or_iterator(SeqKind k) { return k != SeqKind::List && k != SeqKind::Tuple; }

}  // namespace

// ---- Value construction and access ------------------------------------------------------------

Value Value::undefined(std::string hint) {
  auto obj = std::make_shared<UndefinedObj>();
  obj->hint = std::move(hint);
  return object(Type::Undefined, std::move(obj));
}

Value Value::none() {
  Value v;
  v.m_type = Type::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.m_type = Type::Bool;
  v.m_u.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.m_type = Type::Int;
  v.m_u.i = i;
  return v;
}

Value Value::real(double d) {
  Value v;
  v.m_type = Type::Float;
  v.m_u.f = d;
  return v;
}

Value Value::string(std::string s) {
  auto obj = std::make_shared<StringObj>();
  obj->s = std::move(s);
  return object(Type::String, std::move(obj));
}

Value Value::list(std::vector<Value> items, SeqKind kind) {
  auto obj = std::make_shared<ListObj>();
  uint32_t depth = 0;
  for (const auto& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxValueDepth)
    throw OpError("a list would nest deeper than " + std::to_string(kMaxValueDepth) + " levels");
  obj->depth = depth + 1;
  obj->items = std::move(items);
  obj->kind = kind;
  return object(Type::List, std::move(obj));
}

Value Value::dict(std::shared_ptr<DictObj> d) { return object(Type::Dict, std::move(d)); }

Value Value::object(Type type, std::shared_ptr<Object> obj) {
  Value v;
  v.m_type = type;
  v.m_obj = std::move(obj);
  return v;
}

uint32_t Value::depth() const {
  if (m_type == Type::List) return list().depth;
  if (m_type == Type::Dict) return dict().depth;
  return 0;
}

double Value::as_float() const { return m_type == Type::Float ? m_u.f : static_cast<double>(as_int()); }
const std::string& Value::str() const { return static_cast<const StringObj&>(*m_obj).s; }
const ListObj& Value::list() const { return static_cast<const ListObj&>(*m_obj); }
std::shared_ptr<const ListObj> Value::list_ptr() const { return std::static_pointer_cast<const ListObj>(m_obj); }
const DictObj& Value::dict() const { return static_cast<const DictObj&>(*m_obj); }
NamespaceObj& Value::ns() const { return static_cast<NamespaceObj&>(*m_obj); }
LoopObj& Value::loop() const { return static_cast<LoopObj&>(*m_obj); }
const CallableObj& Value::callable() const { return static_cast<const CallableObj&>(*m_obj); }

const std::string& Value::undefined_hint() const {
  static const std::string kGeneric = "undefined value";
  return m_obj ? static_cast<const UndefinedObj&>(*m_obj).hint : kGeneric;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::null: return none();
    case J::boolean: return boolean(j.get<bool>());
    case J::number_integer: return integer(j.get<int64_t>());
    case J::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))  // Python would keep it exact
        throw OpError("the integer " + std::to_string(u) + " does not fit in 64 bits (big integers are not supported)");
      return integer(static_cast<int64_t>(u));
    }
    case J::number_float: return real(j.get<double>());
    case J::string: return string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case J::object: {
      auto d = std::make_shared<DictObj>();
      d->items.reserve(j.size());
      for (const auto& [key, item] : j.items()) d->set(string(key), from_json(item));
      return dict(std::move(d));
    }
    case J::binary: throw OpError("binary JSON values are not supported");
    case J::discarded: break;
  }
  return Value::undefined("a discarded JSON value");
}

std::string CallableObj::repr() const { return "<function " + name + ">"; }

// ---- DictObj ----------------------------------------------------------------------------------

namespace {

bool is_hashable(const Value& v) {
  switch (v.type()) {
    case Type::Dict: return false;
    case Type::List: return v.list().kind == SeqKind::Tuple || v.list().kind == SeqKind::Iterator;
    default: return true;
  }
}

}  // namespace

const Value* DictObj::find(std::string_view key) const {
  if (!m_str_index.empty()) {
    const auto it = m_str_index.find(std::string(key));
    return it == m_str_index.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (!is_hashable(key)) throw OpError(std::string("unhashable type: '") + type_name(key) + "'");
  for (const auto& [k, v] : items)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}

void DictObj::set(Value key, Value value) {
  if (!is_hashable(key)) throw OpError(std::string("unhashable type: '") + type_name(key) + "'");
  if (value.depth() + 1 > kMaxValueDepth)
    throw OpError("a dict would nest deeper than " + std::to_string(kMaxValueDepth) + " levels");
  depth = std::max(depth, value.depth() + 1);
  if (key.is_string()) {
    if (!m_str_index.empty()) {
      const auto it = m_str_index.find(key.str());
      if (it != m_str_index.end()) {
        items[it->second].second = std::move(value);
        return;
      }
      m_str_index.emplace(key.str(), items.size());
      items.emplace_back(std::move(key), std::move(value));
      return;
    }
  }
  for (auto& [k, v] : items) {
    if (k.is_string() == key.is_string() && equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
  if (m_str_index.empty() && items.size() > kIndexThreshold) {
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].first.is_string()) m_str_index.emplace(items[i].first.str(), i);
  }
}

// ---- str() and repr() -------------------------------------------------------------------------

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits (what Python's repr picks), then Python's layout: positional
  // when the decimal exponent is in [-4, 16), scientific with a two-digit exponent otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const int decpt = exponent + 1;  // digits are 0.d1d2... x 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (n > 1) out += "." + digits.substr(1);
  const int e = decpt - 1;
  out += e < 0 ? "e-" : "e+";
  const std::string e_digits = std::to_string(e < 0 ? -e : e);
  if (e_digits.size() < 2) out.push_back('0');
  out += e_digits;
  return out;
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List:
      switch (v.list().kind) {
        case SeqKind::List: return "list";
        case SeqKind::Tuple: return "tuple";
        case SeqKind::Iterator: return "generator";
        case SeqKind::DictItems: return "dict_items";
        case SeqKind::DictKeys: return "dict_keys";
        case SeqKind::DictValues: return "dict_values";
      }
      return "list";
    case Type::Dict: return "dict";
    case Type::Namespace: return "Namespace";
    case Type::Loop: return "LoopContext";
    case Type::Callable: return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.type() == Type::Namespace) return "jinja2.utils.Namespace object";
  if (v.type() == Type::Loop) return "jinja2.runtime.LoopContext object";
  return std::string(type_name(v)) + " object";
}

void throw_undefined(const Value& v) { throw OpError(v.undefined_hint()); }

namespace {

// Namespaces are the only mutable containers, so the only way to build a cycle or a chain of
// unbounded depth; repr() follows CPython there: a dict already being printed prints as "{...}".
struct ReprState {
  uint32_t depth = 0;
  std::vector<const DictObj*> active;
};

void append_repr(std::string& out, const Value& v, ReprState& st);

void append_items(std::string& out, const std::vector<Value>& items, ReprState& st) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i], st);
  }
}

void append_dict_repr(std::string& out, const DictObj& d, ReprState& st) {
  if (std::find(st.active.begin(), st.active.end(), &d) != st.active.end()) {
    out += "{...}";
    return;
  }
  st.active.push_back(&d);
  out.push_back('{');
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, d.items[i].first, st);
    out += ": ";
    append_repr(out, d.items[i].second, st);
  }
  out.push_back('}');
  st.active.pop_back();
}

void append_repr(std::string& out, const Value& v, ReprState& st) {
  if (++st.depth > kMaxValueDepth + 8) throw OpError("a value nests too deeply to be printed");
  struct Leave {
    uint32_t& depth;
    ~Leave() { --depth; }
  } leave{st.depth};
  switch (v.type()) {
    case Type::Undefined: out += "Undefined"; return;
    case Type::String: out += text::repr(v.str()); return;
    case Type::List: {
      const auto& l = v.list();
      switch (l.kind) {
        case SeqKind::List:
          out.push_back('[');
          append_items(out, l.items, st);
          out.push_back(']');
          return;
        case SeqKind::Tuple:
          out.push_back('(');
          append_items(out, l.items, st);
          if (l.items.size() == 1) out.push_back(',');
          out.push_back(')');
          return;
        case SeqKind::Iterator: out += "<generator object>"; return;
        case SeqKind::DictItems:
        case SeqKind::DictKeys:
        case SeqKind::DictValues:
          out += type_name(v);
          out += "([";
          append_items(out, l.items, st);
          out += "])";
          return;
      }
      return;
    }
    case Type::Dict: append_dict_repr(out, v.dict(), st); return;
    case Type::Namespace:
      out += "<Namespace ";
      append_dict_repr(out, v.ns().attrs, st);
      out += ">";
      return;
    default: append_str(out, v); return;
  }
}

}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return;
    case Type::None: out += "None"; return;
    case Type::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Type::Int: out += std::to_string(v.as_int()); return;
    case Type::Float: out += format_float(v.as_float()); return;
    case Type::String: out += v.str(); return;
    case Type::Loop:
      out += "<LoopContext " + std::to_string(v.loop().index0 + 1) + "/" +
             std::to_string(v.loop().items->items.size()) + ">";
      return;
    case Type::Callable: out += v.callable().repr(); return;
    case Type::List:
    case Type::Dict:
    case Type::Namespace: {
      ReprState st;
      append_repr(out, v, st);
      return;
    }
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  ReprState st;
  append_repr(out, v, st);
  return out;
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return v.as_bool();
    case Type::Int: return v.as_int() != 0;
    case Type::Float: return v.as_float() != 0.0;
    case Type::String: return !v.str().empty();
    case Type::List: return v.list().kind == SeqKind::Iterator || !v.list().items.empty();
    case Type::Dict: return !v.dict().items.empty();
    default: return true;
  }
}

// ---- equality and ordering --------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_int_like() && b.is_int_like()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::None: return true;
    case Type::String: return a.str() == b.str();
    case Type::List: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (x.kind != y.kind) return false;
      if (x.kind == SeqKind::Iterator || x.kind == SeqKind::DictValues) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Type::Dict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

namespace {

const char* cmp_symbol(CmpOp op) {
  switch (op) {
    case CmpOp::Lt: return "<";
    case CmpOp::Le: return "<=";
    case CmpOp::Gt: return ">";
    case CmpOp::Ge: return ">=";
    default: return "==";
  }
}

template <typename T>
bool ordered(CmpOp op, const T& a, const T& b) {
  switch (op) {
    case CmpOp::Lt: return a < b;
    case CmpOp::Le: return a <= b;
    case CmpOp::Gt: return a > b;
    case CmpOp::Ge: return a >= b;
    default: return false;
  }
}

}  // namespace

bool compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::Eq: return equals(a, b);
    case CmpOp::Ne: return !equals(a, b);
    case CmpOp::In: return contains(b, a);
    case CmpOp::NotIn: return !contains(b, a);
    default: break;
  }
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_int_like() && b.is_int_like()) return ordered(op, a.as_int(), b.as_int());
    return ordered(op, a.as_float(), b.as_float());
  }
  if (a.is_string() && b.is_string()) return ordered(op, a.str(), b.str());  // UTF-8 order == code point order
  if (a.is_list() && b.is_list() && a.list().kind == b.list().kind && !is_view_or_iterator(a.list().kind)) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(op, x[i], y[i]);
    return ordered(op, x.size(), y.size());
  }
  throw OpError(std::string("'") + cmp_symbol(op) + "' not supported between instances of '" + type_name(a) +
                "' and '" + type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::Undefined: return false;  // an undefined iterates as empty
    case Type::String:
      if (!item.is_string())
        throw OpError(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Type::List:
      for (const auto& x : container.list().items)
        if (equals(x, item)) return true;
      return false;
    case Type::Dict: return container.dict().find(item) != nullptr;
    default: throw OpError(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

// ---- arithmetic -------------------------------------------------------------------------------

namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::Add: return "+";
    case BinOp::Sub: return "-";
    case BinOp::Mul: return "*";
    case BinOp::Div: return "/";
    case BinOp::FloorDiv: return "//";
    case BinOp::Mod: return "%";
    case BinOp::Pow: return "** or pow()";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  throw OpError(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + type_name(a) + "' and '" +
                type_name(b) + "'");
}

Value repeat(const Value& seq, int64_t n, size_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const auto& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > max_bytes / s.size())
      throw OpError("string repetition would exceed the output limit of " + std::to_string(max_bytes) + " bytes");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += s;
    return Value::string(std::move(out));
  }
  const auto& l = seq.list();
  if (!l.items.empty() && static_cast<uint64_t>(n) > max_bytes / (l.items.size() * sizeof(Value)))
    throw OpError("list repetition would exceed the output limit of " + std::to_string(max_bytes) + " bytes");
  std::vector<Value> items;
  items.reserve(l.items.size() * static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) items.insert(items.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(items), l.kind);
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw OpError(overflow_message());
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double float_mod(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

double float_floor_div(double a, double b) {
  // CPython's float_floor_div (via _float_div_mod), so that e.g. 7.5 // -2 == -4.0 exactly.
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div != 0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, a / b);
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) throw OpError("0.0 cannot be raised to a negative power");
    return Value::real(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  int64_t b = base;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, b, &result)) throw OpError(overflow_message());
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(b, b, &b)) throw OpError(overflow_message());
  }
  return Value::integer(result);
}

// printf-style `fmt % args` for the simple conversions %s %r %d %i and %%; anything with
// flags, widths, precisions or mapping keys is refused rather than rendered differently.
Value percent_format(const std::string& fmt, const Value& args, size_t max_bytes) {
  std::vector<Value> values;
  if (args.is_list() && args.list().kind == SeqKind::Tuple)
    values = args.list().items;
  else
    values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (i + 1 >= fmt.size()) throw OpError("incomplete format");
    const char spec = fmt[++i];
    if (spec == '%') {
      out.push_back('%');
      continue;
    }
    if (spec != 's' && spec != 'r' && spec != 'd' && spec != 'i')
      throw OpError(std::string("printf-style format '%") + spec + "' is not supported (only %s %r %d %i %%)");
    if (next >= values.size()) throw OpError("not enough arguments for format string");
    const Value& v = values[next++];
    if (spec == 's') {
      append_str(out, v);
    } else if (spec == 'r') {
      out += repr(v);
    } else {
      if (v.is_undefined()) throw_undefined(v);
      if (v.is_int_like())
        out += std::to_string(v.as_int());
      else if (v.type() == Type::Float && std::fabs(v.as_float()) < 9.2e18)
        out += std::to_string(static_cast<int64_t>(v.as_float()));
      else
        throw OpError(std::string("%") + spec + " format: a real number is required, not " + type_name(v));
    }
    if (out.size() > max_bytes) throw OpError("string formatting would exceed the output limit");
  }
  if (next < values.size()) throw OpError("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  const bool ints = a.is_int_like() && b.is_int_like();
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::Add:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) throw OpError(overflow_message());
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() + b.as_float());
      if (a.is_string() && b.is_string()) {
        if (a.str().size() + b.str().size() > max_bytes)
          throw OpError("string concatenation would exceed the output limit of " + std::to_string(max_bytes) +
                        " bytes");
        return Value::string(a.str() + b.str());
      }
      if (a.is_string()) throw OpError(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
      if (a.is_list() && b.is_list() && !is_view_or_iterator(a.list().kind)) {
        if (a.list().kind != b.list().kind)
          throw OpError(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                        type_name(a));
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return Value::list(std::move(items), a.list().kind);
      }
      unsupported(op, a, b);
    case BinOp::Sub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) throw OpError(overflow_message());
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() - b.as_float());
      unsupported(op, a, b);
    case BinOp::Mul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) throw OpError(overflow_message());
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() * b.as_float());
      if ((a.is_string() || (a.is_list() && !is_view_or_iterator(a.list().kind))) && b.is_int_like())
        return repeat(a, b.as_int(), max_bytes);
      if ((b.is_string() || (b.is_list() && !is_view_or_iterator(b.list().kind))) && a.is_int_like())
        return repeat(b, a.as_int(), max_bytes);
      if (a.is_string() || b.is_string())
        throw OpError(std::string("can't multiply sequence by non-int of type '") + type_name(a.is_string() ? b : a) +
                      "'");
      unsupported(op, a, b);
    case BinOp::Div:
      if (nums) {
        if (b.as_float() == 0) throw OpError(ints ? "division by zero" : "float division by zero");
        return Value::real(a.as_float() / b.as_float());
      }
      unsupported(op, a, b);
    case BinOp::FloorDiv:
      if (ints) {
        if (b.as_int() == 0) throw OpError("integer division or modulo by zero");
        return Value::integer(floor_div(a.as_int(), b.as_int()));
      }
      if (nums) {
        if (b.as_float() == 0) throw OpError("float floor division by zero");
        return Value::real(float_floor_div(a.as_float(), b.as_float()));
      }
      unsupported(op, a, b);
    case BinOp::Mod:
      if (ints) {
        if (b.as_int() == 0) throw OpError("integer modulo by zero");
        return Value::integer(floor_mod(a.as_int(), b.as_int()));
      }
      if (nums) {
        if (b.as_float() == 0) throw OpError("float modulo");
        return Value::real(float_mod(a.as_float(), b.as_float()));
      }
      if (a.is_string()) return percent_format(a.str(), b, max_bytes);
      unsupported(op, a, b);
    case BinOp::Pow:
      if (ints) return int_pow(a.as_int(), b.as_int());
      if (nums) {
        const double x = a.as_float();
        const double y = b.as_float();
        if (x == 0 && y < 0) throw OpError("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y))
          throw OpError("a negative number to a fractional power is complex (not supported)");
        const double r = std::pow(x, y);
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          throw OpError("(34, 'Numerical result out of range')");
        return Value::real(r);
      }
      unsupported(op, a, b);
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_int_like()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) throw OpError(overflow_message());
    return Value::integer(-v.as_int());
  }
  if (v.type() == Type::Float) return Value::real(-v.as_float());
  throw OpError(std::string("bad operand type for unary -: '") + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_int_like()) return Value::integer(v.as_int());
  if (v.type() == Type::Float) return v;
  throw OpError(std::string("bad operand type for unary +: '") + type_name(v) + "'");
}

// ---- iteration, len, slicing ------------------------------------------------------------------

std::shared_ptr<const ListObj> iterate(const Value& v) {
  switch (v.type()) {
    case Type::List: return v.list_ptr();
    case Type::Undefined: return std::make_shared<ListObj>();
    case Type::Dict: {
      auto keys = std::make_shared<ListObj>();
      keys->items.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys->items.push_back(kv.first);
      return keys;
    }
    case Type::String: {
      auto chars = std::make_shared<ListObj>();
      const auto& s = v.str();
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        text::next_cp(s, i);
        chars->items.push_back(Value::string(s.substr(start, i - start)));
      }
      return chars;
    }
    default: throw OpError(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return 0;
    case Type::String: return static_cast<int64_t>(text::length(v.str()));
    case Type::List:
      if (v.list().kind == SeqKind::Iterator) break;
      return static_cast<int64_t>(v.list().items.size());
    case Type::Dict: return static_cast<int64_t>(v.dict().items.size());
    case Type::Namespace: break;
    default: break;
  }
  throw OpError(std::string("object of type '") + type_name(v) + "' has no len()");
}

std::vector<int64_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) throw OpError("slice step cannot be zero");
  if (step == std::numeric_limits<int64_t>::min()) step = -std::numeric_limits<int64_t>::max();
  auto adjust = [&](const Value& v, bool is_start) -> int64_t {
    if (v.is_none()) {
      if (is_start) return step < 0 ? n - 1 : 0;
      return step < 0 ? -1 : n;
    }
    int64_t x = v.as_int();
    if (x < 0) {
      x = (x < -n) ? (step < 0 ? -1 : 0) : x + n;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = adjust(start_v, true);
  const int64_t stop = adjust(stop_v, false);
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) out.push_back(start + k * step);
  return out;
}

}  // namespace trimkv::jinja
