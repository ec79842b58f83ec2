// The accuracy-against-KV-budget figure drawn with Qt Charts. The Studio's evaluation window and
// `trimkv eval-sweep` (in a build that has Qt) draw it with this one function, from the layout the
// OpenCV figure of a Qt-less build uses (trimkv/vision/world_eval.h: the budget as % of the full
// cache's peak on a log axis with 1-2-5 ticks, the same ticks in entries along the top, legend
// order, colours, the learned policy thicker, the full cache dashed).
#pragma once
#include <QByteArray>
#include <QSize>
#include <vector>

#include "trimkv/vision/world_eval.h"

class QChart;

namespace budget_chart {

using Series = trimkv::vision::world::PlotSeries;  // (KV entries held, value) per policy
using Style = trimkv::vision::world::PlotStyle;

// Replaces the chart's series and axes. full_value NaN: no full-cache reference (yet);
// full_entries 0: the x axis in entries. textPx > 0 sets every text's pixel size (a figure for a
// paper); 0 keeps the application's fonts (a window).
void draw(QChart* chart, const std::vector<Series>& series, double full_value, double full_entries,
          const Style& style = {}, int textPx = 0);

// The figure as PNG bytes, white background, `size` pixels. A process without a QApplication
// (the command line) gets an offscreen one for the duration.
QByteArray png(const std::vector<Series>& series, double full_value, double full_entries, const Style& style = {},
               QSize size = QSize(960, 620));

}  // namespace budget_chart
