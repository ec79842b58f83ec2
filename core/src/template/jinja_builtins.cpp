// Filters, tests and globals, each following the jinja2 3.1 function of the same name
// (jinja2/filters.py, jinja2/tests.py, jinja2/defaults.py) and transformers' chat-template
// environment (tojson, raise_exception, strftime_now, dict, namespace).
//
// Filters: abs attr capitalize center count d default dictsort e escape first float indent int items
//   join last length list lower map max min reject rejectattr replace reverse round safe select
//   selectattr sort string sum title tojson trim unique upper wordcount.
// Tests: defined undefined none boolean true false integer float number string mapping sequence
//   iterable callable sameas equalto eq == ne != lt < lessthan le <= gt > greaterthan ge >= in
//   odd even divisibleby lower upper filter test escaped.
// Globals: range (at most 100000 items, as jinja2's sandbox), dict, namespace, raise_exception,
//   strftime_now. Not provided (an "is undefined" error when called): lipsum, cycler, joiner.
// Anything else (format, batch, slice, groupby, truncate, wordwrap, urlize, ...) is an
// unknown filter: Error{Format} when the template is parsed.
#include "template/jinja_builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "template/jinja_eval.h"
#include "template/jinja_text.h"

namespace trimkv::jinja {

Params::Params(std::string_view what, const CallArgs& args, std::initializer_list<const char*> names)
    : m_bound(names.size(), nullptr) {
  if (args.args.size() > names.size())
    throw OpError(std::string(what) + " takes at most " + std::to_string(names.size()) + " argument(s) (" +
                  std::to_string(args.args.size()) + " given)");
  for (size_t i = 0; i < args.args.size(); ++i) m_bound[i] = &args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size()) throw OpError(std::string(what) + " got an unexpected keyword argument " + text::repr(key));
    if (m_bound[i]) throw OpError(std::string(what) + " got multiple values for argument " + text::repr(key));
    m_bound[i] = &value;
  }
}

namespace {

// ---- shared helpers ---------------------------------------------------------------------------

const Value& required(const Params& p, size_t i, const char* what, const char* name) {
  const Value* v = p.get(i);
  if (!v) throw OpError(std::string(what) + " missing required argument " + text::repr(name));
  return *v;
}

bool flag(const Params& p, size_t i) { return p.get(i) && truthy(*p.get(i)); }

const std::string& require_str(const Value& v, const char* what) {
  if (!v.is_string()) throw OpError(std::string(what) + " must be a string, not " + type_name(v));
  return v.str();
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(text::lower(v.str())) : v; }

// jinja2's _prepare_attribute_parts + make_attrgetter: "a.b.0" looks up item a, then b, then 0.
struct AttrGetter {
  std::vector<Value> parts;
  Value fallback;  // replaces an undefined result when given (map's default=)
  bool lower = false;

