// Image decoding against what transformers' processors see (PIL decode, exif_transpose,
// convert_to_rgb), and the refusal of bad files.
#include <catch2/catch.hpp>

#include "trimkv/core/error.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {

// stb_image and libjpeg (PIL) use different IDCT and chroma up-sampling: a JPEG decodes to
// slightly different pixels. Measured on the fixtures (quality 92, 4:2:0): max 3 levels, mean
// 0.08 levels; the bounds leave one level of margin.
constexpr double kJpegMaxLevels = 4;     // max |difference| in 0..255 levels
constexpr double kJpegMeanLevels = 0.25;  // mean |difference|

void require_input_error(const std::string& path, const std::string& what) {
  try {
    decode_image_file(path);
    FAIL("no error for " << path);
  } catch (const Error& e) {
    CAPTURE(e.what());
    REQUIRE(e.kind() == ErrorKind::Input);
    REQUIRE_THAT(e.what(), Catch::Contains(path) && Catch::Contains(what));
  }
}

}  // namespace

TEST_CASE("decode_image_file gives PIL's RGB for PNG, GIF and BMP, alpha composited over white",
          "[vision][image]") {
  for (const char* name : {"a.png", "alpha.png", "gray.png", "palette.gif", "c.bmp"}) {
    CAPTURE(name);
    const RgbImage img = decode_image_file(test::vlm_image(name));
    const at::Tensor want = test::load_u8(std::string(name) + ".rgb");
    REQUIRE(img.height == want.size(0));
    REQUIRE(img.width == want.size(1));
    REQUIRE(test::max_abs_diff(test::as_tensor(img), want) == 0.0);
  }
}

TEST_CASE("decode_image_file applies JPEG EXIF orientation and stays close to libjpeg's pixels",
          "[vision][image]") {
  for (const char* name : {"b.jpg", "rotated.jpg"}) {
    CAPTURE(name);
    const RgbImage img = decode_image_file(test::vlm_image(name));
    const at::Tensor want = test::load_u8(std::string(name) + ".rgb");
    REQUIRE(img.height == want.size(0));
    REQUIRE(img.width == want.size(1));
    const double mx = test::max_abs_diff(test::as_tensor(img), want);
    const double mean = test::mean_abs_diff(test::as_tensor(img), want);
    WARN(name << ": stb_image vs libjpeg: max " << mx << ", mean " << mean << " levels");
    REQUIRE(mx <= kJpegMaxLevels);
    REQUIRE(mean <= kJpegMeanLevels);
  }
  // rotated.jpg is stored 30 wide x 54 high with orientation 6: upright it is 54 x 30.
  const RgbImage r = decode_image_file(test::vlm_image("rotated.jpg"));
  REQUIRE((r.width == 54 && r.height == 30));
  DecodeOptions raw;
  raw.apply_exif_orientation = false;
  const RgbImage stored = decode_image_file(test::vlm_image("rotated.jpg"), raw);
  REQUIRE((stored.width == 30 && stored.height == 54));
}

TEST_CASE("apply_orientation maps every EXIF orientation like PIL's exif_transpose", "[vision][image]") {
  // A 3x2 image with distinct pixels; check where the top-left source pixel lands.
  RgbImage img;
  img.width = 3;
  img.height = 2;
  for (int i = 0; i < 6; ++i) img.data.insert(img.data.end(), {uint8_t(i), uint8_t(i), uint8_t(i)});
  struct Case { int orientation, w, h, x, y; };  // where source pixel (0, 0) ends up
  for (const Case c : {Case{1, 3, 2, 0, 0}, Case{2, 3, 2, 2, 0}, Case{3, 3, 2, 2, 1}, Case{4, 3, 2, 0, 1},
                       Case{5, 2, 3, 0, 0}, Case{6, 2, 3, 1, 0}, Case{7, 2, 3, 1, 2}, Case{8, 2, 3, 0, 2}}) {
    CAPTURE(c.orientation);
    const RgbImage o = apply_orientation(img, c.orientation);
    REQUIRE((o.width == c.w && o.height == c.h));
    REQUIRE(o.at(c.x, c.y, 0) == 0);
  }
}

TEST_CASE("bad image files are refused with an error naming the file", "[vision][image][errors]") {
  require_input_error(test::vlm_image("not_an_image.png"), "not an image");
  require_input_error(test::vlm_image("empty.png"), "empty");
  require_input_error(test::vlm_image("truncated.png"), "truncated or corrupt");
  require_input_error(test::vlm_image("truncated.jpg"), "truncated or corrupt");
  require_input_error(test::vlm_image("bomb.png"), "above the limit");
  require_input_error(test::vlm_image(""), "not a file");
  try {
    decode_image_file(test::vlm_image("missing.png"));
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Io);
    REQUIRE_THAT(e.what(), Catch::Contains("missing.png"));
  }
}

TEST_CASE("a PNG header declaring 2^32 - 1 pixels a side is refused, its pixel count not overflowing",
          "[vision][image][errors]") {
  // Found by the image fuzz target (tests/fuzz/regressions/image): the sides' product overflowed int64.
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\xff\xff\xff\xff\xff\xff\xff\xff\x08\x02\0\0\0", 29);
  png += std::string(4, '\0');  // CRC (not checked before the size)
  try {
    decode_image_memory(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "huge.png");
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Input);
    REQUIRE_THAT(e.what(), Catch::Contains("huge.png") && Catch::Contains("4294967295x4294967295") &&
                               Catch::Contains("above the limit"));
  }
}

TEST_CASE("a JPEG using a Huffman or quantisation table it never defines is refused before stb_image reads it",
          "[vision][image][errors]") {
  // Found by the image fuzz target: stb_image decoded such scans from uninitialised table memory
  // (valgrind: conditional jumps on uninitialised values; now and then a segfault).
  const std::string dir = std::string(TRIMKV_SOURCE_DIR) + "/tests/fuzz/regressions/image/";
  for (const auto& [file, table] : {std::pair{"jpeg-undefined-ac-table.jpg", "AC Huffman table 0"},
                                    std::pair{"jpeg-undefined-ac-table-2.jpg", "AC Huffman table 0"},
                                    std::pair{"jpeg-no-quant-table.jpg", "quantisation table 0"}}) {
    CAPTURE(file);
    try {
      decode_image_file(dir + file);
      FAIL("no error");
    } catch (const Error& e) {
      REQUIRE(e.kind() == ErrorKind::Input);
      REQUIRE_THAT(e.what(), Catch::Contains(file) && Catch::Contains(std::string("uses ") + table) &&
                                 Catch::Contains("never defines"));
    }
  }
}

TEST_CASE("the pixel limit is checked from the header before decoding", "[vision][image][errors]") {
  DecodeOptions tight;
  tight.max_pixels = 60 * 45 - 1;  // a.png is 60 x 45
  REQUIRE_THROWS_WITH(decode_image_file(test::vlm_image("a.png"), tight), Catch::Contains("2700 pixels"));
  tight.max_pixels = 60 * 45;
  REQUIRE(decode_image_file(test::vlm_image("a.png"), tight).width == 60);
}
