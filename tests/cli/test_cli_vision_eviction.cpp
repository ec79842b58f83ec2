// The `trimkv` command line with eviction on vision-language checkpoints: generate --image and
// chat with --policy / --budget / --trace, eval under a budget.
#include <catch2/catch.hpp>
#include <cstdio>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {

using VRun = trimkv::test::CliRun;
VRun run(const std::vector<std::string>& args, const std::string& input = "") {
  return trimkv::test::run_cli(args, input);
}

const std::string kVlm = trimkv::test::data_dir() + "/vlm/smolvlm";
std::string image(const std::string& name) { return trimkv::test::data_dir() + "/vlm/images/" + name; }

}  // namespace

TEST_CASE("trimkv generate --image --policy --budget --trace reports eviction and writes the trace",
          "[cli][vision][eviction]") {
  trimkv::test::ScratchDir dir("vlm-trace");
  const std::string trace = dir.file("trace.json"), csv = dir.file("trace.csv");
  VRun r = run({"generate", "--model", kVlm, "--prompt", "First <image> then <image>, compare them.", "--image",
                image("a.png"), "--image", image("gray.png"), "--max-new-tokens", "4", "--ignore-eos",
                "--policy", "h2o", "--budget", "30", "--slack", "0", "--trace", trace, "--trace-csv", csv,
                "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["policy"] == "h2o");
  REQUIRE(j["budget"] == 30 * 2 * 2);  // M x 2 layers x 2 KV heads
  REQUIRE(j["kv_entries"].get<int64_t>() <= 120);
  REQUIRE(j["eviction_events"].get<int64_t>() > 0);
  REQUIRE(j["kv_image_entries"].get<int64_t>() < 2 * 80 * 2 * 2);
  REQUIRE(j["kv_text_entries"].get<int64_t>() + j["kv_image_entries"].get<int64_t>() <=
          j["kv_entries"].get<int64_t>());
  const auto t = trimkv::test::read_json(trace);
  REQUIRE(t["policy"] == "h2o");
  REQUIRE(t["events"].size() == j["eviction_events"].get<size_t>());
  REQUIRE(!trimkv::test::read_bytes(csv).empty());
  // A budget above the context gives the full cache's answer.
  const std::vector<std::string> base = {"generate", "--model", kVlm, "--prompt", "What do you see?", "--image",
                                         image("a.png"), "--max-new-tokens", "6", "--ignore-eos", "--json"};
  VRun full = run(base);
  std::vector<std::string> big = base;
  for (const char* a : {"--policy", "streamingllm", "--budget", "1000"}) big.push_back(a);
  VRun same = run(big);
  REQUIRE((full.code == 0 && same.code == 0));
  REQUIRE(nlohmann::json::parse(full.out)["tokens"] == nlohmann::json::parse(same.out)["tokens"]);
  REQUIRE(nlohmann::json::parse(same.out)["eviction_events"] == 0);
  // Gate policies need gates: a clear error before any image is read.
  r = run({"generate", "--model", kVlm, "--prompt", "x", "--image", image("a.png"), "--policy", "dbtrimkv",
           "--budget", "8", "--gates", "none"});
  REQUIRE(r.code != 0);
  REQUIRE_THAT(r.err, Catch::Contains("needs retention gates"));
}

TEST_CASE("trimkv chat with policy flags keeps the budget and /stats prints KV entries by modality",
          "[cli][vision][eviction]") {
  trimkv::test::ScratchDir dir("vlm-chat-trace");
  const std::string input = "/image " + image("a.png") + "\nWhat is this?\n/stats\n/image " + image("alpha.png") +
                            "\nAnd this one?\n/stats\n/quit\n";
  VRun r = run({"chat", "--model", kVlm, "--max-new-tokens", "3", "--policy", "streamingllm", "--budget", "30",
                "--slack", "0", "--trace", dir.file("t.json")},
               input);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  size_t stats = 0;
  for (size_t p = r.out.find("policy streamingllm, budget 120"); p != std::string::npos;
       p = r.out.find("policy streamingllm, budget 120", p + 1))
    ++stats;
  REQUIRE(stats == 2);
  REQUIRE_THAT(r.out, Catch::Contains(" image, "));
  REQUIRE_THAT(r.out, Catch::Contains("eviction events"));
  REQUIRE_THAT(r.err, Catch::Contains("eviction events]"));
  const auto t = trimkv::test::read_json(dir.file("t.json"));
  REQUIRE(t["policy"] == "streamingllm");
  REQUIRE(t["events"].size() > 0);
  // Bad policy flags are refused before the model loads.
  r = run({"chat", "--model", kVlm, "--policy", "nosuch"}, "");
  REQUIRE(r.code != 0);
  REQUIRE_THAT(r.err, Catch::Contains("nosuch"));
}

TEST_CASE("trimkv eval under a budget keeps every turn's cache within it", "[cli][vision][eviction][eval]") {
  trimkv::test::ScratchDir dir("vlm-eval-budget");
  REQUIRE(run({"make-world", "--out", dir.path(), "--n", "2", "--seed", "3", "--split", "test", "--max-images",
               "3", "--max-turns", "3", "--quiet"})
              .code == 0);
  VRun r = run({"eval", "--model", kVlm, "--data", dir.file("test.jsonl"), "--quiet", "--policy", "h2o",
                "--budget", "30", "--slack", "0", "--out", dir.file("summary.json")});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("policy h2o, budget 120 entries"));
  const auto summary = trimkv::test::read_json(dir.file("summary.json"));
  REQUIRE(summary.at("kv_entries").at("max").get<int64_t>() <= 120);
  r = run({"eval", "--model", kVlm, "--data", dir.file("test.jsonl"), "--policy", "h2o", "--budget", "30",
           "--trace", dir.file("t.json")});
  REQUIRE(r.code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("--trace"));
}

TEST_CASE("trimkv generate --image --policy visionzip shrinks the image tokens and traces the merge",
          "[cli][vision][eviction][visionzip]") {
  trimkv::test::ScratchDir dir("vlm-visionzip");
  const std::string trace = dir.file("trace.json");
  const std::vector<std::string> base = {"generate", "--model", kVlm, "--prompt", "What is this?", "--image",
                                         image("a.png"), "--max-new-tokens", "4", "--ignore-eos", "--json"};
  VRun full = run(base);
  std::vector<std::string> vz = base;
  for (const char* a : {"--policy", "visionzip", "--policy-opt", "dominant=5", "--policy-opt", "contextual=3"})
    vz.push_back(a);
  vz.push_back("--trace");
  vz.push_back(trace);
  VRun r = run(vz);
  CAPTURE(full.err, r.err);
  REQUIRE((full.code == 0 && r.code == 0));
  const auto jf = nlohmann::json::parse(full.out), j = nlohmann::json::parse(r.out);
  REQUIRE(j["policy"] == "visionzip");
  REQUIRE(j["generated_tokens"] == 4);
  // 5 tiles (2x2 + global) of 16 tokens each keep 5 + 3: 40 fewer positions, x 2 layers x 2 KV heads.
  REQUIRE(j["prompt_tokens"].get<int64_t>() == jf["prompt_tokens"].get<int64_t>() - 40);
  REQUIRE(j["kv_image_entries"].get<int64_t>() == jf["kv_image_entries"].get<int64_t>() - 40 * 4);
  REQUIRE(j["kv_text_entries"] == jf["kv_text_entries"]);
  REQUIRE(j["eviction_events"] == 0);
  const auto t = trimkv::test::read_json(trace);
  REQUIRE(t["policy"] == "visionzip");
  REQUIRE(t["token_merges"].size() == 5);
  REQUIRE(t["token_merges"][0]["n_in"] == 16);
  REQUIRE(t["token_merges"][0]["n_out"] == 8);
  // Enough dominant + contextual tokens for a whole tile: the full cache's answer.
  std::vector<std::string> all = base;
  for (const char* a : {"--policy", "visionzip", "--policy-opt", "dominant=16", "--policy-opt", "contextual=0"})
    all.push_back(a);
  VRun same = run(all);
  REQUIRE(same.code == 0);
  REQUIRE(nlohmann::json::parse(same.out)["tokens"] == jf["tokens"]);
  REQUIRE(nlohmann::json::parse(same.out)["prompt_tokens"] == jf["prompt_tokens"]);
}
