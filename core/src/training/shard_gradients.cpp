// shard_gradients (shard_gradients.h).
#include "trimkv/core/shard_gradients.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "trimkv/core/error.h"

namespace trimkv {

// ATen sets a thread's count on its first parallel operation: that is done first, so it cannot
// undo this one later.
OneComputeThread::OneComputeThread() {
  at::internal::lazy_init_num_threads();
  m_saved = omp_get_max_threads();
  omp_set_num_threads(1);
}

OneComputeThread::~OneComputeThread() { omp_set_num_threads(m_saved); }

void run_parts(int n, int threads, const std::function<void(int part)>& work) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max(0, n)));
  const int lanes = std::max(1, std::min(threads, n));
  auto lane = [&](int first) {
    const OneComputeThread one;
    for (int k = first; k < n; k += lanes) {
      try {
        work(k);
      } catch (...) {
        errors[static_cast<size_t>(k)] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < lanes; ++t) workers.emplace_back(lane, t);
  lane(0);
  for (auto& w : workers) w.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void shard_gradients(const std::vector<NamedParameter>& params, int n_parts, bool parallel,
                     const std::function<at::Tensor(int part)>& loss_of) {
  TRIMKV_CHECK(n_parts >= 1, Input, "a batch must be split into 1 or more parts, got ", n_parts);
  std::vector<at::Tensor> inputs;
  for (const auto& p : params) inputs.push_back(p.tensor);
  std::vector<std::vector<at::Tensor>> grads(static_cast<size_t>(n_parts));
  run_parts(n_parts, parallel ? n_parts : 1, [&](int k) {
    const at::Tensor loss = loss_of(k);
    if (!loss.defined()) return;
    // grad() rather than backward(): the parts' graphs share the parameters, and backward()
    // would add into their .grad from two threads at once.
    grads[static_cast<size_t>(k)] = torch::autograd::grad({loss}, inputs, {}, false, false, true);
  });
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor sum;
    for (const auto& part : grads) {
      if (part.empty() || !part[i].defined()) continue;
      sum = sum.defined() ? sum + part[i] : part[i];
    }
    inputs[i].mutable_grad() = sum;
  }
}

}  // namespace trimkv
