// The embedded demo model as a user meets it: commands without --model use it; its accuracy on a
// fixed sample of the world's test split and on the independent Pillow-drawn set. What the tests
// assert is the shipped model's measured level less a margin of a few questions (floating-point
// differences between CPUs can flip one), not the issues' targets where those are not met: on
// the 150-conversation sample it answers 90.3% of the 62 single-image questions and 91.5% of the
// 469 multi-image ones (issue 6 asked >= 90% / >= 80% of the narrower world it was set on; this
// world is wider); on the independent set 96.8% of 247 and 91.0% of 100 (issue 19's targets,
// >= 90% / >= 75%, are asserted as they are; see README "The demo model").
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {

// `trimkv eval` of the demo model on a world JSONL: accuracy on the questions of one-image and
// of several-image conversations.
struct Accuracy {
  int64_t n_single = 0, n_multi = 0;
  double single = 0, multi = 0;
};

Accuracy demo_accuracy(const std::string& jsonl) {
  const trimkv::test::CliRun r = trimkv::test::run_cli({"eval", "--data", jsonl, "--json"});
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("failures").get<int64_t>() == 0);
  Accuracy a;
  int64_t c1 = 0, cm = 0;
  for (const auto& [k, v] : j.at("by_n_images").items()) {
    const int64_t n = v.at("n").get<int64_t>(), c = v.at("correct").get<int64_t>();
    if (std::stoi(k) == 1) a.n_single += n, c1 += c;
    else a.n_multi += n, cm += c;
  }
  a.single = a.n_single ? static_cast<double>(c1) / static_cast<double>(a.n_single) : 0.0;
  a.multi = a.n_multi ? static_cast<double>(cm) / static_cast<double>(a.n_multi) : 0.0;
  UNSCOPED_INFO(jsonl << ": single-image " << a.single << " (" << a.n_single << " questions), multi-image " << a.multi
                      << " (" << a.n_multi << ")");
  return a;
}

}  // namespace

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

TEST_CASE("trimkv chat with the demo model says what it knows and notes questions outside its world",
          "[cli][demo][chat]") {
  // A picture drawn by the independent generator (a green triangle among others), attached bare;
  // a question of the grammar, then one outside it ("objects" without a colour), then one in
  // another wording of the grammar ("Looking at image 1").
  const std::string picture = trimkv::test::data_dir() + "/independent-shapes/images/ind-000005_1.jpg";
  const trimkv::test::CliRun r = trimkv::test::run_cli(
      {"chat", "--max-new-tokens", "4"},
      "/image " + picture + "\nWhat color is the triangle?\nHow many objects are there?\n"
                            "looking at image 1 is there a green triangle\n/quit\n");
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("demo model: trained here on one small world, not a general model"));
  const size_t answer = r.out.find(">  green\n");  // the prompt, then the streamed answer
  REQUIRE(answer != std::string::npos);
  const std::string note = "outside the demo model's world";
  const size_t first = r.out.find(note);
  REQUIRE(first != std::string::npos);
  CHECK(first > answer);
  CHECK(r.out.find(note, first + 1) == std::string::npos);  // only the one question outside it
}

TEST_CASE("the demo model's accuracy on a fixed test sample", "[cli][demo][accuracy]") {
  trimkv::test::ScratchDir dir("demo-acc");
  const trimkv::test::CliRun w =
      trimkv::test::run_cli({"make-world", "--out", dir.path(), "--n", "150", "--seed", "2024", "--split", "test", "--quiet"});
  CAPTURE(w.err);
  REQUIRE(w.code == 0);
  const Accuracy a = demo_accuracy(dir.file("test.jsonl"));
  REQUIRE(a.n_single >= 50);
  REQUIRE(a.n_multi >= 200);
  CHECK(a.single >= 0.87);  // measured 0.903 (56 of 62; the models shipped before 53 and 55)
  CHECK(a.multi >= 0.89);   // measured 0.915 (429 of 469; the models shipped before 423 and 419)
}

TEST_CASE("the demo model on pictures it never saw the like of: the independent Pillow set", "[cli][demo][accuracy]") {
  // tests/data/independent-shapes: scenes, colours, renderer and files (PNG and JPEG) of a
  // separate generator that shares no code with the world (tests/independent/make_shapes_pillow.py),
  // bare <image> placeholders, the issue-6 question grammar.
  const Accuracy a = demo_accuracy(trimkv::test::data_dir() + "/independent-shapes/test.jsonl");
  REQUIRE(a.n_single >= 200);
  REQUIRE(a.n_multi >= 80);
  // Issue 19's targets. Measured 0.968 (239 of 247) and 0.910 (91 of 100); the same answers with
  // OpenBLAS's Haswell and Sandy Bridge kernels and with one thread.
  CHECK(a.single >= 0.90);
  CHECK(a.multi >= 0.75);
}

