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

std::string format_tick(double v) {
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

namespace {

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

void add_plot_point(std::vector<PlotSeries>& series, const std::string& name, double entries, double value) {
  auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& s) { return s.name == name; });
  if (it == series.end()) it = series.insert(series.end(), PlotSeries{name, {}});
  it->points.emplace_back(entries, value);
}

std::string PlotLayout::x_title() const {
  return std::string(percent ? "KV budget (% of the full cache's peak" : "KV budget (entries") +
         (log_x ? ", log scale)" : ")");
}

std::string PlotLayout::top_title() const { return "KV budget (entries over all layers and heads)"; }

PlotRgb plot_colour(size_t i) {
  static const PlotRgb colours[] = {{214, 39, 40},  {31, 119, 180},  {44, 160, 44},  {255, 127, 14},
                                    {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {23, 190, 207},
                                    {188, 189, 34},  {127, 127, 127}, {0, 0, 0},      {255, 187, 120}};
  return colours[i % (sizeof colours / sizeof colours[0])];
}

bool plot_emphasised(const std::string& name) { return name == "dbtrimkv"; }

PlotLayout plot_layout(const std::vector<PlotSeries>& series, double full_value, double full_entries,
                       const PlotStyle& style) {
  PlotLayout L;
  L.percent = full_entries > 0;
  L.full_entries = full_entries;
  // x: percent of the full cache's peak when known (log axis if the budgets span 4x or more); the
  // y range starts from the full cache's value when there is one.
  const bool have_full = std::isfinite(full_value);
  double x_lo = 1e300, x_hi = L.percent ? 100.0 : 0.0;
  double y_lo = have_full ? full_value : 1e300, y_hi = have_full ? full_value : -1e300;
  std::vector<std::pair<double, size_t>> ranked;  // (rank at the smallest budget, series)
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].points.empty()) continue;
    std::pair<double, double> first = series[i].points.front();
    for (const auto& p : series[i].points) {
      const double x = L.x_of(p.first);
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, p.second), y_hi = std::max(y_hi, p.second);
      if (p.first < first.first) first = p;
    }
    ranked.emplace_back(style.fraction ? -first.second : first.second, i);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& r : ranked) L.legend.push_back(r.second);
  if (x_hi <= 0) x_hi = 1;
  if (x_lo > x_hi) x_lo = x_hi / 2;
  if (x_lo <= 0) x_lo = x_hi / 100;
  if (y_lo > y_hi) y_lo = 0, y_hi = 1;  // nothing to plot yet
  L.log_x = x_hi / x_lo >= 4;
  if (L.log_x) {
    x_lo = std::pow(10.0, std::log10(x_lo) - 0.08), x_hi = std::pow(10.0, std::log10(x_hi) + 0.03);
    L.x_ticks = round_log_ticks(x_lo, x_hi);
    if (L.x_ticks.size() < 3) L.x_ticks = round_ticks(x_lo, x_hi, 5);
  } else {
    const double pad = (x_hi - x_lo) * 0.06 + x_hi * 1e-3;
    L.x_ticks = round_ticks(std::max(0.0, x_lo - pad), x_hi + pad, 6);
    x_lo = std::min(L.x_ticks.front(), x_lo - pad), x_hi = std::max(L.x_ticks.back(), x_hi + pad);
  }
  // y: the fraction axis from a round value below the data to 1; other metrics padded around the data.
  if (style.fraction) {
    y_lo = std::max(0.0, std::floor((y_lo - 0.05) * 10) / 10), y_hi = 1.0;
    if (y_lo < 0.3) y_lo = 0;
    L.y_ticks = round_ticks(y_lo, y_hi, 6);
  } else {
    const double pad = std::max((y_hi - y_lo) * 0.08, std::abs(y_hi) * 0.01 + 1e-9);
    L.y_ticks = round_ticks(y_lo - pad, y_hi + pad, 6);
    y_lo = std::min(L.y_ticks.front(), y_lo - pad), y_hi = std::max(L.y_ticks.back(), y_hi + pad);
  }
  L.x_lo = x_lo, L.x_hi = x_hi, L.y_lo = y_lo, L.y_hi = y_hi;
  return L;
}

