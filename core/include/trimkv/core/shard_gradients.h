// Data parallelism inside one process: a batch's parts on threads of their own, their gradients
// summed. For models too small for the matrix library to keep two cores busy (the demo model:
// its step ran 1.36x faster on two cores than on one), one compute thread per part does better.
#pragma once

#include <functional>
#include <vector>

#include "trimkv/core/adamw.h"

namespace trimkv {

// One compute thread for the calling thread while it lives, the thread's own count after (OpenMP
// keeps the count per thread). For work whose bits must not depend on the thread count (a
// reduction such as a gradient norm splits its sum by threads).
class OneComputeThread {
 public:
  OneComputeThread();
  ~OneComputeThread();
  OneComputeThread(const OneComputeThread&) = delete;
  OneComputeThread& operator=(const OneComputeThread&) = delete;

 private:
  int m_saved = 1;
};

// Calls work(k) for k = 0 .. n - 1, each with one compute thread: on up to `threads` threads of
// their own (part k on thread k % threads, the calling thread being thread 0), or one after the
// other on the calling thread (threads <= 1). An exception from a part is rethrown here (the
// first by part order) after every part has ended.
void run_parts(int n, int threads, const std::function<void(int part)>& work);

// Calls loss_of(k) for k = 0 .. n_parts - 1, each with one compute thread (a loss_of may return
// an undefined tensor: that part adds nothing), differentiates each part's loss with respect to
// `params` and sets every parameter's gradient to the sum of the parts' gradients, added in part
// order (left undefined where no part reaches it). parallel: each part on a thread of its own;
// otherwise one after the other on the calling thread. Either way every part runs with one compute
// thread, so the gradients are the same bits whether or not the parts ran in parallel. The
// caller's compute threads are as they were on return. An exception from a part is rethrown here
// (the first by part order) after every part has ended.
void shard_gradients(const std::vector<NamedParameter>& params, int n_parts, bool parallel,
                     const std::function<at::Tensor(int part)>& loss_of);

}  // namespace trimkv
