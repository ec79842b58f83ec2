// The weight cache (weight_cache.h): q8/q4 blocks quantised at load are written once and read
// back by later loads, giving the same model bit for bit; a cache file from another checkpoint, an
// older layout, another format, changed source files, or one that is damaged is refused by name
// and rebuilt; a cache that cannot be written never stops a load.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "test_util.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_cache.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;
namespace fs = std::filesystem;

namespace {

// Points the cache at `dir` for the life of the object (TRIMKV_WEIGHT_CACHE_DIR), then restores it.
class CacheDirEnv {
 public:
  explicit CacheDirEnv(const std::string& dir) {
    if (const char* old = std::getenv("TRIMKV_WEIGHT_CACHE_DIR")) m_old = old;
    setenv("TRIMKV_WEIGHT_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDirEnv() {
    if (m_old.empty()) unsetenv("TRIMKV_WEIGHT_CACHE_DIR");
    else setenv("TRIMKV_WEIGHT_CACHE_DIR", m_old.c_str(), 1);
  }

 private:
  std::string m_old;
};

// Logits of a 12-token prompt (prefilled in chunks of 8: the GEMM) and 4 greedy steps (the GEMV).
at::Tensor logits_of(const TextModel& m) {
  KvCache cache(kv_geometry_of(m.config, 4));
  TextRunner runner(m, cache, 8);
  std::vector<at::Tensor> out;
  at::Tensor logits = runner.prefill({1, 5, 9, 2, 7, 3, 8, 4, 6, 10, 11, 12});
  for (int i = 0; i < 4; ++i) {
    out.push_back(logits.clone());
    logits = runner.step(static_cast<int32_t>(logits.argmax().item<int64_t>()));
  }
  out.push_back(logits);
  return at::stack(out);
}

ModelLoadOptions opts(const std::string& weights, bool cache = true) {
  ModelLoadOptions o(weights);
  o.weight_cache = cache;
  return o;
}

// The one cache file in `dir`.
std::string only_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  REQUIRE(files.size() == 1);
  return files.front();
}

// Rewrites a cache file with `edit` applied to its metadata and tensors.
template <typename Edit>
void rewrite_cache(const std::string& path, Edit edit) {
  std::map<std::string, std::string> md;
  std::vector<TensorToWrite> tensors;
  {
    const SafetensorsFile f(path);
    md = f.metadata();
    for (const auto& [name, t] : f.tensors())
      tensors.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes)});
  }
  edit(md, tensors);
  write_safetensors(path, tensors, md);
}

}  // namespace

TEST_CASE("Weight cache: q8/q4 blocks are written once, read back bit for bit, in the documented layout",
          "[weights][weight-cache]") {
  test::ScratchDir scratch("wcache");
  const std::string model = scratch.file("llama_gqa"), dir = scratch.file("cache");
  test::copy_model("llama_gqa", model);
  CacheDirEnv env(dir);
  for (const char* fmt : {"q8", "q4"}) {
    CAPTURE(fmt);
    const TextModel plain = load_text_model(model, opts(fmt, false));
    REQUIRE(plain.weight_cache_note.empty());
    const at::Tensor expected = logits_of(plain);

    const TextModel first = load_text_model(model, opts(fmt));
    CHECK_THAT(first.weight_cache_note, Catch::Contains("quantised to " + std::string(fmt) + " at load") &&
                                            Catch::Contains("cached in '" + dir));
    const TextModel second = load_text_model(model, opts(fmt));
    CHECK_THAT(second.weight_cache_note, Catch::StartsWith("matrices read as " + std::string(fmt) + " blocks from"));
    REQUIRE(at::equal(logits_of(first), expected));
    REQUIRE(at::equal(logits_of(second), expected));
    REQUIRE(second.decoder->weight_bytes() == plain.decoder->weight_bytes());
  }
  // One file per format, named after the checkpoint; the layout the header documents.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == 2);
  CHECK_THAT(files[0], Catch::StartsWith("llama_gqa-") && Catch::EndsWith(".q4.safetensors"));
  CHECK_THAT(files[1], Catch::StartsWith("llama_gqa-") && Catch::EndsWith(".q8.safetensors"));
  const SafetensorsFile f((fs::path(dir) / files[1]).string());
  CHECK(f.metadata().at("format") == "trimkv-weight-cache");
  CHECK(f.metadata().at("layout") == std::to_string(kWeightCacheLayout));
  CHECK(f.metadata().at("weights") == "q8");
  CHECK(f.metadata().at("source") == fs::canonical(model).string());
  const auto fingerprints = nlohmann::json::parse(f.metadata().at("source_files"));
  REQUIRE(fingerprints.size() == 1);
  CHECK(fingerprints[0][0] == "model.safetensors");
  CHECK(fingerprints[0][1] == fs::file_size(fs::path(model) / "model.safetensors"));
  const SafetensorsFile source((fs::path(model) / "model.safetensors").string());
  for (const auto& [name, t] : f.tensors()) {
    CAPTURE(name);
    REQUIRE(t.dtype == DType::U8);
    const TensorInfo& s = source.tensors().at(name);
    REQUIRE(t.shape == std::vector<int64_t>{s.shape[0], s.shape[1] / 32, 34});
    // The blocks are pack_weight's of the stored matrix.
    const at::Tensor packed = kernels::pack_weight(tensor_to_float(s), kernels::WeightFormat::Q8_0);
    REQUIRE(std::memcmp(packed.data_ptr(), t.data, t.n_bytes) == 0);
  }
  CHECK(f.tensors().count("model.layers.0.self_attn.q_proj.weight"));
  CHECK(f.tensors().count("model.embed_tokens.weight"));
}

