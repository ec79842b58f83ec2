// The eval-sweep figure: a metric (accuracy, or perplexity) against the KV budget, drawn with
// OpenCV (core + imgproc; cv::putText's Hershey fonts need no other module) and written with
// stb_image_write. Laid out for a paper: the budget as a percentage of the full cache's peak on a
// log axis with round ticks (1-2-5 per decade), the same ticks in entries along the top, each
// policy's line labelled at its end, the full cache dashed, text legible at half size.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <opencv2/imgproc.hpp>
#include <stb_image_write.h>

#include "trimkv/core/error.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::vision::world {

std::vector<double> round_ticks(double lo, double hi, int max_ticks) {
  TRIMKV_ASSERT(hi > lo && max_ticks >= 2, "round_ticks(", lo, ", ", hi, ", ", max_ticks, ")");
  const double raw = (hi - lo) / (max_ticks - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return ticks;
}

std::vector<double> round_log_ticks(double lo, double hi) {
  TRIMKV_ASSERT(lo > 0 && hi > lo, "round_log_ticks(", lo, ", ", hi, ")");
  std::vector<double> ticks;
  for (int d = static_cast<int>(std::floor(std::log10(lo))); d <= static_cast<int>(std::ceil(std::log10(hi))); ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
    }
  return ticks;
}

namespace {

std::string format_number(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a >= 1e6) std::snprintf(buf, sizeof buf, a >= 1e7 ? "%.0fM" : "%.1fM", v / 1e6);
  else if (a >= 1e3) std::snprintf(buf, sizeof buf, a >= 1e4 ? "%.0fK" : "%.1fK", v / 1e3);
  else if (a == std::floor(a) || a >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, a >= 10 ? "%.1f" : "%.2g", v);
  std::string s = buf;
  const size_t dot = s.find(".0");  // "1.0K" -> "1K"
  if (dot != std::string::npos && (dot + 2 == s.size() || !std::isdigit(static_cast<unsigned char>(s[dot + 2]))))
    s.erase(dot, 2);
  return s;
}

struct Text {
  cv::Mat& img;
  double scale;
  cv::Size size(const std::string& s) const {
    int base = 0;
    return cv::getTextSize(s, cv::FONT_HERSHEY_SIMPLEX, scale, 1, &base);
  }
  // Anchored at (x, y): h = -1 left, 0 centre, 1 right; vertically centred on y.
  void put(const std::string& s, int x, int y, int h, const cv::Scalar& c = cv::Scalar(0, 0, 0)) const {
    const cv::Size z = size(s);
    const int x0 = h < 0 ? x : h == 0 ? x - z.width / 2 : x - z.width;
    cv::putText(img, s, {x0, y + z.height / 2}, cv::FONT_HERSHEY_SIMPLEX, scale, c, 1, cv::LINE_AA);
  }
};

void dashed(cv::Mat& img, cv::Point a, cv::Point b, const cv::Scalar& c, int thickness) {
  const double len = std::hypot(b.x - a.x, b.y - a.y);
  for (double t = 0; t < len; t += 14) {
    const double t1 = std::min(len, t + 8);
    cv::line(img, {a.x + static_cast<int>((b.x - a.x) * t / len), a.y + static_cast<int>((b.y - a.y) * t / len)},
             {a.x + static_cast<int>((b.x - a.x) * t1 / len), a.y + static_cast<int>((b.y - a.y) * t1 / len)}, c,
             thickness, cv::LINE_AA);
  }
}

}  // namespace

