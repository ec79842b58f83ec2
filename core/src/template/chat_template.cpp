#include "trimkv/core/chat_template.h"

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

// Stands for an answer's text while finding where a template puts it: private-use code points
// (U+E000, U+E001), which trim, upper/lower and capitalize leave alone (Python's strip() would
// eat control characters such as \x1f).
constexpr const char* kAnswerSentinel = "\xee\x80\x80" "trimkv-answer" "\xee\x80\x81";

}  // namespace

TemplateVar parse_template_var(const std::string& text) {
  const size_t eq = text.find('=');
  TRIMKV_CHECK(eq != std::string::npos && eq > 0, Input, "template variable '", text,
               "' must be NAME=VALUE (e.g. enable_thinking=false)");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

struct ChatTemplate::Impl {
  std::shared_ptr<const jinja::Template> tmpl;
  std::string origin, source;
  ojson vars = ojson::object();  // bos_token, eos_token, the user's variables
};

ChatTemplate::ChatTemplate(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->tmpl = std::make_shared<const jinja::Template>(jinja::Template::parse(source, origin));
  impl->origin = origin;
  impl->source = source;
  return ChatTemplate(std::move(impl));
}

std::optional<ChatTemplate> ChatTemplate::from_folder(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / "chat_template.jinja"))
    return from_source(read_file(d / "chat_template.jinja"), (d / "chat_template.jinja").string());
  for (const char* file : {"chat_template.json", "tokenizer_config.json", "processor_config.json"}) {
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
const std::string& ChatTemplate::source() const { return m_impl->source; }

std::string rendered_delta(const std::string& before, const std::string& after, const std::string& origin) {
  size_t p = 0;
  const size_t n = std::min(before.size(), after.size());
  while (p < n && before[p] == after[p]) ++p;
  if (p == before.size()) return after.substr(p);
  // The template rendered the end of `before` anew: find the longest tail of before[p..] that
  // `after` repeats at or past p, and take what follows it. The tail is the last message as
  // the cache holds it (e.g. an answer without its thinking block).
  for (size_t q = p; q < before.size(); ++q) {
    const std::string_view tail(before.data() + q, before.size() - q);
    const size_t at = after.find(tail, p);
    if (at != std::string::npos) return after.substr(at + tail.size());
  }
  TRIMKV_FAIL(Unsupported, "chat template '", origin, "' renders the conversation so far differently once a ",
              "message follows (they part at byte ", p,
              "), and nothing of its last message is repeated: a cached conversation cannot continue it");
}

ChatFormat::ChatFormat(ChatTemplate tmpl, ContentStyle style) : m_template(std::move(tmpl)), m_style(style) {}

std::string ChatFormat::system_text(const std::string& text) const {
  return m_template.render({{"system", {ContentPart::text_part(text)}}}, false, m_style);
}

std::string ChatFormat::user_text(const std::vector<Message>& history, const std::vector<ContentPart>& content) const {
  // An empty conversation renders as nothing before its first message: the template's opening
  // (e.g. a BOS) belongs to the first piece, and some templates cannot render zero messages.
  const std::string before = history.empty() ? std::string() : m_template.render(history, false, m_style);
  std::vector<Message> next = history;
  next.push_back({"user", content});
  return rendered_delta(before, m_template.render(next, true, m_style), m_template.origin());
}

ChatFormat::AnswerFrame ChatFormat::answer_frame(const std::vector<Message>& history) const {
  const std::string before = m_template.render(history, true, m_style);
  std::vector<Message> next = history;
  next.push_back({"assistant", {ContentPart::text_part(kAnswerSentinel)}});
  const std::string delta = rendered_delta(before, m_template.render(next, false, m_style), m_template.origin());
  const size_t at = delta.find(kAnswerSentinel);
  TRIMKV_CHECK(at != std::string::npos, Unsupported, "chat template '", m_template.origin(),
               "' does not render an assistant answer's text where it follows the generation prompt");
  return {delta.substr(0, at), delta.substr(at + std::string(kAnswerSentinel).size())};
}

}  // namespace trimkv
