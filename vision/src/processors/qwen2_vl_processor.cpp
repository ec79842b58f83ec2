#include "trimkv/vision/qwen2_vl_processor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "processors/processor_settings.h"
#include "trimkv/core/error.h"

namespace trimkv::vision {

namespace {

using json = nlohmann::json;

// Python's round(): to nearest, ties to even (the default floating-point rounding mode).
int64_t python_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

Qwen2VlProcessorConfig Qwen2VlProcessorConfig::from_folder(const std::string& dir) {
  Qwen2VlProcessorConfig c;
  std::string path;
  const json j = read_image_processor_settings(dir, path);
  if (j.is_null()) return c;
  c.do_resize = read_flag(j, "do_resize", c.do_resize);
  if (j.contains("size") && j["size"].is_object()) {
    c.min_pixels = read_positive_int(j["size"], "shortest_edge", c.min_pixels, path);
    c.max_pixels = read_positive_int(j["size"], "longest_edge", c.max_pixels, path);
  }
  c.min_pixels = read_positive_int(j, "min_pixels", c.min_pixels, path);  // legacy keys win
  c.max_pixels = read_positive_int(j, "max_pixels", c.max_pixels, path);
  c.patch_size = static_cast<int>(read_positive_int(j, "patch_size", c.patch_size, path));
  c.temporal_patch_size = static_cast<int>(read_positive_int(j, "temporal_patch_size", c.temporal_patch_size, path));
  c.merge_size = static_cast<int>(read_positive_int(j, "merge_size", c.merge_size, path));
  TRIMKV_CHECK(c.min_pixels <= c.max_pixels, Config, "'", path, "': min_pixels ", c.min_pixels,
               " exceeds max_pixels ", c.max_pixels);
  read_resample(j, path, c.resample);
  read_pixel_scaling(j, path, c.scaling);
  return c;
}

std::pair<int, int> qwen2_vl_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
  TRIMKV_CHECK(height > 0 && width > 0 && factor > 0, Input, "image of ", width, "x", height, " cannot be resized");
  const double aspect = static_cast<double>(std::max(height, width)) / std::min(height, width);
  TRIMKV_CHECK(aspect <= 200, Input, "image of ", width, "x", height,
               ": absolute aspect ratio must be at most 200 (Qwen2-VL's processor refuses it), got ", aspect);
  const double h = height, w = width, f = factor;
  int64_t h_bar = python_round(h / f) * factor, w_bar = python_round(w / f) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

Qwen2VlPatches qwen2_vl_preprocess(const RgbImage& input, const Qwen2VlProcessorConfig& cfg) {
  TRIMKV_CHECK(input.width > 0 && input.height > 0, Input, "empty image");
  Qwen2VlPatches out;
  out.width = input.width;
  out.height = input.height;
  RgbImage img = input;
  if (cfg.do_resize) {
    const auto [h, w] = qwen2_vl_smart_resize(img.height, img.width, cfg.factor(), cfg.min_pixels, cfg.max_pixels);
    img = resize(img, w, h, cfg.resample);
  }
  const int p = cfg.patch_size, m = cfg.merge_size, t = cfg.temporal_patch_size;
  TRIMKV_CHECK(img.height % cfg.factor() == 0 && img.width % cfg.factor() == 0, Input, "image of ", img.width, "x",
               img.height, " is not a multiple of ", cfg.factor(), " (do_resize is off)");
  out.resized_width = img.width;
  out.resized_height = img.height;
  std::vector<float> chw(static_cast<size_t>(3) * img.width * img.height);
  scale_pixels_into(img, cfg.scaling, chw.data());
  const int64_t gh = img.height / p, gw = img.width / p;
  out.grid_h = gh;
  out.grid_w = gw;
  const int64_t cols = 3 * t * p * p;
  out.pixels = at::empty({gh * gw, cols}, at::kFloat);
  float* dst = out.pixels.data_ptr<float>();
  // Rows: merge blocks row-major, then the m x m patches inside each; columns: (channel, time,
  // patch row, patch col), the still image repeated over time.
  int64_t row = 0;
  for (int64_t br = 0; br < gh / m; ++br)
    for (int64_t bc = 0; bc < gw / m; ++bc)
      for (int ir = 0; ir < m; ++ir)
        for (int ic = 0; ic < m; ++ic, ++row) {
          const int64_t y0 = (br * m + ir) * p, x0 = (bc * m + ic) * p;
          float* r = dst + row * cols;
          for (int c = 0; c < 3; ++c)
            for (int tt = 0; tt < t; ++tt)
              for (int py = 0; py < p; ++py)
                for (int px = 0; px < p; ++px)
                  *r++ = chw[(static_cast<size_t>(c) * img.height + (y0 + py)) * img.width + (x0 + px)];
        }
  return out;
}

}  // namespace trimkv::vision
