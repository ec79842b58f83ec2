// Fuzz target: a safetensors file (header + tensor views), then every small tensor converted.
#include "fuzz_input.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/weight_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "model.safetensors");
  trimkv::fuzz::expect_only_trimkv_errors("safetensors", [&] {
    const trimkv::SafetensorsFile f(path);
    for (const auto& [name, info] : f.tensors())
      if (info.n_bytes <= (1u << 16)) trimkv::tensor_to_float(info);
  });
  return 0;
}
