#include "trimkv/core/conversation_types.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"

namespace trimkv {

size_t count_image_placeholders(const std::string& text, const std::string& marker) {
  size_t n = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + marker.size())) ++n;
  return n;
}

std::string expand_image_placeholders(const std::string& text, const std::vector<std::string>& expansions,
                                      const std::string& what, const std::string& marker) {
  const size_t n = count_image_placeholders(text, marker);
  TRIMKV_CHECK(n == expansions.size(), Unsupported, what, " writes ", n, " ", marker, " marker",
               n == 1 ? "" : "s", " for ", expansions.size(), " image", expansions.size() == 1 ? "" : "s");
  std::string out;
  size_t at = 0;
  for (const std::string& e : expansions) {
    const size_t next = text.find(marker, at);
    out += text.substr(at, next - at) + e;
    at = next + marker.size();
  }
  return out + text.substr(at);
}

void check_no_image_markers(const std::vector<ContentPart>& content, const std::vector<std::string>& markers) {
  for (const ContentPart& part : content)
    for (const std::string& marker : markers)
      TRIMKV_CHECK(part.kind != ContentPart::Kind::Text || part.text.find(marker) == std::string::npos, Input,
                   "a text part holds the image marker ", marker,
                   " but no image fills it (give the image as its own part)");
}

std::vector<ContentPart> content_from_prompt(const std::string& text,
                                             const std::vector<std::string>& images) {
  const std::string marker = kImagePlaceholder;
  std::vector<ContentPart> parts;
  const size_t n_markers = count_image_placeholders(text);
  if (n_markers == 0) {
    for (const auto& path : images) parts.push_back(ContentPart::image_part(path));
    if (!text.empty()) parts.push_back(ContentPart::text_part(text));
    return parts;
  }
  TRIMKV_CHECK(n_markers == images.size(), Input, "the prompt has ", n_markers, " ", marker,
               " placeholder", n_markers == 1 ? "" : "s", " but ", images.size(), " image",
               images.size() == 1 ? " was" : "s were", " given");
  size_t begin = 0, k = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, begin)) {
    if (p > begin) parts.push_back(ContentPart::text_part(text.substr(begin, p - begin)));
    parts.push_back(ContentPart::image_part(images[k++]));
    begin = p + marker.size();
  }
  if (begin < text.size()) parts.push_back(ContentPart::text_part(text.substr(begin)));
  return parts;
}

std::vector<Message> read_messages_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot read conversation file '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = parse_json_input(text, "'" + path + "'");
  const nlohmann::json& list = j.is_object() && j.contains("messages") ? j["messages"] : j;
  TRIMKV_CHECK(list.is_array(), Format, "'", path, "': expected a list of messages or {\"messages\": [...]}");
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  std::vector<Message> out;
  for (size_t k = 0; k < list.size(); ++k) {
    const nlohmann::json& m = list[k];
    const std::string where = "'" + path + "': message " + std::to_string(k + 1);
    TRIMKV_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content"), Format,
                 where, " needs a string 'role' and a 'content'");
    Message msg{m["role"].get<std::string>(), {}};
    const nlohmann::json& c = m["content"];
    if (c.is_string()) {
      msg.content.push_back(ContentPart::text_part(c.get<std::string>()));
    } else {
      TRIMKV_CHECK(c.is_array(), Format, where, ": 'content' must be a string or a list of parts");
      for (const nlohmann::json& part : c) {
        const std::string type = string_field(part, "type", "", where);
        if (type == "text" && part.contains("text") && part["text"].is_string()) {
          msg.content.push_back(ContentPart::text_part(part["text"].get<std::string>()));
        } else if (type == "image") {
          const std::string key = part.contains("path") ? "path" : "image";
          TRIMKV_CHECK(part.contains(key) && part[key].is_string(), Format, where,
                       ": an image part needs a 'path' (a file)");
          std::filesystem::path p(part[key].get<std::string>());
          if (p.is_relative()) p = base / p;
          msg.content.push_back(ContentPart::image_part(p.string()));
        } else {
          TRIMKV_FAIL(Format, where, ": a content part must be {\"type\": \"text\", \"text\"} or {\"type\": \"image\", \"path\"}");
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace trimkv
