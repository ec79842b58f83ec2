// Text decoders (Llama, Qwen2, Qwen3) against transformers on tiny random checkpoints
// (tests/oracle/model_fixtures.py): dense and cached paths, chunked prefill, decode, greedy.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;

namespace {

// float32 logits agree with transformers to ~1e-6; 1e-4 leaves room for summation order.
constexpr double kLogitTol = 1e-4;

struct Fixture {
  TextModel model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<at::Tensor> logits;  // [n, vocab] per prompt
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.model = load_text_model(test::model_dir(name));
  auto j = test::read_json(test::model_dir(name) + "/expected.json");
  f.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  f.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  WeightStore expected = WeightStore::open_file(test::model_dir(name) + "/expected.safetensors");
  for (size_t i = 0; i < f.prompts.size(); ++i)
    f.logits.push_back(expected.load({"logits." + std::to_string(i)}, {}));
  return f;
}

at::Tensor ids_tensor(const std::vector<int32_t>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Runs `ids` through the cached path in chunks of `chunk`, returning logits of every position.
at::Tensor cached_logits(const TextModel& m, KvCache& cache, const std::vector<int32_t>& ids,
                         int64_t chunk, int64_t offset = 0) {
  std::vector<at::Tensor> out;
  for (int64_t b = 0; b < static_cast<int64_t>(ids.size()); b += chunk) {
    const int64_t e = std::min<int64_t>(ids.size(), b + chunk);
    std::vector<int32_t> piece(ids.begin() + b, ids.begin() + e);
    std::vector<TokenInfo> infos(piece.size());
    std::vector<int32_t> idx(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      idx[i] = static_cast<int32_t>(offset + b + i);
      infos[i].token_index = infos[i].rope_position = idx[i];
    }
    cache.register_tokens(infos);
    at::Tensor pos = at::arange(offset + b, offset + e, at::kLong);
    at::Tensor h = m.decoder->forward_cached(m.decoder->embed(ids_tensor(piece)), pos, idx, cache);
    out.push_back(m.decoder->logits(h));
  }
  return at::cat(out, 0);
}

const char* kModels[] = {"llama_gqa", "llama_tied", "qwen2", "qwen3"};

}  // namespace

TEST_CASE("TextDecoder dense path matches transformers logits", "[decoder][oracle]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    Fixture f = load_fixture(name);
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      CAPTURE(i);
      const auto& ids = f.prompts[i];
      at::Tensor h = f.model.decoder->forward_dense(
          f.model.decoder->embed(ids_tensor(ids)), at::arange(static_cast<int64_t>(ids.size()), at::kLong));
      REQUIRE(max_diff(f.model.decoder->logits(h), f.logits[i]) < kLogitTol);
    }
  }
}

TEST_CASE("TextDecoder cached path matches transformers for one-shot and chunked prefill",
          "[decoder][oracle][cache]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    Fixture f = load_fixture(name);
    for (int64_t chunk : {int64_t(1000), int64_t(16), int64_t(7)}) {
      CAPTURE(chunk);
      for (size_t i = 0; i < f.prompts.size(); ++i) {
        CAPTURE(i);
        KvCache cache(kv_geometry_of(f.model.config, 4));
        at::Tensor got = cached_logits(f.model, cache, f.prompts[i], chunk);
        REQUIRE(max_diff(got, f.logits[i]) < kLogitTol);
        REQUIRE(cache.bookkeeping().total_entries() ==
                static_cast<int64_t>(f.prompts[i].size()) * f.model.config.n_layer * f.model.config.n_kv_head);
      }
    }
  }
}

TEST_CASE("Cached decode equals the dense forward token by token", "[decoder][cache]") {
  Fixture f = load_fixture("qwen2");
  const auto& ids = f.prompts[2];  // 70 tokens
  KvCache cache(kv_geometry_of(f.model.config, 16));
  at::Tensor prefix = cached_logits(f.model, cache, std::vector<int32_t>(ids.begin(), ids.begin() + 20), 8);
  std::vector<at::Tensor> steps{prefix};
  for (size_t t = 20; t < ids.size(); ++t)
    steps.push_back(cached_logits(f.model, cache, {ids[t]}, 1, static_cast<int64_t>(t)));
  REQUIRE(max_diff(at::cat(steps, 0), f.logits[2]) < kLogitTol);
}