  AttrGetter(const Value* attribute, bool ignore_case_, const Value* default_value = nullptr) : lower(ignore_case_) {
    if (default_value && !default_value->is_none()) fallback = *default_value;
    if (!attribute || attribute->is_none()) return;
    if (!attribute->is_string()) {
      parts.push_back(*attribute);
      return;
    }
    const std::string& s = attribute->str();
    size_t start = 0;
    while (true) {
      const size_t dot = s.find('.', start);
      const std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) {
        int64_t n = 0;
        std::from_chars(part.data(), part.data() + part.size(), n);
        parts.push_back(Value::integer(n));
      } else {
        parts.push_back(Value::string(part));
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }

  Value operator()(Interp& in, Value item) const {
    for (const auto& part : parts) {
      item = in.getitem(item, part);
      if (!fallback.is_undefined() && item.is_undefined()) item = fallback;
    }
    return lower ? ignore_case(item) : item;
  }
};

// make_multi_attrgetter: "a,b" sorts by a, then b.
std::vector<AttrGetter> multi_getter(const Value* attribute, bool ignore_case_) {
  std::vector<AttrGetter> getters;
  if (attribute && attribute->is_string() && attribute->str().find(',') != std::string::npos) {
    const std::string& s = attribute->str();
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      const Value part = Value::string(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      getters.emplace_back(&part, ignore_case_);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    getters.emplace_back(attribute, ignore_case_);
  }
  return getters;
}

Value multi_key(Interp& in, const std::vector<AttrGetter>& getters, const Value& item) {
  if (getters.size() == 1) return getters[0](in, item);
  std::vector<Value> keys;
  for (const auto& g : getters) keys.push_back(g(in, item));
  return Value::list(std::move(keys));
}

std::vector<Value> items_of(Interp& in, const Value& v) {
  auto items = iterate(v);
  in.charge(static_cast<int64_t>(items->items.size()));
  return items->items;
}

// Python's int(str, base) (whitespace, sign, underscores between digits, 0x/0o/0b prefixes).
bool parse_py_int(std::string_view s, int base, int64_t& out) {
  s = text::strip(s, nullptr, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (s.empty() || base < 2 || base > 36) return false;
  __int128 value = 0;
  bool last_digit = false;
  for (char c : s) {
    if (c == '_') {
      if (!last_digit) return false;
      last_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
      d = (c | 0x20) - 'a' + 10;
    if (d < 0 || d >= base) return false;
    value = value * base + d;
    if (value > static_cast<__int128>(std::numeric_limits<int64_t>::max()) + 1)
      throw OpError("integer overflow: the result does not fit in 64 bits (Python's big integers are not supported)");
    last_digit = true;
  }
  if (!last_digit) return false;
  if (negative) value = -value;
  if (value > std::numeric_limits<int64_t>::max())
    throw OpError("integer overflow: the result does not fit in 64 bits (Python's big integers are not supported)");
  out = static_cast<int64_t>(value);
  return true;
}

// Python's float(str).
bool parse_py_float(std::string_view s, double& out) {
  s = text::strip(s, nullptr, true, true);
  std::string clean;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool between = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!between) return false;
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty() || clean[0] == '+' || clean[0] == '-') return false;
  double value = 0;
  const auto res = std::from_chars(clean.data(), clean.data() + clean.size(), value);
  if (res.ptr != clean.data() + clean.size()) return false;
  if (res.ec == std::errc::result_out_of_range) {
    const size_t e = clean.find_first_of("eE");
    value = (e != std::string::npos && e + 1 < clean.size() && clean[e + 1] == '-') ? 0.0 : HUGE_VAL;
  } else if (res.ec != std::errc()) {
    return false;
  }
  out = negative ? -value : value;
  return true;
}

int64_t float_to_int(double d) {
  if (std::isnan(d)) throw OpError("cannot convert float NaN to integer");
  if (std::isinf(d)) throw OpError("cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t >= 9.2233720368547758e18 || t < -9.2233720368547758e18)
    throw OpError("integer overflow: the result does not fit in 64 bits (Python's big integers are not supported)");
  return static_cast<int64_t>(t);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

bool python_less(const Value& a, const Value& b) { return compare(CmpOp::Lt, a, b); }

// ---- filters ----------------------------------------------------------------------------------

Value f_abs(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'abs'", a, {});
  if (v.is_int_like()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min())
      throw OpError("integer overflow: the result does not fit in 64 bits (Python's big integers are not supported)");
    return Value::integer(std::abs(v.as_int()));
  }
  if (v.type() == Type::Float) return Value::real(std::fabs(v.as_float()));
  throw OpError(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value f_attr(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'attr'", a, {"name"});
  return in.getattr(v, to_str(required(p, 0, "filter 'attr'", "name")), false);
}

Value f_capitalize(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'capitalize'", a, {});
  return Value::string(text::capitalize(to_str(v)));
}

Value f_center(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'center'", a, {"width"});
  CallArgs method_args;
  method_args.args.push_back(p.get_or(0, Value::integer(80)));
  return call_method(in, Value::string(to_str(v)), "center", method_args);
}

Value f_default(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'default'", a, {"default_value", "boolean"});
  if (v.is_undefined() || (flag(p, 1) && !truthy(v))) return p.get_or(0, Value::string(""));
  return v;
}

Value f_dictsort(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'dictsort'", a, {"case_sensitive", "by", "reverse"});
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_dict()) throw OpError(std::string("'") + type_name(v) + "' object has no attribute 'items'");
  const std::string by = p.get(1) ? to_str(*p.get(1)) : "key";
  if (by != "key" && by != "value") throw OpError("You can only sort by either \"key\" or \"value\"");
  const size_t pos = by == "key" ? 0 : 1;
  const bool case_sensitive = flag(p, 0);
  const bool reverse = flag(p, 2);
  struct Entry {
    Value key;
    Value item;
  };
  std::vector<Entry> entries;
  for (const auto& [k, val] : v.dict().items) {
    const Value& sort_by = pos == 0 ? k : val;
    entries.push_back({case_sensitive ? sort_by : ignore_case(sort_by), Value::list({k, val}, SeqKind::Tuple)});
  }
  in.charge(static_cast<int64_t>(entries.size()));
  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& x, const Entry& y) {
    return reverse ? python_less(y.key, x.key) : python_less(x.key, y.key);
  });
  std::vector<Value> out;
  for (auto& e : entries) out.push_back(std::move(e.item));
  return Value::list(std::move(out));
}

Value f_escape(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'escape'", a, {});
  return Value::string(html_escape(to_str(v)));
}

Value f_first(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'first'", a, {});
  const auto items = iterate(v);
  if (items->items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items->items.front();
}

Value f_last(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'last'", a, {});
  if (v.is_list() && v.list().kind == SeqKind::Iterator) throw OpError("'generator' object is not reversible");
  const auto items = iterate(v);
  if (items->items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items->items.back();
}

Value f_float(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'float'", a, {"default"});
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_number()) return Value::real(v.as_float());
  double d;
  if (v.is_string() && parse_py_float(v.str(), d)) return Value::real(d);
  return p.get_or(0, Value::real(0.0));
}

Value f_indent(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'indent'", a, {"width", "first", "blank"});
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_string())
    throw OpError(std::string("unsupported operand type(s) for +=: '") + type_name(v) + "' and 'str'");
  std::string indention;
  const Value width = p.get_or(0, Value::integer(4));
  if (width.is_string())
    indention = width.str();
  else if (width.is_int_like())
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(width.as_int(), 1 << 16))), ' ');
  else
    throw OpError(std::string("can't multiply sequence by non-int of type '") + type_name(width) + "'");
  const std::vector<std::string> lines = text::splitlines(v.str() + "\n", false);
  std::string rv;
  if (flag(p, 2)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
      if (rv.size() > in.max_bytes()) throw OpError("indent would exceed the output limit");
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
      if (rv.size() > in.max_bytes()) throw OpError("indent would exceed the output limit");
    }
  }
  if (flag(p, 1)) rv = indention + rv;
  return Value::string(std::move(rv));
}

