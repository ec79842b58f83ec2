#include "trimkv/core/file_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "fnv1a.h"
#include "trimkv/core/error.h"

namespace fs = std::filesystem;

namespace trimkv {

std::string file_sample_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TRIMKV_CHECK(in.good(), Io, "cannot read '", path, "'");
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  uint64_t h = kFnv1aOffset;
  std::vector<char> buf(64 << 10);
  auto sample = [&](uint64_t at, size_t n) {
    if (at >= size) return;
    n = static_cast<size_t>(std::min<uint64_t>(n, size - at));
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    h = fnv1a_bytes(buf.data(), static_cast<size_t>(in.gcount()), h);
  };
  sample(0, buf.size());
  for (uint64_t k = 1; k <= 16; ++k) sample(size / 17 * k, 4096);
  return hex64(h);
}

std::string checkpoint_fingerprint(const std::string& model) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::exists(model, ec)) return "";  // the load that follows names it
  if (fs::is_directory(model, ec)) {
    for (const auto& e : fs::directory_iterator(model, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file(ec) && (ext == ".safetensors" || ext == ".gguf")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(model);
  }
  uint64_t h = kFnv1aOffset;
  for (const fs::path& f : files) {
    const uint64_t size = fs::file_size(f, ec);
    TRIMKV_CHECK(!ec, Io, "cannot read '", f.string(), "': ", ec.message());
    h = fnv1a(f.filename().string() + "|" + std::to_string(size) + "|" + file_sample_hash(f.string()) + "\n", h);
  }
  return hex64(h);
}

}  // namespace trimkv
