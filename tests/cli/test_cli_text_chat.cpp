// `trimkv chat` and `generate --chat` with text instruct models, through their own chat template
// (fixtures: tests/oracle/text_chat_fixtures.py, the greedy answers are transformers').
#include <catch2/catch.hpp>

#include <filesystem>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {

using trimkv::test::CliRun;
CliRun run(const std::vector<std::string>& args, const std::string& input = "") {
  return trimkv::test::run_cli(args, input);
}

std::string model(const std::string& name) { return trimkv::test::model_dir(name); }

nlohmann::json expected(const std::string& name) {
  return trimkv::test::read_json(model(name) + "/chat_expected.json");
}

}  // namespace

TEST_CASE("trimkv generate --chat --system on a text model answers as transformers does", "[cli][chat]") {
  for (const std::string name : {"llama_gqa", "qwen2"}) {
    CAPTURE(name);
    const nlohmann::json want = expected(name);
    const CliRun r = run({"generate", "--model", model(name), "--chat", "--system", want["system"],
                          "--prompt", want["user1"], "--max-new-tokens", std::to_string(want["n_new"].get<int>()),
                          "--ignore-eos", "--json"});
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["tokens"] == want["cases"][0]["greedy_turn1"]);
    CHECK(j["prompt_tokens"] == want["cases"][0]["ids_turn1"].size());
  }
}

TEST_CASE("trimkv generate --chat --template-var reaches the template (Qwen3 enable_thinking)", "[cli][chat]") {
  const nlohmann::json want = expected("qwen3");
  REQUIRE(want["cases"].size() == 2);
  for (int k = 0; k < 2; ++k) {
    std::vector<std::string> args = {"generate", "--model", model("qwen3"), "--chat", "--system", want["system"],
                                     "--prompt", want["user1"], "--max-new-tokens", "12", "--ignore-eos", "--json"};
    if (k == 1) {
      args.push_back("--template-var");
      args.push_back("enable_thinking=false");
    }
    const CliRun r = run(args);
    CAPTURE(k, r.err);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["tokens"] == want["cases"][k]["greedy_turn1"]);
    CHECK(j["prompt_tokens"] == want["cases"][k]["ids_turn1"].size());
  }
}

TEST_CASE("trimkv generate: chat options are checked before the model loads", "[cli][chat]") {
  CliRun r = run({"generate", "--model", model("qwen2"), "--prompt", "Hi", "--system", "S"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("need --chat or --messages"));
  r = run({"generate", "--model", model("qwen2"), "--chat", "--prompt", "Hi", "--template-var", "oops"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("NAME=VALUE"));
  r = run({"generate", "--model", model("qwen2"), "--chat", "--prompt", "Hi", "--image",
           trimkv::test::data_dir() + "/vlm/images/a.png"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("vision-language"));
}

TEST_CASE("trimkv chat with a text model: system message, streaming, /image refused, save, reset",
          "[cli][chat]") {
  trimkv::test::ScratchDir dir("text-chat");
  const std::string input = "Hello there\n/image " + trimkv::test::data_dir() + "/vlm/images/a.png\n" +
                            "And again?\n/stats\n/save " + dir.file("t.json") + "\n/reset\nNew one\n/quit\n";
  const CliRun r = run({"chat", "--model", model("qwen2"), "--system", "Be brief.", "--max-new-tokens", "3",
                        "--policy", "streamingllm", "--budget", "8"},
                       input);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("text only"));
  CHECK_THAT(r.out, Catch::Contains("chat_template.jinja"));
  CHECK_THAT(r.out, Catch::Contains("it cannot take images"));
  CHECK_THAT(r.out, Catch::Contains("policy streamingllm"));
  CHECK_THAT(r.out, Catch::Contains("[new conversation]"));
  const auto t = trimkv::test::read_json(dir.file("t.json"));
  REQUIRE(t["messages"].size() == 5);  // system, two user turns and their answers
  CHECK(t["messages"][0]["role"] == "system");
  CHECK(t["messages"][3]["content"][0]["text"] == "And again?");
  size_t answers = 0;
  for (size_t p = r.err.find("KV entries"); p != std::string::npos; p = r.err.find("KV entries", p + 1)) ++answers;
  CHECK(answers == 3);
}

TEST_CASE("trimkv info names the chat template a checkpoint uses", "[cli][chat]") {
  CliRun r = run({"info", "--model", model("qwen2"), "--json"});
  REQUIRE(r.code == 0);
  CHECK_THAT(nlohmann::json::parse(r.out)["chat_template"].get<std::string>(), Catch::EndsWith("chat_template.jinja"));
  r = run({"info", "--model", model("qwen2")});
  CHECK_THAT(r.out, Catch::Contains("chat template  ") && Catch::Contains("chat_template.jinja"));
}

TEST_CASE("trimkv chat refuses a folder without a chat template, naming it", "[cli][chat]") {
  trimkv::test::ScratchDir dir("no-template-cli");
  trimkv::test::copy_model("llama_tied", dir.path() + "/m");
  auto cfg = trimkv::test::read_json(dir.path() + "/m/tokenizer_config.json");
  cfg.erase("chat_template");
  trimkv::test::write_text(dir.path() + "/m/tokenizer_config.json", cfg.dump());
  std::filesystem::remove(dir.path() + "/m/chat_template.jinja");
  const CliRun r = run({"chat", "--model", dir.path() + "/m"}, "Hi\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("has no chat template"));
}

TEST_CASE("--model takes a Hugging Face repo id found in the local cache, naming where it looked", "[cli][hf-cache]") {
  trimkv::test::ScratchDir cache("cli-hf-cache");
  const std::string repo = cache.path() + "/models--tiny--qwen2-chat";
  std::filesystem::create_directories(repo + "/refs");
  std::filesystem::create_directories(repo + "/snapshots");
  trimkv::test::copy_model("qwen2", repo + "/snapshots/0123abcd");
  trimkv::test::write_text(repo + "/refs/main", "0123abcd");
  ::setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  CliRun r = run({"generate", "--model", "tiny/qwen2-chat", "--chat", "--prompt", "Hi", "--max-new-tokens", "2",
                  "--ignore-eos", "--json"});
  CAPTURE(r.err);
  CHECK(r.code == 0);
  r = run({"info", "--model", "tiny/absent"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("models--tiny--absent") && Catch::Contains("nothing is downloaded"));
  ::unsetenv("HF_HUB_CACHE");
}
