// The `trimkv` command line with eviction on vision-language checkpoints: generate --image and
// chat with --policy / --budget / --trace, eval under a budget.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "test_util.h"

namespace {

struct VRun {
  int code = -1;
  std::string out, err;
};

std::string q(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

VRun run(const std::vector<std::string>& args, const std::string& input = "") {
  trimkv::test::ScratchDir dir("cli-vision");
  trimkv::test::write_text(dir.file("in"), input);
  std::string cmd = q(TRIMKV_CLI_PATH);
  for (const auto& a : args) cmd += " " + q(a);
  cmd += " 2>" + q(dir.file("err")) + " <" + q(dir.file("in"));
  VRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = trimkv::test::read_bytes(dir.file("err"));
  return r;
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