TEST_CASE("the demo model in bf16 / f16 answers as in f32; q8 / q4 keep its accuracy (full cache and DBTrimKV 25%)",
          "[cli][demo][accuracy][weights]") {
  trimkv::test::ScratchDir dir("demo-weights");
  // The sample question with its picture: the same greedy answer, logits within 0.3 of f32 (of
  // logits up to 7.5; the vision tower runs in the same precision). Measured on the shipped model
  // (AMD EPYC, AVX-512 bf16): bf16 0.039, f16 0.0066. Earlier models moved by 0.024, 0.020, 0.034, 0.015 and 0.021 in
  // bf16, 0.026 with oneDNN's bf16 matmul forced for the tower's products (bf16-rounded
  // activations, as on AMX: vision::tower_linear; TRIMKV_BF16_GEMM=off turns that off); the
  // earlier recipe's by 0.256 here and 0.258 on AMX, with the same accuracy on the independent set
  // (309 of 347, as f32).
  const std::string image = trimkv::test::data_dir() + "/vlm/images/a.png";
  auto answer = [&](const std::string& weights) {
    const std::string logits = dir.file("logits-" + weights + ".bin");
    const trimkv::test::CliRun r =
        trimkv::test::run_cli({"generate", "--chat", "--prompt", "How many shapes are there?", "--image", image,
                               "--max-new-tokens", "12", "--weights", weights, "--logits", logits, "--json"});
    CAPTURE(weights, r.err);
    REQUIRE(r.code == 0);
    std::ifstream in(logits, std::ios::binary);
    const std::vector<char> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> values(v.size() / sizeof(float));
    std::memcpy(values.data(), v.data(), values.size() * sizeof(float));
    return std::pair{nlohmann::json::parse(r.out).at("tokens").get<std::vector<int>>(), values};
  };
  const auto f32 = answer("f32");
  for (const char* w : {"bf16", "f16"}) {
    const auto low = answer(w);
    CAPTURE(w);
    REQUIRE(low.first == f32.first);
    REQUIRE(low.second.size() == f32.second.size());
    float worst = 0;
    for (size_t i = 0; i < low.second.size(); ++i) worst = std::max(worst, std::abs(low.second[i] - f32.second[i]));
    INFO("max |logit - f32| " << worst);
    CHECK(worst < 0.3f);
  }
  // Accuracy on the fixed 150-conversation sample (gold history): within 1 point of f32 for q8,
  // 3 for q4, at full cache and at DBTrimKV with 25% of the full cache's peak entries (926 of
  // 3,704; eval-sweep's 0.25 for this sample).
  const trimkv::test::CliRun w =
      trimkv::test::run_cli({"make-world", "--out", dir.path(), "--n", "150", "--seed", "2024", "--split", "test", "--quiet"});
  REQUIRE(w.code == 0);
  auto accuracy = [&](const std::string& weights, bool evict) {
    std::vector<std::string> args = {"eval", "--data", dir.file("test.jsonl"), "--json", "--weights", weights};
    if (evict) args.insert(args.end(), {"--policy", "dbtrimkv", "--global-budget", "926"});
    const trimkv::test::CliRun r = trimkv::test::run_cli(args);
    CAPTURE(weights, evict, r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out).at("accuracy").get<double>();
  };
  for (bool evict : {false, true}) {
    const double base = accuracy("f32", evict);
    for (const auto& [weights, points] : {std::pair{"q8", 1.0}, std::pair{"q4", 3.0}}) {
      const double a = accuracy(weights, evict);
      INFO(weights << (evict ? " dbtrimkv 25%" : " full") << ": " << a << " vs f32 " << base);
      CHECK(a >= base - points / 100.0);
    }
  }
}

TEST_CASE("a fixed sample of the README's demo sweep reproduces bit-exactly from the shipped model and gates",
          "[cli][demo][sweep]") {
  // docs/demo-sweep/sweep.csv was written by `trimkv eval-sweep --data build/eval-test/test.jsonl
  // --limit 60 ...` on `make-world --split test --n 200 --seed 2024` (README "The demo model").
  // Three of its cells, the full cache and DBTrimKV at 10% and 25% of the full cache's peak, are
  // recomputed here: every column but the seconds must be the same text (accuracy, correct,
  // budget entries, KV peak and mean entries and bytes).
  trimkv::test::ScratchDir dir("demo-sweep-sample");
  const trimkv::test::CliRun w =
      trimkv::test::run_cli({"make-world", "--out", dir.path(), "--n", "200", "--seed", "2024", "--split", "test", "--quiet"});
  CAPTURE(w.err);
  REQUIRE(w.code == 0);
  const trimkv::test::CliRun r = trimkv::test::run_cli({"eval-sweep", "--data", dir.file("test.jsonl"), "--limit", "60",
                                                        "--policies", "dbtrimkv", "--budgets", "0.1,0.25", "--out",
                                                        dir.file("sweep"), "--quiet"});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  auto rows = [](const std::string& csv) {
    std::map<std::string, std::string> out;  // "policy,budget" -> every column but the seconds
    std::istringstream in(csv);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      const size_t second_comma = line.find(',', line.find(',') + 1);
      out[line.substr(0, second_comma)] = line.substr(0, line.rfind(','));
    }
    return out;
  };
  const auto shipped = rows(trimkv::test::read_bytes(trimkv::test::data_dir() + "/../../docs/demo-sweep/sweep.csv"));
  const auto now = rows(trimkv::test::read_bytes(dir.file("sweep/sweep.csv")));
  REQUIRE(now.size() == 3);
  for (const auto& [cell, columns] : now) {
    INFO(cell);
    REQUIRE(shipped.count(cell) == 1);
    CHECK(columns == shipped.at(cell));
  }
}
