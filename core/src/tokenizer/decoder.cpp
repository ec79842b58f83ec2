#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "trimkv/core/error.h"

namespace trimkv {
namespace {

// A token whose characters are not all byte stand-ins (e.g. an added token containing a
// space) contributes its own UTF-8 bytes, as in HF's ByteLevel::decode_chain.
class ByteLevelDecoder final : public Decoder {
 public:
  void append_token(std::string_view token, bool, std::string& out) const override {
    if (!byte_level::decode(token, out)) out.append(token);
  }
};

class JoinWithSpaceDecoder final : public Decoder {
 public:
  void append_token(std::string_view token, bool first, std::string& out) const override {
    if (!first) out += ' ';
    out.append(token);
  }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return std::make_unique<JoinWithSpaceDecoder>();
  TRIMKV_CHECK(spec.is_object() && spec.contains("type"), Format, file,
               ": decoder must be an object with a \"type\"");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Sequence") {
    // Only the trivial Sequence [ByteLevel] is supported.
    const auto& steps = spec.at("decoders");
    const std::string sub = steps.size() == 1 ? steps[0].at("type").get<std::string>() : "";
    TRIMKV_CHECK(sub == "ByteLevel", Unsupported, file,
                 ": unsupported decoder Sequence (only [ByteLevel] is supported)");
    return std::make_unique<ByteLevelDecoder>();
  }
  TRIMKV_FAIL(Unsupported, file, ": unsupported decoder type '", type, "'");
}

}  // namespace trimkv
