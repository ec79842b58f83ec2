// The last steps every Hugging Face image processor shares: uint8 RGB to float32 CHW, rescaled
// (float64 x * factor, then float32, as numpy does) and normalised ((x - mean) / std in float32).
#pragma once
#include "trimkv/vision/image.h"

namespace trimkv::vision {

struct PixelScaling {
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
};

// `img` as float32 [3, height, width] into `out` (3 * width * height values).
void scale_pixels_into(const RgbImage& img, const PixelScaling& scaling, float* out);

}  // namespace trimkv::vision
