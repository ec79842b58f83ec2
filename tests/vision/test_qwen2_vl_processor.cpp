// The Qwen2-VL / Qwen2.5-VL image processor against transformers' slow PIL processor (oracle:
// tests/oracle/qwen2_vl_processor_fixtures.py): smart_resize on a table of sizes, pixel values
// and grids of the test images under three size settings, and its settings files.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/qwen2_vl_processor.h"
#include "vision/vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {
std::string fixture_dir() { return test::data_dir() + "/vlm/qwen2_vl_processor"; }

Qwen2VlProcessorConfig config_for(const nlohmann::json& kwargs) {
  Qwen2VlProcessorConfig c;
  if (kwargs.contains("size")) {
    c.min_pixels = kwargs["size"]["shortest_edge"];
    c.max_pixels = kwargs["size"]["longest_edge"];
  }
  if (kwargs.contains("min_pixels")) c.min_pixels = kwargs["min_pixels"];
  if (kwargs.contains("max_pixels")) c.max_pixels = kwargs["max_pixels"];
  return c;
}
}  // namespace

TEST_CASE("Qwen2-VL smart_resize rounds as Python does and refuses aspect ratios above 200",
          "[vision][qwen2vl][oracle]") {
  const auto want = test::read_json(fixture_dir() + "/expected.json");
  for (const auto& c : want["smart_resize"]) {
    CAPTURE(c.dump());
    if (c.contains("error")) {
      CHECK_THROWS_WITH(qwen2_vl_smart_resize(c["h"], c["w"], 28, 56 * 56, 28 * 28 * 1280),
                        Catch::Contains("aspect ratio"));
      continue;
    }
    const auto [h, w] = qwen2_vl_smart_resize(c["h"], c["w"], 28, 56 * 56, 28 * 28 * 1280);
    REQUIRE(h == c["out"][0].get<int>());
    REQUIRE(w == c["out"][1].get<int>());
  }
  // Half to even: 98 / 28 = 3.5 -> 4 (112), 126 / 28 = 4.5 -> 4 (112), not 5 (140).
  REQUIRE(qwen2_vl_smart_resize(98, 126, 28, 56 * 56, 28 * 28 * 1280) == std::make_pair(112, 112));
  CHECK_THROWS_WITH(qwen2_vl_smart_resize(1, 201, 28, 56 * 56, 28 * 28 * 1280), Catch::Contains("201x1"));
}

TEST_CASE("Qwen2-VL preprocessing equals the slow HF processor: pixels, merge-block order, grid",
          "[vision][qwen2vl][oracle]") {
  const auto want = test::read_json(fixture_dir() + "/expected.json");
  const WeightStore tensors = WeightStore::open_file(fixture_dir() + "/expected.safetensors");
  REQUIRE(want["cases"].size() >= 9);
  for (const auto& c : want["cases"]) {
    const std::string key = c["setting"].get<std::string>() + "/" + c["image"].get<std::string>();
    CAPTURE(key);
    const Qwen2VlPatches p = qwen2_vl_preprocess(decode_image_file(test::vlm_image(c["image"])), config_for(c["kwargs"]));
    REQUIRE(std::vector<int64_t>{p.grid_t, p.grid_h, p.grid_w} == c["grid_thw"].get<std::vector<int64_t>>());
    const at::Tensor expected = tensors.load({key}, {});
    REQUIRE(p.pixels.sizes() == expected.sizes());
    // PNG/BMP/GIF decode identically and Pillow's BICUBIC is reproduced bit for bit.
    CAPTURE(test::max_abs_diff(p.pixels, expected), test::mean_abs_diff(p.pixels, expected));
    REQUIRE(at::equal(p.pixels, expected));
    REQUIRE(p.n_tokens(2) == p.grid_h * p.grid_w / 4);
  }
}

TEST_CASE("Qwen2-VL processor settings: size, legacy min/max_pixels, bad values named", "[vision][qwen2vl]") {
  test::ScratchDir dir("qwen2vl-settings");
  REQUIRE(Qwen2VlProcessorConfig::from_folder(dir.path()).min_pixels == 56 * 56);  // class defaults
  test::write_text(dir.file("preprocessor_config.json"),
                   R"({"size": {"shortest_edge": 100, "longest_edge": 5000}, "max_pixels": 4000,
                       "image_mean": 0.5, "image_std": [0.5, 0.5, 0.5], "resample": 3})");
  const Qwen2VlProcessorConfig c = Qwen2VlProcessorConfig::from_folder(dir.path());
  REQUIRE(c.min_pixels == 100);
  REQUIRE(c.max_pixels == 4000);  // the legacy key wins, as in transformers
  REQUIRE(c.scaling.mean[2] == 0.5f);
  REQUIRE(c.resample == ResampleFilter::Bicubic);
  test::write_text(dir.file("preprocessor_config.json"), R"({"min_pixels": 5000, "max_pixels": 4000})");
  CHECK_THROWS_WITH(Qwen2VlProcessorConfig::from_folder(dir.path()),
                    Catch::Contains("preprocessor_config.json") && Catch::Contains("exceeds"));
  test::write_text(dir.file("preprocessor_config.json"), R"({"patch_size": -2})");
  CHECK_THROWS_WITH(Qwen2VlProcessorConfig::from_folder(dir.path()), Catch::Contains("patch_size"));
  test::write_text(dir.file("preprocessor_config.json"), R"({"image_std": [0, 1, 1]})");
  CHECK_THROWS_WITH(Qwen2VlProcessorConfig::from_folder(dir.path()), Catch::Contains("image_std"));
  // An image smaller than one 28 x 28 block is upscaled (what the reference does).
  RgbImage tiny;
  tiny.width = 5;
  tiny.height = 3;
  tiny.data.assign(5 * 3 * 3, 128);
  const Qwen2VlPatches p = qwen2_vl_preprocess(tiny, Qwen2VlProcessorConfig{});
  REQUIRE(p.resized_width % 28 == 0);
  REQUIRE(p.resized_height % 28 == 0);
  REQUIRE(p.resized_width * p.resized_height >= 56 * 56);
}
