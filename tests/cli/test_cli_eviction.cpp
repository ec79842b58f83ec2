// `trimkv generate` with eviction: --policy/--budget/--policy-opt/--trace as a user runs them.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {

using Run = trimkv::test::CliRun;
using trimkv::test::run_cli;
using trimkv::test::require_clean_error;

const std::string kModel = trimkv::test::model_dir("llama_gqa");

std::string ids(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(5 + (i * 37) % 200);
  return s;
}

std::vector<std::string> gen(std::vector<std::string> extra) {
  std::vector<std::string> a = {
      "generate",         "--model", kModel,         "--prompt-ids",    ids(60),
      "--max-new-tokens", "20",      "--ignore-eos", "--prefill-chunk", "16",
      "--gates",          "none",    "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE("trimkv generate --policy --budget evicts, reports and writes the trace",
          "[cli][eviction]") {
  trimkv::test::ScratchDir dir("cli-trace");
  const Run r =
      run_cli(gen({"--policy", "snapkv", "--budget", "16", "--policy-opt", "window=4", "--slack",
                   "8", "--trace", dir.file("t.json"), "--trace-csv", dir.file("t.csv")}));
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const int64_t streams = 2 * 2;  // llama_gqa: 2 layers x 2 KV heads
  REQUIRE(j["policy"] == "snapkv");
  REQUIRE(j["budget"] == 16 * streams);
  REQUIRE(j["eviction_events"].get<int64_t>() >= 2);
  REQUIRE(j["kv_entries"].get<int64_t>() <= (16 + 8) * streams);
  REQUIRE(j["kv_text_entries"] == j["kv_entries"]);
  REQUIRE(j["kv_image_entries"] == 0);
  REQUIRE(j["kv_bytes"].get<int64_t>() == j["kv_entries"].get<int64_t>() * 2 * 16 * 4);
  REQUIRE(j["tokens"].size() == 20);
  const auto trace = trimkv::test::read_json(dir.file("t.json"));
  REQUIRE(trace["format"] == "trimkv-trace");
  REQUIRE(trace["policy"] == "snapkv");
  REQUIRE(trace["events"].size() == j["eviction_events"].get<size_t>());
  REQUIRE(trace["options"]["window"] == "4");
  std::istringstream csv(trimkv::test::read_bytes(dir.file("t.csv")));
  std::string line;
  size_t lines = 0;
  while (std::getline(csv, line)) ++lines;
  REQUIRE(lines == 1 + trace["events"].size() * streams);
}

TEST_CASE("trimkv generate without a policy keeps the full cache", "[cli][eviction]") {
  const Run r = run_cli(gen({}));
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["policy"] == "full");
  REQUIRE(j["budget"].is_null());
  REQUIRE(j["eviction_events"] == 0);
  REQUIRE(j["kv_entries"] == (60 + 19) * 4);
  // Same tokens as a budget that holds the whole context.
  const Run big = run_cli(gen({"--policy", "h2o", "--budget", "200"}));
  REQUIRE(big.code == 0);
  REQUIRE(nlohmann::json::parse(big.out)["tokens"] == j["tokens"]);
}

TEST_CASE("trimkv generate refuses bad eviction options with one clear message",
          "[cli][eviction][errors]") {
  require_clean_error(run_cli(gen({"--policy", "snapkv", "--budget", "0"})), "'--budget' needs an integer from 1");
  require_clean_error(run_cli(gen({"--policy", "snapkv", "--budget", "-4"})), "'--budget' needs an integer from 1");
  require_clean_error(run_cli(gen({"--policy", "nope", "--budget", "8"})),
                      "unknown eviction policy 'nope'");
  require_clean_error(run_cli(gen({"--policy", "h2o", "--budget", "8", "--policy-opt", "windw=2"})),
                      "no option 'windw'");
  require_clean_error(run_cli(gen({"--policy", "dbtrimkv", "--budget", "8"})),
                      "needs retention gates");
  require_clean_error(
      run_cli(gen({"--policy", "dbtrimkv", "--global-budget", "10", "--policy-opt", "floor=3"})),
      "floor 3");
  require_clean_error(run_cli(gen({"--budget", "8", "--global-budget", "100"})), "give one of --budget");
  require_clean_error(run_cli(gen({"--policy", "snapkv"})), "needs a budget");
  require_clean_error(run_cli(gen({"--policy", "snapkv", "--budget", "x"})), "'--budget' needs an integer");
}
