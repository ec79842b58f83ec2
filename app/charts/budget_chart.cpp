#include "budget_chart.h"

#include <QApplication>
#include <QBuffer>
#include <QGraphicsScene>
#include <QImage>
#include <QPainter>
#include <QtCharts/QCategoryAxis>
#include <QtCharts/QChart>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>
#include <memory>

#include "trimkv/core/error.h"

namespace budget_chart {

namespace w = trimkv::vision::world;

namespace {

QFont sized(QFont f, int px) {
  if (px > 0) f.setPixelSize(px);
  return f;
}

// A category axis used for its labels only: each tick's label placed on its value (log10 of it on
// a log axis), grid lines there.
QCategoryAxis* tickAxis(const w::PlotLayout& L, bool top, int textPx) {
  auto u = [&](double x) { return L.log_x ? std::log10(x) : x; };
  auto* axis = new QCategoryAxis;
  axis->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  axis->setRange(u(L.x_lo), u(L.x_hi));
  axis->setStartValue(u(L.x_lo));
  axis->setTitleText(QString::fromStdString(top ? L.top_title() : L.x_title()));
  axis->setGridLineVisible(!top);
  axis->setLabelsFont(sized(axis->labelsFont(), textPx));
  axis->setTitleFont(sized(axis->titleFont(), textPx));
  for (double t : L.x_ticks) {
    if (t < L.x_lo || t > L.x_hi) continue;
    QString label = QString::fromStdString(w::format_tick(top ? std::round(L.entries_of(t)) : t));
    if (!top && L.percent) label += QLatin1Char('%');
    if (axis->categoriesLabels().contains(label)) continue;  // two ticks rounding to one label
    axis->append(label, u(t));
  }
  return axis;
}

}  // namespace

void draw(QChart* chart, const std::vector<Series>& series, double full_value, double full_entries, const Style& style,
          int textPx) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
  const w::PlotLayout L = w::plot_layout(series, full_value, full_entries, style);
  auto u = [&](double x) { return L.log_x ? std::log10(x) : x; };
  const double scale = style.fraction ? 100.0 : 1.0;  // fractions shown as %

  QCategoryAxis* x = tickAxis(L, false, textPx);
  auto* y = new QValueAxis;
  // (a hair above the top so that a tick on it, 100%, is not lost to rounding)
  y->setRange(L.y_lo * scale, L.y_hi * scale + (L.y_hi - L.y_lo) * scale * 1e-9);
  y->setTickType(QValueAxis::TicksDynamic);
  y->setTickAnchor(L.y_ticks.front() * scale);
  y->setTickInterval(L.y_ticks.size() > 1 ? (L.y_ticks[1] - L.y_ticks[0]) * scale : (L.y_hi - L.y_lo) * scale);
  y->setLabelFormat(style.fraction ? QStringLiteral("%.0f%%") : QStringLiteral("%g"));
  y->setTitleText(QString::fromStdString(style.y_label));
  y->setLabelsFont(sized(y->labelsFont(), textPx));
  y->setTitleFont(sized(y->titleFont(), textPx));
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->legend()->setFont(sized(chart->legend()->font(), textPx));

  auto add = [&](QLineSeries* s, QAbstractAxis* along) {
    chart->addSeries(s);
    s->attachAxis(along);
    s->attachAxis(y);
  };
  if (std::isfinite(full_value)) {
    auto* ref = new QLineSeries;
    ref->setName(QObject::tr("full cache (%1)")
                     .arg(style.fraction ? QStringLiteral("%1%").arg(100.0 * full_value, 0, 'f', 1)
                                         : QString::number(full_value, 'g', 4)));
    ref->setPen(QPen(QColor(60, 60, 60), 2, Qt::DashLine));
    ref->append(u(L.x_lo), full_value * scale);
    ref->append(u(L.x_hi), full_value * scale);
    add(ref, x);
  }
  for (size_t i : L.legend) {
    auto* line = new QLineSeries;
    line->setName(QString::fromStdString(series[i].name));
    const w::PlotRgb c = w::plot_colour(i);
    const int width = w::plot_emphasised(series[i].name) ? 4 : 2;
    line->setPen(QPen(QColor(c[0], c[1], c[2]), width));
    line->setPointsVisible(true);
    line->setMarkerSize(width + 5.0);
    std::vector<std::pair<double, double>> pts = series[i].points;
    std::sort(pts.begin(), pts.end());
    for (const auto& [entries, value] : pts) line->append(u(L.x_of(entries)), value * scale);
    add(line, x);
  }
  if (L.percent) {  // the entries along the top: an axis of its own, held by an empty, unlisted series
    QCategoryAxis* top = tickAxis(L, true, textPx);
    chart->addAxis(top, Qt::AlignTop);
    auto* holder = new QLineSeries;
    add(holder, top);
    for (QLegendMarker* m : chart->legend()->markers(holder)) m->setVisible(false);
  }
}

QByteArray png(const std::vector<Series>& series, double full_value, double full_entries, const Style& style,
               QSize size) {
  // Qt Charts draws through QGraphicsWidget, which needs a QApplication; the command line has none.
  // Its arguments are fresh on every call (QApplication removes the ones it reads) and outlive it.
  char arg0[] = "trimkv", arg1[] = "-platform", arg2[] = "offscreen";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  int argc = 3;
  std::unique_ptr<QApplication> own;
  if (!QCoreApplication::instance()) own = std::make_unique<QApplication>(argc, argv);
  TRIMKV_CHECK(qobject_cast<QApplication*>(QCoreApplication::instance()) != nullptr, Internal,
               "the budget chart needs a QApplication");

  QByteArray bytes;
  {
    QGraphicsScene scene;
    auto* chart = new QChart;  // owned by the scene
    scene.addItem(chart);
    const int textPx = std::max(12, size.width() / 52);  // 18 px at 960: legible at half size
    draw(chart, series, full_value, full_entries, style, textPx);
    chart->legend()->setAlignment(Qt::AlignRight);  // a figure is wide enough for a legend beside it
    chart->setGeometry(0, 0, size.width(), size.height());
    chart->setBackgroundRoundness(0);
    QImage img(size, QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter painter(&img);
    painter.setRenderHint(QPainter::Antialiasing);
    scene.render(&painter, QRectF(0, 0, size.width(), size.height()), QRectF(0, 0, size.width(), size.height()));
    painter.end();
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    TRIMKV_CHECK(img.save(&buffer, "PNG"), Io, "cannot encode the figure as PNG");
  }
  return bytes;
}

}  // namespace budget_chart