TEST_CASE("Weight cache: files from another checkpoint, an older layout, another format, changed sources, or "
          "damaged ones are refused by name and rebuilt", "[weights][weight-cache]") {
  test::ScratchDir scratch("wcache-bad");
  const std::string a = scratch.file("llama_gqa"), b = scratch.file("llama_tied"), dir = scratch.file("cache");
  test::copy_model("llama_gqa", a);
  test::copy_model("llama_tied", b);
  CacheDirEnv env(dir);
  const at::Tensor expected = logits_of(load_text_model(a, opts("q8", false)));
  const std::string path = [&] {
    load_text_model(a, opts("q8"));
    return only_file(dir);
  }();
  const std::string pristine = test::read_bytes(path);
  auto reload_checks = [&](const std::string& refusal) {
    CAPTURE(refusal);
    const TextModel m = load_text_model(a, opts("q8"));
    CHECK_THAT(m.weight_cache_note, Catch::StartsWith("cache file '" + path + "' refused (") &&
                                        Catch::Contains(refusal) && Catch::Contains("cached in"));
    REQUIRE(at::equal(logits_of(m), expected));
    // Rebuilt: the next load reads it.
    CHECK_THAT(load_text_model(a, opts("q8")).weight_cache_note, Catch::StartsWith("matrices read as q8"));
    CHECK(test::read_bytes(path) == pristine);
  };

  SECTION("another checkpoint's cache") {
    load_text_model(b, opts("q8"));
    std::string other;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string() != path) other = e.path().string();
    REQUIRE(!other.empty());
    fs::copy_file(other, path, fs::copy_options::overwrite_existing);
    reload_checks("made from '" + fs::canonical(b).string() + "', not from this checkpoint");
  }
  SECTION("an older layout") {
    rewrite_cache(path, [](auto& md, auto&) { md["layout"] = "0"; });
    reload_checks("layout 0; this build reads layout 1");
  }
  SECTION("another format's blocks under this name") {
    rewrite_cache(path, [](auto& md, auto&) { md["weights"] = "q4"; });
    reload_checks("holds q4 blocks, not q8");
  }
  SECTION("not a cache at all") {
    rewrite_cache(path, [](auto& md, auto&) { md.erase("format"); });
    reload_checks("not a trimkv weight cache");
  }
  SECTION("the checkpoint was written again since") {
    const fs::path st = fs::path(a) / "model.safetensors";
    fs::last_write_time(st, fs::last_write_time(st) + std::chrono::seconds(5));
    const TextModel m = load_text_model(a, opts("q8"));
    CHECK_THAT(m.weight_cache_note, Catch::Contains("refused (the checkpoint's files changed since it was written)"));
    REQUIRE(at::equal(logits_of(m), expected));
    CHECK_THAT(load_text_model(a, opts("q8")).weight_cache_note, Catch::StartsWith("matrices read as q8"));
  }
  SECTION("truncated") {
    fs::resize_file(path, fs::file_size(path) / 2);
    reload_checks("truncated file?");
  }
  SECTION("garbage") {
    test::write_text(path, "not a safetensors file");
    reload_checks(path);
  }
  SECTION("a matrix missing or of the wrong shape: quantised afresh, the rest read, the file rewritten") {
    rewrite_cache(path, [](auto&, auto& tensors) {
      tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                   [](const TensorToWrite& t) { return t.name == "model.layers.1.mlp.down_proj.weight"; }),
                    tensors.end());
      for (auto& t : tensors)
        if (t.name == "model.layers.0.self_attn.o_proj.weight") t.shape = {t.shape[1], t.shape[0], t.shape[2]};
    });
    const TextModel m = load_text_model(a, opts("q8"));
    CHECK_THAT(m.weight_cache_note, Catch::StartsWith("matrices quantised to q8 at load (") &&
                                        Catch::Contains(" read from the old cache)"));
    REQUIRE(at::equal(logits_of(m), expected));
    CHECK_THAT(load_text_model(a, opts("q8")).weight_cache_note, Catch::StartsWith("matrices read as q8"));
    // The same tensors as the first file (the two re-quantised ones now stored first).
    test::write_text(scratch.file("pristine.safetensors"), pristine);
    const SafetensorsFile now(path), before(scratch.file("pristine.safetensors"));
    REQUIRE(now.tensors().size() == before.tensors().size());
    for (const auto& [name, t] : before.tensors()) {
      CAPTURE(name);
      const TensorInfo& u = now.tensors().at(name);
      REQUIRE(u.shape == t.shape);
      REQUIRE(std::memcmp(u.data, t.data, t.n_bytes) == 0);
    }
  }
}