Value f_int(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'int'", a, {"default", "base"});
  if (v.is_undefined()) throw_undefined(v);
  const Value fallback = p.get_or(0, Value::integer(0));
  if (v.is_int_like()) return Value::integer(v.as_int());
  if (v.type() == Type::Float) return Value::integer(float_to_int(v.as_float()));
  if (v.is_string()) {
    const int base = p.get(1) && p.get(1)->is_int_like() ? static_cast<int>(p.get(1)->as_int()) : 10;
    int64_t i;
    if (parse_py_int(v.str(), base, i)) return Value::integer(i);
    double d;  // jinja2's quirk so that "42.23"|int gives 42
    if (parse_py_float(v.str(), d)) return Value::integer(float_to_int(d));
  }
  return fallback;
}

Value f_items(Interp& in, const Value& v, const CallArgs& a) {
  Params("filter 'items'", a, {});
  if (v.is_undefined()) return Value::list({}, SeqKind::Iterator);
  if (!v.is_dict()) throw OpError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::list({k, val}, SeqKind::Tuple));
  in.charge(static_cast<int64_t>(out.size()));
  return Value::list(std::move(out), SeqKind::Iterator);
}

Value f_join(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'join'", a, {"d", "attribute"});
  const std::string sep = p.get(0) ? to_str(*p.get(0)) : "";
  const AttrGetter getter(p.get(1), false);
  std::string out;
  bool first = true;
  for (const auto& item : items_of(in, v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, getter(in, item));
    if (out.size() > in.max_bytes()) throw OpError("join would exceed the output limit");
  }
  return Value::string(std::move(out));
}

