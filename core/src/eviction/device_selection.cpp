#include "eviction/device_selection.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_cache.h"
#if TRIMKV_HAVE_CUDA_RUNTIME
#include <c10/cuda/CUDAStream.h>

#include "cache/upload.h"
#include "trimkv/kernels/cuda_kernels.h"
#endif

namespace trimkv {

std::optional<EvictionPlan> learned_plan_on_device(const KvCache& cache, const LearnedSelection& s) {
#if TRIMKV_HAVE_CUDA_RUNTIME
  const at::Device dev = cache.k_pool().device();
  const KvBookkeeping& kv = cache.bookkeeping();
  if (!dev.is_cuda() || s.lookahead != 2 || kv.total_entries() == 0) return std::nullopt;
  const KvGeometry& g = kv.geometry();
  const int n_streams = g.n_streams();
  std::vector<float> log_beta, log1p_beta;
  std::vector<int32_t> token;
  std::vector<int64_t> offsets(1, 0);
  log_beta.reserve(static_cast<size_t>(kv.total_entries()));
  log1p_beta.reserve(log_beta.capacity());
  token.reserve(log_beta.capacity());
  for (int st = 0; st < n_streams; ++st) {
    for (const EntryMeta& e : kv.entries(st / g.n_kv_head, st % g.n_kv_head)) {
      log_beta.push_back(e.log_beta);
      log1p_beta.push_back(e.log1p_beta);
      token.push_back(e.token_index);
    }
    offsets.push_back(static_cast<int64_t>(token.size()));
  }
  const at::Tensor d_log_beta = upload_to(log_beta, dev), d_log1p = upload_to(log1p_beta, dev);
  const at::Tensor d_token = upload_to(token, dev), d_offsets = upload_to(offsets, dev);
  const int64_t total = offsets.back();
  const at::Tensor scores = at::empty({total}, at::TensorOptions().device(dev).dtype(at::kFloat));
  const at::Tensor keep = at::empty({total}, at::TensorOptions().device(dev).dtype(at::kByte));
  kernels::cuda::DeviceEntries e;
  e.log_beta = d_log_beta.data_ptr<float>();
  e.log1p_beta = d_log1p.data_ptr<float>();
  e.token_index = d_token.data_ptr<int32_t>();
  e.offsets = d_offsets.data_ptr<int64_t>();
  e.n_streams = n_streams;
  e.total = total;
  e.stream = c10::cuda::getCurrentCUDAStream().stream();
  std::vector<std::vector<int32_t>> lists;
  try {
    float* sc = scores.data_ptr<float>();
    uint8_t* kp = keep.data_ptr<uint8_t>();
    kernels::cuda::retention_scores(e, static_cast<int64_t>(kv.n_tokens()) + 1, s.lookahead, sc);  // q as the host's
    if (s.window > 0 || s.sinks > 0)
      kernels::cuda::protect_tokens(
          e, s.window > 0 ? static_cast<int32_t>(kv.n_tokens() - s.window) : std::numeric_limits<int32_t>::max(),
          static_cast<int32_t>(s.sinks), sc);
    if (s.threshold) kernels::cuda::select_threshold(e, sc, *s.threshold, kp);
    else if (s.per_head)
      kernels::cuda::select_per_head_top_k(e, sc, std::vector<int64_t>(static_cast<size_t>(n_streams), *s.per_head), kp);
    else kernels::cuda::select_global_top_k(e, sc, s.k, s.floor_per_head, kp);
    lists = kernels::cuda::keep_lists(kp, offsets, e.stream);
  } catch (const std::exception& ex) {
    TRIMKV_FAIL(Internal, "the learned selection on the GPU: ", ex.what());
  }
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  for (int st = 0; st < n_streams; ++st) plan.keep(st / g.n_kv_head, st % g.n_kv_head) = std::move(lists[static_cast<size_t>(st)]);
  return plan;
#else
  (void)cache;
  (void)s;
  return std::nullopt;
#endif
}

}  // namespace trimkv