TEST_CASE("Weight cache: new files left by killed loads are removed; a live load's are not", "[weights][weight-cache]") {
  test::ScratchDir scratch("wcache-tmp");
  const std::string model = scratch.file("llama_gqa"), dir = scratch.file("cache");
  test::copy_model("llama_gqa", model);
  CacheDirEnv env(dir);
  load_text_model(model, opts("q8"));
  const std::string path = only_file(dir);
  // pid 2^22 + 1 is above Linux's pid_max limit: no such process.
  const std::string dead = path + ".tmp-4194305", live = path + ".tmp-" + std::to_string(::getpid());
  test::write_text(dead, "half a file");
  test::write_text(live, "being written");
  load_text_model(model, opts("q8"));
  CHECK(!fs::exists(dead));
  CHECK(fs::exists(live));
}

TEST_CASE("Weight cache: a cache that cannot be written, or is turned off, never stops a load",
          "[weights][weight-cache]") {
  test::ScratchDir scratch("wcache-off");
  const std::string model = test::model_dir("llama_gqa");
  const at::Tensor expected = logits_of(load_text_model(model, opts("q8", false)));
  SECTION("the folder cannot be made") {
    test::write_text(scratch.file("a-file"), "x");
    CacheDirEnv env(scratch.file("a-file") + "/cache");
    const TextModel m = load_text_model(model, opts("q8"));
    CHECK_THAT(m.weight_cache_note, Catch::Contains("could not be cached: cannot create '" + scratch.file("a-file")));
    REQUIRE(at::equal(logits_of(m), expected));
  }
  SECTION("TRIMKV_WEIGHT_CACHE=0") {
    CacheDirEnv env(scratch.file("cache"));
    setenv("TRIMKV_WEIGHT_CACHE", "0", 1);
    const TextModel m = load_text_model(model, opts("q8"));
    unsetenv("TRIMKV_WEIGHT_CACHE");
    CHECK(m.weight_cache_note.empty());
    CHECK(!fs::exists(scratch.file("cache")));
    REQUIRE(at::equal(logits_of(m), expected));
  }
  SECTION("formats that quantise nothing use no cache") {
    CacheDirEnv env(scratch.file("cache"));
    for (const char* fmt : {"f32", "bf16", "f16"}) CHECK(load_text_model(model, opts(fmt)).weight_cache_note.empty());
    CHECK(!fs::exists(scratch.file("cache")));
  }
}

TEST_CASE("Weight cache: GGUF files requantised at load are cached too", "[weights][weight-cache][gguf]") {
  test::ScratchDir scratch("wcache-gguf");
  CacheDirEnv env(scratch.file("cache"));
  const std::string file = scratch.file("llama_gqa.f16-f16.gguf");
  fs::copy_file(test::data_dir() + "/gguf/llama_gqa.f16-f16.gguf", file);
  const at::Tensor expected = logits_of(load_text_model(file, opts("q4", false)));
  const TextModel first = load_text_model(file, opts("q4"));
  CHECK_THAT(first.weight_cache_note, Catch::Contains("quantised to q4 at load"));
  const TextModel second = load_text_model(file, opts("q4"));
  CHECK_THAT(second.weight_cache_note, Catch::StartsWith("matrices read as q4 blocks"));
  REQUIRE(at::equal(logits_of(first), expected));
  REQUIRE(at::equal(logits_of(second), expected));
  // A GGUF file's own q8_0 blocks are used as they are: nothing to cache.
  CHECK(load_text_model(test::data_dir() + "/gguf/llama_gqa.q8_0-q8_0.gguf", opts("q8")).weight_cache_note.empty());
}
