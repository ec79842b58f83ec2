// Image resizing that reproduces Pillow's Image.resize bit for bit on 8-bit RGB (the reference
// processors resize uint8 images with PIL). Pillow resamples separably with an antialiasing
// kernel whose support grows with the downscale factor, in 22-bit fixed point, horizontal pass
// first into an 8-bit intermediate image, then vertical (libImaging/Resample.c); this file
// follows that arithmetic exactly. OpenCV's resize is not a substitute: INTER_LANCZOS4 is a fixed
// 8-tap kernel (no antialiasing on downscale), so results differ by tens of levels (see README,
// "Vision").
#pragma once
#include "trimkv/vision/image.h"

namespace trimkv::vision {

// Pillow's filters with their PIL.Image.Resampling numbers (preprocessor_config.json "resample").
enum class ResampleFilter { Nearest = 0, Lanczos = 1, Bilinear = 2, Bicubic = 3, Box = 4, Hamming = 5 };

// Error{Unsupported} for a number that is not a Pillow filter.
ResampleFilter resample_filter_from_pil(int pil_value, const std::string& where);
const char* resample_filter_name(ResampleFilter filter);

// PIL: image.resize((width, height), filter). width, height >= 1 (Error{Input} otherwise).
RgbImage resize(const RgbImage& image, int width, int height, ResampleFilter filter);

// The sub-image [x0, x0 + width) x [y0, y0 + height) (must lie inside the image).
RgbImage crop(const RgbImage& image, int x0, int y0, int width, int height);

}  // namespace trimkv::vision
