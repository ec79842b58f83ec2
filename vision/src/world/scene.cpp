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
  static const char* const kNames[] = {"plain", "noise", "gradient", "texture"};
  return kNames[static_cast<int>(background)];
}
const char* renderer_name(Renderer renderer) { return renderer == Renderer::OpenCv ? "opencv" : "supersample"; }
const char* split_name(Split split) {
  static const char* const kNames[] = {"train", "val", "test"};
  return kNames[static_cast<int>(split)];
}

ColorRange color_range(Color color) {
  static const ColorRange kRanges[] = {
      {350, 10, 0.65, 1.0, 0.55, 1.0},   // red
      {95, 150, 0.6, 1.0, 0.45, 0.95},   // green
      {205, 245, 0.6, 1.0, 0.55, 1.0},   // blue
      {48, 60, 0.7, 1.0, 0.8, 1.0},      // yellow (darker is olive)
      {265, 300, 0.5, 0.9, 0.45, 0.9},   // purple
      {22, 38, 0.75, 1.0, 0.85, 1.0},    // orange (darker is brown)
  };
  return kRanges[static_cast<int>(color)];
}

std::array<uint8_t, 3> hsv_to_rgb(double h, double s, double v) {
  h = std::fmod(h, 360.0);
  if (h < 0) h += 360.0;
  const double c = v * s, hp = h / 60.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(hp)) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  const double m = v - c;
  auto to8 = [](double u) { return static_cast<uint8_t>(std::clamp(std::floor(u * 255.0 + 0.5), 0.0, 255.0)); };
  return {to8(r + m), to8(g + m), to8(b + m)};
}

Split parse_split(const std::string& name) {
  if (name == "train") return Split::Train;
  if (name == "val" || name == "validation") return Split::Val;
  if (name == "test") return Split::Test;
  TRIMKV_FAIL(Input, "unknown split '", name, "' (expected train, val or test)");
}

void validate(const WorldOptions& o) {
  TRIMKV_CHECK(o.min_image_size >= kMinImageSize && o.min_image_size <= kMaxImageSize, Input, "min_image_size ",
               o.min_image_size, " is out of range: it must be in ", kMinImageSize, "..", kMaxImageSize);
  TRIMKV_CHECK(o.max_image_size >= o.min_image_size && o.max_image_size <= kMaxImageSize, Input, "max_image_size ",
               o.max_image_size, " is out of range: it must be in ", o.min_image_size, " (min_image_size)..",
               kMaxImageSize);
  TRIMKV_CHECK(o.max_images >= 1 && o.max_images <= kMaxImagesLimit, Input, "max_images ", o.max_images,
               " must be in 1..", kMaxImagesLimit);
  TRIMKV_CHECK(o.max_turns >= 1 && o.max_turns <= kMaxTurnsLimit, Input, "max_turns ", o.max_turns,
               " must be in 1..", kMaxTurnsLimit);
  TRIMKV_CHECK(o.max_objects >= 1 && o.max_objects <= kMaxObjectsLimit, Input, "max_objects ",
               o.max_objects, " must be in 1..", kMaxObjectsLimit);
  TRIMKV_CHECK(o.min_objects >= 1 && o.min_objects <= o.max_objects, Input, "min_objects ", o.min_objects,
               " must be in 1..", o.max_objects, " (max_objects)");
}

namespace {
double quarter(double v) { return std::floor(v * 4.0 + 0.5) / 4.0; }

// Width over bounding radius, unrotated: circle 2, square sqrt(2), triangle sqrt(3), star
// 2 sin(72 deg).
constexpr double kWidthOverRadius[] = {2.0, 1.4142135623730951, 1.7320508075688772, 1.9021130325903071};
}  // namespace

double shape_width(Shape shape, double radius) { return radius * kWidthOverRadius[static_cast<int>(shape)]; }

