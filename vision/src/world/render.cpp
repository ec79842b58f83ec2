// Scene rendering: background in plain C++, shapes with OpenCV's anti-aliased fixed-point
// rasteriser (cv::circle / cv::fillPoly with cv::LINE_AA and 4 fractional bits).
#include <algorithm>
#include <cmath>
#include <random>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "world/world_internal.h"

namespace trimkv::vision::world {
namespace {

constexpr int kShift = 4;                       // fractional bits of the drawing coordinates
constexpr double kScale = 1 << kShift;
constexpr int kNoiseAmplitude = 10;             // +-grey levels of the noise texture

int fixed(double v) { return static_cast<int>(std::lround(v * kScale)); }

void draw_background(const Scene& scene, cv::Mat& img) {
  const int size = scene.image_size;
  // The noise texture has its own stream, so rendering is a pure function of the scene.
  Rng noise({static_cast<uint32_t>(scene.texture_seed), static_cast<uint32_t>(scene.texture_seed >> 32), 7u});
  for (int y = 0; y < size; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    for (int x = 0; x < size; ++x) {
      for (int c = 0; c < 3; ++c) row[x * 3 + c] = scene.bg_rgb[c];
      if (scene.background == Background::Noise) {
        const int delta = static_cast<int>(noise.uniform_int(-kNoiseAmplitude, kNoiseAmplitude));
        for (int c = 0; c < 3; ++c) row[x * 3 + c] = static_cast<uint8_t>(std::clamp(scene.bg_rgb[c] + delta, 0, 255));
      } else if (scene.background == Background::Gradient) {
        const int t = scene.gradient_vertical ? y : x;  // integer interpolation, rounded
        for (int c = 0; c < 3; ++c) {
          const int a = scene.bg_rgb[c], b = scene.bg_rgb2[c];
          row[x * 3 + c] = static_cast<uint8_t>((a * (size - 1 - t) + b * t + (size - 1) / 2) / (size - 1));
        }
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> render_scene(const Scene& scene) {
  const int size = scene.image_size;
  cv::Mat img(size, size, CV_8UC3);  // channels in R, G, B order
  draw_background(scene, img);
  for (const Object& o : scene.objects) {
    const auto rgb = color_rgb(o.color);
    const cv::Scalar colour(rgb[0], rgb[1], rgb[2]);
    if (o.shape == Shape::Circle) {
      cv::circle(img, cv::Point(fixed(o.cx), fixed(o.cy)), fixed(o.radius), colour, cv::FILLED,
                 cv::LINE_AA, kShift);
      continue;
    }
    std::vector<cv::Point> pts;
    for (const auto& p : object_polygon(o)) pts.emplace_back(fixed(p[0]), fixed(p[1]));
    const cv::Point* polys[] = {pts.data()};
    const int counts[] = {static_cast<int>(pts.size())};
    cv::fillPoly(img, polys, counts, 1, colour, cv::LINE_AA, kShift);
  }
  return std::vector<uint8_t>(img.data, img.data + static_cast<size_t>(size) * size * 3);
}

}  // namespace trimkv::vision::world
