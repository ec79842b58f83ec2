// The watcher thread of interrupts.h.
#include "interrupts.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

namespace trimkv::cli {

namespace {

std::mutex g_mutex;                       // guards g_actions and every action's run
std::vector<InterruptAction*> g_actions;  // in registration order: the last one wins
sigset_t g_watched, g_start_mask;
std::once_flag g_started;

// What the signal would have done without us: end the program (killed by that signal). Its
// disposition is still the default: nothing here installs a handler.
[[noreturn]] void die_by(int sig) {
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached: the default action of SIGINT and SIGTERM ends the process
}

}  // namespace

struct InterruptWatcher {
  static void watch() {
    pthread_setname_np(pthread_self(), "trimkv-signals");  // as top, gdb and the tests see it
    while (true) {
      int sig = 0;
      if (sigwait(&g_watched, &sig) != 0) continue;
      std::unique_lock<std::mutex> lock(g_mutex);
      const auto it = std::find_if(g_actions.rbegin(), g_actions.rend(), [sig](const InterruptAction* a) {
        return std::find(a->m_signals.begin(), a->m_signals.end(), sig) != a->m_signals.end();
      });
      if (it == g_actions.rend()) {
        lock.unlock();
        die_by(sig);
      }
      (*it)->m_action(sig);  // under the lock: its owner's destructor waits for it
    }
  }
};

void start_interrupt_watcher() {
  std::call_once(g_started, [] {
    sigemptyset(&g_watched);
    sigaddset(&g_watched, SIGINT);
    sigaddset(&g_watched, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &g_watched, &g_start_mask);
    std::thread(InterruptWatcher::watch).detach();  // blocks them too (inherited); sigwait takes them
  });
}

void restore_signal_mask_for_exec() { pthread_sigmask(SIG_SETMASK, &g_start_mask, nullptr); }

InterruptAction::InterruptAction(std::vector<int> signals, std::function<void(int)> action)
    : m_signals(std::move(signals)), m_action(std::move(action)) {
  start_interrupt_watcher();  // main() has, unless this runs in a program of its own
  std::lock_guard<std::mutex> lock(g_mutex);
  g_actions.push_back(this);
}

InterruptAction::~InterruptAction() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_actions.erase(std::find(g_actions.begin(), g_actions.end(), this));
}

InterruptAction::InterruptAction(std::atomic<bool>& flag)
    : InterruptAction({SIGINT}, [&flag](int) { flag.store(true); }) {}

}  // namespace trimkv::cli
