#include "timeline_chart.h"

#include <QtCharts/QChart>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>

#include "modality_palette.h"

TimelineChart::TimelineChart(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart;
  chart->setTitle(tr("KV entries held over forward steps"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  m_held = new QLineSeries(chart);
  m_held->setName(tr("entries held (drops: evictions)"));
  m_held->setPen(QPen(ModalityPalette::text(), 2));
  m_budget = new QLineSeries(chart);
  m_budget->setName(tr("budget"));
  QPen dashed(ModalityPalette::special(), 1.5, Qt::DashLine);
  m_budget->setPen(dashed);
  m_marker = new QLineSeries(chart);
  m_marker->setName(tr("step shown"));
  m_marker->setPen(QPen(ModalityPalette::image(), 1.5));
  m_marker->setVisible(false);
  chart->addSeries(m_held);
  chart->addSeries(m_budget);
  chart->addSeries(m_marker);
  m_x = new QValueAxis(chart);
  m_x->setTitleText(tr("step (prefill chunks and decode steps)"));
  m_x->setLabelFormat(QStringLiteral("%d"));
  m_y = new QValueAxis(chart);
  m_y->setTitleText(tr("KV entries"));
  m_y->setLabelFormat(QStringLiteral("%d"));
  chart->addAxis(m_x, Qt::AlignBottom);
  chart->addAxis(m_y, Qt::AlignLeft);
  for (QLineSeries* s : {m_held, m_budget, m_marker}) {
    s->attachAxis(m_x);
    s->attachAxis(m_y);
  }
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setToolTip(tr("Entries held by the whole cache (all layers and KV heads). The policy compresses "
                "when the cache exceeds the budget plus slack; each drop is one eviction."));
}

void TimelineChart::setTrace(std::shared_ptr<const trimkv::Trace> trace, int64_t currentStep, int64_t currentEntries) {
  if (!trace) return;
  QList<QPointF> held;
  held.reserve(static_cast<qsizetype>(trace->events.size() * 2 + 2));
  held << QPointF(0, 0);
  double most = static_cast<double>(currentEntries);
  for (const trimkv::EvictionEvent& e : trace->events) {
    held << QPointF(static_cast<double>(e.step), static_cast<double>(e.entries_before))
         << QPointF(static_cast<double>(e.step), static_cast<double>(e.entries_after));
    most = std::max(most, static_cast<double>(e.entries_before));
  }
  const double lastStep = std::max<double>(static_cast<double>(currentStep), held.back().x());
  held << QPointF(lastStep, static_cast<double>(currentEntries));
  m_held->replace(held);
  m_events = static_cast<int>(trace->events.size());
  QList<QPointF> budget;
  if (trace->budget_global >= 0) {
    budget << QPointF(0, static_cast<double>(trace->budget_global)) << QPointF(lastStep, static_cast<double>(trace->budget_global));
    most = std::max(most, static_cast<double>(trace->budget_global));
  }
  m_budget->replace(budget);
  m_budget->setVisible(!budget.isEmpty());
  m_x->setRange(0, std::max(1.0, lastStep));
  m_y->setRange(0, std::max(1.0, most * 1.1));
  m_x->applyNiceNumbers();
  m_y->applyNiceNumbers();
  m_yTop = m_y->max();
  setMarker(m_markerStep);
}

void TimelineChart::setMarker(int64_t step) {
  m_markerStep = step;
  QList<QPointF> line;
  if (step >= 0) line << QPointF(static_cast<double>(step), 0) << QPointF(static_cast<double>(step), m_yTop);
  m_marker->replace(line);
  m_marker->setVisible(step >= 0);
  if (chart()->legend()->markers(m_marker).size() == 1) chart()->legend()->markers(m_marker).front()->setVisible(step >= 0);
}
