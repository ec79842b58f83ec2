// The `trimkv` command line with vision-language checkpoints: info, generate --image, chat.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

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

TEST_CASE("trimkv info recognises a SmolVLM checkpoint and reports its vision side", "[cli][vision]") {
  VRun r = run({"info", "--model", kVlm, "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["family"] == "idefics3");
  REQUIRE(j["model_type"] == "smolvlm");
  REQUIRE(j["vision"]["tokens_per_tile"] == 16);
  REQUIRE(j["vision"]["image_splitting"] == true);
  r = run({"info", "--model", kVlm});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("16 tokens per tile"));
  // Text-only folders are unchanged.
  r = run({"info", "--model", trimkv::test::model_dir("llama_gqa"), "--json"});
  REQUIRE(r.code == 0);
  REQUIRE(nlohmann::json::parse(r.out)["family"] == "llama");
}

TEST_CASE("trimkv generate --image prints the prompt ids' continuation with per-modality KV counts",
          "[cli][vision]") {
  const auto expected = trimkv::test::read_json(kVlm + "/expected.json")["cases"];
  VRun r = run({"generate", "--model", kVlm, "--prompt", "First <image> then <image>, compare them.", "--image",
                image("a.png"), "--image", image("gray.png"), "--max-new-tokens", "4", "--ignore-eos", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["prompt_tokens"] == expected["multi"]["input_ids"].size());
  REQUIRE(j["generated_tokens"] == 4);
  for (const char* key : {"tokens", "text", "stop_reason", "kv_entries", "kv_bytes", "prefill_ms", "decode_ms",
                          "prefill_tokens_per_s", "decode_tokens_per_s", "kv_text_entries", "kv_image_entries"})
    REQUIRE(j.contains(key));
  REQUIRE(j["kv_image_entries"] == 2 * 80 * 2 * 2);  // 2 images x 80 tokens x 2 layers x 2 KV heads
  // Without a placeholder the image goes first: the ids of "<image>What do you see?".
  r = run({"generate", "--model", kVlm, "--prompt", "What do you see?", "--image", image("a.png"),
           "--max-new-tokens", "12", "--ignore-eos", "--json"});
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  REQUIRE(j["prompt_tokens"] == expected["split"]["input_ids"].size());
  REQUIRE(j["tokens"] == expected["split"]["greedy"]);
}

TEST_CASE("trimkv generate refuses bad images and placeholder mismatches with clear errors",
          "[cli][vision][errors]") {
  for (const char* bad : {"not_an_image.png", "empty.png", "truncated.png", "truncated.jpg", "bomb.png"}) {
    VRun r = run({"generate", "--model", kVlm, "--prompt", "x", "--image", image(bad)});
    CAPTURE(bad, r.err);
    REQUIRE(r.code == 1);
    REQUIRE_THAT(r.err, Catch::Contains(bad));
  }
  VRun r = run({"generate", "--model", kVlm, "--prompt", "<image> and <image>", "--image", image("a.png")});
  REQUIRE(r.code == 1);
  REQUIRE_THAT(r.err, Catch::Contains("2 <image> placeholders but 1 image"));
  r = run({"generate", "--model", kVlm, "--prompt", "<image>", "--image", image("a.png"), "--image", image("b.jpg")});
  REQUIRE(r.code == 1);
  REQUIRE_THAT(r.err, Catch::Contains("1 <image> placeholder but 2 images"));
  r = run({"generate", "--model", trimkv::test::model_dir("llama_gqa"), "--prompt", "x", "--image", image("a.png")});
  REQUIRE(r.code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("not one"));
}

TEST_CASE("trimkv chat: images, streaming answers, errors that keep the session, save, reset, quit",
          "[cli][vision]") {
  trimkv::test::ScratchDir dir("chat");
  const std::string input = "/image " + image("a.png") + "\nWhat is this?\n/image " + image("truncated.jpg") +
                            "\nAnd this?\n/image /no/such.png\n/frobnicate\nStill there?\n/save " +
                            dir.file("t.json") + "\n/reset\nHello again\n/quit\n";
  VRun r = run({"chat", "--model", kVlm, "--max-new-tokens", "3"}, input);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("[image 1 attached"));
  REQUIRE_THAT(r.out, Catch::Contains(" image tokens at this resolution"));
  // A corrupt image is refused when attached (decoded then to count its tokens), named; the
  // message typed after it is answered without it.
  REQUIRE_THAT(r.out, Catch::Contains("truncated.jpg' is a truncated or corrupt JPEG"));
  REQUIRE_THAT(r.out, !Catch::Contains("[image 2 attached"));
  REQUIRE_THAT(r.out, Catch::Contains("no such image file"));
  REQUIRE_THAT(r.out, Catch::Contains("unknown command '/frobnicate'"));
  REQUIRE_THAT(r.out, Catch::Contains("[new conversation]"));
  const auto t = trimkv::test::read_json(dir.file("t.json"));
  // Turn 1 with its image and answer, "And this?" (text only) and its answer, "Still there?" and
  // its answer.
  REQUIRE(t["messages"].size() == 6);
  REQUIRE(t["messages"][0]["content"][0]["type"] == "image");
  REQUIRE(t["messages"][2]["content"].size() == 1);
  REQUIRE(t["messages"][2]["content"][0]["text"] == "And this?");
  REQUIRE(t["messages"][4]["content"][0]["text"] == "Still there?");
  // Four answers streamed, each with a stats line.
  size_t stats = 0;
  for (size_t p = r.err.find("KV entries"); p != std::string::npos; p = r.err.find("KV entries", p + 1)) ++stats;
  REQUIRE(stats == 4);
  // Ctrl-D ends the chat too.
  REQUIRE(run({"chat", "--model", kVlm}, "").code == 0);
}

TEST_CASE("trimkv train-gates on Qwen3-VL writes the authors' .pth, which info validates and chat evicts with",
          "[cli][vision][training]") {
  trimkv::test::ScratchDir dir("qwen3-train");
  const std::string qwen3 = trimkv::test::data_dir() + "/vlm/qwen3_vl";
  trimkv::test::write_text(
      dir.file("d.jsonl"),
      "{\"images\": [\"" + image("qwen_a.png") + "\", \"" + image("qwen_tall.png") +
          "\"], \"turns\": [{\"text\": \"<image>What is this?\", \"answer\": \"A small test picture.\"}, "
          "{\"text\": \"And this one: <image> Which is brighter?\", \"answer\": \"The second one.\"}]}\n");
  const std::string pth = dir.file("g.pth");
  VRun r = run({"train-gates", "--model", qwen3, "--data", dir.file("d.jsonl"), "--out", pth, "--steps", "3",
                "--gate-hidden", "16", "--bias-init", "3", "--budget", "8", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.err, Catch::Contains("1 sequences") && Catch::Contains("gates written to"));
  r = run({"info", "--model", qwen3, "--gates", pth});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("dbtrimkv, output layer tied") && Catch::Contains("3 layers, 64 -> 16 -> 16 -> 2"));
  r = run({"chat", "--model", qwen3, "--gates", pth, "--policy", "dbtrimkv", "--budget", "16", "--max-new-tokens", "4"},
          "/image " + image("qwen_a.png") + "\nWhat is it?\n");
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.err, Catch::Contains("eviction events"));
  // The untied ablation has no .pth layout: refused before the first step.
  r = run({"train-gates", "--model", qwen3, "--data", dir.file("d.jsonl"), "--out", dir.file("u.pth"), "--untied",
           "--steps", "3"});
  REQUIRE(r.code != 0);
  REQUIRE_THAT(r.err, Catch::Contains("u.pth") && Catch::Contains("untied"));
  REQUIRE_FALSE(std::ifstream(dir.file("u.pth")).good());
}
