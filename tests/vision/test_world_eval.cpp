// World evaluation pieces: replay records read back from write_world's files, answer scoring,
// breakdowns.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <tuple>
#include <vector>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/world.h"
#include "trimkv/vision/world_eval.h"

namespace w = trimkv::vision::world;
using trimkv::test::ScratchDir;

TEST_CASE("world eval: records read back match the generated conversations", "[world][eval]") {
  ScratchDir dir("world-eval");
  const auto files = w::write_world(dir.path(), w::Split::Test, 8, 40, {});
  const auto records = w::read_world_jsonl(files.jsonl);
  REQUIRE(records.size() == 40);
  CHECK(w::read_world_jsonl(files.jsonl, 7).size() == 7);
  for (size_t i = 0; i < records.size(); ++i) {
    const w::Conversation conv = w::make_conversation(8, w::Split::Test, static_cast<int64_t>(i), {});
    const w::WorldRecord& rec = records[i];
    CHECK(rec.id == conv.id);
    REQUIRE(rec.turns.size() == conv.turns.size());
    CHECK(rec.n_images == static_cast<int>(conv.scenes.size()));
    int n_shown = 0;
    std::vector<int> turn_of_image;
    for (size_t t = 0; t < rec.turns.size(); ++t) {
      const w::WorldTurn& turn = rec.turns[t];
      CHECK(turn.text == conv.turns[t].text);
      CHECK(turn.answer == conv.turns[t].answer);
      CHECK(turn.type == conv.turns[t].type);
      CHECK(turn.about == conv.turns[t].about);
      REQUIRE(turn.images.size() == conv.turns[t].new_images.size());
      for (const auto& path : turn.images) {
        CHECK(std::filesystem::is_regular_file(path));
        turn_of_image.push_back(static_cast<int>(t));
      }
      n_shown += static_cast<int>(turn.images.size());
      // Distances by brute force.
      int newest = -1, oldest = 1 << 20;
      for (int k : turn.about) newest = std::max(newest, k), oldest = std::min(oldest, k);
      CHECK(turn.images_since == n_shown - 1 - newest);
      CHECK(turn.turns_since == static_cast<int>(t) - turn_of_image[oldest]);
      CHECK(turn.images_since >= 0);
      CHECK(turn.turns_since >= 0);
    }
  }
}

TEST_CASE("world eval: malformed files fail naming the line", "[world][eval]") {
  ScratchDir dir("world-eval-bad");
  trimkv::test::write_text(dir.file("a.jsonl"),
                           "{\"id\":\"x\",\"images\":[\"a.png\"],\"turns\":[{\"text\":\"Hi?\",\"answer\":\"no\"}]}\n");
  try {
    w::read_world_jsonl(dir.file("a.jsonl"));
    FAIL("no error");
  } catch (const trimkv::Error& e) {
    CHECK(e.kind() == trimkv::ErrorKind::Format);
    CHECK_THAT(e.what(), Catch::Contains("a.jsonl:1") && Catch::Contains("placeholders"));
  }
  trimkv::test::write_text(dir.file("b.jsonl"), "{\"id\":\"x\",\"images\":[\"a.png\"],\"turns\":[{\"text\":\"<image>Hi?\","
                                                "\"answer\":\"no\",\"about\":[2]}]}\n");
  CHECK_THROWS_WITH(w::read_world_jsonl(dir.file("b.jsonl")), Catch::Contains("not shown yet"));
  trimkv::test::write_text(dir.file("c.jsonl"), "{\"id\": 3}\n");
  CHECK_THROWS_WITH(w::read_world_jsonl(dir.file("c.jsonl")), Catch::Contains("c.jsonl:1"));
  CHECK_THROWS_AS(w::read_world_jsonl(dir.file("missing.jsonl")), trimkv::Error);

  // Tolerant reading: the bad lines are named and skipped, the good ones kept (with their line).
  trimkv::test::write_text(dir.file("mixed.jsonl"),
                           "{\"id\":\"x\",\"images\":[\"a.png\"],\"turns\":[{\"text\":\"Hi?\",\"answer\":\"no\"}]}\n"
                           "{\"id\":\"ok\",\"images\":[\"a.png\"],\"turns\":[{\"text\":\"<image>Hi?\",\"answer\":\"no\"}]}\n"
                           "\n{\"id\": 3}\n");
  std::vector<std::string> errors;
  const auto kept = w::read_world_jsonl(dir.file("mixed.jsonl"), -1, &errors);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].id == "ok");
  CHECK(kept[0].line == 2);
  REQUIRE(errors.size() == 2);
  CHECK_THAT(errors[0], Catch::Contains("mixed.jsonl:1") && Catch::Contains("placeholders"));
  CHECK_THAT(errors[1], Catch::Contains("mixed.jsonl:4"));
  errors.clear();
  CHECK(w::read_world_jsonl(dir.file("mixed.jsonl"), 1, &errors).empty());  // the limit counts lines read
  CHECK(errors.size() == 1);
  CHECK_THROWS_AS(w::read_world_jsonl(dir.file("missing.jsonl"), -1, &errors), trimkv::Error);
}