void write_accuracy_plot(const std::string& path, const std::vector<PlotSeries>& series, double full_value,
                         double full_entries, const PlotStyle& style) {
  const int W = 960, H = 620, left = 100, right = 210, top = 86, bottom = 96;
  const int pw = W - left - right, ph = H - top - bottom;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));  // R, G, B order
  const cv::Scalar black(0, 0, 0), grid(225, 225, 225), axis_grey(90, 90, 90);
  const Text ticks{img, 0.62}, labels{img, 0.68};

  // x: percent of the full cache's peak when known (log axis if the budgets span 4x or more).
  const bool percent = full_entries > 0;
  auto x_of = [&](double entries) { return percent ? 100.0 * entries / full_entries : entries; };
  double x_lo = 1e300, x_hi = percent ? 100.0 : 0.0, y_lo = full_value, y_hi = full_value;
  for (const PlotSeries& s : series)
    for (const auto& [x, y] : s.points) {
      x_lo = std::min(x_lo, x_of(x)), x_hi = std::max(x_hi, x_of(x));
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  if (x_lo > x_hi) x_lo = x_hi / 2;
  if (x_lo <= 0) x_lo = x_hi / 100;
  const bool log_x = x_hi / x_lo >= 4;
  std::vector<double> xt;
  if (log_x) {
    x_lo = std::pow(10.0, std::log10(x_lo) - 0.08), x_hi = std::pow(10.0, std::log10(x_hi) + 0.03);
    xt = round_log_ticks(x_lo, x_hi);
    if (xt.size() < 3) xt = round_ticks(x_lo, x_hi, 5);
  } else {
    const double pad = (x_hi - x_lo) * 0.06 + 1e-9;
    xt = round_ticks(std::max(0.0, x_lo - pad), x_hi + pad, 6);
    x_lo = std::min(xt.front(), x_lo - pad), x_hi = std::max(xt.back(), x_hi + pad);
  }
  auto px = [&](double xv) {
    const double f = log_x ? (std::log(xv) - std::log(x_lo)) / (std::log(x_hi) - std::log(x_lo)) : (xv - x_lo) / (x_hi - x_lo);
    return left + static_cast<int>(std::lround(f * pw));
  };
  // y: the fraction axis from a round value below the data to 1; other metrics padded around the data.
  std::vector<double> yt;
  if (style.fraction) {
    y_lo = std::max(0.0, std::floor((y_lo - 0.05) * 10) / 10), y_hi = 1.0;
    if (y_lo < 0.3) y_lo = 0;
    yt = round_ticks(y_lo, y_hi, 6);
  } else {
    const double pad = std::max((y_hi - y_lo) * 0.08, std::abs(y_hi) * 0.01 + 1e-9);
    yt = round_ticks(y_lo - pad, y_hi + pad, 6);
    y_lo = std::min(yt.front(), y_lo - pad), y_hi = std::max(yt.back(), y_hi + pad);
  }
  auto py = [&](double y) { return top + ph - static_cast<int>(std::lround((y - y_lo) / (y_hi - y_lo) * ph)); };

  // Grid, ticks, axis labels.
  for (double y : yt) {
    if (y < y_lo - 1e-12 || y > y_hi + 1e-12) continue;
    cv::line(img, {left, py(y)}, {left + pw, py(y)}, grid, 1);
    char buf[32];
    if (style.fraction) std::snprintf(buf, sizeof buf, "%.0f%%", y * 100);
    ticks.put(style.fraction ? std::string(buf) : format_number(y), left - 10, py(y), 1);
  }
  for (double x : xt) {
    if (x < x_lo || x > x_hi) continue;
    cv::line(img, {px(x), top}, {px(x), top + ph}, grid, 1);
    cv::line(img, {px(x), top + ph}, {px(x), top + ph + 6}, axis_grey, 1);
    ticks.put(percent ? format_number(x) + "%" : format_number(x), px(x), top + ph + 20, 0);
    if (percent) {
      cv::line(img, {px(x), top}, {px(x), top - 6}, axis_grey, 1);
      ticks.put(format_number(x * full_entries / 100.0), px(x), top - 18, 0);
    }
  }
  cv::rectangle(img, {left, top}, {left + pw, top + ph}, axis_grey, 1);
  labels.put(percent ? "KV budget (% of the full cache's peak, log scale)" : "KV budget (entries)", left + pw / 2,
             top + ph + 56, 0);
  if (percent) labels.put("KV budget (entries over all layers and heads)", left + pw / 2, top - 50, 0);
  labels.put(style.y_label, 14, top - 50, -1);

  // The full cache: a dashed line across, its point at 100%.
  const cv::Scalar full_colour(60, 60, 60);
  dashed(img, {left, py(full_value)}, {left + pw, py(full_value)}, full_colour, 2);
  if (percent) cv::circle(img, {px(100.0), py(full_value)}, 5, full_colour, cv::FILLED, cv::LINE_AA);

  // Policies: distinct colours (dbtrimkv thicker), a legend beside the plot ordered by the value at
  // each policy's smallest budget (where the policies differ most), the full cache first.
  static const cv::Scalar colours[] = {{214, 39, 40},  {31, 119, 180},  {44, 160, 44},  {255, 127, 14},
                                       {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {23, 190, 207},
                                       {188, 189, 34},  {127, 127, 127}, {0, 0, 0},      {255, 187, 120}};
  constexpr size_t kColours = sizeof colours / sizeof colours[0];
  struct Entry {
    double rank;
    std::string text;
    cv::Scalar colour;
    int width;
  };
  std::vector<Entry> legend;
  for (size_t i = 0; i < series.size(); ++i) {
    const cv::Scalar c = colours[i % kColours];
    const int width = series[i].name == "dbtrimkv" ? 4 : 2;
    std::vector<std::pair<double, double>> pts = series[i].points;
    if (pts.empty()) continue;
    std::sort(pts.begin(), pts.end());
    for (size_t k = 0; k < pts.size(); ++k) {
      const cv::Point p(px(x_of(pts[k].first)), py(pts[k].second));
      if (k > 0) cv::line(img, {px(x_of(pts[k - 1].first)), py(pts[k - 1].second)}, p, c, width, cv::LINE_AA);
      cv::circle(img, p, width + 3, c, cv::FILLED, cv::LINE_AA);
    }
    legend.push_back({style.fraction ? -pts.front().second : pts.front().second, series[i].name, c, width});
  }
  std::stable_sort(legend.begin(), legend.end(), [](const Entry& a, const Entry& b) { return a.rank < b.rank; });
  const int row = labels.size("Hg").height + 14, lx = left + pw + 18;
  int ly = top + 12;
  dashed(img, {lx, ly}, {lx + 34, ly}, full_colour, 2);
  labels.put("full cache", lx + 44, ly, -1);
  for (const Entry& e : legend) {
    ly += row;
    cv::line(img, {lx, ly}, {lx + 34, ly}, e.colour, e.width, cv::LINE_AA);
    cv::circle(img, {lx + 17, ly}, e.width + 3, e.colour, cv::FILLED, cv::LINE_AA);
    labels.put(e.text, lx + 44, ly, -1);
  }
  TRIMKV_CHECK(stbi_write_png(path.c_str(), W, H, 3, img.data, W * 3) != 0, Io, path, ": cannot write the PNG");
}

}  // namespace trimkv::vision::world
