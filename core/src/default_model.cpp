#include "trimkv/core/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "trimkv/core/error.h"

namespace fs = std::filesystem;

namespace trimkv {

std::string default_model_dir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("TRIMKV_DEMO_MODEL")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "trimkv" / "demo-model");
  candidates.emplace_back(TRIMKV_SOURCE_DEMO_MODEL);
  std::string tried;
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c / "config.json", ec)) return c.string();
    tried += (tried.empty() ? "" : ", ") + c.string();
  }
  TRIMKV_FAIL(Io, "the embedded demo model was not found (looked in ", tried,
              "); give a model folder with --model or set TRIMKV_DEMO_MODEL");
}

}  // namespace trimkv