TEST_CASE("world eval: answers match exactly after normalisation", "[world][eval]") {
  CHECK(w::normalize_answer("  Top   Left. ") == "top left");
  CHECK(w::normalize_answer(" red") == "red");
  CHECK(w::normalize_answer("Yes!") == "yes");
  CHECK(w::answer_correct("red", " Red."));
  CHECK(w::answer_correct("image 2", "Image 2"));
  CHECK(w::answer_correct("3", "3"));
  CHECK_FALSE(w::answer_correct("red", "red circle"));
  CHECK_FALSE(w::answer_correct("3", "13"));
  CHECK_FALSE(w::answer_correct("yes", ""));
}

TEST_CASE("world eval: --match contains finds the answer as whole words in a sentence", "[world][eval]") {
  const auto contains = w::AnswerMatch::Contains;
  CHECK(w::answer_match_named("contains") == contains);
  CHECK(w::answer_match_named("exact") == w::AnswerMatch::Exact);
  CHECK_FALSE(w::answer_match_named("fuzzy").has_value());
  CHECK(w::answer_correct("4821", "The code for the blue door is 4821.", contains));
  CHECK_FALSE(w::answer_correct("4821", "The code for the blue door is 4821.", w::AnswerMatch::Exact));
  CHECK(w::answer_correct("4821", "4821", contains));
  CHECK(w::answer_correct("4821", "code: 4821!", contains));
  CHECK(w::answer_correct("4821", "(4821)", contains));
  CHECK(w::answer_correct("top left", "It is in the  Top Left corner.", contains));
  CHECK(w::answer_correct("4821", "48210, no: 4821", contains));  // a later whole-word occurrence
  CHECK_FALSE(w::answer_correct("4821", "48210", contains));
  CHECK_FALSE(w::answer_correct("4821", "14821", contains));
  CHECK_FALSE(w::answer_correct("4821", "4 8 2 1", contains));
  CHECK_FALSE(w::answer_correct("red", "bored", contains));
  CHECK_FALSE(w::answer_correct("4821", "", contains));
}

TEST_CASE("world eval: summaries count by type and distance", "[world][eval]") {
  std::vector<w::EvalRecord> records(4);
  records[0] = {"a", 0, "count_shape", "2", "2", true, 0, 0, 100};
  records[1] = {"a", 1, "count_shape", "1", "2", false, 2, 1, 300};
  records[2] = {"b", 0, "exists", "yes", "yes", true, 2, 1, 200};
  records[3] = {"b", 1, "more_shape", "image 1", "image 1", true, 0, 0, 200};
  const w::EvalSummary s = w::summarize(records);
  CHECK(s.all.n == 4);
  CHECK(s.all.correct == 3);
  CHECK(s.all.accuracy() == Approx(0.75));
  CHECK(s.by_type.at("count_shape").accuracy() == Approx(0.5));
  CHECK(s.by_images_since.at(2).n == 2);
  CHECK(s.by_images_since.at(2).correct == 1);
  CHECK(s.max_kv_entries == 300);
  CHECK(s.mean_kv_entries == Approx(200));
  const auto j = nlohmann::json::parse(w::summary_json(s));
  CHECK(j.at("accuracy").get<double>() == Approx(0.75));
  CHECK(j.at("by_type").at("exists").at("n") == 1);
  CHECK(j.at("by_images_since").at("0").at("correct") == 2);
  CHECK(j.at("kv_peak_entries") == 300);
  CHECK(j.at("kv_mean_entries").get<double>() == Approx(200));
  CHECK(j.at("n") == 4);
  CHECK(j.contains("by_n_images"));
  CHECK(j.contains("failures"));
  const auto line = nlohmann::json::parse(w::record_json(records[1]));
  CHECK(line.at("generated") == "2");
  CHECK(line.at("correct") == false);
}

