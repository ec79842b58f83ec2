// `trimkv train-gates --nproc N` and ranks joined through RANK / WORLD_SIZE / MASTER_*: the
// launcher's ranks train what one process trains, Ctrl-C checkpoints every rank's run, and a
// killed rank stops the others with an error naming it instead of a hang.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "cli_runner.h"
#include "data_parallel_skip.h"
#include "test_util.h"
#include "trimkv/core/gate_file.h"

using namespace trimkv;
using trimkv::test::CliRun;
using trimkv::test::run_cli;

namespace {

std::string write_ids_data(const test::ScratchDir& dir) {
  std::mt19937 rng(11);
  std::string text;
  for (int i = 0; i < 6; ++i) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < 24; ++t) ids.push_back(3 + static_cast<int>(rng() % 300));
    text += nlohmann::json{{"ids", ids}}.dump() + "\n";
  }
  test::write_text(dir.file("data.jsonl"), text);
  return dir.file("data.jsonl");
}

std::vector<std::string> train_args(const std::string& data, const std::string& out, const std::string& steps) {
  return {"train-gates", "--model", test::model_dir("llama_gqa"), "--data", data, "--out", out,
          "--gate-hidden", "16", "--budget", "4", "--steps", steps, "--batch", "4", "--lr", "0.05",
          "--max-len", "64", "--seed", "2", "--threads", "1"};
}

double max_diff(const std::string& a, const std::string& b) {
  const RetentionGates ga = load_gates(a), gb = load_gates(b);
  double d = 0;
  for (size_t i = 0; i < ga.named_tensors().size(); ++i)
    d = std::max(d, (ga.named_tensors()[i].tensor - gb.named_tensors()[i].tensor).abs().max().item<double>());
  return d;
}

}  // namespace

TEST_CASE("train-gates --nproc 2 trains the gates of one process; bad rank variables are named",
          "[cli][parallel]") {
  test::ScratchDir dir("cli-dp");
  const std::string data = write_ids_data(dir);
  // Environment errors name the variable; --nproc inside a launched rank is refused.
  setenv("WORLD_SIZE", "two", 1);
  test::require_clean_error(run_cli(train_args(data, dir.file("x.safetensors"), "1")),
                            "environment variable WORLD_SIZE='two' is not an integer");
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "5", 1);
  test::require_clean_error(run_cli(train_args(data, dir.file("x.safetensors"), "1")), "RANK='5'");
  unsetenv("RANK");
  auto args = train_args(data, dir.file("x.safetensors"), "1");
  args.insert(args.end(), {"--nproc", "2"});
  test::require_clean_error(run_cli(args), "--nproc starts its own ranks");
  unsetenv("WORLD_SIZE");
  SKIP_WITHOUT_GLOO();
  const CliRun one = run_cli(train_args(data, dir.file("one.safetensors"), "8"));
  REQUIRE(one.code == 0);
  args = train_args(data, dir.file("two.safetensors"), "8");
  args.insert(args.end(), {"--nproc", "2"});
  const CliRun two = run_cli(args);
  CAPTURE(two.err);
  REQUIRE(two.code == 0);
  REQUIRE_THAT(two.err, Catch::Contains("2 local ranks on 127.0.0.1:"));
  REQUIRE_THAT(two.err, Catch::Contains("data parallel over 2 ranks (batch 4 in all)"));
  REQUIRE(max_diff(dir.file("one.safetensors"), dir.file("two.safetensors")) < 1e-5);
}

