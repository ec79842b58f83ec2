#include "quit_signals.h"

#include <signal.h>
#include <unistd.h>

#include "interrupts.h"

void QuitSignals::startWatcher() { trimkv::cli::start_interrupt_watcher(); }

QuitSignals::QuitSignals(QObject* parent) : QObject(parent) {
  m_action = std::make_unique<trimkv::cli::InterruptAction>(std::vector<int>{SIGINT, SIGTERM}, [this](int signo) {
    if (m_pending.exchange(true)) _exit(128 + signo);  // the second one
    QMetaObject::invokeMethod(this, [this, signo] { Q_EMIT received(signo); }, Qt::QueuedConnection);
  });
}

// The action is unregistered first (its destructor waits for a running one), then the object goes.
QuitSignals::~QuitSignals() { m_action.reset(); }
