#include "trimkv/core/chat_template.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trimkv/core/error.h"
#include "trimkv/core/jinja.h"

namespace trimkv {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot read '", p.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ojson read_json(const fs::path& p) {
  try {
    return ojson::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    TRIMKV_FAIL(Format, "'", p.string(), "': malformed JSON: ", e.what());
  }
}

// The "chat_template" field of a JSON file: a string, or a list of named templates (the one
// named "default"). nullopt when the field is absent or null.
std::optional<std::pair<std::string, std::string>> template_field(const fs::path& p) {
  const ojson j = read_json(p);
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return std::nullopt;
  const ojson& t = j["chat_template"];
  const std::string where = p.string() + "' field 'chat_template";
  if (t.is_string()) return std::make_pair(t.get<std::string>(), p.string() + " (chat_template)");
  TRIMKV_CHECK(t.is_array(), Format, "'", where, "' must be a string or a list of named templates");
  std::vector<std::string> names;
  for (const ojson& e : t) {
    TRIMKV_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                     e["template"].is_string(),
                 Format, "'", where, "': every entry needs a string 'name' and 'template'");
    const std::string name = e["name"].get<std::string>();
    if (name == "default") return std::make_pair(e["template"].get<std::string>(), p.string() + " (chat_template 'default')");
    names.push_back(name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  TRIMKV_FAIL(Config, "'", where, "' has no template named 'default' (it has: ", list, ")");
}

}  // namespace

TemplateVar parse_template_var(const std::string& text) {
  auto trim = [](const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, s.find_last_not_of(" \t") - b + 1);
  };
  const size_t eq = text.find('=');
  const std::string name = eq == std::string::npos ? "" : trim(text.substr(0, eq));
  bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
  for (char ch : name) identifier = identifier && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
  TRIMKV_CHECK(identifier, Input, "template variable '", text, "' must be NAME=VALUE with NAME an identifier ",
               "(e.g. enable_thinking=false)");
  std::string value = trim(text.substr(eq + 1));
  if (value == "True" || value == "False" || value == "None")  // Python's spelling
    value = value == "True" ? "true" : value == "False" ? "false" : "null";
  return {name, value};
}

struct ChatTemplate::Impl {
  std::shared_ptr<const jinja::Template> tmpl;
  std::string origin;
  ojson vars = ojson::object();  // bos_token, eos_token, the user's variables
};

ChatTemplate::ChatTemplate(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->tmpl = std::make_shared<const jinja::Template>(jinja::Template::parse(source, origin));
  impl->origin = origin;
  return ChatTemplate(std::move(impl));
}

std::optional<ChatTemplate> ChatTemplate::from_folder(const std::string& dir, bool processor_first) {
  const fs::path d(dir);
  if (fs::exists(d / "chat_template.jinja"))
    return from_source(read_file(d / "chat_template.jinja"), (d / "chat_template.jinja").string());
  const std::vector<const char*> files =
      processor_first ? std::vector<const char*>{"chat_template.json", "processor_config.json", "tokenizer_config.json"}
                      : std::vector<const char*>{"chat_template.json", "tokenizer_config.json", "processor_config.json"};
  for (const char* file : files) {
    if (!fs::exists(d / file)) continue;
    if (auto t = template_field(d / file)) return from_source(t->first, t->second);
  }
  return std::nullopt;
}

void ChatTemplate::set_variable(const TemplateVar& var) {
  TRIMKV_CHECK(var.name != "messages" && var.name != "add_generation_prompt", Input, "template variable '",
               var.name, "' is set by the conversation itself");
  auto copy = std::make_shared<Impl>(*m_impl);
  ojson value = ojson::parse(var.value, nullptr, false);
  if (value.is_discarded()) value = var.value;
  copy->vars[var.name] = std::move(value);
  m_impl = std::move(copy);
}

