// The `trimkv` command line as a user runs it: output formats, exit codes, error messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/cli_runner.h"
#include "commands.h"
#include "args.h"
#include "test_util.h"
#include "trimkv/core/compute_device.h"

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

TEST_CASE("trimkv tokenize prints the ids Hugging Face tokenizers gives", "[cli][oracle]") {
  // The oracle: tokenizers/expected.json, HF tokenizers' encode of its corpus with each saved
  // tokenizer.json (tests/oracle/tokenizer_fixtures.py). The model folders hold a copy of that file
  // (tests/oracle/model_fixtures.py), checked byte for byte here, so the ids apply to them.
  const nlohmann::json hf = trimkv::test::read_json(trimkv::test::data_dir() + "/tokenizers/expected.json");
  // A few texts of the corpus, through the command line's argv: digits and punctuation, control
  // whitespace, combining marks (NFD; qwen2 normalizes to NFC), CJK, and added special tokens with
  // --no-special.
  const std::vector<std::pair<std::string, bool>> picked = {
      {"numbers: 007, 1,000,000 and -42", true},
      {"mixed \t \n whitespace \n\t ", true},
      {"cafe\xcc\x81 nai\xcc\x88ve re\xcc\x81sume\xcc\x81 A\xcc\x8angstro\xcc\x88m", true},
      {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x8c\xe6\x9c\xba\xe5\x99\xa8\xe5\xad\xa6\xe4\xb9\xa0\xe3\x80\x82", true},
      {"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n", false},
  };
  for (const auto& [model, tokenizer] : {std::pair{std::string("llama_gqa"), std::string("smollm2")}, {"qwen2", "qwen2"}}) {
    const std::string dir = trimkv::test::model_dir(model);
    CAPTURE(model, tokenizer);
    REQUIRE(trimkv::test::read_bytes(dir + "/tokenizer.json") ==
            trimkv::test::read_bytes(trimkv::test::data_dir() + "/tokenizers/" + tokenizer + "/tokenizer.json"));
    for (const auto& [text, add_special] : picked) {
      CAPTURE(text, add_special);
      const nlohmann::json* want = nullptr;
      for (const auto& c : hf.at(tokenizer))
        if (c.at("text") == text && c.at("add_special_tokens") == add_special) want = &c.at("ids");
      REQUIRE(want);  // a text missing from the fixture is an error, not a skip
      std::vector<std::string> args = {"tokenize", "--model", dir, "--text", text};
      if (!add_special) args.push_back("--no-special");
      const Run r = run_cli(args);
      CAPTURE(r.err);
      REQUIRE(r.code == 0);
      REQUIRE(nlohmann::json::parse(r.out) == *want);
    }
  }
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

TEST_CASE("trimkv generate samples reproducibly from --seed, differently from another seed", "[cli][sampling]") {
  auto tokens = [](const char* seed) {
    const Run r = run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2,3", "--max-new-tokens", "24",
                           "--temperature", "1.5", "--top-k", "50", "--seed", seed, "--json", "--ignore-eos"});
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int>>();
  };
  const std::vector<int> a = tokens("11");
  CHECK(a.size() == 24);
  CHECK(tokens("11") == a);
  CHECK(tokens("12") != a);
  // Greedy differs from a hot sample of 24 tokens over 50 candidates.
  const Run g = run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2,3", "--max-new-tokens", "24", "--json",
                         "--ignore-eos"});
  REQUIRE(g.code == 0);
  CHECK(nlohmann::json::parse(g.out).at("tokens").get<std::vector<int>>() != a);
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
                      "option '--threads' needs an integer from 0 to 1048576, got '-3'");
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

