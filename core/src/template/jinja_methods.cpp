// Python methods of str, list and dict values as templates call them (`content.split('x')`,
// `message.get('role')`), with Python's semantics. Indices are in code points.
//
// Under ImmutableSandboxedEnvironment every mutating method (list.append, dict.update, ...)
// is refused; here too, with jinja2's SecurityError message.
#include <algorithm>
#include <unordered_set>

#include "template/jinja_builtins.h"
#include "template/jinja_eval.h"
#include "template/jinja_text.h"

namespace trimkv::jinja {

namespace {

// Every attribute of Python's str that is a method: all are allowed by the sandbox; the ones
// this interpreter does not implement fail when called.
const std::unordered_set<std::string_view>& str_methods() {
  static const std::unordered_set<std::string_view> names = {
      "capitalize", "casefold",     "center",       "count",   "encode",     "endswith",    "expandtabs",
      "find",       "format",       "format_map",   "index",   "isalnum",    "isalpha",     "isascii",
      "isdecimal",  "isdigit",      "isidentifier", "islower", "isnumeric",  "isprintable", "isspace",
      "istitle",    "isupper",      "join",         "ljust",   "lower",      "lstrip",      "maketrans",
      "partition",  "removeprefix", "removesuffix", "replace", "rfind",      "rindex",      "rjust",
      "rpartition", "rsplit",       "rstrip",       "split",   "splitlines", "startswith",  "strip",
      "swapcase",   "title",        "translate",    "upper",   "zfill"};
  return names;
}

struct BoundMethod : CallableObj {
  Value self;
  Value call(Interp& interp, CallArgs& args, uint32_t) const override { return call_method(interp, self, name, args); }
  std::string repr() const override {
    return std::string("<built-in method ") + name + " of " + type_name(self) + " object>";
  }
};

// ---- str helpers ------------------------------------------------------------------------------

const std::string& str_arg(const Value& v, const char* method) {
  if (!v.is_string()) throw OpError(std::string(method) + " argument must be str, not " + type_name(v));
  return v.str();
}

const std::string* chars_arg(const Params& p, size_t i, const char* method) {
  const Value* v = p.get(i);
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) throw OpError(std::string(method) + " arg must be None or str");
  return &v->str();
}

int64_t int_arg(const Value* v, int64_t fallback, const char* method) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int_like())
    throw OpError(std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer (" + method + ")");
  return v->as_int();
}

// The code-point range [start, end) of a str method's optional start/end arguments
// (slice-like clamping). Returns false when the range is empty and start lies past the end.
bool sub_range(int64_t n, const Value* start_v, const Value* end_v, int64_t& start, int64_t& end) {
  start = int_arg(start_v, 0, "start");
  end = int_arg(end_v, n, "end");
  if (start < 0) start = std::max<int64_t>(0, start + n);
  if (end < 0) end = std::max<int64_t>(0, end + n);
  end = std::min(end, n);
  return start <= n;
}