std::array<double, 2> radius_range(Shape shape, ObjectSize size, int image_size) {
  const double lo = size == ObjectSize::Small ? 0.08 : 0.22, hi = size == ObjectSize::Small ? 0.18 : 0.40;
  const double k = kWidthOverRadius[static_cast<int>(shape)];
  return {std::max(4.0, quarter(lo * image_size / k)), std::max(4.0, quarter(hi * image_size / k))};
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
  // cos and sin of k * kRotationStep degrees, k = -8..8.
  static constexpr double kRotation[2 * kMaxRotationSteps + 1][2] = {
      {0.9396926207859084, -0.3420201433256687},  {0.9537169507482269, -0.3007057995042731},
      {0.9659258262890683, -0.25881904510252074}, {0.9762960071199334, -0.21643961393810288},
      {0.984807753012208, -0.17364817766693033},  {0.9914448613738104, -0.13052619222005157},
      {0.9961946980917455, -0.08715574274765817}, {0.9990482215818578, -0.043619387365336},
      {1.0, 0.0},
      {0.9990482215818578, 0.043619387365336},    {0.9961946980917455, 0.08715574274765817},
      {0.9914448613738104, 0.13052619222005157},  {0.984807753012208, 0.17364817766693033},
      {0.9762960071199334, 0.21643961393810288},  {0.9659258262890683, 0.25881904510252074},
      {0.9537169507482269, 0.3007057995042731},   {0.9396926207859084, 0.3420201433256687}};
  const int step = std::clamp(o.rotation, -kMaxRotationSteps, kMaxRotationSteps);
  const double c = kRotation[step + kMaxRotationSteps][0], sn = kRotation[step + kMaxRotationSteps][1];
  // Unit-circle offsets scaled by r, rotated (clockwise on screen, y down) about the centre.
  std::vector<std::array<double, 2>> pts;
  auto add = [&](double ux, double uy, double r) {
    const double x = ux * r, y = uy * r;
    pts.push_back({o.cx + c * x - sn * y, o.cy + sn * x + c * y});
  };
  switch (o.shape) {
    case Shape::Circle: break;
    case Shape::Square: {
      const double h = 0.86 / bounding_factor(Shape::Square);  // half-side over the bounding radius
      add(-h, -h, o.radius), add(h, -h, o.radius), add(h, h, o.radius), add(-h, h, o.radius);
      break;
    }
    case Shape::Triangle:
      for (const auto& v : kTriangle) add(v[0], v[1], o.radius);
      break;
    case Shape::Star:
      for (int k = 0; k < 10; ++k) add(kStar[k][0], kStar[k][1], k % 2 == 0 ? o.radius : 0.5 * o.radius);
      break;
  }
  return pts;
}

bool object_covers(const Object& o, double x, double y) { return shape_covers(o, object_polygon(o), x, y); }

