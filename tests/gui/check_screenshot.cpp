// Checks that a screenshot of the Studio shows a populated window, not a blank or
// single-colour one: `check_screenshot FILE.png` exits 0 when the image is at least 800x500, has
// at least 64 distinct colours and no colour covers more than 90% of it; otherwise it says what is
// wrong and exits 1 (2 when the file cannot be read as an image).
#include <QGuiApplication>
#include <QHash>
#include <QImage>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: check_screenshot FILE.png\n");
    return 2;
  }
  const QImage image(QString::fromLocal8Bit(argv[1]));
  if (image.isNull()) {
    std::fprintf(stderr, "check_screenshot: '%s' is not a readable image\n", argv[1]);
    return 2;
  }
  const QImage rgb = image.convertToFormat(QImage::Format_RGB32);
  QHash<QRgb, qint64> counts;
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = reinterpret_cast<const QRgb*>(rgb.constScanLine(y));
    for (int x = 0; x < rgb.width(); ++x) ++counts[line[x]];
  }
  qint64 most = 0;
  for (auto it = counts.cbegin(); it != counts.cend(); ++it) most = std::max(most, it.value());
  const double share = static_cast<double>(most) / (static_cast<double>(rgb.width()) * rgb.height());
  std::printf("check_screenshot: %s: %dx%d, %lld colours, the commonest covers %.1f%%\n", argv[1], rgb.width(),
              rgb.height(), static_cast<long long>(counts.size()), 100.0 * share);
  if (rgb.width() < 800 || rgb.height() < 500 || counts.size() < 64 || share > 0.9) {
    std::fprintf(stderr, "check_screenshot: '%s' looks blank or too small\n", argv[1]);
    return 1;
  }
  return 0;
}