void write_accuracy_plot(const std::string& path, const std::vector<PlotSeries>& series, double full_value,
                         double full_entries, const PlotStyle& style) {
  const int W = 960, H = 620, left = 100, right = 210, top = 86, bottom = 96;
  const int pw = W - left - right, ph = H - top - bottom;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));  // R, G, B order
  const cv::Scalar grid(225, 225, 225), axis_grey(90, 90, 90);
  const Text ticks{img, 0.62}, labels{img, 0.68};

  const PlotLayout L = plot_layout(series, full_value, full_entries, style);
  const bool percent = L.percent, log_x = L.log_x;
  const double x_lo = L.x_lo, x_hi = L.x_hi, y_lo = L.y_lo, y_hi = L.y_hi;
  const std::vector<double>& xt = L.x_ticks;
  const std::vector<double>& yt = L.y_ticks;
  auto x_of = [&](double entries) { return L.x_of(entries); };
  auto px = [&](double xv) {
    const double f = log_x ? (std::log(xv) - std::log(x_lo)) / (std::log(x_hi) - std::log(x_lo)) : (xv - x_lo) / (x_hi - x_lo);
    return left + static_cast<int>(std::lround(f * pw));
  };
  auto py = [&](double y) { return top + ph - static_cast<int>(std::lround((y - y_lo) / (y_hi - y_lo) * ph)); };

  // Grid, ticks, axis labels.
  for (double y : yt) {
    if (y < y_lo - 1e-12 || y > y_hi + 1e-12) continue;
    cv::line(img, {left, py(y)}, {left + pw, py(y)}, grid, 1);
    char buf[32];
    if (style.fraction) std::snprintf(buf, sizeof buf, "%.0f%%", y * 100);
    ticks.put(style.fraction ? std::string(buf) : format_tick(y), left - 10, py(y), 1);
  }
  for (double x : xt) {
    if (x < x_lo || x > x_hi) continue;
    cv::line(img, {px(x), top}, {px(x), top + ph}, grid, 1);
    cv::line(img, {px(x), top + ph}, {px(x), top + ph + 6}, axis_grey, 1);
    ticks.put(percent ? format_tick(x) + "%" : format_tick(x), px(x), top + ph + 20, 0);
    if (percent) {
      cv::line(img, {px(x), top}, {px(x), top - 6}, axis_grey, 1);
      ticks.put(format_tick(std::round(L.entries_of(x))), px(x), top - 18, 0);
    }
  }
  cv::rectangle(img, {left, top}, {left + pw, top + ph}, axis_grey, 1);
  labels.put(L.x_title(), left + pw / 2, top + ph + 56, 0);
  if (percent) labels.put(L.top_title(), left + pw / 2, top - 50, 0);
  labels.put(style.y_label, 14, top - 50, -1);

  // The full cache: a dashed line across, its point at 100%.
  const cv::Scalar full_colour(60, 60, 60);
  const bool have_full = std::isfinite(full_value);
  if (have_full) dashed(img, {left, py(full_value)}, {left + pw, py(full_value)}, full_colour, 2);
  if (have_full && percent) cv::circle(img, {px(100.0), py(full_value)}, 5, full_colour, cv::FILLED, cv::LINE_AA);

  // Policies: distinct colours (dbtrimkv thicker), a legend beside the plot in the layout's order,
  // the full cache first.
  auto colour_of = [](size_t i) {
    const PlotRgb c = plot_colour(i);
    return cv::Scalar(c[0], c[1], c[2]);
  };
  auto width_of = [&](size_t i) { return plot_emphasised(series[i].name) ? 4 : 2; };
  for (size_t i : L.legend) {
    const cv::Scalar c = colour_of(i);
    const int width = width_of(i);
    std::vector<std::pair<double, double>> pts = series[i].points;
    std::sort(pts.begin(), pts.end());
    for (size_t k = 0; k < pts.size(); ++k) {
      const cv::Point p(px(x_of(pts[k].first)), py(pts[k].second));
      if (k > 0) cv::line(img, {px(x_of(pts[k - 1].first)), py(pts[k - 1].second)}, p, c, width, cv::LINE_AA);
      cv::circle(img, p, width + 3, c, cv::FILLED, cv::LINE_AA);
    }
  }
  const int row = labels.size("Hg").height + 14, lx = left + pw + 18;
  int ly = top + 12;
  if (have_full) {
    dashed(img, {lx, ly}, {lx + 34, ly}, full_colour, 2);
    labels.put("full cache", lx + 44, ly, -1);
  } else {
    ly -= row;
  }
  for (size_t i : L.legend) {
    ly += row;
    cv::line(img, {lx, ly}, {lx + 34, ly}, colour_of(i), width_of(i), cv::LINE_AA);
    cv::circle(img, {lx + 17, ly}, width_of(i) + 3, colour_of(i), cv::FILLED, cv::LINE_AA);
    labels.put(series[i].name, lx + 44, ly, -1);
  }
  TRIMKV_CHECK(stbi_write_png(path.c_str(), W, H, 3, img.data, W * 3) != 0, Io, path, ": cannot write the PNG");
}

}  // namespace trimkv::vision::world
