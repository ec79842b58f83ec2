// Fuzz target: retention-gates files: a zip ("PK" first, the authors' PyTorch .pth holding a
// pickle, whose directory and pickle opcodes must be checked before anything reads them) or our
// safetensors layout (anything else).
#include "fuzz_input.h"
#include "trimkv/core/gate_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool pth = size >= 2 && data[0] == 'P' && data[1] == 'K';
  const std::string path = trimkv::fuzz::input_file(data, size, pth ? "gates.pth" : "gates.safetensors");
  trimkv::fuzz::expect_only_trimkv_errors("gates", [&] { trimkv::load_gates(path); });
  return 0;
}
