// transformers' tojson filter: Python's json.dumps(x, ensure_ascii=..., indent=..., separators=...,
// sort_keys=...) byte for byte (json/encoder.py): floats as float.__repr__, NaN/Infinity
// spelled as Python does, control characters as \u00XX, and with ensure_ascii=False (the
// default here) every other character kept as UTF-8. Unlike jinja2's own tojson it does not
// HTML-escape < > & '.
#include <algorithm>
#include <cmath>

#include "template/jinja_builtins.h"
#include "template/jinja_text.h"

namespace trimkv::jinja {

namespace {

void append_hex4(std::string& out, unsigned v) {
  static const char* kHex = "0123456789abcdef";
  out += "\\u";
  for (int k = 3; k >= 0; --k) out.push_back(kHex[(v >> (4 * k)) & 0xF]);
}

void append_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80) {
      const size_t start = i;
      const char32_t cp = text::next_cp(s, i);
      if (!ensure_ascii) {
        out.append(s.substr(start, i - start));
      } else if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        append_hex4(out, 0xD800 + (v >> 10));
        append_hex4(out, 0xDC00 + (v & 0x3FF));
      } else {
        append_hex4(out, cp);
      }
      continue;
    }
    ++i;
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (b < 0x20 || (ensure_ascii && b == 0x7F))
          append_hex4(out, b);
        else
          out.push_back(static_cast<char>(b));
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

[[noreturn]] void not_serializable(const Value& v) {
  throw OpError(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

class Encoder {
 public:
  explicit Encoder(const JsonOptions& o) : m_o(o) {}

  void encode(std::string& out, const Value& v, size_t level) {
    switch (v.type()) {
      case Type::None: out += "null"; return;
      case Type::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Type::Int: out += std::to_string(v.as_int()); return;
      case Type::Float: out += float_json(v.as_float()); return;
      case Type::String: append_string(out, v.str(), m_o.ensure_ascii); return;
      case Type::List: {
        const auto& l = v.list();
        if (l.kind != SeqKind::List && l.kind != SeqKind::Tuple) not_serializable(v);
        if (l.items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        const std::string separator = open(out, level);
        for (size_t i = 0; i < l.items.size(); ++i) {
          if (i) out += separator;
          encode(out, l.items[i], level + 1);
        }
        close(out, level);
        out.push_back(']');
        return;
      }
      case Type::Dict: {
        const auto& d = v.dict();
        if (d.items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<Value, Value>*> items;
        items.reserve(d.items.size());
        for (const auto& kv : d.items) items.push_back(&kv);
        if (m_o.sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return compare(CmpOp::Lt, a->first, b->first); });
        out.push_back('{');
        const std::string separator = open(out, level);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += separator;
          const Value& key = items[i]->first;
          switch (key.type()) {
            case Type::String: append_string(out, key.str(), m_o.ensure_ascii); break;
            case Type::Float: append_string(out, float_json(key.as_float()), false); break;
            case Type::Bool: out += key.as_bool() ? "\"true\"" : "\"false\""; break;
            case Type::None: out += "\"null\""; break;
            case Type::Int: append_string(out, std::to_string(key.as_int()), false); break;
            default: throw OpError(std::string("keys must be str, int, float, bool or None, not ") + type_name(key));
          }
          out += m_o.key_separator;
          encode(out, items[i]->second, level + 1);
        }
        close(out, level);
        out.push_back('}');
        return;
      }
      default: not_serializable(v);
    }
  }

 private:
  // Writes the newline and indentation after an opening bracket; returns the item separator.
  std::string open(std::string& out, size_t level) const {
    if (!m_o.has_indent) return m_o.item_separator;
    std::string newline_indent = "\n";
    for (size_t k = 0; k <= level; ++k) newline_indent += m_o.indent;
    out += newline_indent;
    return m_o.item_separator + newline_indent;
  }

  void close(std::string& out, size_t level) const {
    if (!m_o.has_indent) return;
    out.push_back('\n');
    for (size_t k = 0; k < level; ++k) out += m_o.indent;
  }

  const JsonOptions& m_o;
};

}  // namespace

std::string to_json(const Value& value, const JsonOptions& options) {
  std::string out;
  Encoder(options).encode(out, value, 0);
  return out;
}

}  // namespace trimkv::jinja
