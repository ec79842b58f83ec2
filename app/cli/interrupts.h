// Ctrl-C (SIGINT) and SIGTERM without a signal handler on any thread that computes.
//
// A signal handler runs on the stack of whichever thread the signal interrupts, and the kernel
// writes its frame below that thread's stack pointer. oneDNN's JIT f32 GEMM (Debian's libdnnl 2.6,
// reached through LibTorch's matmuls and our kernels' sgemm) points the stack pointer into a heap
// buffer while it runs, so a Ctrl-C landing there wrote the frame into the heap: eval-sweep stopped
// mid-turn aborted with "corrupted size vs. prev_size" in 1-3% of runs (oneDNN issue 4845, fixed
// upstream in 3.11 by leaving rsp alone). So no thread takes these signals but one: main() blocks
// them before any thread starts (every later thread inherits the mask) and a watcher thread, which
// computes nothing, waits for them with sigwait and runs the action registered for them as plain
// code. With no action registered a signal ends the program as it would have by default.
#pragma once
#include <atomic>
#include <functional>
#include <vector>

namespace trimkv::cli {

// In main(), before any other thread exists. Idempotent.
void start_interrupt_watcher();

// For a forked child about to exec another program: the signal mask main() started with.
void restore_signal_mask_for_exec();

// While alive, the listed signals (SIGINT and/or SIGTERM) run `action(signal)` on the watcher
// thread instead of ending the program; an action registered later for the same signal takes
// precedence until it is gone. The destructor waits for a running action to finish, so the
// action may use what outlives this object. Actions must be short and must not register others.
class InterruptAction {
 public:
  InterruptAction(std::vector<int> signals, std::function<void(int)> action);
  // The common case: Ctrl-C sets `flag` (which the long operation polls).
  explicit InterruptAction(std::atomic<bool>& flag);
  ~InterruptAction();
  InterruptAction(const InterruptAction&) = delete;
  InterruptAction& operator=(const InterruptAction&) = delete;

 private:
  friend struct InterruptWatcher;
  std::vector<int> m_signals;
  std::function<void(int)> m_action;
};

}  // namespace trimkv::cli