TEST_CASE("every numeric option of every command refuses values outside its range, naming the option",
          "[cli][bad-input]") {
  // Each command's --help shows its numeric options' ranges as "[lo..hi]". The commands run
  // in-process (trimkv_cli) on one value per option, below the range for one option and above it
  // for the next: the command line is checked before anything is loaded (UsageError, exit 2).
  using Command = int (*)(int, char**, int);
  const std::map<std::string, Command> functions = {
      {"info", trimkv::cli::cmd_info},         {"tokenize", trimkv::cli::cmd_tokenize},
      {"generate", trimkv::cli::cmd_generate}, {"chat", trimkv::cli::cmd_chat},
      {"train-gates", trimkv::cli::cmd_train_gates}, {"make-world", trimkv::cli::cmd_make_world},
      {"train-tokenizer", trimkv::cli::cmd_train_tokenizer}, {"eval", trimkv::cli::cmd_eval},
      {"eval-sweep", trimkv::cli::cmd_eval_sweep}, {"train-demo", trimkv::cli::cmd_train_demo},
      {"make-tasks", trimkv::cli::cmd_make_tasks}};
  const auto call = [&](const std::string& command, std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), {"trimkv", command});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::ostringstream captured;
    std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
    try {
      const int code = functions.at(command)(static_cast<int>(argv.size()), argv.data(), 2);
      std::cout.rdbuf(old);
      if (out) *out = captured.str();
      return code;
    } catch (...) {
      std::cout.rdbuf(old);
      throw;
    }
  };
  // The commands the program lists (one process): each must be in the table above.
  const Run top = run_cli({"--help"});
  REQUIRE(top.code == 0);
  std::vector<std::string> commands;
  {
    std::istringstream in(top.out.substr(top.out.find("commands:")));
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
        commands.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  REQUIRE(commands.size() == functions.size());
  int n_checked = 0;
  for (const std::string& c : commands) {
    CAPTURE(c);
    REQUIRE(functions.count(c));
    std::string help;
    REQUIRE(call(c, {"--help"}, &help) == 0);
    std::istringstream in(help);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("  --", 0) != 0 || line.empty() || line.back() != ']') continue;
      const size_t open = line.rfind(" ["), dots = line.find("..", open);
      if (open == std::string::npos || dots == std::string::npos) continue;
      const std::string name = line.substr(4, line.find(' ', 4) - 4);
      const std::string lo = line.substr(open + 2, dots - open - 2), hi = line.substr(dots + 2, line.size() - dots - 3);
      // An integer step off a bound written as an integer is outside either kind of range.
      const bool integer = lo.find_first_of(".e") == std::string::npos && hi.find_first_of(".e") == std::string::npos;
      std::string bad;
      if (n_checked % 2 == 0) {
        const double v = std::stod(lo);
        bad = integer ? std::to_string(static_cast<long long>(v) - 1) : std::to_string(v - std::fabs(v) - 1);
      } else {
        const double v = std::stod(hi);
        bad = integer ? std::to_string(static_cast<long long>(v) + 1) : "1e300";
      }
      CAPTURE(name, lo, hi, bad);
      try {
        call(c, {"--" + name, bad}, nullptr);
        FAIL("accepted");
      } catch (const trimkv::cli::UsageError& e) {
        REQUIRE_THAT(e.what(), Catch::StartsWith("option '--" + name + "' needs ") && Catch::EndsWith(bad + "'"));
      }
      ++n_checked;
    }
  }
  CHECK(n_checked >= 60);
}

TEST_CASE("the option parser: numbers that do not parse, fractions for integers, NaN, and the exit code", "[cli][bad-input]") {
  // Through the real binary: exit 2 and the message, before any model is loaded.
  require_clean_error(run_cli({"generate", "--top-p", "half"}), "option '--top-p' needs a number from 0 to 1, got 'half'");
  require_clean_error(run_cli({"generate", "--max-new-tokens", "2.5"}), "option '--max-new-tokens' needs an integer");
  require_clean_error(run_cli({"generate", "--temperature", "nan"}), "option '--temperature' needs a number");
  // An option that only means something with another.
  require_clean_error(run_cli({"train-demo", "--out", "/nonexistent/demo", "--tower-lr-scale", "0.1"}),
                      "--tower-lr-scale sets the tower's rate in the chat stages: it needs --train-tower");
  const Run r = run_cli({"train-gates", "--steps", "0"});
  REQUIRE(r.code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("option '--steps' needs an integer from 1 to 100000000, got '0'"));
}

TEST_CASE("--device: cpu runs, auto falls back to the CPU, cuda without a GPU is a clean error", "[cli][device]") {
  const trimkv::test::CliRun cpu = run_cli({"info", "--model", kModel, "--json", "--device", "cpu"});
  CAPTURE(cpu.err);
  REQUIRE(cpu.code == 0);
  CHECK(nlohmann::json::parse(cpu.out)["device"] == "cpu");
  require_clean_error(run_cli({"info", "--model", kModel, "--device", "gpu"}), "unknown device 'gpu'");
  std::string why;
  if (trimkv::cuda_usable(&why)) return;  // a GPU here: tests/cuda/test_cuda_runtime
  const trimkv::test::CliRun automatic = run_cli({"info", "--model", kModel, "--json"});
  REQUIRE(automatic.code == 0);
  CHECK(nlohmann::json::parse(automatic.out)["device"] == "cpu");
  require_clean_error(run_cli({"generate", "--model", kModel, "--prompt-ids", "1,2", "--device", "cuda"}),
                      "--device cuda: " + why);
  trimkv::test::ScratchDir dir("device-train");
  trimkv::test::write_text(dir.file("d.jsonl"), "{\"ids\": [5, 6, 7, 8, 9, 10]}\n");
  require_clean_error(run_cli({"train-gates", "--model", kModel, "--data", dir.file("d.jsonl"), "--out",
                               dir.file("g.safetensors"), "--steps", "1", "--device", "cuda"}),
                      "--device cuda: " + why);
}
