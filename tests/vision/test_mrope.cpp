// Qwen-VL M-RoPE positions against transformers' get_rope_index (oracle:
// tests/oracle/mrope_fixtures.py, fixture tests/data/vlm/mrope.json).
#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/mrope.h"

#include <algorithm>

using trimkv::vision::MropePositions;

TEST_CASE("M-RoPE positions equal get_rope_index: text runs, images of any shape, several turns",
          "[vision][mrope][oracle]") {
  const auto fixture = trimkv::test::read_json(trimkv::test::data_dir() + "/vlm/mrope.json");
  const int64_t merge = fixture["merge"];
  for (const auto& [name, c] : fixture["cases"].items()) {
    CAPTURE(name);
    MropePositions p;  // runs added one at a time, as turns are prefilled
    for (const auto& run : c["runs"]) {
      if (run[0] == "text") p.add_text(run[1]);
      else p.add_image(run[1], run[2], run[3], merge);
    }
    REQUIRE(p.time() == c["positions"][0].get<std::vector<int64_t>>());
    REQUIRE(p.row() == c["positions"][1].get<std::vector<int64_t>>());
    REQUIRE(p.col() == c["positions"][2].get<std::vector<int64_t>>());
    REQUIRE(p.delta() == c["delta"].get<int64_t>());
    // The next token (decode) continues at max + 1 on every axis.
    const int64_t max = std::max({*std::max_element(p.time().begin(), p.time().end()),
                                  *std::max_element(p.row().begin(), p.row().end()),
                                  *std::max_element(p.col().begin(), p.col().end())});
    REQUIRE(p.next() == max + 1);
  }
}

TEST_CASE("M-RoPE refuses grids the merge does not divide and videos", "[vision][mrope]") {
  MropePositions p;
  REQUIRE_THROWS_WITH(p.add_image(1, 5, 4, 2), Catch::Contains("5x4"));
  REQUIRE_THROWS_WITH(p.add_image(2, 4, 4, 2), Catch::Contains("videos"));
  REQUIRE_THROWS(p.add_text(-1));
  REQUIRE(p.size() == 0);
}