// Python's str.split: with sep == nullptr splits on whitespace runs, ignoring leading/trailing
// whitespace; maxsplit < 0 means no limit.
std::vector<Value> split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw OpError("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t at = s.find(*sep, start);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        rev.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      rev.emplace_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  } else {
    const std::u32string cps = text::decode(s);
    const auto n = static_cast<int64_t>(cps.size());
    if (!from_right) {
      int64_t i = 0;
      while (true) {
        while (i < n && text::is_space(cps[static_cast<size_t>(i)])) ++i;
        if (i >= n) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
          parts.push_back(text::encode(std::u32string_view(cps).substr(static_cast<size_t>(i))));
          break;
        }
        const int64_t begin = i;
        while (i < n && !text::is_space(cps[static_cast<size_t>(i)])) ++i;
        parts.push_back(
            text::encode(std::u32string_view(cps).substr(static_cast<size_t>(begin), static_cast<size_t>(i - begin))));
      }
    } else {
      int64_t i = n;
      std::vector<std::string> rev;
      while (true) {
        while (i > 0 && text::is_space(cps[static_cast<size_t>(i - 1)])) --i;
        if (i <= 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
          rev.push_back(text::encode(std::u32string_view(cps).substr(0, static_cast<size_t>(i))));
          break;
        }
        const int64_t end = i;
        while (i > 0 && !text::is_space(cps[static_cast<size_t>(i - 1)])) --i;
        rev.push_back(
            text::encode(std::u32string_view(cps).substr(static_cast<size_t>(i), static_cast<size_t>(end - i))));
      }
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

// startswith / endswith: `prefix` is a str or a tuple of str.
bool affix_match(const std::string& s, const Value& affix, const Params& p, bool at_start, const char* method) {
  std::vector<const std::string*> candidates;
  if (affix.is_string()) {
    candidates.push_back(&affix.str());
  } else if (affix.is_list() && affix.list().kind == SeqKind::Tuple) {
    for (const auto& item : affix.list().items) candidates.push_back(&str_arg(item, method));
  } else {
    throw OpError(std::string(method) + " first arg must be str or a tuple of str, not " + type_name(affix));
  }
  std::string_view view = s;
  if (p.get(1) || p.get(2)) {
    const std::u32string cps = text::decode(s);
    int64_t start, end;
    if (!sub_range(static_cast<int64_t>(cps.size()), p.get(1), p.get(2), start, end)) return false;
    const std::string sub = start < end ? text::encode(std::u32string_view(cps).substr(
                                              static_cast<size_t>(start), static_cast<size_t>(end - start)))
                                        : std::string();
    for (const auto* c : candidates) {
      if (at_start ? sub.compare(0, c->size(), *c) == 0 && sub.size() >= c->size()
                   : sub.size() >= c->size() && sub.compare(sub.size() - c->size(), c->size(), *c) == 0)
        return true;
    }
    return false;
  }
  for (const auto* c : candidates) {
    if (view.size() < c->size()) continue;
    if (at_start ? view.compare(0, c->size(), *c) == 0 : view.compare(view.size() - c->size(), c->size(), *c) == 0)
      return true;
  }
  return false;
}

// find / rfind / index / rindex / count over the optional [start, end) code-point range.
int64_t find_sub(const std::string& s, const std::string& sub, const Params& p, bool from_right) {
  const std::u32string cps = text::decode(s);
  const std::u32string needle = text::decode(sub);
  int64_t start, end;
  if (!sub_range(static_cast<int64_t>(cps.size()), p.get(1), p.get(2), start, end)) return -1;
  if (end - start < static_cast<int64_t>(needle.size())) return -1;
  const std::u32string_view hay =
      std::u32string_view(cps).substr(static_cast<size_t>(start), static_cast<size_t>(end - start));
  const size_t at = from_right ? hay.rfind(needle) : hay.find(needle);
  return at == std::u32string_view::npos ? -1 : start + static_cast<int64_t>(at);
}

template <typename Pred>
Value all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  for (size_t i = 0; i < s.size();)
    if (!pred(text::next_cp(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}

std::string pad(const std::string& s, int64_t width, const Params& p, int where /* -1 left, 0 center, 1 right */,
                const char* method) {
  const Value* fill_v = p.get(1);
  std::string fill = " ";
  if (fill_v) {
    const std::string& f = str_arg(*fill_v, method);
    if (text::length(f) != 1) throw OpError("The fill character must be exactly one character long");
    fill = f;
  }
  const auto n = static_cast<int64_t>(text::length(s));
  if (width <= n) return s;
  width = std::min<int64_t>(width, 1 << 24);
  const int64_t total = width - n;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < total - left; ++k) out += fill;
  return out;
}

Value str_method(Interp& in, const std::string& s, const std::string& name, const CallArgs& a) {
  const std::string what = "str." + name + "()";
  const char* m = what.c_str();
  static constexpr std::string_view kUnsupported[] = {"format",       "format_map",  "encode",
                                                      "expandtabs",   "maketrans",   "translate",
                                                      "isidentifier", "isprintable", "istitle"};
  if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported))
    throw OpError(what + " is not supported by this template interpreter");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(what, a, {"chars"});
    return Value::string(std::string(text::strip(s, chars_arg(p, 0, m), name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    Params p(what, a, {"sep", "maxsplit"});
    const std::string* sep = chars_arg(p, 0, m);
    return Value::list(split(s, sep, int_arg(p.get(1), -1, m), name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(what, a, {"prefix", "start", "end"});
    if (!p.get(0)) throw OpError(what + " takes at least 1 argument (0 given)");
    return Value::boolean(affix_match(s, *p.get(0), p, name == "startswith", m));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold") {
    Params(what, a, {});
    if (name == "upper") return Value::string(text::upper(s));
    if (name == "title") return Value::string(text::title(s));
    if (name == "capitalize") return Value::string(text::capitalize(s));
    if (name == "swapcase") return Value::string(text::swapcase(s));
    return Value::string(text::lower(s));
  }
  if (name == "replace") {
    Params p(what, a, {"old", "new", "count"});
    if (!p.get(0) || !p.get(1)) throw OpError(what + " takes at least 2 arguments");
    return Value::string(
        str_replace(s, str_arg(*p.get(0), m), str_arg(*p.get(1), m), int_arg(p.get(2), -1, m), in.max_bytes()));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    Params p(what, a, {"sub", "start", "end"});
    if (!p.get(0)) throw OpError(what + " takes at least 1 argument (0 given)");
    const int64_t at = find_sub(s, str_arg(*p.get(0), m), p, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw OpError("substring not found");
    return Value::integer(at);
  }
  if (name == "count") {
    Params p(what, a, {"sub", "start", "end"});
    if (!p.get(0)) throw OpError(what + " takes at least 1 argument (0 given)");
    const std::u32string cps = text::decode(s);
    const std::u32string needle = text::decode(str_arg(*p.get(0), m));
    int64_t start, end;
    if (!sub_range(static_cast<int64_t>(cps.size()), p.get(1), p.get(2), start, end) || end < start)
      return Value::integer(0);
    const std::u32string_view hay =
        std::u32string_view(cps).substr(static_cast<size_t>(start), static_cast<size_t>(end - start));
    if (needle.empty()) return Value::integer(static_cast<int64_t>(hay.size()) + 1);
    int64_t n = 0;
    for (size_t at = hay.find(needle); at != std::u32string_view::npos; at = hay.find(needle, at + needle.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    Params p(what, a, {"iterable"});
    if (!p.get(0)) throw OpError(what + " takes exactly one argument (0 given)");
    const auto items = iterate(*p.get(0));
    std::string out;
    for (size_t i = 0; i < items->items.size(); ++i) {
      const Value& item = items->items[i];
      if (!item.is_string())
        throw OpError("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
      if (i) out += s;
      out += item.str();
      if (out.size() > in.max_bytes()) throw OpError("str.join() would exceed the output limit");
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") {
    Params p(what, a, {"keepends"});
    std::vector<Value> out;
    for (auto& line : text::splitlines(s, p.get(0) && truthy(*p.get(0)))) out.push_back(Value::string(std::move(line)));
    return Value::list(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    Params p(what, a, {"sep"});
    if (!p.get(0)) throw OpError(what + " takes exactly one argument (0 given)");
    const std::string& sep = str_arg(*p.get(0), m);
    if (sep.empty()) throw OpError("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      if (name == "partition")
        return Value::list({Value::string(s), Value::string(""), Value::string("")}, SeqKind::Tuple);
      return Value::list({Value::string(""), Value::string(""), Value::string(s)}, SeqKind::Tuple);
    }
    return Value::list({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))},
                       SeqKind::Tuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(what, a, {"affix"});
    if (!p.get(0)) throw OpError(what + " takes exactly one argument (0 given)");
    const std::string& affix = str_arg(*p.get(0), m);
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && s.size() >= affix.size() && !affix.empty() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
      return Value::string(s.substr(0, s.size() - affix.size()));
    return Value::string(s);
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    Params p(what, a, {"width", "fillchar"});
    if (!p.get(0)) throw OpError(what + " takes at least 1 argument (0 given)");
    return Value::string(pad(s, int_arg(p.get(0), 0, m), p, name == "ljust" ? -1 : name == "rjust" ? 1 : 0, m));
  }
  if (name == "zfill") {
    Params p(what, a, {"width"});
    const int64_t width = std::min<int64_t>(int_arg(p.get(0), 0, m), 1 << 24);
    const auto n = static_cast<int64_t>(text::length(s));
    if (width <= n) return Value::string(s);
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string out = sign ? s.substr(0, 1) : "";
    out.append(static_cast<size_t>(width - n), '0');
    out += sign ? s.substr(1) : s;
    return Value::string(std::move(out));
  }
  Params(what, a, {});
  if (name == "isdigit") return all_chars(s, text::is_digit);
  if (name == "isdecimal") return all_chars(s, text::is_decimal);
  if (name == "isnumeric") return all_chars(s, text::is_numeric);
  if (name == "isalpha") return all_chars(s, text::is_alpha);
  if (name == "isalnum")
    return all_chars(s, [](char32_t c) { return text::is_alpha(c) || text::is_numeric(c) || text::is_digit(c); });
  if (name == "isspace") return all_chars(s, text::is_space);
  if (name == "isascii") return Value::boolean(text::is_ascii(s));
  if (name == "islower" || name == "isupper") {
    bool any_cased = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = text::next_cp(s, i);
      if (name == "islower" ? text::is_upper(c) : text::is_lower(c)) return Value::boolean(false);
      if (text::is_cased(c)) any_cased = true;
    }
    return Value::boolean(any_cased);
  }
  throw OpError(what + " is not supported by this template interpreter");
}

Value list_method(const Value& self, const std::string& name, const CallArgs& a) {
  const std::string what = std::string(type_name(self)) + "." + name + "()";
  const auto& items = self.list().items;
  if (name == "copy") {
    Params(what, a, {});
    return Value::list(items, self.list().kind);
  }
  if (name == "count") {
    Params p(what, a, {"value"});
    if (!p.get(0)) throw OpError(what + " takes exactly one argument (0 given)");
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& x) { return equals(x, *p.get(0)); }));
  }
  if (name == "index") {
    Params p(what, a, {"value", "start", "stop"});
    if (!p.get(0)) throw OpError(what + " takes at least 1 argument (0 given)");
    int64_t start, end;
    sub_range(static_cast<int64_t>(items.size()), p.get(1), p.get(2), start, end);
    for (int64_t i = start; i < end; ++i)
      if (equals(items[static_cast<size_t>(i)], *p.get(0))) return Value::integer(i);
    throw OpError(repr(*p.get(0)) + " is not in " + type_name(self));
  }
  throw OpError(what + " is not supported by this template interpreter");
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& a) {
  const std::string what = "dict." + name + "()";
  const DictObj& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    Params(what, a, {});
    std::vector<Value> out;
    out.reserve(d.items.size());
    for (const auto& [k, v] : d.items) {
      if (name == "items")
        out.push_back(Value::list({k, v}, SeqKind::Tuple));
      else
        out.push_back(name == "keys" ? k : v);
    }
    const SeqKind kind = name == "items"  ? SeqKind::DictItems
                         : name == "keys" ? SeqKind::DictKeys
                                          : SeqKind::DictValues;
    return Value::list(std::move(out), kind);
  }
  if (name == "get") {
    Params p(what, a, {"key", "default"});
    if (!p.get(0)) throw OpError("get expected at least 1 argument, got 0");
    const Value* v = d.find(*p.get(0));
    return v ? *v : p.get_or(1, Value::none());
  }
  if (name == "copy") {
    Params(what, a, {});
    return self;  // dicts are immutable here, so a copy is indistinguishable
  }
  throw OpError(what + " is not supported by this template interpreter");
}

}  // namespace

MethodKind method_kind(const Value& self, std::string_view name) {
  if (self.is_string()) return str_methods().count(name) ? MethodKind::Safe : MethodKind::None;
  if (self.is_list()) {
    const SeqKind kind = self.list().kind;
    if (kind == SeqKind::List) {
      if (name == "index" || name == "count" || name == "copy") return MethodKind::Safe;
      static constexpr std::string_view kMutating[] = {"append", "clear",  "extend",  "insert",
                                                       "pop",    "remove", "reverse", "sort"};
      if (std::find(std::begin(kMutating), std::end(kMutating), name) != std::end(kMutating)) return MethodKind::Unsafe;
    }
    if (kind == SeqKind::Tuple && (name == "index" || name == "count")) return MethodKind::Safe;
    return MethodKind::None;
  }
  if (self.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy")
      return MethodKind::Safe;
    if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
      return MethodKind::Unsafe;
  }
  return MethodKind::None;
}

Value call_method(Interp& interp, const Value& self, const std::string& name, const CallArgs& args) {
  if (self.is_string()) return str_method(interp, self.str(), name, args);
  if (self.is_list()) return list_method(self, name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  throw OpError(std::string("'") + type_name(self) + "' object has no attribute " + text::repr(name));
}

Value bind_method(const Value& self, const std::string& name) {
  auto m = std::make_shared<BoundMethod>();
  m->name = name;
  m->self = self;
  return Value::object(Type::Callable, std::move(m));
}

std::string str_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                        size_t max_bytes) {
  std::string out;
  auto check = [&]() {
    if (out.size() > max_bytes)
      throw OpError("replace would exceed the output limit of " + std::to_string(max_bytes) + " bytes");
  };
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    int64_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count >= 0 && done >= count) {
        out.append(s.substr(i));
        break;
      }
      out.append(repl);
      ++done;
      check();
      if (i == s.size()) break;
      const size_t start = i;
      text::next_cp(s, i);
      out.append(s.substr(start, i - start));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(repl);
    check();
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  check();
  return out;
}

}  // namespace trimkv::jinja
