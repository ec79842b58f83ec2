// The embedded demo model as a user meets it: commands without --model use it, and on a fixed
// sample of the world's test split it answers >= 90% of the questions of single-image
// conversations and >= 80% of those of multi-image ones (issue 6's targets; the shipped model
// answers 91.9% of this sample's 62 and 81.4% of its 469).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "test_util.h"

TEST_CASE("commands without --model use the embedded demo model", "[cli][demo]") {
  const trimkv::test::CliRun info = trimkv::test::run_cli({"info", "--json"});
  CAPTURE(info.err);
  REQUIRE(info.code == 0);
  const nlohmann::json j = nlohmann::json::parse(info.out);
  CHECK(j.dump().find("idefics3") != std::string::npos);

  trimkv::test::ScratchDir dir("demo-default");
  const trimkv::test::CliRun w =
      trimkv::test::run_cli({"make-world", "--out", dir.path(), "--n", "3", "--seed", "5", "--split", "test", "--quiet"});
  REQUIRE(w.code == 0);
  const trimkv::test::CliRun r = trimkv::test::run_cli({"eval", "--data", dir.file("test.jsonl"), "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json e = nlohmann::json::parse(r.out);
  CHECK(e.at("n").get<int64_t>() > 0);
  CHECK(e.at("failures").get<int64_t>() == 0);
}

TEST_CASE("the demo model's accuracy on a fixed test sample", "[cli][demo][accuracy]") {
  trimkv::test::ScratchDir dir("demo-acc");
  const trimkv::test::CliRun w =
      trimkv::test::run_cli({"make-world", "--out", dir.path(), "--n", "150", "--seed", "2024", "--split", "test", "--quiet"});
  CAPTURE(w.err);
  REQUIRE(w.code == 0);
  const trimkv::test::CliRun r = trimkv::test::run_cli({"eval", "--data", dir.file("test.jsonl"), "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  int64_t n1 = 0, c1 = 0, nm = 0, cm = 0;
  for (const auto& [k, v] : j.at("by_n_images").items()) {
    const int64_t n = v.at("n").get<int64_t>(), c = v.at("correct").get<int64_t>();
    if (std::stoi(k) == 1) n1 += n, c1 += c;
    else nm += n, cm += c;
  }
  REQUIRE(n1 >= 50);
  REQUIRE(nm >= 200);
  const double single = static_cast<double>(c1) / static_cast<double>(n1);
  const double multi = static_cast<double>(cm) / static_cast<double>(nm);
  INFO("single-image " << single << " (" << n1 << " questions), multi-image " << multi << " (" << nm << ")");
  CHECK(single >= 0.90);
  CHECK(multi >= 0.80);
}
