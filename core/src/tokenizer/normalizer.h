// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD (utf8proc) and Sequence of those.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Precondition: text is valid UTF-8; so is the result.
  virtual std::string normalize(std::string_view text) const = 0;
};

// nullptr for a JSON null. Throws Error Unsupported naming `file` and the type for any other
// normalizer, Format for a malformed entry.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& file);

}  // namespace trimkv
