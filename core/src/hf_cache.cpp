#include "trimkv/core/hf_cache.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "trimkv/core/error.h"
#include "trimkv/core/model_config.h"

namespace trimkv {

namespace fs = std::filesystem;

std::string hf_hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return (fs::path(h) / "hub").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home ? home : "") / ".cache" / "huggingface" / "hub").string();
}

namespace {
bool looks_like_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < s.size() && s.find('/', slash + 1) == std::string::npos &&
         s[0] != '.' && s[0] != '~';
}
}  // namespace

std::string resolve_model_dir(const std::string& spec) {
  if (fs::exists(spec) || !looks_like_repo_id(spec)) return spec;  // a folder or file (or an error later)  // a folder (or an error later)
  const std::string cache = hf_hub_cache_dir();
  const std::string owner = spec.substr(0, spec.find('/')), name = spec.substr(spec.find('/') + 1);
  const fs::path repo = fs::path(cache) / ("models--" + owner + "--" + name);
  TRIMKV_CHECK(fs::is_directory(repo), Io, "'", spec, "' is neither a model folder nor a repo in the Hugging Face ",
               "cache (looked for '", repo.string(), "'; the cache is $HF_HUB_CACHE, $HF_HOME/hub or ",
               "~/.cache/huggingface/hub; nothing is downloaded)");
  const fs::path ref = repo / "refs" / "main";
  std::ifstream in(ref);
  TRIMKV_CHECK(in.good(), Format, "'", spec, "': the cached repo has no '", ref.string(), "'");
  std::string hash;
  std::getline(in, hash);
  while (!hash.empty() && (hash.back() == '\r' || hash.back() == ' ')) hash.pop_back();
  TRIMKV_CHECK(!hash.empty() && hash.find('/') == std::string::npos && hash != "." && hash != "..", Format, "'",
               ref.string(), "' does not name a snapshot");
  const fs::path snapshot = repo / "snapshots" / hash;
  TRIMKV_CHECK(fs::is_directory(snapshot), Format, "'", ref.string(), "' names snapshot ", hash,
               ", which is not in '", (repo / "snapshots").string(), "'");
  return snapshot.string();
}

std::vector<CachedRepo> list_cached_repos() {
  std::vector<CachedRepo> out;
  std::error_code ec;
  const fs::path cache = hf_hub_cache_dir();
  if (!fs::is_directory(cache, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(cache, ec)) {
    const std::string folder = e.path().filename().string();
    if (folder.rfind("models--", 0) != 0 || !e.is_directory(ec)) continue;
    const std::string rest = folder.substr(8);
    const size_t sep = rest.find("--");
    if (sep == std::string::npos || sep == 0 || sep + 2 >= rest.size()) continue;
    CachedRepo r;
    r.repo_id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    try {
      r.dir = resolve_model_dir(r.repo_id);
    } catch (const Error& err) {
      r.problem = err.what();
      out.push_back(std::move(r));
      continue;
    }
    for (const fs::directory_entry& f : fs::recursive_directory_iterator(r.dir, ec))
      if (f.is_regular_file(ec)) r.bytes += f.file_size(ec);  // follows the snapshot's links
    r.model_type = checkpoint_model_type(r.dir);
    if (r.model_type.empty()) r.problem = "no readable config.json with a model_type in '" + r.dir + "'";
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo_id < b.repo_id; });
  return out;
}

}  // namespace trimkv
