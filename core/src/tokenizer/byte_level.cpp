#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace trimkv::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_chars;  // UTF-8 of each byte's stand-in
  std::array<int16_t, 512> char_to_byte;       // stand-in code point -> byte, -1 if none

  Tables() {
    char_to_byte.fill(-1);
    int n_shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n_shifted++);
      utf8::append(byte_to_chars[b], cp);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += t.byte_to_chars[static_cast<unsigned char>(c)];
  return out;
}

bool decode(std::string_view token, std::string& out) {
  const Tables& t = tables();
  if (!utf8::is_valid(token)) return false;
  const size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const char32_t cp = utf8::next(token, i);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(t.char_to_byte[cp]);
  }
  return true;
}

}  // namespace trimkv::byte_level