void ChatTemplate::set_special_tokens(const std::string& bos, const std::string& eos) {
  auto copy = std::make_shared<Impl>(*m_impl);
  if (!bos.empty()) copy->vars["bos_token"] = bos;
  if (!eos.empty()) copy->vars["eos_token"] = eos;
  m_impl = std::move(copy);
}

std::string ChatTemplate::render(const std::vector<Message>& messages, bool add_generation_prompt,
                                 ContentStyle style) const {
  ojson list = ojson::array();
  for (const Message& m : messages) {
    ojson msg = {{"role", m.role}};
    bool text_only = true;
    for (const ContentPart& p : m.content) text_only = text_only && p.kind == ContentPart::Kind::Text;
    if (style == ContentStyle::Strings) {
      TRIMKV_CHECK(text_only, Input, "chat template '", m_impl->origin,
                   "' is a text model's: a message cannot hold an image");
      std::string text;
      for (const ContentPart& p : m.content) text += p.text;
      msg["content"] = text;
    } else {
      ojson parts = ojson::array();
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::Text) parts.push_back({{"type", "text"}, {"text", p.text}});
        else parts.push_back({{"type", "image"}});
      }
      msg["content"] = std::move(parts);
    }
    list.push_back(std::move(msg));
  }
  // transformers always passes tools and documents (None when not given): `tools is defined`
  // holds and `tools is none` decides.
  ojson ctx = {{"messages", std::move(list)}, {"tools", nullptr}, {"documents", nullptr},
               {"add_generation_prompt", add_generation_prompt}};
  for (const auto& [k, v] : m_impl->vars.items()) ctx[k] = v;  // the caller's override these
  return m_impl->tmpl->render(ctx);
}

const std::string& ChatTemplate::origin() const { return m_impl->origin; }

namespace {

size_t common_prefix(const std::string& a, const std::string& b) {
  size_t p = 0;
  const size_t n = std::min(a.size(), b.size());
  while (p < n && a[p] == b[p]) ++p;
  return p;
}

// The content sentinel number k, standing for a message's text while finding where a template
// puts it: private-use code points (U+E000, U+E001) around a tag, which trim, upper/lower and
// capitalize leave alone (Python's strip() would eat control characters such as \x1f) and no
// real text holds.
std::string sentinel(int k) { return "\xee\x80\x80trimkv-" + std::to_string(k) + "\xee\x80\x81"; }

// How much of a closing two renderings share, cut back to the end of a line or tag when they
// part inside one (so "<|end|>\n<|" becomes "<|end|>\n").
size_t shared_closing(const std::string& last, const std::string& followed) {
  size_t c = common_prefix(last, followed);
  if (c == last.size() || c == followed.size()) return c;
  while (c > 0 && std::string("\n >]}").find(last[c - 1]) == std::string::npos) --c;
  return c;
}

Message text_message(const std::string& role, const std::string& text) { return {role, {ContentPart::text_part(text)}}; }

// Whether `piece` holds what the user wrote (the first text, as a template that trims it
// writes it).
bool holds_text(const std::string& piece, const std::vector<ContentPart>& content) {
  for (const ContentPart& p : content) {
    if (p.kind != ContentPart::Kind::Text) continue;
    const size_t b = p.text.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) continue;
    const size_t e = p.text.find_last_not_of(" \t\r\n");
    return piece.find(p.text.substr(b, e - b + 1)) != std::string::npos;
  }
  return true;
}

}  // namespace

ChatFormat::ChatFormat(ChatTemplate tmpl, ContentStyle style) : m_template(std::move(tmpl)), m_style(style) {}

