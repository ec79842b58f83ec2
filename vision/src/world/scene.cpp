// World vocabulary, option checks, object geometry and scene sampling.
#include <algorithm>
#include <cmath>

#include "trimkv/core/error.h"
#include "world/world_internal.h"

namespace trimkv::vision::world {

const char* shape_name(Shape shape) {
  static const char* const kNames[] = {"circle", "square", "triangle", "star"};
  return kNames[static_cast<int>(shape)];
}
const char* shape_plural(Shape shape) {
  static const char* const kNames[] = {"circles", "squares", "triangles", "stars"};
  return kNames[static_cast<int>(shape)];
}
const char* color_name(Color color) {
  static const char* const kNames[] = {"red", "green", "blue", "yellow", "purple", "orange"};
  return kNames[static_cast<int>(color)];
}
const char* size_name(ObjectSize size) { return size == ObjectSize::Small ? "small" : "large"; }
const char* background_name(Background background) {
  static const char* const kNames[] = {"plain", "noise", "gradient"};
  return kNames[static_cast<int>(background)];
}
const char* split_name(Split split) {
  static const char* const kNames[] = {"train", "val", "test"};
  return kNames[static_cast<int>(split)];
}

std::array<uint8_t, 3> color_rgb(Color color) {
  // Saturated and far apart in hue; all far from the light grey backgrounds (175..235).
  static const std::array<uint8_t, 3> kRgb[] = {
      {220, 40, 40},   // red
      {40, 170, 60},   // green
      {40, 80, 220},   // blue
      {240, 210, 30},  // yellow
      {150, 60, 190},  // purple
      {250, 140, 30},  // orange
  };
  return kRgb[static_cast<int>(color)];
}

Split parse_split(const std::string& name) {
  if (name == "train") return Split::Train;
  if (name == "val" || name == "validation") return Split::Val;
  if (name == "test") return Split::Test;
  TRIMKV_FAIL(Input, "unknown split '", name, "' (expected train, val or test)");
}

void validate(const WorldOptions& o) {
  TRIMKV_CHECK(o.image_size >= kMinImageSize && o.image_size <= kMaxImageSize, Input, "image_size ",
               o.image_size, " is out of range: it must be in ", kMinImageSize, "..", kMaxImageSize,
               " (below ", kMinImageSize, " px the small objects are under 14 px wide)");
  TRIMKV_CHECK(o.max_images >= 1 && o.max_images <= kMaxImagesLimit, Input, "max_images ", o.max_images,
               " must be in 1..", kMaxImagesLimit);
  TRIMKV_CHECK(o.max_turns >= 1 && o.max_turns <= kMaxTurnsLimit, Input, "max_turns ", o.max_turns,
               " must be in 1..", kMaxTurnsLimit);
  TRIMKV_CHECK(o.max_objects >= 1 && o.max_objects <= kMaxObjectsLimit, Input, "max_objects ",
               o.max_objects, " must be in 1..", kMaxObjectsLimit);
}

namespace {
double quarter(double v) { return std::floor(v * 4.0 + 0.5) / 4.0; }
}  // namespace

double nominal_radius(ObjectSize size, int image_size) {
  return quarter((size == ObjectSize::Small ? 0.11 : 0.16) * image_size);
}

double bounding_factor(Shape shape) {
  switch (shape) {
    case Shape::Circle: return 1.0;
    case Shape::Square: return 1.216;    // half-diagonal of a square of half-side 0.86 r
    case Shape::Triangle: return 1.35;   // circumradius
    case Shape::Star: return 1.3;        // outer radius
  }
  return 1.0;
}

double object_gap(int image_size) { return std::max(2.0, 0.03 * image_size); }
double position_margin(int image_size) { return std::max(2.0, 0.04 * image_size); }

std::vector<std::array<double, 2>> object_polygon(const Object& o) {
  // Unit vertices as literals (not std::cos / std::sin, whose last bit may differ between
  // libms), so the polygon and hence the pixels are the same on every platform.
  static constexpr double kTriangle[3][2] = {
      {0.0, -1.0}, {0.8660254037844386, 0.5}, {-0.8660254037844386, 0.5}};
  static constexpr double kStar[10][2] = {  // angle -90 + 36 k degrees, y down
      {0.0, -1.0},
      {0.5877852522924731, -0.8090169943749475},
      {0.9510565162951535, -0.3090169943749474},
      {0.9510565162951535, 0.3090169943749474},
      {0.5877852522924731, 0.8090169943749475},
      {0.0, 1.0},
      {-0.5877852522924731, 0.8090169943749475},
      {-0.9510565162951535, 0.3090169943749474},
      {-0.9510565162951535, -0.3090169943749474},
      {-0.5877852522924731, -0.8090169943749475}};
  const double nominal = o.radius / bounding_factor(o.shape);
  std::vector<std::array<double, 2>> pts;
  switch (o.shape) {
    case Shape::Circle: break;
    case Shape::Square: {
      const double h = 0.86 * nominal;
      pts = {{o.cx - h, o.cy - h}, {o.cx + h, o.cy - h}, {o.cx + h, o.cy + h}, {o.cx - h, o.cy + h}};
      break;
    }
    case Shape::Triangle:
      for (const auto& v : kTriangle) pts.push_back({o.cx + o.radius * v[0], o.cy + o.radius * v[1]});
      break;
    case Shape::Star:
      for (int k = 0; k < 10; ++k) {
        const double rk = k % 2 == 0 ? o.radius : 0.5 * o.radius;
        pts.push_back({o.cx + rk * kStar[k][0], o.cy + rk * kStar[k][1]});
      }
      break;
  }
  return pts;
}

namespace {

// The geometric extent of the drawn shape, rounded outwards to pixels and clipped to the image.
std::array<int, 4> object_bbox(const Object& o, int image_size) {
  double x0 = o.cx - o.radius, x1 = o.cx + o.radius, y0 = o.cy - o.radius, y1 = o.cy + o.radius;
  const auto pts = object_polygon(o);
  if (!pts.empty()) {
    x0 = y0 = 1e30;
    x1 = y1 = -1e30;
    for (const auto& p : pts) {
      x0 = std::min(x0, p[0]);
      x1 = std::max(x1, p[0]);
      y0 = std::min(y0, p[1]);
      y1 = std::max(y1, p[1]);
    }
  }
  auto clip = [&](double v) { return std::clamp(static_cast<int>(v), 0, image_size - 1); };
  return {clip(std::floor(x0)), clip(std::floor(y0)), clip(std::ceil(x1)), clip(std::ceil(y1))};
}

std::array<uint8_t, 3> light_background(Rng& rng) {
  const int grey = static_cast<int>(rng.uniform_int(175, 235));
  std::array<uint8_t, 3> rgb{};
  for (auto& c : rgb) c = static_cast<uint8_t>(std::clamp<int64_t>(grey + rng.uniform_int(-8, 8), 0, 255));
  return rgb;
}

// Tries to place `o` (shape, colour, size set) at a random spot clear of `placed`.
bool place(Rng& rng, Object& o, const std::vector<Object>& placed, int image_size) {
  constexpr int kTries = 100;
  o.radius = nominal_radius(o.size, image_size) * bounding_factor(o.shape);
  // The bounding circle stays one pixel inside the image; centres on the 1/4-pixel grid.
  const int64_t lo = static_cast<int64_t>(std::ceil((o.radius + 1.0) * 4.0));
  const int64_t hi = static_cast<int64_t>(std::floor((image_size - 2.0 - o.radius) * 4.0));
  if (lo > hi) return false;
  const double gap = object_gap(image_size);
  for (int attempt = 0; attempt < kTries; ++attempt) {
    o.cx = rng.uniform_int(lo, hi) / 4.0;
    o.cy = rng.uniform_int(lo, hi) / 4.0;
    bool clear = true;
    for (const Object& p : placed) {
      const double dx = o.cx - p.cx, dy = o.cy - p.cy, min_dist = o.radius + p.radius + gap;
      if (dx * dx + dy * dy < min_dist * min_dist) {
        clear = false;
        break;
      }
    }
    if (clear) return true;
  }
  return false;
}

}  // namespace

Scene sample_scene(Rng& rng, const WorldOptions& options) {
  const int size = options.image_size;
  Scene scene;
  scene.image_size = size;
  scene.background = static_cast<Background>(rng.uniform_int(0, 2));
  scene.bg_rgb = light_background(rng);
  scene.bg_rgb2 = scene.background == Background::Gradient ? light_background(rng) : scene.bg_rgb;
  scene.gradient_vertical = scene.background == Background::Gradient && rng.bernoulli(0.5);
  scene.texture_seed = scene.background == Background::Noise ? rng.next_u64() : 0;

  const int n_objects = static_cast<int>(rng.uniform_int(1, options.max_objects));
  // Crowded draws (many large objects) may not fit: a large object that finds no room becomes
  // small, and a scene where even that fails is drawn again. Six small objects always fit.
  for (int restart = 0;; ++restart) {
    TRIMKV_ASSERT(restart < 1000, "no room for ", n_objects, " objects in ", size, " px");
    scene.objects.clear();
    bool ok = true;
    for (int i = 0; i < n_objects && ok; ++i) {
      Object o;
      o.shape = static_cast<Shape>(rng.uniform_int(0, kNumShapes - 1));
      o.color = static_cast<Color>(rng.uniform_int(0, kNumColors - 1));
      o.size = static_cast<ObjectSize>(rng.uniform_int(0, kNumSizes - 1));
      bool placed = place(rng, o, scene.objects, size);
      if (!placed && o.size == ObjectSize::Large) {
        o.size = ObjectSize::Small;
        placed = place(rng, o, scene.objects, size);
      }
      if (!placed) {
        ok = false;
        break;
      }
      o.bbox = object_bbox(o, size);
      scene.objects.push_back(o);
    }
    if (ok) break;
  }
  return scene;
}

}  // namespace trimkv::vision::world
