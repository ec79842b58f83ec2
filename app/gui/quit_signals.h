// Ctrl+C in the terminal that started the Studio (SIGINT) and SIGTERM (a logout, `kill`) reach
// the event loop as received(signo) instead of ending the process where it stands: the
// application closes its window as the close button does, so the settings and the message being
// written are saved. No signal handler is involved: the signals go to the command line's watcher
// thread (app/cli/interrupts.h: a handler on a thread inside oneDNN's GEMM corrupted the heap),
// whose action posts them to this object's thread. A second signal while the first is handled
// ends the process at once (a Studio that does not close still yields to Ctrl+C twice).
#pragma once
#include <QObject>
#include <atomic>
#include <memory>

namespace trimkv::cli {
class InterruptAction;
}

class QuitSignals : public QObject {
  Q_OBJECT

 public:
  // In main(), before any other thread exists (every later thread inherits the blocked mask).
  static void startWatcher();

  explicit QuitSignals(QObject* parent = nullptr);
  ~QuitSignals() override;

 Q_SIGNALS:
  void received(int signo);

 private:
  std::atomic<bool> m_pending{false};
  std::unique_ptr<trimkv::cli::InterruptAction> m_action;
};
