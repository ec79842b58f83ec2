// Repo ids resolved in a local Hugging Face cache (a cache laid out here as huggingface_hub lays
// it out: models--owner--name/{refs/main, snapshots/<hash>/}).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/hf_cache.h"

namespace fs = std::filesystem;
using trimkv::resolve_model_dir;

TEST_CASE("a repo id resolves to its cached snapshot; folders stay folders; clear errors otherwise", "[hf-cache]") {
  trimkv::test::ScratchDir cache("hf-cache");
  const fs::path repo = fs::path(cache.path()) / "models--Qwen--Qwen2.5-VL-3B-Instruct";
  fs::create_directories(repo / "snapshots" / "abc123");
  fs::create_directories(repo / "refs");
  trimkv::test::write_text((repo / "refs" / "main").string(), "abc123");
  ::setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  CHECK(trimkv::hf_hub_cache_dir() == cache.path());
  CHECK(resolve_model_dir("Qwen/Qwen2.5-VL-3B-Instruct") == (repo / "snapshots" / "abc123").string());
  // An existing folder wins, and paths that are not repo ids are left alone.
  CHECK(resolve_model_dir(cache.path()) == cache.path());
  CHECK(resolve_model_dir("./not/a-repo") == "./not/a-repo");
  CHECK(resolve_model_dir("relative-folder") == "relative-folder");
  CHECK_THROWS_WITH(resolve_model_dir("Qwen/Absent-Model"),
                    Catch::Contains("models--Qwen--Absent-Model") && Catch::Contains("nothing is downloaded"));
  trimkv::test::write_text((repo / "refs" / "main").string(), "");
  CHECK_THROWS_WITH(resolve_model_dir("Qwen/Qwen2.5-VL-3B-Instruct"), Catch::Contains("does not name a snapshot"));
  trimkv::test::write_text((repo / "refs" / "main").string(), "fff999\n");
  CHECK_THROWS_WITH(resolve_model_dir("Qwen/Qwen2.5-VL-3B-Instruct"), Catch::Contains("fff999"));
  fs::remove(repo / "refs" / "main");
  CHECK_THROWS_WITH(resolve_model_dir("Qwen/Qwen2.5-VL-3B-Instruct"), Catch::Contains("refs"));
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", "/somewhere", 1);
  CHECK(trimkv::hf_hub_cache_dir() == "/somewhere/hub");
  ::unsetenv("HF_HOME");
}
