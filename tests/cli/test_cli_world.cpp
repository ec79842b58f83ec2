// `trimkv make-world` and `trimkv train-tokenizer` as a user runs them: files, determinism,
// error messages naming the option.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/cli_runner.h"
#include "test_util.h"
#include "trimkv/core/tokenizer.h"

namespace {

using WorldRun = trimkv::test::CliRun;
WorldRun run_world_cli(const std::vector<std::string>& args) { return trimkv::test::run_cli(args); }
const auto& require_error_naming = trimkv::test::require_clean_error;

}  // namespace

TEST_CASE("trimkv make-world writes a reproducible split and train-tokenizer trains on it", "[cli][world]") {
  trimkv::test::ScratchDir a("mw-a"), b("mw-b");
  for (const auto* dir : {&a, &b}) {
    const WorldRun r = run_world_cli({"make-world", "--out", dir->path(), "--n", "5", "--seed", "9", "--split", "val",
                                      "--max-images", "3", "--image-size", "80", "--quiet"});
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("5 conversations"));
  }
  const std::string jsonl = trimkv::test::read_bytes(a.file("val.jsonl"));
  CHECK(jsonl == trimkv::test::read_bytes(b.file("val.jsonl")));
  CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 5);
  CHECK(std::filesystem::is_regular_file(a.file("images/val/000000_1.png")));
  CHECK_THAT(jsonl, Catch::Contains("\"size\":80"));

  const WorldRun t = run_world_cli({"train-tokenizer", "--data", a.file("val.jsonl"), b.file("val.jsonl"),
                                    "--vocab-size", "400", "--out", a.file("tokenizer.json")});
  CAPTURE(t.err);
  REQUIRE(t.code == 0);
  REQUIRE_THAT(t.out, Catch::Contains("from 10 texts"));
  const trimkv::Tokenizer tok = trimkv::Tokenizer::from_file(a.file("tokenizer.json"));
  CHECK(tok.token_to_id("<image>") >= 0);
  CHECK(tok.token_to_id("<row_6_col_6>") >= 0);
}

TEST_CASE("trimkv make-world and train-tokenizer reject bad input naming the option", "[cli][world]") {
  trimkv::test::ScratchDir dir("mw-bad");
  const std::string out = dir.file("w");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "0", "--seed", "1"}), "--n");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "-3", "--seed", "1"}), "--n");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--image-size", "32"}),
                       "--image-size");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--max-images", "9"}),
                       "--max-images");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "-1"}), "--seed");
  require_error_naming(run_world_cli({"make-world", "--out", out, "--n", "2", "--seed", "1", "--split", "dev"}),
                       "--split");
  trimkv::test::write_text(dir.file("a-file"), "x");
  require_error_naming(run_world_cli({"make-world", "--out", dir.file("a-file") + "/sub", "--n", "2", "--seed", "1"}),
                       "--out");

  trimkv::test::write_text(dir.file("empty.jsonl"), "");
  trimkv::test::write_text(dir.file("one.jsonl"), "{\"text\": \"hello world\"}\n");
  require_error_naming(run_world_cli({"train-tokenizer", "--data", dir.file("missing.jsonl"), "--vocab-size", "400",
                                      "--out", dir.file("t.json")}),
                       "missing.jsonl");
  require_error_naming(run_world_cli({"train-tokenizer", "--data", dir.file("empty.jsonl"), "--vocab-size", "400",
                                      "--out", dir.file("t.json")}),
                       "empty");
  const WorldRun small = run_world_cli({"train-tokenizer", "--data", dir.file("one.jsonl"), "--vocab-size", "100",
                                        "--out", dir.file("t.json")});
  require_error_naming(small, "--vocab-size");
  REQUIRE_THAT(small.err, Catch::Contains("299"));
  require_error_naming(run_world_cli({"train-tokenizer", "--vocab-size", "400", "--out", dir.file("t.json")}), "--data");
}

TEST_CASE("trimkv eval replays world conversations through a VLM and scores every turn", "[cli][world][eval]") {
  trimkv::test::ScratchDir dir("eval");
  REQUIRE(run_world_cli({"make-world", "--out", dir.path(), "--n", "2", "--seed", "3", "--split", "test",
                         "--max-images", "3", "--max-turns", "3", "--quiet"})
              .code == 0);
  const std::string model = trimkv::test::data_dir() + "/vlm/smolvlm";  // tiny random weights
  const WorldRun r = run_world_cli({"eval", "--model", model, "--data", dir.file("test.jsonl"), "--quiet",
                                    "--out", dir.file("summary.json"), "--records", dir.file("records.jsonl")});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("accuracy"));
  const auto summary = trimkv::test::read_json(dir.file("summary.json"));
  const std::string records = trimkv::test::read_bytes(dir.file("records.jsonl"));
  CHECK(summary.at("n").get<int64_t>() == std::count(records.begin(), records.end(), '\n'));
  CHECK(summary.at("n").get<int64_t>() >= 2);
  CHECK(summary.at("kv_entries").at("max").get<int64_t>() > 0);

  require_error_naming(run_world_cli({"eval", "--model", model, "--data", dir.file("test.jsonl"), "--limit", "0"}),
                       "--limit");
  require_error_naming(run_world_cli({"eval", "--model", model, "--data", dir.file("missing.jsonl")}),
                       "missing.jsonl");
}