bool shape_covers(const Object& o, const std::vector<std::array<double, 2>>& poly, double x, double y) {
  if (poly.empty()) return (x - o.cx) * (x - o.cx) + (y - o.cy) * (y - o.cy) <= o.radius * o.radius;
  bool inside = false;
  for_each_crossing(poly, y, [&](double crossing) { inside ^= x < crossing; });
  return inside;
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

// A nearly grey background colour (saturation <= ~0.12) from dark to light.
std::array<uint8_t, 3> background_colour(Rng& rng) {
  const int grey = static_cast<int>(rng.uniform_int(12, 242));
  const int tint = std::max<int>(2, grey / 16);  // per-channel tint: saturation stays under ~0.13
  std::array<uint8_t, 3> rgb{};
  for (auto& c : rgb) c = static_cast<uint8_t>(std::clamp<int64_t>(grey + rng.uniform_int(-tint, tint), 0, 255));
  return rgb;
}

// The object's fill from its colour's range, and an outline on about one object in four (black,
// white or a darker shade of the fill; 1 px, or 2 px on large images), kept by place() only on
// objects at least kMinOutlinedWidth wide.
void style_object(Rng& rng, Object& o, int image_size) {
  const ColorRange r = color_range(o.color);
  const double span = r.hue_hi >= r.hue_lo ? r.hue_hi - r.hue_lo : r.hue_hi + 360.0 - r.hue_lo;
  o.rgb = hsv_to_rgb(r.hue_lo + span * rng.uniform01(), r.sat_lo + (r.sat_hi - r.sat_lo) * rng.uniform01(),
                     r.val_lo + (r.val_hi - r.val_lo) * rng.uniform01());
  if (o.shape != Shape::Circle) o.rotation = static_cast<int>(rng.uniform_int(-kMaxRotationSteps, kMaxRotationSteps));
  if (rng.bernoulli(0.25)) {
    o.outline = image_size >= 200 && rng.bernoulli(0.5) ? 2 : 1;
    switch (rng.uniform_int(0, 2)) {
      case 0: o.outline_rgb = {20, 20, 20}; break;
      case 1: o.outline_rgb = {240, 240, 240}; break;
      default:
        for (int c = 0; c < 3; ++c) o.outline_rgb[c] = static_cast<uint8_t>(o.rgb[c] * 11 / 20);
    }
  }
}

// Tries to place `o` (shape, colour, size set) at a random spot clear of `placed`.
bool place(Rng& rng, Object& o, const std::vector<Object>& placed, int image_size) {
  constexpr int kTries = 100;
  const auto [r_lo, r_hi] = radius_range(o.shape, o.size, image_size);
  o.radius = rng.uniform_int(static_cast<int64_t>(r_lo * 4), static_cast<int64_t>(r_hi * 4)) / 4.0;
  // The bounding circle stays one pixel inside the image; centres on the 1/4-pixel grid.
  const int64_t lo = static_cast<int64_t>(std::ceil((o.radius + 1.0) * 4.0));
  const int64_t hi = static_cast<int64_t>(std::floor((image_size - 2.0 - o.radius) * 4.0));
  if (lo > hi) return false;
  if (shape_width(o.shape, o.radius) < kMinOutlinedWidth) o.outline = 0;
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

int sample_image_size(Rng& rng, const WorldOptions& options) {
  if (options.min_image_size == options.max_image_size) return options.min_image_size;
  // About log-uniform (as many sides from 48 to 96 px as from 200 to 400): each integer side
  // weighted by 1/side (no exp/log, whose last bit may differ between libms).
  std::vector<double> weights;
  for (int s = options.min_image_size; s <= options.max_image_size; ++s) weights.push_back(1.0 / s);
  return options.min_image_size + static_cast<int>(rng.weighted(weights));
}

Scene sample_scene(Rng& rng, const WorldOptions& options) {
  const int size = sample_image_size(rng, options);
  Scene scene;
  scene.image_size = size;
  // Backgrounds: plain 30%, noise 20%, gradient 30% (16 directions), soft texture 20%.
  scene.background = static_cast<Background>(rng.weighted({0.3, 0.2, 0.3, 0.2}));
  scene.bg_rgb = background_colour(rng);
  scene.bg_rgb2 = scene.bg_rgb;
  if (scene.background == Background::Gradient) {
    scene.bg_rgb2 = background_colour(rng);
    scene.gradient_direction = static_cast<int>(rng.uniform_int(0, 15));
  }
  if (scene.background == Background::Noise || scene.background == Background::Texture) {
    scene.noise_amplitude = static_cast<int>(rng.uniform_int(4, scene.background == Background::Noise ? 16 : 28));
    scene.texture_seed = rng.next_u64();
  }
  scene.renderer = rng.bernoulli(0.5) ? Renderer::OpenCv : Renderer::Supersample;
  scene.antialias = rng.bernoulli(0.7);

  const int n_objects = static_cast<int>(rng.uniform_int(options.min_objects, options.max_objects));
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
      style_object(rng, o, size);
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
