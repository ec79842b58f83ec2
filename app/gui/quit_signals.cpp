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

// Here, where InterruptAction is complete. m_action, the last member, goes first: its destructor
// unregisters the action and waits for a running one.
QuitSignals::~QuitSignals() = default;
