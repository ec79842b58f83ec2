// The timeline of the inspector: KV entries held over the forward steps of the conversation, from
// the eviction trace: the entries just before and just after each compression (the saw-tooth a
// budget produces) and the budget itself as a dashed line. Updated at the end of every turn (the
// worker sends the trace with its idle frames only).
#pragma once
#include <QtCharts/QChartView>
#include <memory>

#include "trimkv/core/trace.h"

class QLineSeries;
class QValueAxis;

class TimelineChart : public QChartView {
  Q_OBJECT

 public:
  explicit TimelineChart(QWidget* parent = nullptr);

  // `trace` may be null (no change). currentStep / currentEntries: where the cache stands now
  // (the last point of the curve).
  void setTrace(std::shared_ptr<const trimkv::Trace> trace, int64_t currentStep, int64_t currentEntries);
  int eventCount() const { return m_events; }

 private:
  QLineSeries* m_held = nullptr;    // entries over steps (before -> after at each event)
  QLineSeries* m_budget = nullptr;  // M_global, dashed
  QValueAxis* m_x = nullptr;
  QValueAxis* m_y = nullptr;
  int m_events = 0;
};
