// What the GUI's worker objects (SessionWorker, AnalysisWorker) share: a busy signal around each
// request and how an engine error reads.
#pragma once
#include <QString>

#include <exception>

#include "trimkv/core/error.h"

// Emits worker->busyChanged(true) now and busyChanged(false) when the request ends.
template <class Worker>
class BusyScope {
 public:
  explicit BusyScope(Worker* w) : m_w(w) { Q_EMIT m_w->busyChanged(true); }
  ~BusyScope() { Q_EMIT m_w->busyChanged(false); }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;

 private:
  Worker* m_w;
};

// The library's error text (it names the folder, file, field or setting).
inline QString errorText(const std::exception& e) { return QString::fromStdString(e.what()); }

// Whether `e` is the engine's answer to a stop request.
inline bool isCancelled(const std::exception& e) {
  const auto* err = dynamic_cast<const trimkv::Error*>(&e);
  return err && err->kind() == trimkv::ErrorKind::Cancelled;
}
