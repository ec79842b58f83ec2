// Decoded images: PNG, JPEG, BMP, GIF (first frame) through stb_image, turned into 8-bit RGB the
// way the Hugging Face processors see them (transformers' convert_to_rgb after PIL's
// ImageOps.exif_transpose):
//  - grayscale and palette become RGB;
//  - transparency is composited over white with Pillow's integer alpha_composite arithmetic;
//  - a JPEG's EXIF orientation (tag 0x0112) is applied.
// The pixel count is read from the header and checked against a limit BEFORE decoding, so a
// decompression bomb (a small file declaring a huge image) never allocates its pixels.
// Plain C++: no ATen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trimkv::vision {

// Default limit on width * height: 50 megapixels (e.g. 8660 x 5773), about 150 MB of RGB. Pillow
// warns at 89 MP and refuses 179 MP; camera photos stay well below this limit.
inline constexpr int64_t kDefaultMaxImagePixels = 50'000'000;

// 8-bit RGB, row-major, interleaved: pixel (x, y) channel c at data[(y * width + x) * 3 + c].
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> data;  // [height, width, 3]

  uint8_t at(int x, int y, int c) const { return data[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

struct DecodeOptions {
  int64_t max_pixels = kDefaultMaxImagePixels;
  bool apply_exif_orientation = true;
};

// Reads and decodes an image file. Error{Io} when it cannot be read, Error{Input} naming the
// file when it is empty, not an image stb_image knows, truncated or corrupt, or larger than
// options.max_pixels.
RgbImage decode_image_file(const std::string& path, const DecodeOptions& options = {});
// Same from bytes in memory; `name` is used in messages.
RgbImage decode_image_memory(const uint8_t* data, size_t size, const std::string& name,
                             const DecodeOptions& options = {});

// EXIF orientation (1..8) of a JPEG held in memory; 1 when absent or unreadable.
int jpeg_exif_orientation(const uint8_t* data, size_t size);
// Applies an EXIF orientation (as PIL's ImageOps.exif_transpose).
RgbImage apply_orientation(const RgbImage& image, int orientation);

}  // namespace trimkv::vision
