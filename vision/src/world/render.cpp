// Scene rendering: the background in plain C++, then the objects by one of two independent
// rasterisers, chosen per scene: OpenCV's fixed-point one (cv::circle / cv::fillPoly /
// cv::polylines, anti-aliased with cv::LINE_AA or hard-edged with cv::LINE_8, 4 fractional
// bits), or our own coverage fill (4x4 samples a pixel, or the pixel centre for hard edges).
#include <algorithm>
#include <cmath>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "world/world_internal.h"

namespace trimkv::vision::world {
namespace {

constexpr int kShift = 4;                       // fractional bits of OpenCV's drawing coordinates
constexpr double kScale = 1 << kShift;

int fixed(double v) { return static_cast<int>(std::lround(v * kScale)); }

uint8_t clamp8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Unit vectors of the 16 gradient directions, 22.5 degrees apart (literals: see object_polygon).
constexpr double kDirections[16][2] = {
    {1.0, 0.0},
    {0.9238795325112867, 0.3826834323650898},
    {0.7071067811865476, 0.7071067811865475},
    {0.38268343236508984, 0.9238795325112867},
    {0.0, 1.0},
    {-0.3826834323650897, 0.9238795325112867},
    {-0.7071067811865475, 0.7071067811865476},
    {-0.9238795325112867, 0.3826834323650899},
    {-1.0, 0.0},
    {-0.9238795325112868, -0.38268343236508967},
    {-0.7071067811865477, -0.7071067811865475},
    {-0.3826834323650895, -0.9238795325112868},
    {0.0, -1.0},
    {0.38268343236509, -0.9238795325112866},
    {0.7071067811865474, -0.7071067811865477},
    {0.9238795325112868, -0.38268343236508956}};

// Soft texture: a coarse grid of random offsets (4..8 cells a side), bilinearly interpolated.
std::vector<double> soft_texture(Rng& rng, int size, int amplitude) {
  const int cells = static_cast<int>(rng.uniform_int(4, 8));
  std::vector<double> grid(static_cast<size_t>((cells + 1) * (cells + 1)));
  for (double& g : grid) g = static_cast<double>(rng.uniform_int(-amplitude, amplitude));
  std::vector<double> out(static_cast<size_t>(size) * size);
  const double step = static_cast<double>(size) / cells;
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      const double gx = (x + 0.5) / step, gy = (y + 0.5) / step;
      const int ix = std::min(static_cast<int>(gx), cells - 1), iy = std::min(static_cast<int>(gy), cells - 1);
      const double fx = gx - ix, fy = gy - iy;
      auto at = [&](int i, int j) { return grid[static_cast<size_t>(j * (cells + 1) + i)]; };
      out[static_cast<size_t>(y) * size + x] = (1 - fy) * ((1 - fx) * at(ix, iy) + fx * at(ix + 1, iy)) +
                                               fy * ((1 - fx) * at(ix, iy + 1) + fx * at(ix + 1, iy + 1));
    }
  return out;
}

void draw_background(const Scene& scene, cv::Mat& img) {
  const int size = scene.image_size;
  // The noise and texture have their own stream, so rendering is a pure function of the scene.
  Rng noise({static_cast<uint32_t>(scene.texture_seed), static_cast<uint32_t>(scene.texture_seed >> 32), 7u});
  std::vector<double> texture;
  if (scene.background == Background::Texture) texture = soft_texture(noise, size, scene.noise_amplitude);
  const double* dir = kDirections[scene.gradient_direction & 15];
  // The gradient runs from bg_rgb to bg_rgb2 along `dir` over the image's extent in that direction.
  const double half = 0.5 * (size - 1) * (std::fabs(dir[0]) + std::fabs(dir[1]));
  for (int y = 0; y < size; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    for (int x = 0; x < size; ++x) {
      uint8_t* px = row + x * 3;
      switch (scene.background) {
        case Background::Plain:
          for (int c = 0; c < 3; ++c) px[c] = scene.bg_rgb[c];
          break;
        case Background::Noise: {
          const int delta = static_cast<int>(noise.uniform_int(-scene.noise_amplitude, scene.noise_amplitude));
          for (int c = 0; c < 3; ++c) px[c] = clamp8(scene.bg_rgb[c] + delta);
          break;
        }
        case Background::Texture: {
          const int delta = static_cast<int>(std::lround(texture[static_cast<size_t>(y) * size + x]));
          for (int c = 0; c < 3; ++c) px[c] = clamp8(scene.bg_rgb[c] + delta);
          break;
        }
        case Background::Gradient: {
          const double proj = (x - 0.5 * (size - 1)) * dir[0] + (y - 0.5 * (size - 1)) * dir[1];
          const double t = half > 0 ? std::clamp(0.5 + 0.5 * proj / half, 0.0, 1.0) : 0.0;
          for (int c = 0; c < 3; ++c)
            px[c] = clamp8(static_cast<int>(std::lround(scene.bg_rgb[c] + t * (scene.bg_rgb2[c] - scene.bg_rgb[c]))));
          break;
        }
      }
    }
  }
}

void draw_opencv(const Object& o, bool antialias, cv::Mat& img) {
  const int line = antialias ? cv::LINE_AA : cv::LINE_8;
  const cv::Scalar fill(o.rgb[0], o.rgb[1], o.rgb[2]);
  const cv::Scalar edge(o.outline_rgb[0], o.outline_rgb[1], o.outline_rgb[2]);
  if (o.shape == Shape::Circle) {
    const cv::Point centre(fixed(o.cx), fixed(o.cy));
    cv::circle(img, centre, fixed(o.radius), fill, cv::FILLED, line, kShift);
    if (o.outline > 0)
      cv::circle(img, centre, fixed(o.radius - 0.5 * o.outline), edge, o.outline, line, kShift);
    return;
  }
  std::vector<cv::Point> pts;
  for (const auto& p : object_polygon(o)) pts.emplace_back(fixed(p[0]), fixed(p[1]));
  const cv::Point* polys[] = {pts.data()};
  const int counts[] = {static_cast<int>(pts.size())};
  cv::fillPoly(img, polys, counts, 1, fill, line, kShift);
  if (o.outline > 0) cv::polylines(img, polys, counts, 1, true, edge, o.outline, line, kShift);
}

// Our own rasteriser: each pixel's coverage by the shape from n x n samples (n = 4, or 1 at the
// pixel centre for hard edges), the colour blended by it. An outline is the shape drawn in the
// outline colour, then the fill inside it shrunk by the outline's width.
void draw_supersampled(const Object& o, bool antialias, cv::Mat& img) {
  const int n = antialias ? 4 : 1;
  const int size = img.rows;
  Object inner = o;
  if (o.outline > 0) inner.radius = std::max(0.5, o.radius - o.outline * (o.shape == Shape::Circle ? 1.0 : 1.6));
  const int x0 = std::max(0, static_cast<int>(std::floor(o.cx - o.radius - 1)));
  const int x1 = std::min(size - 1, static_cast<int>(std::ceil(o.cx + o.radius + 1)));
  const int y0 = std::max(0, static_cast<int>(std::floor(o.cy - o.radius - 1)));
  const int y1 = std::min(size - 1, static_cast<int>(std::ceil(o.cy + o.radius + 1)));
  const auto outer_poly = object_polygon(o), inner_poly = object_polygon(inner);
  // A polygon's edge crossings of each sample row, computed once per row (shape_covers' rule);
  // a circle is tested per sample.
  std::vector<std::vector<double>> outer_x(static_cast<size_t>(n)), inner_x(static_cast<size_t>(n));
  auto covers = [](const Object& obj, const std::vector<std::array<double, 2>>& poly,
                   const std::vector<double>& crossings, double px, double py) {
    if (poly.empty()) return shape_covers(obj, poly, px, py);
    bool inside = false;
    for (double c : crossings) inside ^= px < c;
    return inside;
  };
  for (int y = y0; y <= y1; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    for (int sy = 0; sy < n; ++sy) {
      const double py = y - 0.5 + (sy + 0.5) / n;
      outer_x[static_cast<size_t>(sy)].clear(), inner_x[static_cast<size_t>(sy)].clear();
      for_each_crossing(outer_poly, py, [&](double c) { outer_x[static_cast<size_t>(sy)].push_back(c); });
      for_each_crossing(inner_poly, py, [&](double c) { inner_x[static_cast<size_t>(sy)].push_back(c); });
    }
    for (int x = x0; x <= x1; ++x) {
      int hit_outer = 0, hit_inner = 0;
      for (int sy = 0; sy < n; ++sy)
        for (int sx = 0; sx < n; ++sx) {
          const double px = x - 0.5 + (sx + 0.5) / n, py = y - 0.5 + (sy + 0.5) / n;
          if (!covers(o, outer_poly, outer_x[static_cast<size_t>(sy)], px, py)) continue;
          ++hit_outer;
          if (o.outline == 0 || covers(inner, inner_poly, inner_x[static_cast<size_t>(sy)], px, py)) ++hit_inner;
        }
      if (hit_outer == 0) continue;
      const int total = n * n, edge = hit_outer - hit_inner, rest = total - hit_outer;
      uint8_t* px = row + x * 3;
      for (int c = 0; c < 3; ++c)
        px[c] = clamp8((px[c] * rest + o.rgb[c] * hit_inner + o.outline_rgb[c] * edge + total / 2) / total);
    }
  }
}

}  // namespace

std::vector<uint8_t> render_scene(const Scene& scene) {
  const int size = scene.image_size;
  cv::Mat img(size, size, CV_8UC3);  // channels in R, G, B order
  draw_background(scene, img);
  for (const Object& o : scene.objects) {
    if (scene.renderer == Renderer::OpenCv)
      draw_opencv(o, scene.antialias, img);
    else
      draw_supersampled(o, scene.antialias, img);
  }
  return std::vector<uint8_t>(img.data, img.data + static_cast<size_t>(size) * size * 3);
}

}  // namespace trimkv::vision::world
