// Fuzz target: a GGUF file (header, metadata, tensor table), then every small tensor converted.
#include "fuzz_input.h"
#include "trimkv/core/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "model.gguf");
  trimkv::fuzz::expect_only_trimkv_errors("gguf", [&] { const trimkv::GgufFile f(path); });
  return 0;
}
