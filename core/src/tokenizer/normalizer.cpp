#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <vector>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "trimkv/core/error.h"

namespace trimkv {
namespace {

// Unicode normalization forms. utf8proc's Unicode version may differ from the Rust
// unicode-normalization crate's by a release; only characters new in that release differ.
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : m_options(options) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                            m_options);
    TRIMKV_CHECK(n >= 0, Input, "unicode normalization failed: ", utf8proc_errmsg(n));
    std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
    return out;
  }

 private:
  utf8proc_option_t m_options;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : m_steps(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : m_steps) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> m_steps;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  TRIMKV_CHECK(spec.is_object() && spec.contains("type"), Format, file,
               ": normalizer must be an object with a \"type\"");
  const std::string type = spec.at("type").get<std::string>();
  const auto stable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC")
    return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& sub : spec.at("normalizers")) {
      auto step = make_normalizer(sub, file);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  TRIMKV_FAIL(Unsupported, file, ": unsupported normalizer type '", type, "'");
}

}  // namespace trimkv
