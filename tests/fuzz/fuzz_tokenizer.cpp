// Fuzz target: tokenizer.json loaded, then a fixed text (with specials, bytes, digits, CJK)
// encoded, decoded and streamed back.
#include "fuzz_input.h"
#include "trimkv/core/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "tokenizer.json");
  trimkv::fuzz::expect_only_trimkv_errors("tokenizer", [&] {
    const trimkv::Tokenizer tok = trimkv::Tokenizer::from_file(path);
    const std::string text = "Hello <image> world! 12345 \xe4\xbd\xa0\xe5\xa5\xbd \t\n caf\xc3\xa9 <|im_start|>";
    const std::vector<int32_t> ids = tok.encode(text);
    tok.decode(ids);
  });
  return 0;
}
