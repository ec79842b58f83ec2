// Bad checkpoints and bad requests: each gives an Error naming the input, and nothing is
// half-loaded (load_text_model either returns a whole model or throws).
#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;
namespace fs = std::filesystem;

namespace {

// The Error thrown by loading `dir` (kind and message), or fails the test if none is thrown.
Error load_error(const std::string& dir) {
  try {
    load_text_model(dir);
  } catch (const Error& e) {
    return e;
  }
  FAIL("loading '" << dir << "' did not throw");
  return Error(ErrorKind::Internal, "");
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = test::read_json(dir + "/config.json");
  edit(j);
  test::write_text(dir + "/config.json", j.dump());
}

}  // namespace

TEST_CASE("Loading a missing folder or file names it", "[load][bad-input]") {
  test::ScratchDir dir("load");
  Error e = load_error(dir.file("absent"));
  REQUIRE(e.kind() == ErrorKind::Io);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("absent"));

  e = load_error(dir.path());  // empty folder: no config.json
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("config.json"));

  test::copy_model("llama_gqa", dir.path());
  fs::remove(dir.file("model.safetensors"));
  e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Io);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("model.safetensors"));
}

TEST_CASE("A truncated checkpoint is refused with the file named", "[load][bad-input]") {
  test::ScratchDir dir("trunc");
  test::copy_model("llama_gqa", dir.path());
  std::string bytes = test::read_bytes(dir.file("model.safetensors"));
  test::write_text(dir.file("model.safetensors"), bytes.substr(0, bytes.size() / 2));
  Error e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Format);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("model.safetensors") && Catch::Contains("truncated"));
}

TEST_CASE("A missing shard named by the index is reported", "[load][bad-input]") {
  test::ScratchDir dir("shard");
  test::copy_model("llama_tied", dir.path());
  fs::remove(dir.file("model-00003-of-00011.safetensors"));
  Error e = load_error(dir.path());
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("model-00003-of-00011.safetensors"));
}

TEST_CASE("Malformed config JSON and bad fields are named", "[load][bad-input]") {
  test::ScratchDir dir("cfg");
  test::copy_model("llama_gqa", dir.path());
  SECTION("malformed JSON") {
    test::write_text(dir.file("config.json"), "{\"model_type\": \"llama\",");
    Error e = load_error(dir.path());
    REQUIRE(e.kind() == ErrorKind::Format);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("config.json") && Catch::Contains("malformed JSON"));
  }
  SECTION("a key given twice (which one holds?)") {
    std::string text = test::read_bytes(dir.file("config.json"));
    text.insert(text.find('{') + 1, "\"num_hidden_layers\": 7, ");
    test::write_text(dir.file("config.json"), text);
    Error e = load_error(dir.path());
    REQUIRE(e.kind() == ErrorKind::Format);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("config.json") &&
                                            Catch::Contains("the key 'num_hidden_layers' appears twice"));
  }
  SECTION("missing field") {
    edit_config(dir.path(), [](auto& j) { j.erase("num_hidden_layers"); });
    REQUIRE_THAT(std::string(load_error(dir.path()).what()), Catch::Contains("num_hidden_layers"));
  }
  SECTION("wrong field type") {
    edit_config(dir.path(), [](auto& j) { j["hidden_size"] = "big"; });
    REQUIRE_THAT(std::string(load_error(dir.path()).what()), Catch::Contains("hidden_size"));
  }
  SECTION("heads not divisible by KV heads") {
    edit_config(dir.path(), [](auto& j) { j["num_key_value_heads"] = 3; });
    REQUIRE_THAT(std::string(load_error(dir.path()).what()), Catch::Contains("num_key_value_heads"));
  }
  SECTION("unsupported rope type") {
    edit_config(dir.path(), [](auto& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}}; });
    Error e = load_error(dir.path());
    REQUIRE(e.kind() == ErrorKind::Unsupported);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("yarn"));
  }
}

TEST_CASE("An unknown architecture fails loudly with the supported list", "[load][bad-input]") {
  test::ScratchDir dir("arch");
  test::copy_model("llama_gqa", dir.path());
  edit_config(dir.path(), [](auto& j) { j["model_type"] = "mamba"; });
  Error e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Unsupported);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("'mamba'") && Catch::Contains("qwen3"));
}

TEST_CASE("A tensor whose shape contradicts the config is named with both shapes", "[load][bad-input]") {
  test::ScratchDir dir("shape");
  test::copy_model("llama_gqa", dir.path());
  edit_config(dir.path(), [](auto& j) { j["intermediate_size"] = 96; });
  Error e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Shape);
  REQUIRE_THAT(std::string(e.what()),
               Catch::Contains("mlp.gate_proj.weight") && Catch::Contains("[128, 64]") && Catch::Contains("[96, 64]"));
}

TEST_CASE("A missing required tensor is named", "[load][bad-input]") {
  test::ScratchDir dir("missing");
  test::copy_model("qwen2", dir.path());
  SafetensorsFile src(test::model_dir("qwen2") + "/model.safetensors");
  std::vector<TensorToWrite> out;
  for (const auto& [name, info] : src.tensors())
    if (name != "model.layers.1.self_attn.k_proj.bias")
      out.push_back({name, info.dtype, info.shape, std::vector<uint8_t>(info.data, info.data + info.n_bytes)});
  write_safetensors(dir.file("model.safetensors"), out);
  Error e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Config);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("model.layers.1.self_attn.k_proj.bias"));
}

TEST_CASE("A tokenizer with an unknown model type is refused when loading the model", "[load][bad-input]") {
  test::ScratchDir dir("tok");
  test::copy_model("llama_gqa", dir.path());
  auto j = test::read_json(dir.file("tokenizer.json"));
  j["model"]["type"] = "WordPiece";
  test::write_text(dir.file("tokenizer.json"), j.dump());
  Error e = load_error(dir.path());
  REQUIRE(e.kind() == ErrorKind::Unsupported);
  REQUIRE_THAT(std::string(e.what()), Catch::Contains("tokenizer.json") && Catch::Contains("WordPiece"));
}

TEST_CASE("A prompt longer than max_position_embeddings is refused before any work", "[generation][bad-input]") {
  auto engine = Engine::load(test::model_dir("llama_gqa"));
  std::vector<int32_t> prompt(300, 5);  // the fixture allows 256 positions
  GenerationParams p;
  p.max_new_tokens = 4;
  try {
    engine->generate(prompt, p);
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Input);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("300 tokens") && Catch::Contains("256"));
  }
  // The engine stays usable.
  p.stop_at_eos = false;
  REQUIRE(engine->generate({5, 6, 7}, p).tokens.size() == 4);
}