Value f_length(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'length'", a, {});
  return Value::integer(length(v));
}

Value f_list(Interp& in, const Value& v, const CallArgs& a) {
  Params("filter 'list'", a, {});
  return Value::list(items_of(in, v));
}

Value f_lower(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'lower'", a, {});
  return Value::string(text::lower(to_str(v)));
}

Value f_map(Interp& in, const Value& v, const CallArgs& a) {
  const std::vector<Value> items = items_of(in, v);
  std::vector<Value> out;
  out.reserve(items.size());
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  if (a.args.empty()) {
    for (const auto& [k, val] : a.kwargs) {
      if (k == "attribute")
        attribute = &val;
      else if (k == "default")
        fallback = &val;
    }
  }
  if (attribute) {
    for (const auto& [k, val] : a.kwargs)
      if (k != "attribute" && k != "default") throw OpError("Unexpected keyword argument " + text::repr(k));
    const AttrGetter getter(attribute, false, fallback);
    for (const auto& item : items) out.push_back(getter(in, item));
    return Value::list(std::move(out), SeqKind::Iterator);
  }
  if (a.args.empty()) throw OpError("map requires a filter argument");
  const std::string& name = require_str(a.args[0], "map's filter name");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const auto& item : items) out.push_back(in.apply_filter(name, item, rest));
  return Value::list(std::move(out), SeqKind::Iterator);
}

