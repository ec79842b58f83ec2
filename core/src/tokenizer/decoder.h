// tokenizer.json "decoder": how tokens turn back into bytes. ByteLevel maps each token's
// stand-in characters back to bytes; no decoder joins the tokens with spaces (HF's fallback).
// The decoded text is the lossy UTF-8 of the concatenated bytes, so decoding can stream.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Appends the bytes of `token` (possibly partial UTF-8) to out; `first` is true for the
  // first token of a decode.
  virtual void append_token(std::string_view token, bool first, std::string& out) const = 0;
};

// A JSON null gives the space-joining fallback. Throws Error Unsupported naming `file` and the
// type for decoders other than ByteLevel (or the Sequence [ByteLevel]).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& file);

}  // namespace trimkv
