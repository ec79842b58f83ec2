// Pillow's resampling (libImaging/Resample.c, ImagingResample for 8-bit images), transcribed so
// results are bit-identical: the same kernels and supports, the same double-precision
// coefficient computation, the same 22-bit fixed-point rounding and clipping, the same pass order
// and the same 8-bit intermediate image.
#include "trimkv/vision/resample.h"

#include <algorithm>
#include <cmath>

#include "trimkv/core/error.h"

namespace trimkv::vision {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double box_filter(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }
double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}
double hamming_filter(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  return std::sin(x) / x * (static_cast<double>(0.54f) + static_cast<double>(0.46f) * std::cos(x));
}
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double sinc_filter(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}
double lanczos_filter(double x) {
  return (-3.0 <= x && x < 3.0) ? sinc_filter(x) * sinc_filter(x / 3) : 0.0;
}

struct Filter {
  double (*fn)(double);
  double support;
};

Filter filter_of(ResampleFilter f) {
  switch (f) {
    case ResampleFilter::Box: return {box_filter, 0.5};
    case ResampleFilter::Bilinear: return {bilinear_filter, 1.0};
    case ResampleFilter::Hamming: return {hamming_filter, 1.0};
    case ResampleFilter::Bicubic: return {bicubic_filter, 2.0};
    case ResampleFilter::Lanczos: return {lanczos_filter, 3.0};
    case ResampleFilter::Nearest: break;
  }
  TRIMKV_FAIL(Unsupported, "resampling filter 'nearest' is not implemented");
}

// Per output pixel: the first input pixel, the number of taps and the fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  // [out_size * 2]: xmin, count
  std::vector<int32_t> k;   // [out_size * ksize]
};

