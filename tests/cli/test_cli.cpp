// The `trimkv` command line as a user runs it: output formats, exit codes, error messages.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/cli_runner.h"
#include "test_util.h"
#include "trimkv/core/tokenizer.h"

namespace {

using Run = trimkv::test::CliRun;
using trimkv::test::run_cli;
using trimkv::test::require_clean_error;

const std::string kModel = trimkv::test::model_dir("llama_gqa");

}  // namespace

TEST_CASE("trimkv --help lists the commands and each command has --help", "[cli]") {
  Run r = run_cli({"--help"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("info") && Catch::Contains("tokenize") && Catch::Contains("generate"));
  for (const char* c : {"info", "tokenize", "generate"}) {
    Run h = run_cli({c, "--help"});
    REQUIRE(h.code == 0);
    REQUIRE_THAT(h.out, Catch::Contains("--model"));
  }
}

TEST_CASE("trimkv info --json reports the architecture and sizes", "[cli]") {
  Run r = run_cli({"info", "--model", kModel, "--json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["architecture"] == "LlamaForCausalLM");
  REQUIRE(j["layers"] == 2);
  REQUIRE(j["kv_heads"] == 2);
  REQUIRE(j["dtype"] == "F32");
  REQUIRE(j["tokenizer"] == true);
}

TEST_CASE("trimkv tokenize prints the tokenizer's ids as JSON", "[cli]") {
  const std::string text = "Hello  world 123 \xe2\x9c\x93";
  Run r = run_cli({"tokenize", "--model", kModel, "--text", text});
  REQUIRE(r.code == 0);
  auto ids = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  REQUIRE(ids == trimkv::Tokenizer::from_folder(kModel).encode(text));
}

TEST_CASE("trimkv generate --json reproduces the oracle's greedy continuation", "[cli]") {
  auto expected = trimkv::test::read_json(kModel + "/expected.json");
  std::string ids;
  for (int id : expected["prompts"][0]) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  Run r = run_cli({"generate", "--model", kModel, "--prompt-ids", ids, "--max-new-tokens", "32",
                   "--ignore-eos", "--json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"tokens", "text", "prompt_tokens", "kv_entries", "kv_bytes", "prefill_ms", "decode_ms"})
    REQUIRE(j.contains(key));
  REQUIRE(j["tokens"] == expected["greedy"][0]);
  REQUIRE(j["prompt_tokens"] == expected["prompts"][0].size());
  // 6 prompt + 31 generated tokens cached, x 2 layers x 2 KV heads, 16 floats K + 16 V each.
  REQUIRE(j["kv_entries"] == 37 * 2 * 2);
  REQUIRE(j["kv_bytes"] == 37 * 2 * 2 * 2 * 16 * 4);
}

TEST_CASE("trimkv generate streams text from a text prompt", "[cli]") {
  Run r = run_cli({"generate", "--model", kModel, "--prompt", "Hello", "--max-new-tokens", "8",
                   "--temperature", "0.8", "--top-p", "0.9", "--seed", "3"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.err, Catch::Contains("8 generated"));
}

TEST_CASE("trimkv reports bad input with a message and an exit code", "[cli][bad-input]") {
  require_clean_error(run_cli({"info", "--model", "/nonexistent/model"}), "/nonexistent/model");
  require_clean_error(run_cli({"frobnicate"}), "unknown command 'frobnicate'");
  require_clean_error(run_cli({"generate", "--model", kModel, "--bogus", "1"}), "--bogus");
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,x,3"}), "'x'");
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2", "--temperature", "-1"}),
                      "temperature");
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,999999"}), "999999");
  require_clean_error(run_cli({"generate", "--model", kModel}), "--prompt");
  require_clean_error(run_cli({"tokenize", "--model", kModel}), "--text");
  REQUIRE(run_cli({"generate", "--model", kModel, "--bogus"}).code == 2);
}

TEST_CASE("--kv-dtype sets the cache's storage, shown by info; GGUF files open like folders", "[cli][kv-dtype][gguf]") {
  const auto info = [](std::vector<std::string> extra, const std::string& model = kModel) {
    std::vector<std::string> args = {"info", "--model", model, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const trimkv::test::CliRun r = run_cli(args);
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto f32 = info({}), f16 = info({"--kv-dtype", "f16"});
  CHECK(f32["kv_dtype"] == "f32");
  CHECK(f16["kv_dtype"] == "f16");
  CHECK(f16["kv_bytes_per_token"].get<int64_t>() * 2 == f32["kv_bytes_per_token"].get<int64_t>());
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2", "--kv-dtype", "fp8"}),
                      "unknown KV dtype 'fp8'");
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2", "--budget", "8", "--budget-mib", "1"}),
                      "give one of --budget");
  // A MiB budget holds the cache to that many bytes at the stored dtype.
  const trimkv::test::CliRun r = run_cli({"generate", "--model", kModel, "--prompt-ids", "1,5,9,13,17,21,25,29",
                                          "--max-new-tokens", "24", "--policy", "streamingllm", "--kv-dtype", "f16",
                                          "--budget-mib", "0.0078125", "--json"});  // 8 KiB = 128 f16 entries
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["budget"] == 128);
  const std::string gguf = trimkv::test::data_dir() + "/gguf/llama_gqa.q8_0-q8_0.gguf";
  const auto g = info({}, gguf);
  CHECK(g["dtype"] == "Q8_0");
  CHECK(g["weights_held"] == "q8");
  CHECK(g["kv_dtype"] == "f16");  // quantised files keep K/V in f16, as llama.cpp does
  const trimkv::test::CliRun t = run_cli({"tokenize", "--model", gguf, "--text", "Hello world"});
  REQUIRE(t.code == 0);
  const trimkv::test::CliRun t2 = run_cli({"tokenize", "--model", kModel, "--text", "Hello world"});
  CHECK(t.out == t2.out);
  require_clean_error(run_cli({"info", "--model", trimkv::test::data_dir() + "/gguf/tokens.json"}), "not a GGUF file");
}

TEST_CASE("trimkv --threads: negative counts are refused, absurd ones clamped to the machine with a warning",
          "[cli][bad-input]") {
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                               "--threads", "-3"}),
                      "--threads must be 0 (every core) or a positive count, got -3");
  // 100,000 threads would never start; the run clamps, warns, and finishes like any other.
  const Run r = run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                         "--threads", "100000", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.err, Catch::Contains("100000 threads asked for") && Catch::Contains("hardware threads: using"));
  REQUIRE_THAT(r.out, Catch::Contains("\"tokens\""));
}

TEST_CASE("trimkv --version prints CMake's project version and, built from git, the revision", "[cli]") {
  const Run r = run_cli({"--version"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::StartsWith(std::string("trimkv ") + TRIMKV_PROJECT_VERSION));
  if (std::filesystem::exists(std::string(TRIMKV_SOURCE_DIR) + "/.git"))
    REQUIRE_THAT(r.out, Catch::Contains(" (git ") && Catch::EndsWith(")\n"));
}
