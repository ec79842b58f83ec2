// JSON that comes from a user's file, parsed strictly: an object naming one key twice is refused.
// nlohmann::json (like Python's json module) keeps the last of such keys without a word, so two
// readers of one file could disagree about what it says: a safetensors header naming one tensor
// twice, a config.json giving two vocab sizes. Error{Format} names the input (`what`: a path, or
// "path, line 3") and the key.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"

namespace trimkv {

// Parses `text` (nlohmann::json or nlohmann::ordered_json). Malformed JSON: Error{Format}
// "<what>: malformed JSON: ..."; a duplicate key: "<what>: the key 'k' appears twice in one object".
template <typename Json = nlohmann::json, typename Text>
Json parse_json_input(const Text& text, const std::string& what) {
  std::vector<std::set<std::string>> open;  // the keys seen in each object being parsed
  std::string duplicate;
  const typename Json::parser_callback_t check = [&](int, typename Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open.emplace_back();
    else if (event == Json::parse_event_t::object_end && !open.empty()) open.pop_back();
    else if (event == Json::parse_event_t::key && !open.empty() &&
             !open.back().insert(parsed.template get<std::string>()).second && duplicate.empty())
      duplicate = parsed.template get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, check);
  } catch (const nlohmann::json::exception& e) {
    TRIMKV_FAIL(Format, what, ": malformed JSON: ", e.what());
  }
  TRIMKV_CHECK(duplicate.empty(), Format, what, ": the key '", duplicate, "' appears twice in one object");
  return j;
}

// Field `key` of object `j` as a string: `fallback` when `j` is not an object or lacks the key (or
// holds null); Error{Format} naming `what` and the key when it holds anything but a string
// (nlohmann's value() would throw its own type_error, naming neither).
inline std::string string_field(const nlohmann::json& j, const char* key, const std::string& fallback,
                                const std::string& what) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  TRIMKV_CHECK(j[key].is_string(), Format, what, ": \"", key, "\" must be a string, not ", j[key].dump());
  return j[key].get<std::string>();
}

}  // namespace trimkv