Coeffs precompute(int in_size, int out_size, const Filter& filter) {
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  double scale = static_cast<double>(in1 - in0) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  std::vector<double> kk(static_cast<size_t>(out_size) * c.ksize, 0.0);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double* k = &kk[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double w = filter.fn((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x)
      if (ww != 0.0) k[x] /= ww;
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
  c.k.resize(kk.size());
  for (size_t i = 0; i < kk.size(); ++i)
    c.k[i] = kk[i] < 0 ? static_cast<int32_t>(-0.5 + kk[i] * (1 << kPrecisionBits))
                       : static_cast<int32_t>(0.5 + kk[i] * (1 << kPrecisionBits));
  return c;
}

inline uint8_t clip8(int32_t v) {
  const int32_t s = v >> kPrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

// out row yy = input row yy + row_offset, resampled along x.
RgbImage horizontal(const RgbImage& in, int out_w, int row_offset, int n_rows, const Coeffs& c) {
  RgbImage out;
  out.width = out_w;
  out.height = n_rows;
  out.data.resize(static_cast<size_t>(out_w) * n_rows * 3);
  for (int yy = 0; yy < n_rows; ++yy) {
    const uint8_t* row = &in.data[static_cast<size_t>(yy + row_offset) * in.width * 3];
    uint8_t* orow = &out.data[static_cast<size_t>(yy) * out_w * 3];
    for (int xx = 0; xx < out_w; ++xx) {
      const int xmin = c.bounds[xx * 2], xmax = c.bounds[xx * 2 + 1];
      const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < xmax; ++x) {
        const uint8_t* p = row + (x + xmin) * 3;
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      orow[xx * 3] = clip8(s0);
      orow[xx * 3 + 1] = clip8(s1);
      orow[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

RgbImage vertical(const RgbImage& in, int out_h, const Coeffs& c, int bound_shift) {
  RgbImage out;
  out.width = in.width;
  out.height = out_h;
  out.data.resize(static_cast<size_t>(in.width) * out_h * 3);
  const size_t stride = static_cast<size_t>(in.width) * 3;
  // A whole output row's sums at once, tap by tap: each sum adds the same terms in the same order
  // as Pillow's per-pixel loop (integers: the same bits), but the inner loop runs along the row.
  std::vector<int32_t> sums(stride);
  for (int yy = 0; yy < out_h; ++yy) {
    const int ymin = c.bounds[yy * 2] - bound_shift, ymax = c.bounds[yy * 2 + 1];
    const int32_t* k = &c.k[static_cast<size_t>(yy) * c.ksize];
    std::fill(sums.begin(), sums.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < ymax; ++y) {
      const uint8_t* row = &in.data[static_cast<size_t>(y + ymin) * stride];
      const int32_t w = k[y];
      for (size_t xc = 0; xc < stride; ++xc) sums[xc] += row[xc] * w;
    }
    uint8_t* orow = &out.data[yy * stride];
    for (size_t xc = 0; xc < stride; ++xc) orow[xc] = clip8(sums[xc]);
  }
  return out;
}

}  // namespace

ResampleFilter resample_filter_from_pil(int v, const std::string& where) {
  TRIMKV_CHECK(v >= 1 && v <= 5, Unsupported, where, ": resample = ", v,
               " is not supported (Pillow filters 1 LANCZOS, 2 BILINEAR, 3 BICUBIC, 4 BOX, 5 HAMMING)");
  return static_cast<ResampleFilter>(v);
}

const char* resample_filter_name(ResampleFilter f) {
  switch (f) {
    case ResampleFilter::Nearest: return "nearest";
    case ResampleFilter::Lanczos: return "lanczos";
    case ResampleFilter::Bilinear: return "bilinear";
    case ResampleFilter::Bicubic: return "bicubic";
    case ResampleFilter::Box: return "box";
    case ResampleFilter::Hamming: return "hamming";
  }
  return "?";
}

RgbImage resize(const RgbImage& in, int width, int height, ResampleFilter filter) {
  TRIMKV_CHECK(width >= 1 && height >= 1, Input, "cannot resize an image to ", width, "x", height);
  TRIMKV_CHECK(in.width >= 1 && in.height >= 1, Input, "cannot resize an empty image");
  if (width == in.width && height == in.height) return in;  // PIL returns a copy
  const Filter f = filter_of(filter);
  const bool need_h = width != in.width, need_v = height != in.height;
  const Coeffs ch = precompute(in.width, width, f);
  const Coeffs cv = precompute(in.height, height, f);
  // Rows of the input the vertical pass reads: only those go through the horizontal pass.
  const int ybox_first = cv.bounds[0];
  const int ybox_last = cv.bounds[height * 2 - 2] + cv.bounds[height * 2 - 1];
  if (!need_h) return vertical(in, height, cv, 0);
  if (!need_v) return horizontal(in, width, 0, in.height, ch);
  // Pillow 13 (what transformers installs; libImaging/Resample.c) runs the vertical pass first
  // when the height shrinks by more than twice as many pixels as the width does; the 8-bit
  // intermediate image makes the order visible (up to 10 levels on a 100x30 -> 112x28 BICUBIC).
  const bool horizontal_first = !(in.height - height > 0 && in.height - height > (in.width - width) * 2);
  if (!horizontal_first) return horizontal(vertical(in, height, cv, 0), width, 0, height, ch);
  RgbImage tmp = horizontal(in, width, ybox_first, ybox_last - ybox_first, ch);
  return vertical(tmp, height, cv, ybox_first);
}

RgbImage crop(const RgbImage& in, int x0, int y0, int width, int height) {
  TRIMKV_ASSERT(x0 >= 0 && y0 >= 0 && width >= 0 && height >= 0 && x0 + width <= in.width &&
                y0 + height <= in.height);
  RgbImage out;
  out.width = width;
  out.height = height;
  out.data.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    std::copy_n(&in.data[(static_cast<size_t>(y + y0) * in.width + x0) * 3], static_cast<size_t>(width) * 3,
                &out.data[static_cast<size_t>(y) * width * 3]);
  return out;
}

}  // namespace trimkv::vision
