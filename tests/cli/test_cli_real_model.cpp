// The one real trained instruct model reachable offline, SmolLM2-135M-Instruct, when it has been
// converted on this machine (tests/oracle/smollm2_checkpoint.py into $TRIMKV_SMOLLM2 or
// ~/.cache/trimkv/models/SmolLM2-135M-Instruct). CI has no such model: the test then says so and
// checks nothing. The side-by-side oracle is tests/oracle/smollm2_oracle.py.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {
using trimkv::test::smollm2_dir;

// The capital question through the model's own chat template: it must end at the template's
// end-of-turn token and name Paris.
void answers_the_capital_question(const std::string& model) {
  const trimkv::test::CliRun r =
      trimkv::test::run_cli({"generate", "--model", model, "--chat", "--system", "You are a concise assistant.",
                             "--prompt", "What is the capital of France?", "--max-new-tokens", "24", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["stop_reason"] == "eos");
  CHECK_THAT(j["text"].get<std::string>(), Catch::Contains("Paris"));
}
}  // namespace

TEST_CASE("SmolLM2-135M-Instruct chats through its own template and answers rightly", "[cli][chat][real]") {
  const std::string dir = smollm2_dir();
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    WARN("skipped: no converted SmolLM2-135M-Instruct at " << dir
         << " (make it with ~/.cache/trimkv/venv-oracle/bin/python tests/oracle/smollm2_checkpoint.py)");
    return;
  }
  answers_the_capital_question(dir);
}

TEST_CASE("SmolLM2-135M-Instruct answers rightly from its GGUF file", "[cli][chat][real][gguf]") {
  const std::string file = trimkv::test::smollm2_gguf();
  if (!std::filesystem::exists(file)) {
    WARN("skipped: no " << file << " (tests/oracle/smollm2_checkpoint.py copies it there)");
    return;
  }
  answers_the_capital_question(file);
  const trimkv::test::CliRun info = trimkv::test::run_cli({"info", "--model", file, "--json"});
  REQUIRE(info.code == 0);
  const auto i = nlohmann::json::parse(info.out);
  CHECK(i["dtype"] == "Q4_1");
  CHECK(i["weights_held"] == "q8");
  CHECK_THAT(i["chat_template"].get<std::string>(), Catch::Contains("tokenizer.chat_template"));
}
