// Fuzz target: image decoding (PNG, JPEG, GIF, BMP through stb_image) with the pixel-limit header
// check and EXIF orientation, at a small limit so huge headers are refused before any allocation.
#include "fuzz_input.h"
#include "trimkv/vision/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trimkv::fuzz::expect_only_trimkv_errors("image", [&] {
    trimkv::vision::DecodeOptions o;
    o.max_pixels = 1 << 20;
    trimkv::vision::decode_image_memory(data, size, "fuzz input", o);
  });
  return 0;
}
