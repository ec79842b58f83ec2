// The generation loop: stop strings, streaming, EOS, cancellation from another thread.
#include <catch2/catch.hpp>
#include <thread>

#include "test_util.h"
#include "trimkv/core/engine.h"

using namespace trimkv;

namespace {
GenerationParams greedy(int n) {
  GenerationParams p;
  p.max_new_tokens = n;
  p.stop_at_eos = false;
  return p;
}
}  // namespace

TEST_CASE("Streaming pieces concatenate to the final text", "[generation]") {
  auto engine = Engine::load(test::model_dir("llama_gqa"));
  const auto prompt = engine->tokenize("Hello there, how are you?");
  std::string streamed;
  int pieces = 0;
  GenerationResult r = engine->generate(prompt, greedy(24), [&](const std::string& s) {
    streamed += s;
    ++pieces;
  });
  REQUIRE(r.tokens.size() == 24);
  REQUIRE(streamed == r.text);
  REQUIRE(r.text == engine->detokenize(r.tokens, true));
  REQUIRE(pieces > 1);
}

TEST_CASE("A stop string ends generation and is cut from the text", "[generation]") {
  auto engine = Engine::load(test::model_dir("llama_gqa"));
  const auto prompt = engine->tokenize("Hello there, how are you?");
  const GenerationResult full = engine->generate(prompt, greedy(24));
  REQUIRE(full.text.size() > 6);
  // Stop on a substring that starts in the middle of the full continuation.
  const size_t at = full.text.size() / 2;
  const std::string stop = full.text.substr(at, 3);
  const size_t first = full.text.find(stop);
  GenerationParams p = greedy(24);
  p.stop_strings = {stop};
  std::string streamed;
  GenerationResult r = engine->generate(prompt, p, [&](const std::string& s) { streamed += s; });
  REQUIRE(r.stop_reason == "stop_string");
  REQUIRE(r.text == full.text.substr(0, first));
  REQUIRE(streamed == r.text);
  REQUIRE(r.tokens.size() < full.tokens.size());
}

TEST_CASE("Generation stops at an EOS id from generation_config.json", "[generation]") {
  const std::vector<int32_t> prompt{10, 20, 30, 40};
  const GenerationResult free_run = Engine::load(test::model_dir("llama_gqa"))->generate(prompt, greedy(16));
  // Make the 5th generated token the model's EOS (generation_config overrides config.json).
  const int32_t eos = free_run.tokens[4];
  const size_t first = std::find(free_run.tokens.begin(), free_run.tokens.end(), eos) - free_run.tokens.begin();
  test::ScratchDir dir("eos");
  test::copy_model("llama_gqa", dir.path());
  auto gen = test::read_json(dir.file("generation_config.json"));
  gen["eos_token_id"] = {eos};
  test::write_text(dir.file("generation_config.json"), gen.dump());
  GenerationParams p = greedy(16);
  p.stop_at_eos = true;
  const GenerationResult r = Engine::load(dir.path())->generate(prompt, p);
  REQUIRE(r.stop_reason == "eos");
  REQUIRE(r.tokens.size() == first + 1);
  REQUIRE(r.tokens.back() == eos);
}

TEST_CASE("Cancellation from another thread stops generation early", "[generation]") {
  auto engine = Engine::load(test::model_dir("llama_gqa"));
  std::atomic<bool> cancel{false};
  std::atomic<int> seen{0};
  GenerationParams p = greedy(200);
  GenerationResult r;
  std::thread worker([&] {
    r = engine->generate({10, 20, 30}, p, [&](const std::string&) { seen++; }, &cancel);
  });
  while (seen.load() < 3) std::this_thread::yield();
  cancel.store(true);
  worker.join();
  REQUIRE(r.stop_reason == "cancelled");
  REQUIRE(r.tokens.size() < 200);
}
