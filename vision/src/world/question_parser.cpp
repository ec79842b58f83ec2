// Recognising the world's questions in typed text, from the same templates the world asks them with.
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "world/world_internal.h"

namespace trimkv::vision::world {
namespace {

template <typename Name, typename T>
std::string alternatives(int n, Name name) {
  std::string out = "(?:";
  for (int i = 0; i < n; ++i) out += (i ? "|" : "") + std::string(name(static_cast<T>(i)));
  return out + ")";
}

// A template as a regular expression: literal text escaped, placeholders as the names they stand
// for, the final punctuation optional (typed questions drop, space or repeat it).
std::string pattern_of(std::string text) {
  while (!text.empty() && (text.back() == '?' || text.back() == '.')) text.pop_back();
  const std::string shape = alternatives<const char* (*)(Shape), Shape>(kNumShapes, shape_name);
  const std::string shapes = alternatives<const char* (*)(Shape), Shape>(kNumShapes, shape_plural);
  const std::string color = alternatives<const char* (*)(Color), Color>(kNumColors, color_name);
  const std::vector<std::pair<std::string, std::string>> slots = {
      {"{shape}", shape}, {"{shapes}", shapes}, {"{color}", color},
      {"{object}", color + " " + shape}, {"{a}", color + " " + shape}, {"{b}", color + " " + shape}};
  std::string out;
  for (size_t i = 0; i < text.size();) {
    bool slot = false;
    for (const auto& [key, regex] : slots)
      if (text.compare(i, key.size(), key) == 0) {
        out += regex;
        i += key.size();
        slot = true;
        break;
      }
    if (slot) continue;
    const char c = text[i++];
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out + " ?[?.!]*";
}

struct Grammar {
  std::vector<std::pair<std::string, std::regex>> single, multi;  // (type, pattern)
  std::regex prefixed{"(?:in|looking at|for) image ([1-9]),? (.*)", std::regex::icase};
  std::regex describe{"describe image ([1-9]) ?[?.!]*", std::regex::icase};
};

const Grammar& grammar() {
  static const Grammar g = [] {
    Grammar out;
    for (const std::string& type : question_types()) {
      if (type.rfind("in_image_", 0) == 0) continue;  // a prefixed single-image type
      auto& to = type == "more_shape" || type == "total_shape" ? out.multi : out.single;
      for (const char* t : templates(type)) to.emplace_back(type, std::regex(pattern_of(t), std::regex::icase));
    }
    return out;
  }();
  return g;
}

// The text without <image> placeholders (and the "Image k:" labels typed before them), with
// single spaces and none at either end.
std::string normalized(const std::string& text) {
  static const std::regex kPlaceholder("(?:image [0-9]+: *)?" + std::string(kImageToken), std::regex::icase);
  const std::string s = std::regex_replace(text, kPlaceholder, " ");
  std::string out;
  for (const char c : s) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (space) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

std::optional<ParsedQuestion> parse_question(const std::string& text) {
  const Grammar& g = grammar();
  const std::string q = normalized(text);
  std::smatch m;
  if (std::regex_match(q, m, g.describe)) return ParsedQuestion{"describe", std::stoi(m[1])};
  std::string rest = q;
  int image = 0;
  if (std::regex_match(q, m, g.prefixed)) {
    image = std::stoi(m[1]);
    rest = m[2];
  }
  for (const auto& [type, pattern] : g.single)
    if (std::regex_match(rest, pattern)) return ParsedQuestion{image ? "in_image_" + type : type, image};
  if (image == 0)
    for (const auto& [type, pattern] : g.multi)
      if (std::regex_match(q, pattern)) return ParsedQuestion{type, 0};
  return std::nullopt;
}

}  // namespace trimkv::vision::world
