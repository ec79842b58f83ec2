// The embedded demo model as a user meets it: commands without --model use it.
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
