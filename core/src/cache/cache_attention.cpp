#include "trimkv/core/cache_attention.h"

#include <ATen/ATen.h>

#include <vector>

#include "trimkv/core/error.h"
#include "upload.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/kernels/paged_attention.h"
#if TRIMKV_HAVE_CUDA_RUNTIME
#include <c10/cuda/CUDAStream.h>

#include "trimkv/kernels/cuda_kernels.h"
#endif

namespace trimkv {

namespace {

#if TRIMKV_HAVE_CUDA_RUNTIME
// The layer's block tables, lengths and first rows as the CUDA kernel reads them, copied to the
// device in one int32 transfer (tables, lengths, first rows) and one int64 (table offsets), from
// pinned memory without waiting (upload_to). They change with every append, so they are sent per
// call: a few KiB per layer per step.
CacheAttention attend_cuda(const KvCache& cache, int il, const at::Tensor& q_in, double scale, bool attention_sum) {
  const KvBookkeeping& book = cache.bookkeeping();
  const KvGeometry& g = cache.geometry();
  const int nkv = g.n_kv_head;
  std::vector<int64_t> offsets(static_cast<size_t>(nkv));
  std::vector<int32_t> ints;  // tables..., lengths[nkv], first_rows[nkv]
  int32_t max_len = 0;
  for (int h = 0; h < nkv; ++h) {
    offsets[static_cast<size_t>(h)] = static_cast<int64_t>(ints.size());
    const std::vector<int32_t>& t = book.block_table(il, h);
    ints.insert(ints.end(), t.begin(), t.end());
    max_len = std::max(max_len, book.length(il, h));
  }
  const int64_t n_table = static_cast<int64_t>(ints.size());
  for (int h = 0; h < nkv; ++h) ints.push_back(book.length(il, h));
  for (int h = 0; h < nkv; ++h) ints.push_back(book.first_row(il, h));
  const at::Device dev = cache.k_pool().device();
  const at::Tensor d_ints = upload_to(ints, dev);
  const at::Tensor d_offsets = upload_to(offsets, dev);

  const at::Tensor q = q_in.to(dev, at::kFloat).contiguous();
  TRIMKV_CHECK(q.dim() == 3 && q.size(2) == g.head_dim && q.size(1) % nkv == 0, Shape,
               "attention over layer ", il, ": queries must be [n_q, n_head (a multiple of ", nkv, "), ", g.head_dim,
               "], got ", q.sizes());
  CacheAttention r;
  r.out = at::empty(q.sizes(), q.options());
  const at::ScalarType st = cache.k_pool().scalar_type();
  kernels::cuda::DeviceAttentionParams p;
  p.q = q.data_ptr<float>();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.out = r.out.data_ptr<float>();
  p.out_row_stride = r.out.stride(0);
  p.out_head_stride = r.out.stride(1);
  p.n_q = static_cast<int>(q.size(0));
  p.n_head = static_cast<int>(q.size(1));
  p.scale = static_cast<float>(scale);
  p.kv.k_pool = cache.k_pool().data_ptr();
  p.kv.v_pool = cache.v_pool().data_ptr();
  p.kv.dtype = st == at::kFloat ? kernels::KvDtype::F32 : st == at::kBFloat16 ? kernels::KvDtype::BF16 : kernels::KvDtype::F16;
  p.kv.block_size = g.block_size;
  p.kv.head_dim = g.head_dim;
  p.kv.n_kv_head = nkv;
  p.kv.tables = d_ints.data_ptr<int32_t>();
  p.kv.table_offsets = d_offsets.data_ptr<int64_t>();
  p.kv.lengths = d_ints.data_ptr<int32_t>() + n_table;
  p.kv.first_rows = d_ints.data_ptr<int32_t>() + n_table + nkv;
  p.kv.max_length = max_len;
  at::Tensor sums;
  if (attention_sum) {
    sums = at::zeros({nkv, std::max<int32_t>(1, max_len)}, q.options());
    p.attn_sum = sums.data_ptr<float>();
    p.attn_sum_stride = sums.size(1);
  }
  try {
    p.stream = c10::cuda::getCurrentCUDAStream().stream();  // ATen's: ordered with its work
    kernels::cuda::paged_attention(p);
  } catch (const std::exception& e) {
    TRIMKV_FAIL(Internal, "attention over layer ", il, " on the GPU: ", e.what());
  }
  if (attention_sum) r.attn_sum = sums.narrow(1, 0, max_len).to(at::kCPU);
  return r;
}
#endif

}  // namespace

CacheAttention attend_cache_layer(const KvCache& cache, int il, const at::Tensor& q, double scale,
                                  bool attention_sum) {
  const at::Device dev = cache.k_pool().device();
  if (dev.is_cpu()) {
    CacheAttention r;
    const kernels::PagedKvView view = cache.layer_view(il);
    const at::Tensor qc = q.to(at::kCPU);  // the same tensor when it is there already
    if (attention_sum) {
      kernels::PagedAttentionOutput o = kernels::paged_attention_with_stats(qc, view, scale);
      r.out = o.out;
      r.attn_sum = o.attn_sum;
    } else {
      r.out = kernels::paged_attention(qc, view, scale);
    }
    return r;
  }
#if TRIMKV_HAVE_CUDA_RUNTIME
  if (dev.is_cuda()) return attend_cuda(cache, il, q, scale, attention_sum);
#endif
  TRIMKV_FAIL(Unsupported, "attention over a KV cache on ", dev, ": this build attends on the CPU",
              TRIMKV_HAVE_CUDA_RUNTIME ? " and CUDA" : "", " only");
}

}  // namespace trimkv