TEST_CASE("train-gates --nproc 2 on a VLM: each rank lays out the conversations it draws; one process's gates",
          "[cli][parallel][vision]") {
  SKIP_WITHOUT_GLOO();
  test::ScratchDir dir("cli-dp-vlm");
  // The demo world's committed test conversations (1-8 images each), their images by full path.
  std::ifstream in(test::data_dir() + "/demo/world/test.jsonl");
  std::string line, clean;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (auto& image : j["images"]) image = test::data_dir() + "/demo/world/" + image.get<std::string>();
    clean += j.dump() + "\n";
  }
  test::write_text(dir.file("clean.jsonl"), clean);
  auto args = [&](const std::string& data, const std::string& out, bool ranks) {
    std::vector<std::string> a = {"train-gates", "--model", std::string(TRIMKV_SOURCE_DIR) + "/resources/demo-model",
                                  "--data", data, "--out", out, "--gate-hidden", "8", "--budget", "16", "--steps", "3",
                                  "--batch", "2", "--lr", "0.05", "--seed", "3", "--threads", "1"};
    if (ranks) a.insert(a.end(), {"--nproc", "2"});
    return a;
  };
  const CliRun one = run_cli(args(dir.file("clean.jsonl"), dir.file("one.safetensors"), false));
  CAPTURE(one.err);
  REQUIRE(one.code == 0);
  REQUIRE_THAT(one.err, Catch::Contains("4 sequences") && !Catch::Contains("by the rank that draws them"));
  const CliRun two = run_cli(args(dir.file("clean.jsonl"), dir.file("two.safetensors"), true));
  CAPTURE(two.err);
  REQUIRE(two.code == 0);
  REQUIRE_THAT(two.err, Catch::Contains("chat template by the rank that draws them"));
  // Three steps of two: rank 0 draws one conversation a step, three places of the 4-line epoch.
  const std::regex laid_out("rank 0 laid out and encoded (\\d+) of the 4 conversations \\(those it drew\\)");
  std::smatch m;
  REQUIRE(std::regex_search(two.err, m, laid_out));
  CHECK(std::stoi(m[1]) >= 2);
  CHECK(std::stoi(m[1]) <= 3);
  REQUIRE(max_diff(dir.file("one.safetensors"), dir.file("two.safetensors")) < 1e-5);
  // A conversation whose image is not a picture: one process skips it when reading the file; the
  // ranks read it as a line and skip it when one of them draws it, naming the rank and the line.
  test::write_text(dir.file("bad.png"), "not a picture");
  test::write_text(dir.file("bad.jsonl"),
                   clean + nlohmann::json{{"images", {dir.file("bad.png")}},
                                          {"turns", {{{"text", "<image>What shape is it?"}, {"answer", "star"}}}}}
                               .dump() + "\n");
  const CliRun bad_one = run_cli(args(dir.file("bad.jsonl"), dir.file("b1.safetensors"), false));
  CAPTURE(bad_one.err);
  REQUIRE(bad_one.code == 0);
  REQUIRE_THAT(bad_one.err, Catch::Contains("warning: line 5: ") && Catch::Contains("4 sequences from 5 lines"));
  const CliRun bad_two = run_cli(args(dir.file("bad.jsonl"), dir.file("b2.safetensors"), true));
  CAPTURE(bad_two.err);
  REQUIRE(bad_two.code == 0);
  REQUIRE_THAT(bad_two.err, Catch::Contains("5 sequences from 5 lines") && Catch::Contains("warning (rank ") &&
                                Catch::Contains("line 5: ") && Catch::Contains("bad.png") &&
                                Catch::Contains("skipped for the next line in the order"));
}

TEST_CASE("train-gates --nproc 2: a rank killed stops the other with an error naming the lost peer",
          "[cli][parallel]") {
  SKIP_WITHOUT_GLOO();
  test::ScratchDir dir("cli-dp-kill");
  auto args = train_args(write_ids_data(dir), dir.file("k.safetensors"), "100000000");
  args.insert(args.end(), {"--nproc", "2"});
  pid_t rank1 = 0;
  // Once the pids are printed and step 3 is done, rank 1 gets SIGKILL; the launcher itself gets
  // signal 0 (nothing) and must then exit on its own within 20 s.
  const auto r = test::run_cli_signalled(args, "", 0, [&](const std::string&, const std::string& err) {
    std::smatch m;
    if (rank1 == 0 && std::regex_search(err, m, std::regex("\\(pids ([0-9]+) ([0-9]+)\\)")))
      rank1 = static_cast<pid_t>(std::stoi(m[2]));
    if (rank1 == 0 || err.find("] 3/") == std::string::npos) return false;
    kill(rank1, SIGKILL);
    return true;
  });
  CAPTURE(r.err);
  REQUIRE(r.code == 128 + SIGKILL);
  REQUIRE_THAT(r.err, Catch::Contains("rank 1 (pid " + std::to_string(rank1) + ") was killed by signal 9"));
  // Rank 0 meets the lost peer at the next collective: a step's gradient sum or the stop flag.
  REQUIRE_THAT(r.err, Catch::Contains("data-parallel rank 0 of 2: the sum of step") ||
                          Catch::Contains("data-parallel rank 0 of 2: the sum of the stop flag"));
  REQUIRE_THAT(r.err, Catch::Contains("another rank stopped, was killed or did not answer"));
  REQUIRE_THAT(r.err, !Catch::Contains("terminate called"));
}

TEST_CASE("train-gates --nproc 2: Ctrl-C stops every rank at one step and rank 0 writes the checkpoint",
          "[cli][parallel]") {
  SKIP_WITHOUT_GLOO();
  test::ScratchDir dir("cli-dp-int");
  auto args = train_args(write_ids_data(dir), dir.file("i.safetensors"), "100000000");
  args.insert(args.end(), {"--nproc", "2", "--checkpoint", dir.file("i.ckpt")});
  const auto r = test::run_cli_signalled(args, "", SIGINT, [](const std::string&, const std::string& err) {
    return err.find("] 3/") != std::string::npos;
  });
  CAPTURE(r.err);
  REQUIRE(r.code == 130);
  REQUIRE_THAT(r.err, Catch::Contains("train-gates: interrupted at step"));
  REQUIRE_THAT(r.err, Catch::Contains("checkpoint written to '" + dir.file("i.ckpt") + "'"));
  REQUIRE(std::filesystem::exists(dir.file("i.ckpt")));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("i.safetensors")));
}
