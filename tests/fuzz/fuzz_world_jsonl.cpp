// Fuzz target: the eval JSONL reader (`trimkv eval --data`), strict and skipping bad lines.
#include "fuzz_input.h"
#include "trimkv/vision/world_eval.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "data.jsonl");
  trimkv::fuzz::expect_only_trimkv_errors("world_jsonl", [&] {
    std::vector<std::string> errors;
    trimkv::vision::world::read_world_jsonl(path, -1, &errors);
  });
  trimkv::fuzz::expect_only_trimkv_errors("world_jsonl", [&] { trimkv::vision::world::read_world_jsonl(path); });
  return 0;
}
