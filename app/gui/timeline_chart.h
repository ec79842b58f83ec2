// The timeline of the inspector: KV entries held over the forward steps of the conversation, from
// the eviction trace: the entries just before and just after each compression (the saw-tooth a
// budget produces) and the budget itself as a dashed line; when the scrubber goes back, a
// vertical line marks the step shown. Updated at the end of every turn (the
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
  // A vertical line at `step` (the scrubber's position); a negative step hides it.
  void setMarker(int64_t step);
  int64_t marker() const { return m_markerStep; }

 private:
  QLineSeries* m_held = nullptr;    // entries over steps (before -> after at each event)
  QLineSeries* m_budget = nullptr;  // M_global, dashed
  QLineSeries* m_marker = nullptr;  // the step the inspector shows when scrubbing
  int64_t m_markerStep = -1;
  double m_yTop = 1;
  QValueAxis* m_x = nullptr;
  QValueAxis* m_y = nullptr;
  int m_events = 0;
};
