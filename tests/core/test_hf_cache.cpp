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

TEST_CASE("the cache's repos are listed with their model type and size, broken ones with the reason", "[hf-cache]") {
  trimkv::test::ScratchDir cache("hf-list");
  const fs::path root(cache.path());
  auto make_repo = [&](const std::string& folder, const std::string& ref, const std::string& config) {
    const fs::path repo = root / folder;
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / "h1");
    trimkv::test::write_text((repo / "refs" / "main").string(), ref);
    if (!config.empty()) {  // as huggingface_hub does: the snapshot links to a blob
      trimkv::test::write_text((repo / "blobs" / "cfg").string(), config);
      fs::create_symlink("../../blobs/cfg", repo / "snapshots" / "h1" / "config.json");
      trimkv::test::write_text((repo / "blobs" / "w").string(), std::string(1000, 'x'));
      fs::create_symlink("../../blobs/w", repo / "snapshots" / "h1" / "model.safetensors");
    }
  };
  make_repo("models--Qwen--Qwen2.5-VL-3B-Instruct", "h1", R"({"model_type": "qwen2_5_vl"})");
  make_repo("models--acme--broken", "missing-hash", "");
  make_repo("models--acme--no-config", "h1", "");
  fs::create_directories(root / "datasets--acme--data");  // not a model
  ::setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  const std::vector<trimkv::CachedRepo> repos = trimkv::list_cached_repos();
  ::unsetenv("HF_HUB_CACHE");
  REQUIRE(repos.size() == 3);
  REQUIRE(repos[0].repo_id == "Qwen/Qwen2.5-VL-3B-Instruct");
  REQUIRE(repos[0].model_type == "qwen2_5_vl");
  REQUIRE(repos[0].problem.empty());
  REQUIRE(repos[0].bytes == 1000 + std::string(R"({"model_type": "qwen2_5_vl"})").size());  // links followed
  REQUIRE(repos[1].repo_id == "acme/broken");
  REQUIRE_THAT(repos[1].problem, Catch::Contains("missing-hash"));
  REQUIRE(repos[2].repo_id == "acme/no-config");
  REQUIRE_THAT(repos[2].problem, Catch::Contains("config.json"));
  ::setenv("HF_HUB_CACHE", (root / "absent").c_str(), 1);
  REQUIRE(trimkv::list_cached_repos().empty());
  ::unsetenv("HF_HUB_CACHE");
}
