// The eval-sweep plot: accuracy vs KV budget, drawn with OpenCV (core + imgproc; cv::putText's
// Hershey fonts need no other module) and written with stb_image_write.
#include <algorithm>
#include <cstdio>

#include <opencv2/imgproc.hpp>
#include <stb_image_write.h>

#include "trimkv/core/error.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::vision::world {

void write_accuracy_plot(const std::string& path, const std::vector<PlotSeries>& series, double full_accuracy,
                         double full_entries) {
  const int W = 720, H = 480, left = 70, right = 170, top = 30, bottom = 60;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));  // R, G, B order
  double x_max = std::max(full_entries, 1.0);
  for (const PlotSeries& s : series)
    for (const auto& [x, y] : s.points) x_max = std::max(x_max, x);
  const int pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + static_cast<int>(x / x_max * pw + 0.5); };
  auto py = [&](double y) { return top + ph - static_cast<int>(std::clamp(y, 0.0, 1.0) * ph + 0.5); };
  const cv::Scalar black(0, 0, 0), grey(200, 200, 200);
  const int font = cv::FONT_HERSHEY_SIMPLEX;
  char buf[64];
  for (int i = 0; i <= 5; ++i) {  // grid and tick labels
    const double y = i / 5.0, x = x_max * i / 5.0;
    cv::line(img, {left, py(y)}, {left + pw, py(y)}, grey, 1);
    std::snprintf(buf, sizeof buf, "%.1f", y);
    cv::putText(img, buf, {left - 40, py(y) + 5}, font, 0.45, black, 1, cv::LINE_AA);
    cv::line(img, {px(x), top + ph}, {px(x), top + ph + 5}, black, 1);
    std::snprintf(buf, sizeof buf, "%.0f", x);
    cv::putText(img, buf, {px(x) - 15, top + ph + 22}, font, 0.45, black, 1, cv::LINE_AA);
  }
  cv::rectangle(img, {left, top}, {left + pw, top + ph}, black, 1);
  cv::putText(img, "KV budget (entries)", {left + pw / 2 - 80, H - 15}, font, 0.5, black, 1, cv::LINE_AA);
  cv::putText(img, "accuracy", {5, top - 10}, font, 0.5, black, 1, cv::LINE_AA);
  for (int x = left; x < left + pw; x += 12)  // the full cache: dashed reference line
    cv::line(img, {x, py(full_accuracy)}, {std::min(x + 6, left + pw), py(full_accuracy)}, black, 1, cv::LINE_AA);
  cv::putText(img, "full cache", {left + pw + 10, top + 15}, font, 0.45, black, 1, cv::LINE_AA);
  cv::line(img, {left + pw + 100, top + 10}, {left + pw + 106, top + 10}, black, 1);
  cv::line(img, {left + pw + 112, top + 10}, {left + pw + 118, top + 10}, black, 1);
  // Twelve distinct colours: the eviction sweep draws up to 11 policies.
  static const cv::Scalar colours[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                                       {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                                       {188, 189, 34},  {23, 190, 207}, {0, 0, 0},       {255, 215, 0}};
  constexpr size_t kColours = sizeof colours / sizeof colours[0];
  for (size_t i = 0; i < series.size(); ++i) {
    const cv::Scalar c = colours[i % kColours];
    std::vector<std::pair<double, double>> pts = series[i].points;
    std::sort(pts.begin(), pts.end());
    for (size_t k = 0; k < pts.size(); ++k) {
      const cv::Point p(px(pts[k].first), py(pts[k].second));
      cv::circle(img, p, 4, c, cv::FILLED, cv::LINE_AA);
      if (k > 0) cv::line(img, {px(pts[k - 1].first), py(pts[k - 1].second)}, p, c, 2, cv::LINE_AA);
    }
    const int ly = top + 40 + static_cast<int>(i) * 22;
    cv::line(img, {left + pw + 10, ly - 4}, {left + pw + 35, ly - 4}, c, 2, cv::LINE_AA);
    cv::putText(img, series[i].name, {left + pw + 40, ly}, font, 0.45, black, 1, cv::LINE_AA);
  }
  TRIMKV_CHECK(stbi_write_png(path.c_str(), W, H, 3, img.data, W * 3) != 0, Io, path, ": cannot write the PNG");
}

}  // namespace trimkv::vision::world