TEST_CASE("Greedy generation reproduces transformers' 32-token continuations", "[decoder][oracle][generation]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    EngineOptions options;
    options.prefill_chunk = 16;  // the 70-token prompt spans several chunks
    auto engine = Engine::load(test::model_dir(name), options);
    auto j = test::read_json(test::model_dir(name) + "/expected.json");
    auto prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
    auto greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      GenerationParams p;
      p.max_new_tokens = 32;
      p.stop_at_eos = false;
      GenerationResult r = engine->generate(prompts[i], p);
      REQUIRE(r.tokens == greedy[i]);
      REQUIRE(r.stop_reason == "max_tokens");
      // Every prompt and generated token but the last has its K/V in the cache.
      const auto info = engine->info();
      REQUIRE(r.kv_entries == static_cast<int64_t>(prompts[i].size() + 31) * info.n_layer * info.n_kv_head);
    }
  }
}

TEST_CASE("Weights load under both the legacy and the new VLM name schemes", "[decoder][weights]") {
  Fixture f = load_fixture("llama_gqa");
  for (const std::string root : {"model.language_model.", "language_model.model."}) {
    CAPTURE(root);
    test::ScratchDir dir("scheme");
    std::filesystem::copy(test::model_dir("llama_gqa") + "/config.json", dir.file("config.json"));
    SafetensorsFile src(test::model_dir("llama_gqa") + "/model.safetensors");
    std::vector<TensorToWrite> out;
    for (const auto& [name, info] : src.tensors()) {
      std::string renamed = name;
      if (name.rfind("model.", 0) == 0) renamed = root + name.substr(6);
      else if (root == "language_model.model.") renamed = "language_model." + name;  // lm_head
      out.push_back({renamed, info.dtype, info.shape,
                     std::vector<uint8_t>(info.data, info.data + info.n_bytes)});
    }
    write_safetensors(dir.file("model.safetensors"), out);
    TextModel m = load_text_model(dir.path());
    const auto& ids = f.prompts[0];
    at::Tensor h = m.decoder->forward_dense(m.decoder->embed(ids_tensor(ids)),
                                            at::arange(static_cast<int64_t>(ids.size()), at::kLong));
    REQUIRE(max_diff(m.decoder->logits(h), f.logits[0]) < kLogitTol);
  }
}

TEST_CASE("TextDecoder applies linear and llama3 rope scaling as transformers does, from v4 and v5 keys",
          "[decoder][oracle][rope]") {
  // tests/oracle/rope_fixtures.py: llama_gqa's weights with each variant's rope fields in its
  // config.json, logits at every 4th position of an 80-token prompt.
  const nlohmann::json spec = test::read_json(test::data_dir() + "/models/rope.json");
  const std::vector<int32_t> prompt = spec.at("prompt").get<std::vector<int32_t>>();
  WeightStore expected = WeightStore::open_file(test::data_dir() + "/models/rope.safetensors");
  const nlohmann::json base = test::read_json(test::model_dir("llama_gqa") + "/config.json");
  const Fixture plain = load_fixture("llama_gqa");
  const at::Tensor positions = at::arange(static_cast<int64_t>(prompt.size()), at::kLong);
  const at::Tensor every4 = at::arange(0, static_cast<int64_t>(prompt.size()), 4, at::kLong);
  const at::Tensor unscaled = plain.model.decoder->logits(
      plain.model.decoder->forward_dense(plain.model.decoder->embed(ids_tensor(prompt)), positions)).index_select(0, every4);
  REQUIRE(spec.at("variants").size() == 4);
  for (const auto& [name, fields] : spec.at("variants").items()) {
    CAPTURE(name);
    test::ScratchDir dir("rope");
    test::copy_model("llama_gqa", dir.path());
    nlohmann::json cfg = base;
    for (const char* k : {"rope_parameters", "rope_scaling", "rope_theta"}) cfg.erase(k);
    cfg.update(fields);
    test::write_text(dir.file("config.json"), cfg.dump());
    const TextModel m = load_text_model(dir.path());
    const at::Tensor got =
        m.decoder->logits(m.decoder->forward_dense(m.decoder->embed(ids_tensor(prompt)), positions)).index_select(0, every4);
    const at::Tensor want = expected.load({"logits." + name}, {});
    CHECK(max_diff(got, want) < kLogitTol);
    CHECK(max_diff(unscaled, want) > 100 * kLogitTol);  // the scaling changes the logits
  }
}
