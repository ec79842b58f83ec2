// The Qwen2-VL / Qwen2.5-VL image processor (transformers models/qwen2_vl/
// image_processing_pil_qwen2_vl.py, the slow PIL path; shared/QWEN-VL.md §2): smart_resize to
// multiples of patch * merge within [min_pixels, max_pixels], BICUBIC on uint8 (Pillow-exact),
// rescale and CLIP normalisation, then patches in 2x2 merge-block order with the still image
// repeated over the temporal patch. Groundwork of the Qwen-VL families (issue 16).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>

#include "trimkv/vision/image.h"
#include "trimkv/vision/pixel_scaling.h"
#include "trimkv/vision/resample.h"

namespace trimkv::vision {

struct Qwen2VlProcessorConfig {
  bool do_resize = true;
  int64_t min_pixels = 56 * 56;          // size.shortest_edge (or legacy min_pixels)
  int64_t max_pixels = 28 * 28 * 1280;   // size.longest_edge (or legacy max_pixels)
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  ResampleFilter resample = ResampleFilter::Bicubic;
  PixelScaling scaling = {true, 1.0 / 255.0, true, {0.48145466f, 0.4578275f, 0.40821073f},
                          {0.26862954f, 0.26130258f, 0.27577711f}};  // OpenAI CLIP

  int factor() const { return patch_size * merge_size; }
  // preprocessor_config.json, else processor_config.json's "image_processor", else the class
  // defaults; the legacy min_pixels / max_pixels keys override `size`. Errors name file and field.
  static Qwen2VlProcessorConfig from_folder(const std::string& dir);
};

// smart_resize(height, width, factor, min_pixels, max_pixels) -> (height, width), Python's
// arithmetic (round half to even). Error{Input} naming the size when the aspect ratio exceeds 200.
std::pair<int, int> qwen2_vl_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels);

struct Qwen2VlPatches {
  at::Tensor pixels;  // [grid_h * grid_w, 3 * temporal * patch * patch] float32, merge-block order
  int64_t grid_t = 1, grid_h = 0, grid_w = 0;  // image_grid_thw
  int width = 0, height = 0;                   // input size
  int resized_width = 0, resized_height = 0;
  int64_t n_tokens(int merge_size) const { return grid_t * grid_h * grid_w / (merge_size * merge_size); }
};

Qwen2VlPatches qwen2_vl_preprocess(const RgbImage& image, const Qwen2VlProcessorConfig& cfg);

}  // namespace trimkv::vision
