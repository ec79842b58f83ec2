// The GPT-2 byte <-> unicode map used by byte-level BPE: every byte gets a printable stand-in
// character (printable Latin-1 bytes map to themselves, the others to U+0100 and up, in order),
// so any byte string becomes a string of visible characters the BPE vocabulary is written in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trimkv::byte_level {

// Bytes -> stand-in characters (UTF-8).
std::string encode(std::string_view bytes);

// Appends the bytes a byte-level token stands for. Returns false, leaving out unchanged, when
// some character of the token is not a stand-in (HF then uses the token's own UTF-8 bytes).
bool decode(std::string_view token, std::string& out);

}  // namespace trimkv::byte_level