Value min_or_max(Interp& in, const Value& v, const CallArgs& a, bool want_max) {
  Params p(want_max ? "filter 'max'" : "filter 'min'", a, {"case_sensitive", "attribute"});
  const std::vector<Value> items = items_of(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const AttrGetter getter(p.get(1), !flag(p, 0));
  size_t best = 0;
  Value best_key = getter(in, items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = getter(in, items[i]);
    if (want_max ? python_less(best_key, key) : python_less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_max(Interp& in, const Value& v, const CallArgs& a) { return min_or_max(in, v, a, true); }
Value f_min(Interp& in, const Value& v, const CallArgs& a) { return min_or_max(in, v, a, false); }

// select / reject / selectattr / rejectattr (jinja2's prepare_select_or_reject).
Value select_or_reject(Interp& in, const Value& v, const CallArgs& a, bool lookup_attr, bool reject) {
  size_t off = 0;
  const Value* attribute = nullptr;
  if (lookup_attr) {
    if (a.args.empty()) throw OpError("Missing parameter for attribute name");
    attribute = &a.args[0];
    off = 1;
  }
  const AttrGetter getter(attribute, false);
  const bool has_test = a.args.size() > off;
  std::string test;
  CallArgs test_args;
  if (has_test) {
    test = require_str(a.args[off], "the test name");
    test_args.args.assign(a.args.begin() + static_cast<ptrdiff_t>(off + 1), a.args.end());
    test_args.kwargs = a.kwargs;
  }
  std::vector<Value> out;
  for (const auto& item : items_of(in, v)) {
    const Value x = lookup_attr ? getter(in, item) : item;
    const bool passed = has_test ? in.apply_test(test, x, test_args) : truthy(x);
    if (passed != reject) out.push_back(item);
  }
  return Value::list(std::move(out), SeqKind::Iterator);
}

Value f_select(Interp& in, const Value& v, const CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_reject(Interp& in, const Value& v, const CallArgs& a) { return select_or_reject(in, v, a, false, true); }
Value f_selectattr(Interp& in, const Value& v, const CallArgs& a) { return select_or_reject(in, v, a, true, false); }
Value f_rejectattr(Interp& in, const Value& v, const CallArgs& a) { return select_or_reject(in, v, a, true, true); }

Value f_replace(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'replace'", a, {"old", "new", "count"});
  const std::string old = to_str(required(p, 0, "filter 'replace'", "old"));
  const std::string repl = to_str(required(p, 1, "filter 'replace'", "new"));
  const Value* count = p.get(2);
  int64_t n = -1;  // Python's "all"
  if (count && !count->is_none()) {
    if (!count->is_int_like()) throw OpError("'count' must be an integer, not " + std::string(type_name(*count)));
    n = count->as_int();
  }
  return Value::string(str_replace(to_str(v), old, repl, n, in.max_bytes()));
}

Value f_reverse(Interp& in, const Value& v, const CallArgs& a) {
  Params("filter 'reverse'", a, {});
  if (v.is_string()) {
    std::u32string cps = text::decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::encode(cps));
  }
  if (!v.is_list() && !v.is_dict() && !v.is_undefined()) throw OpError("argument must be iterable");
  std::vector<Value> items = items_of(in, v);
  std::reverse(items.begin(), items.end());
  // reversed() of a list is an iterator; a generator cannot be reversed, so jinja2 builds a list.
  const bool generator = v.is_list() && v.list().kind == SeqKind::Iterator;
  return Value::list(std::move(items), generator ? SeqKind::List : SeqKind::Iterator);
}

Value f_round(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'round'", a, {"precision", "method"});
  const Value precision_v = p.get_or(0, Value::integer(0));
  if (!precision_v.is_int_like())
    throw OpError(std::string("'") + type_name(precision_v) + "' object cannot be interpreted as an integer");
  const int64_t precision = precision_v.as_int();
  const std::string method = p.get(1) ? to_str(*p.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw OpError("method must be common, ceil or floor");
  if (!v.is_number()) throw OpError(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int_like()) {
      if (precision >= 0) return Value::integer(v.as_int());
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value::integer(static_cast<int64_t>(std::nearbyint(static_cast<double>(v.as_int()) / scale) * scale));
    }
    const double x = v.as_float();
    if (!std::isfinite(x) || precision > 323) return Value::real(x);
    if (precision < 0) {
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value::real(std::nearbyint(x / scale) * scale);
    }
    // Python rounds the exact binary value half-to-even, as printf's %.Nf does.
    char buf[1100];
    const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, static_cast<int>(precision));
    double r = x;
    std::from_chars(buf, res.ptr, r);
    return Value::real(r);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_float() * scale;
  return Value::real((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_safe(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'safe'", a, {});
  return Value::string(to_str(v));
}

Value f_sort(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'sort'", a, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = flag(p, 0);
  const auto getters = multi_getter(p.get(2), !flag(p, 1));
  std::vector<Value> items = items_of(in, v);
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(multi_key(in, getters, items[i]), i);
  // Stable both ways: Python's sorted(reverse=True) keeps equal items in their original order.
  // jinja2 wraps every key in a list, and list comparison tests == before <, so equal keys
  // (two undefined attributes, say) never reach a `<` that would raise.
  auto less = [](const Value& a, const Value& b) { return !equals(a, b) && python_less(a, b); };
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& [key, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_string(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'string'", a, {});
  return Value::string(to_str(v));
}

Value f_sum(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'sum'", a, {"attribute", "start"});
  const AttrGetter getter(p.get(0), false);
  Value acc = p.get_or(1, Value::integer(0));
  if (acc.is_string()) throw OpError("sum() can't sum strings [use ''.join(seq) instead]");
  for (const auto& item : items_of(in, v)) acc = binary_op(BinOp::Add, acc, getter(in, item), in.max_bytes());
  return acc;
}

// jinja2's do_title (not str.title): words start after runs of `[-\s({\[<]`.
Value f_title(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'title'", a, {});
  const std::string s = to_str(v);
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    const char32_t c = text::next_cp(s, i);
    const std::string_view ch(s.data() + begin, i - begin);
    const bool delimiter = text::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (delimiter) {
      out.append(ch);
      word_start = true;
    } else if (word_start) {
      out += text::upper(ch);
      word_start = false;
    } else {
      out += text::lower(ch);
    }
  }
  return Value::string(std::move(out));
}

Value f_tojson(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'tojson'", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = flag(p, 0);
  const Value* indent = p.get(1);
  if (indent && !indent->is_none()) {
    o.has_indent = true;
    o.item_separator = ",";
    if (indent->is_string())
      o.indent = indent->str();
    else if (indent->is_int_like())
      o.indent.assign(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(indent->as_int(), 1 << 12))), ' ');
    else
      throw OpError(std::string("can't multiply sequence by non-int of type '") + type_name(*indent) + "'");
  }
  const Value* separators = p.get(2);
  if (separators && !separators->is_none()) {
    if (!separators->is_list() || separators->list().items.size() != 2 || !separators->list().items[0].is_string() ||
        !separators->list().items[1].is_string())
      throw OpError("separators must be an (item_separator, key_separator) pair of strings");
    o.item_separator = separators->list().items[0].str();
    o.key_separator = separators->list().items[1].str();
  }
  o.sort_keys = flag(p, 3);
  return Value::string(to_json(v, o));
}

Value f_trim(Interp&, const Value& v, const CallArgs& a) {
  Params p("filter 'trim'", a, {"chars"});
  const std::string s = to_str(v);
  const Value* chars = p.get(0);
  if (chars && !chars->is_none()) {
    const std::string& set = require_str(*chars, "trim's chars");
    return Value::string(std::string(text::strip(s, &set, true, true)));
  }
  return Value::string(std::string(text::strip(s, nullptr, true, true)));
}

Value f_unique(Interp& in, const Value& v, const CallArgs& a) {
  Params p("filter 'unique'", a, {"case_sensitive", "attribute"});
  const AttrGetter getter(p.get(1), !flag(p, 0));
  std::unordered_set<std::string> seen_strings;
  std::vector<Value> seen_other;
  std::vector<Value> out;
  for (const auto& item : items_of(in, v)) {
    const Value key = getter(in, item);
    bool fresh;
    if (key.is_string()) {
      fresh = seen_strings.insert(key.str()).second;
    } else {
      if (key.is_dict() || (key.is_list() && key.list().kind != SeqKind::Tuple))
        throw OpError(std::string("unhashable type: '") + type_name(key) + "'");
      fresh = std::none_of(seen_other.begin(), seen_other.end(), [&](const Value& s) { return equals(s, key); });
      if (fresh) seen_other.push_back(key);
    }
    if (fresh) out.push_back(item);
  }
  return Value::list(std::move(out), SeqKind::Iterator);
}

Value f_upper(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'upper'", a, {});
  return Value::string(text::upper(to_str(v)));
}

Value f_wordcount(Interp&, const Value& v, const CallArgs& a) {
  Params("filter 'wordcount'", a, {});
  const std::string s = to_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = text::next_cp(s, i);
    const bool word_char = c == '_' || text::is_alpha(c) || text::is_numeric(c);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests ------------------------------------------------------------------------------------

const Value& test_arg(const CallArgs& a, const char* test) {
  Params p(std::string("test '") + test + "'", a, {"other"});
  return required(p, 0, test, "other");
}

void no_args(const CallArgs& a, const char* test) { Params(std::string("test '") + test + "'", a, {}); }

bool t_defined(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "defined"), !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "undefined"), v.is_undefined(); }
bool t_none(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "none"), v.is_none(); }
bool t_boolean(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "boolean"), v.type() == Type::Bool; }
bool t_true(Interp&, const Value& v, const CallArgs& a) {
  return no_args(a, "true"), v.type() == Type::Bool && v.as_bool();
}
bool t_false(Interp&, const Value& v, const CallArgs& a) {
  return no_args(a, "false"), v.type() == Type::Bool && !v.as_bool();
}
bool t_integer(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "integer"), v.type() == Type::Int; }
bool t_float(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "float"), v.type() == Type::Float; }
bool t_number(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "number"), v.is_number(); }
bool t_string(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "string"), v.is_string(); }
bool t_mapping(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "mapping"), v.is_dict(); }
bool t_escaped(Interp&, const Value&, const CallArgs& a) { return no_args(a, "escaped"), false; }