std::optional<ChatFormat::Closing> ChatFormat::closing(const std::vector<Message>& before,
                                                       const std::string& role) const {
  const std::string text = sentinel(0);
  std::vector<Message> one = before;
  one.push_back(text_message(role, text));
  const std::string last = render(one, false);
  const size_t at = last.find(text);
  if (at == std::string::npos) return std::nullopt;
  Closing c;
  c.last = last.substr(at + text.size());
  // The same message with one more after it (a user message after an answer or a system
  // message, an answer after a user message).
  one.push_back(text_message(role == "user" ? "assistant" : "user", sentinel(1)));
  std::string followed;
  try {
    followed = render(one, false);
  } catch (const Error&) {
    c.followed = c.last;  // the template refuses that order: keep the closing as it is
    return c;
  }
  const size_t at2 = followed.find(text);
  if (at2 == std::string::npos) {
    c.followed = c.last;
    return c;
  }
  c.followed = c.last.substr(0, shared_closing(c.last, followed.substr(at2 + text.size())));
  return c;
}

std::string ChatFormat::system_text(const std::string& text) const {
  const std::vector<Message> sys = {text_message("system", text)};
  const std::string rendered = render(sys, false);
  const std::optional<Closing> c = closing({}, "system");
  if (!c || rendered.size() < c->last.size() ||
      rendered.compare(rendered.size() - c->last.size(), c->last.size(), c->last) != 0)
    return rendered;  // folded into the next turn, or closed as the template pleases
  return rendered.substr(0, rendered.size() - c->last.size()) + c->followed;
}

std::string ChatFormat::user_text(const std::vector<Message>& history, const std::vector<ContentPart>& content) const {
  std::vector<Message> next = history;
  next.push_back({"user", content});
  const std::string after = render(next, true);
  // An empty conversation renders as nothing before its first message: the template's opening
  // (e.g. a BOS) belongs to the first piece, and some templates cannot render zero messages.
  if (history.empty()) return after;
  const std::string before = render(history, false);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  // The template renders the conversation so far differently now that a message follows. The
  // cache holds the last message with its closing (`followed`); the new piece is what comes
  // after that closing in a rendering whose last message's text is the sentinel.
  const Message& last = history.back();
  const std::optional<Closing> c = closing({history.begin(), history.end() - 1}, last.role);
  std::vector<Message> marked(history.begin(), history.end() - 1);
  const std::string text = sentinel(2);
  marked.push_back(text_message(last.role, text));
  marked.push_back({"user", content});
  const std::string structure = render(marked, true);
  const size_t at = structure.find(text);
  const size_t from = at == std::string::npos || !c ? std::string::npos : at + text.size() + c->followed.size();
  TRIMKV_CHECK(from != std::string::npos && structure.compare(at + text.size(), c->followed.size(), c->followed) == 0,
               Unsupported, "chat template '", m_template.origin(), "' renders the conversation so far differently ",
               "once a message follows, in a way a cached conversation cannot continue");
  const std::string piece = structure.substr(from);
  TRIMKV_CHECK(holds_text(piece, content), Unsupported, "chat template '", m_template.origin(),
               "': the new user message is not where a cached conversation can continue");
  return piece;
}

std::string ChatFormat::assistant_text(const std::vector<Message>& history, const std::string& text) const {
  const std::string prompt = render(history, true);
  std::vector<Message> next = history;
  next.push_back(text_message("assistant", text));
  const std::string rendered = render(next, false);
  const Closing c = answer_closing(history);
  const size_t p = common_prefix(prompt, rendered);  // the generation prompt (or what it shares)
  TRIMKV_CHECK(rendered.size() >= p + c.last.size() &&
                   rendered.compare(rendered.size() - c.last.size(), c.last.size(), c.last) == 0,
               Unsupported, "chat template '", m_template.origin(), "' closes this answer unlike any other");
  return rendered.substr(p, rendered.size() - c.last.size() - p) + c.followed;
}

std::string ChatFormat::answer_close(const std::vector<Message>& history) const { return answer_closing(history).followed; }

ChatFormat::Closing ChatFormat::answer_closing(const std::vector<Message>& history) const {
  std::optional<Closing> c = closing(history, "assistant");
  TRIMKV_CHECK(c, Unsupported, "chat template '", m_template.origin(),
               "' does not render an assistant answer's text where it follows the generation prompt");
  return std::move(*c);
}

}  // namespace trimkv