TEST_CASE("world eval: sweep figure ticks are round and cover the range", "[world][eval][plot]") {
  auto round_value = [](double v) {  // m x 10^k with m in {1, 2, 2.5, 5}
    if (v == 0) return true;
    const double mag = std::pow(10.0, std::floor(std::log10(std::abs(v)) + 1e-12));
    const double m = std::abs(v) / mag;
    for (double ok : {1.0, 2.0, 2.5, 5.0, 10.0})
      if (std::abs(m - ok) < 1e-9) return true;
    return false;
  };
  for (const auto& [lo, hi, n] : std::vector<std::tuple<double, double, int>>{
           {0, 1, 6}, {0.4, 1, 6}, {0, 3544, 6}, {354, 1772, 5}, {12.3, 17.9, 6}, {-3, 7, 4}, {0.001, 0.0042, 5}}) {
    const std::vector<double> t = w::round_ticks(lo, hi, n);
    INFO(lo << ".." << hi);
    REQUIRE(t.size() >= 2);
    CHECK(static_cast<int>(t.size()) <= n);
    CHECK(t.front() >= lo - 1e-12);
    CHECK(t.back() <= hi + 1e-12);
    const double step = t[1] - t[0];
    CHECK(round_value(step));
    for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(step));
    CHECK(t.front() - lo < step + 1e-12);  // no room for another tick at either end
    CHECK(hi - t.back() < step + 1e-12);
  }
  CHECK(w::round_log_ticks(4.2, 110) == std::vector<double>{5, 10, 20, 50, 100});
  CHECK(w::round_log_ticks(0.9, 2.1) == std::vector<double>{1, 2});
}

// The layout both drawings of the sweep figure use (OpenCV here, Qt Charts in app/charts), and the
// OpenCV drawing of a build without Qt.
TEST_CASE("world eval: sweep figure layout and the OpenCV drawing", "[world][eval][plot]") {
  const std::vector<w::PlotSeries> series = {
      {"h2o", {{1772, 0.80}, {354, 0.72}, {886, 0.79}}},
      {"random", {}},  // no points yet: not in the legend
      {"dbtrimkv", {{354, 0.73}, {886, 0.79}, {1772, 0.80}}},
  };
  const w::PlotLayout L = w::plot_layout(series, 0.798, 3544);
  CHECK(L.percent);
  CHECK(L.log_x);
  CHECK(L.x_ticks == std::vector<double>{10, 20, 50, 100});
  CHECK(L.x_lo < L.x_of(354));
  CHECK(L.x_hi >= 100);
  CHECK(L.entries_of(50) == Approx(1772));
  CHECK(L.legend == std::vector<size_t>{2, 0});  // best at the smallest budget first
  CHECK(L.y_lo == Approx(0.6));
  CHECK(L.y_hi == 1.0);
  CHECK(L.y_ticks.front() == Approx(0.6));
  CHECK(L.x_title() == "KV budget (% of the full cache's peak, log scale)");
  CHECK(w::plot_emphasised("dbtrimkv"));
  CHECK_FALSE(w::plot_emphasised("h2o"));

  // Lower is better (perplexity): the legend puts the smallest value first; no full cache and no
  // peak: entries, linear when the budgets span less than 4x.
  const w::PlotLayout P = w::plot_layout({{"a", {{100, 9.0}, {200, 8.5}}}, {"b", {{100, 8.0}, {200, 8.4}}}},
                                         std::nan(""), 0, {"perplexity", false});
  CHECK_FALSE(P.percent);
  CHECK_FALSE(P.log_x);
  CHECK(P.legend == std::vector<size_t>{1, 0});
  CHECK(P.y_lo < 8.0);
  CHECK(P.y_hi > 9.0);
  CHECK(P.x_title() == "KV budget (entries)");

  trimkv::test::ScratchDir dir("plot");
  w::write_accuracy_plot(dir.file("sweep.png"), series, 0.798, 3544);
  const trimkv::vision::RgbImage img = trimkv::vision::decode_image_file(dir.file("sweep.png"));
  CHECK(img.width == 960);
  CHECK(img.height == 620);
  size_t h2o = 0, dbtrimkv = 0;  // pixels in each series' own colour (series 0 and 2)
  const w::PlotRgb r = w::plot_colour(0), b = w::plot_colour(2);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      h2o += img.at(x, y, 0) == r[0] && img.at(x, y, 1) == r[1] && img.at(x, y, 2) == r[2];
      dbtrimkv += img.at(x, y, 0) == b[0] && img.at(x, y, 1) == b[1] && img.at(x, y, 2) == b[2];
    }
  CHECK(h2o > 200);
  CHECK(dbtrimkv > 200);
  CHECK_THROWS_AS(w::write_accuracy_plot(dir.file("no/such/folder/sweep.png"), series, 0.8, 3544), trimkv::Error);
}