bool t_sequence(Interp&, const Value& v, const CallArgs& a) {  // has len() and __getitem__
  no_args(a, "sequence");
  if (v.is_list()) return v.list().kind == SeqKind::List || v.list().kind == SeqKind::Tuple;
  return v.is_string() || v.is_dict() || v.is_undefined();
}

bool t_iterable(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "iterable");
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.type() == Type::Loop;
}

bool t_callable(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "callable");
  return v.type() == Type::Callable || v.is_undefined() || v.type() == Type::Loop;
}

bool t_sameas(Interp&, const Value& v, const CallArgs& a) {
  const Value& other = test_arg(a, "sameas");
  if (v.type() != other.type()) return false;
  switch (v.type()) {
    case Type::None: return true;
    case Type::Bool: return v.as_bool() == other.as_bool();
    case Type::Int: return v.as_int() == other.as_int();
    case Type::Float: return v.as_float() == other.as_float();
    default: return v.identity() == other.identity();
  }
}

bool t_eq(Interp&, const Value& v, const CallArgs& a) { return equals(v, test_arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, const CallArgs& a) { return !equals(v, test_arg(a, "ne")); }
bool t_lt(Interp&, const Value& v, const CallArgs& a) { return compare(CmpOp::Lt, v, test_arg(a, "lt")); }
bool t_le(Interp&, const Value& v, const CallArgs& a) { return compare(CmpOp::Le, v, test_arg(a, "le")); }
bool t_gt(Interp&, const Value& v, const CallArgs& a) { return compare(CmpOp::Gt, v, test_arg(a, "gt")); }
bool t_ge(Interp&, const Value& v, const CallArgs& a) { return compare(CmpOp::Ge, v, test_arg(a, "ge")); }
bool t_in(Interp&, const Value& v, const CallArgs& a) {
  Params p("test 'in'", a, {"seq"});
  return contains(required(p, 0, "test 'in'", "seq"), v);
}

bool t_odd(Interp& in, const Value& v, const CallArgs& a) {
  no_args(a, "odd");
  return equals(binary_op(BinOp::Mod, v, Value::integer(2), in.max_bytes()), Value::integer(1));
}

bool t_even(Interp& in, const Value& v, const CallArgs& a) {
  no_args(a, "even");
  return equals(binary_op(BinOp::Mod, v, Value::integer(2), in.max_bytes()), Value::integer(0));
}

bool t_divisibleby(Interp& in, const Value& v, const CallArgs& a) {
  Params p("test 'divisibleby'", a, {"num"});
  return equals(binary_op(BinOp::Mod, v, required(p, 0, "test 'divisibleby'", "num"), in.max_bytes()),
                Value::integer(0));
}

bool cased_test(const Value& v, bool want_lower) {  // str.islower() / str.isupper()
  const std::string s = to_str(v);
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = text::next_cp(s, i);
    if (want_lower ? text::is_upper(c) : text::is_lower(c)) return false;
    if (text::is_cased(c)) any_cased = true;
  }
  return any_cased;
}

