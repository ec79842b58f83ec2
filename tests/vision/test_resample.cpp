// resize() against Pillow's Image.resize on the same uint8 image: bit-identical.
#include <catch2/catch.hpp>

#include "trimkv/vision/resample.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

TEST_CASE("resize with LANCZOS is bit-identical to Pillow when shrinking and enlarging",
          "[vision][resample]") {
  const RgbImage a = decode_image_file(test::vlm_image("a.png"));
  for (auto [w, h] : {std::pair{64, 48}, {32, 32}, {17, 9}, {121, 90}, {60, 46}}) {
    CAPTURE(w, h);
    const at::Tensor want = test::load_u8("resize." + std::to_string(w) + "x" + std::to_string(h));
    const RgbImage got = resize(a, w, h, ResampleFilter::Lanczos);
    REQUIRE((got.width == w && got.height == h));
    REQUIRE(test::max_abs_diff(test::as_tensor(got), want) == 0.0);
  }
}

TEST_CASE("resize reproduces Pillow's BICUBIC, BILINEAR, BOX and HAMMING filters", "[vision][resample]") {
  const RgbImage a = decode_image_file(test::vlm_image("a.png"));
  for (auto [name, f] : {std::pair{"bicubic", ResampleFilter::Bicubic}, {"bilinear", ResampleFilter::Bilinear},
                         {"box", ResampleFilter::Box}, {"hamming", ResampleFilter::Hamming}}) {
    CAPTURE(name);
    const at::Tensor want = test::load_u8(std::string("resize.") + name + ".37x29");
    REQUIRE(test::max_abs_diff(test::as_tensor(resize(a, 37, 29, f)), want) == 0.0);
  }
}

TEST_CASE("resize to the same size returns the image unchanged; bad sizes are refused", "[vision][resample]") {
  const RgbImage a = decode_image_file(test::vlm_image("a.png"));
  REQUIRE(resize(a, a.width, a.height, ResampleFilter::Lanczos).data == a.data);
  REQUIRE_THROWS_WITH(resize(a, 0, 5, ResampleFilter::Lanczos), Catch::Contains("0x5"));
  REQUIRE_THROWS_WITH(resample_filter_from_pil(0, "cfg"), Catch::Contains("resample = 0"));
}
