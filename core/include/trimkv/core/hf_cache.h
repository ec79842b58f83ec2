// Checkpoints as users hold them: a folder, or a Hugging Face repo id ("Qwen/Qwen2.5-VL-3B-Instruct")
// resolved offline in the local Hugging Face cache (nothing is downloaded). The cache is
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub; a repo is
// <cache>/models--<owner>--<name>, its current files snapshots/<hash> with <hash> read from
// refs/main (the layout huggingface_hub writes).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trimkv {

// The Hugging Face hub cache folder this process would use (it may not exist).
std::string hf_hub_cache_dir();

// `spec` when it is an existing folder; else, when it looks like a repo id ("owner/name": one '/',
// no leading '.', '/' or '~'), the snapshot folder of that repo in the cache. Error{Io} naming
// the folder and the cache place looked at when neither exists; Error{Format} naming refs/main
// when it is empty or points at a missing snapshot.
std::string resolve_model_dir(const std::string& spec);

// A model repo found in the cache.
struct CachedRepo {
  std::string repo_id;     // "owner/name"
  std::string dir;         // its snapshot folder ("" when it does not resolve)
  std::string model_type;  // config.json's ("" when unreadable)
  uint64_t bytes = 0;      // the snapshot's files on disk (links followed to the blobs)
  std::string problem;     // why it cannot be opened ("" when it can be tried)
};
// Every models--<owner>--<name> folder of the cache, sorted by repo id (none when the cache does
// not exist). Unreadable entries are listed with their problem, never thrown.
std::vector<CachedRepo> list_cached_repos();

}  // namespace trimkv