bool t_lower(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "lower"), cased_test(v, true); }
bool t_upper(Interp&, const Value& v, const CallArgs& a) { return no_args(a, "upper"), cased_test(v, false); }
bool t_filter(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "filter");
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "test");
  return v.is_string() && find_test(v.str()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"sequence", t_sequence},
      {"iterable", t_iterable},
      {"callable", t_callable},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"<", t_lt},
      {"lessthan", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {">", t_gt},
      {"greaterthan", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

// ---- globals ----------------------------------------------------------------------------------

struct BuiltinFunction : CallableObj {
  using Fn = Value (*)(Interp&, CallArgs&, uint32_t pos);
  Fn fn = nullptr;
  Value call(Interp& interp, CallArgs& args, uint32_t pos) const override { return fn(interp, args, pos); }
};

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value g_range(Interp& in, CallArgs& a, uint32_t) {
  if (!a.kwargs.empty()) throw OpError("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3)
    throw OpError("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
  for (const auto& v : a.args) {
    if (v.is_undefined()) throw_undefined(v);
    if (!v.is_int_like())
      throw OpError(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
  }
  int64_t start = 0, stop = 0, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  if (step == 0) throw OpError("range() arg 3 must not be zero");
  __int128 n = 0;
  if (step > 0 && stop > start) n = ((__int128)stop - start - 1) / step + 1;
  if (step < 0 && stop < start) n = ((__int128)start - stop - 1) / -(__int128)step + 1;
  if (n > kMaxRange)
    throw OpError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) +
                  ").");
  in.charge(static_cast<int64_t>(n));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) items.push_back(Value::integer(start + k * step));
  return Value::list(std::move(items));
}

// dict(*args, **kwargs) semantics, shared by dict() and namespace().
std::shared_ptr<DictObj> build_dict(const CallArgs& a, const char* what) {
  if (a.args.size() > 1)
    throw OpError(std::string(what) + " expected at most 1 positional argument, got " + std::to_string(a.args.size()));
  auto d = std::make_shared<DictObj>();
  if (a.args.size() == 1) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items) d->set(k, v);
    } else {
      const auto pairs = iterate(src);
      for (size_t i = 0; i < pairs->items.size(); ++i) {
        const Value& pair = pairs->items[i];
        if (!pair.is_list() && !pair.is_string())
          throw OpError("cannot convert dictionary update sequence element #" + std::to_string(i) + " to a sequence");
        const auto kv = iterate(pair);
        if (kv->items.size() != 2)
          throw OpError("dictionary update sequence element #" + std::to_string(i) + " has length " +
                        std::to_string(kv->items.size()) + "; 2 is required");
        d->set(kv->items[0], kv->items[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kwargs) d->set(Value::string(k), v);
  return d;
}

Value g_dict(Interp&, CallArgs& a, uint32_t) { return Value::dict(build_dict(a, "dict")); }

Value g_namespace(Interp& in, CallArgs& a, uint32_t) {
  auto ns = std::make_shared<NamespaceObj>();
  const auto attrs = build_dict(a, "namespace");
  for (const auto& [k, v] : attrs->items) {
    if (k.is_string() && !k.str().empty() && k.str()[0] == '_')  // transformers' TemplateNamespace
      throw OpError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
                    text::repr(k.str()) + ". Please rename the attribute.");
    ns->attrs.set(k, v);
  }
  return in.new_namespace(std::move(ns));
}

Value g_raise_exception(Interp& in, CallArgs& a, uint32_t pos) {
  Params p("raise_exception()", a, {"message"});
  in.fail(pos, to_str(required(p, 0, "raise_exception()", "message")));
}

Value g_strftime_now(Interp& in, CallArgs& a, uint32_t) {
  Params p("strftime_now()", a, {"format"});
  const std::string& format = require_str(required(p, 0, "strftime_now()", "format"), "strftime_now's format");
  const int64_t fixed = in.options().now_unix;
  const std::time_t t = fixed >= 0 ? static_cast<std::time_t>(fixed) : std::time(nullptr);
  std::tm tm{};
  if (fixed >= 0)
    gmtime_r(&t, &tm);
  else
    localtime_r(&t, &tm);
  // A naive datetime (transformers' datetime.now()) has no zone: %z and %Z are empty, %f is the
  // microseconds, which this clock does not have.
  std::string fmt;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[++i];
      if (c == 'z' || c == 'Z') continue;
      if (c == 'f') {
        fmt += "000000";
        continue;
      }
      fmt.push_back('%');
      fmt.push_back(c);
      continue;
    }
    fmt.push_back(format[i]);
  }
  if (fmt.empty()) return Value::string("");
  for (size_t size = 256; size <= (1u << 20); size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
  }
  return Value::string("");
}

Value make_builtin(const char* name, BuiltinFunction::Fn fn) {
  auto f = std::make_shared<BuiltinFunction>();
  f->name = name;
  f->fn = fn;
  return Value::object(Type::Callable, std::move(f));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& table = filter_table();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  const auto& table = test_table();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, Value>> make_globals() {
  return {
      {"range", make_builtin("range", g_range)},
      {"dict", make_builtin("dict", g_dict)},
      {"namespace", make_builtin("namespace", g_namespace)},
      {"raise_exception", make_builtin("raise_exception", g_raise_exception)},
      {"strftime_now", make_builtin("strftime_now", g_strftime_now)},
  };
}

}  // namespace trimkv::jinja
