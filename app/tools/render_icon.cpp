// render_icon SVG OUTDIR SIZE...: the application icon as OUTDIR/<S>x<S>/apps/<name>.png for each
// size S, rendered by Qt's SVG renderer (hicolor's PNG sizes for the package; build-time only).
#include <QDir>
#include <QFileInfo>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>
#include <cstdio>

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QGuiApplication app(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: render_icon SVG OUTDIR SIZE...\n");
    return 2;
  }
  QSvgRenderer svg(QString::fromLocal8Bit(argv[1]));
  if (!svg.isValid()) {
    std::fprintf(stderr, "render_icon: '%s' is not a valid SVG file\n", argv[1]);
    return 1;
  }
  const QString name = QFileInfo(QString::fromLocal8Bit(argv[1])).completeBaseName();
  for (int i = 3; i < argc; ++i) {
    const int s = QString::fromLocal8Bit(argv[i]).toInt();
    if (s < 8 || s > 1024) {
      std::fprintf(stderr, "render_icon: size '%s' is not 8..1024\n", argv[i]);
      return 2;
    }
    const QString dir = QStringLiteral("%1/%2x%2/apps").arg(QString::fromLocal8Bit(argv[2])).arg(s);
    QDir().mkpath(dir);
    QImage img(s, s, QImage::Format_ARGB32_Premultiplied);
    img.fill(Qt::transparent);
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    svg.render(&p);
    p.end();
    if (!img.save(dir + QLatin1Char('/') + name + QStringLiteral(".png"))) {
      std::fprintf(stderr, "render_icon: cannot write into '%s'\n", qPrintable(dir));
      return 1;
    }
  }
  return 0;
}
