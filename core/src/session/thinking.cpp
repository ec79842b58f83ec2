#include "trimkv/core/thinking.h"

namespace trimkv {

namespace {
constexpr const char* kOpen = "<think>";
constexpr const char* kClose = "</think>";

size_t skip_space(const std::string& s, size_t at) {
  while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) ++at;
  return at;
}
std::string trim_end(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.pop_back();
  return s;
}
}  // namespace

ThinkingSplit split_thinking(const std::string& text, bool opened_by_prompt) {
  ThinkingSplit r;
  size_t begin = skip_space(text, 0);
  if (!opened_by_prompt) {
    if (text.compare(begin, std::string(kOpen).size(), kOpen) != 0) {
      r.answer = text;
      return r;
    }
    begin += std::string(kOpen).size();
  } else if (text.compare(begin, std::string(kOpen).size(), kOpen) == 0) {
    begin += std::string(kOpen).size();  // a model that writes the tag again
  }
  r.has_thinking = true;
  begin = skip_space(text, begin);
  const size_t end = text.find(kClose, begin);
  if (end == std::string::npos) {
    r.thinking = text.substr(begin);
    return r;
  }
  r.closed = true;
  r.thinking = trim_end(text.substr(begin, end - begin));
  r.answer = text.substr(skip_space(text, end + std::string(kClose).size()));
  return r;
}

}  // namespace trimkv
