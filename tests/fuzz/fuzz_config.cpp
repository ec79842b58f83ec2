// Fuzz target: config.json of every family (flat or nested text_config, rope settings, ...).
#include "fuzz_input.h"
#include "trimkv/core/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "config.json");
  trimkv::fuzz::expect_only_trimkv_errors("config", [&] { trimkv::load_text_config(path); });
  return 0;
}
