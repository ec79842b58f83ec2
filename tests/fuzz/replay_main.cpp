// Replays fuzz inputs without libFuzzer (any compiler): `fuzz_replay TARGET PATH...` sends every
// file named, and every file under every folder named, through TARGET's LLVMFuzzerTestOneInput
// once. The seed and regression corpora run this way in the normal test suite (tests/fuzz).
// Each target's entry point is compiled here under the name trimkv_fuzz_<target> (CMake renames it).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define TRIMKV_FUZZ_TARGETS(X) \
  X(safetensors) X(gguf) X(config) X(tokenizer) X(chat_template) X(image) X(gates) X(messages) X(world_jsonl)
#define TRIMKV_DECLARE(t) extern "C" int trimkv_fuzz_##t(const uint8_t* data, size_t size);
TRIMKV_FUZZ_TARGETS(TRIMKV_DECLARE)

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using Entry = int (*)(const uint8_t*, size_t);
  Entry entry = nullptr;
  const std::string target = argc > 1 ? argv[1] : "";
#define TRIMKV_MATCH(t) \
  if (target == #t) entry = trimkv_fuzz_##t;
  TRIMKV_FUZZ_TARGETS(TRIMKV_MATCH)
  if (!entry) {
    std::fprintf(stderr, "usage: fuzz_replay TARGET PATH... (unknown target '%s')\n", target.c_str());
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != ".gitkeep") inputs.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_replay: '%s' does not exist\n", argv[i]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    entry(bytes.data(), bytes.size());
  }
  std::printf("fuzz_replay %s: %zu inputs replayed, none crashed\n", target.c_str(), inputs.size());
  return inputs.empty() ? 1 : 0;
}
