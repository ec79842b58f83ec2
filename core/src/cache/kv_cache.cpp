#include "trimkv/core/kv_cache.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cstring>

#include "trimkv/core/error.h"
#include "upload.h"

namespace trimkv {

namespace {

at::Tensor slots_to_index(const std::vector<int32_t>& slots, const at::Device& device) {
  return upload_to(std::vector<int64_t>(slots.begin(), slots.end()), device);  // [n]
}

}  // namespace

KvCache::KvCache(const KvGeometry& geometry, at::TensorOptions options, int32_t initial_blocks)
    : m_book(geometry, initial_blocks), m_options(options) {
  m_k = at::zeros({0, geometry.block_size, geometry.head_dim}, m_options);
  m_v = at::zeros({0, geometry.block_size, geometry.head_dim}, m_options);
  grow_storage();
  refresh_views();
}

void KvCache::grow_storage() {
  const int64_t cap = m_book.pool().capacity();
  const int64_t old = m_k.size(0);
  if (cap <= old) return;
  const KvGeometry& g = geometry();
  at::Tensor k = at::zeros({cap, g.block_size, g.head_dim}, m_options);
  at::Tensor v = at::zeros({cap, g.block_size, g.head_dim}, m_options);
  if (old > 0) {
    k.narrow(0, 0, old).copy_(m_k);
    v.narrow(0, 0, old).copy_(m_v);
  }
  m_k = k;
  m_v = v;
}

void KvCache::refresh_views() {
  const KvGeometry& g = geometry();
  m_view_tables.resize(static_cast<size_t>(g.n_streams()));
  m_view_lengths.resize(static_cast<size_t>(g.n_streams()));
  m_view_first_rows.resize(static_cast<size_t>(g.n_streams()));
  for (int il = 0; il < g.n_layer; ++il) {
    for (int h = 0; h < g.n_kv_head; ++h) {
      const size_t s = static_cast<size_t>(il * g.n_kv_head + h);
      m_view_tables[s] = m_book.block_table(il, h).data();
      m_view_lengths[s] = m_book.length(il, h);
      m_view_first_rows[s] = m_book.first_row(il, h);
    }
  }
}

void KvCache::append(int il, const at::Tensor& k, const at::Tensor& v,
                     const std::vector<int32_t>& token_indices,
                     const std::vector<float>& log_beta) {
  const KvGeometry& g = geometry();
  const int64_t n_new = static_cast<int64_t>(token_indices.size());
  TRIMKV_CHECK(k.defined() && v.defined(), Shape, "KvCache::append: k or v is undefined");
  TRIMKV_CHECK(
      k.dim() == 3 && k.size(0) == n_new && k.size(1) == g.n_kv_head && k.size(2) == g.head_dim,
      Shape, "KvCache::append: layer ", il, ": k must be [n_new=", n_new,
      ", n_kv_head=", g.n_kv_head, ", head_dim=", g.head_dim, "], got ", k.sizes());
  TRIMKV_CHECK(v.sizes() == k.sizes(), Shape, "KvCache::append: layer ", il, ": v ", v.sizes(),
               " must match k ", k.sizes());
  TRIMKV_CHECK(k.device() == m_k.device() && v.device() == m_k.device(), Shape,
               "KvCache::append: k/v on ", k.device(), "/", v.device(), " but the cache is on ",
               m_k.device());

  const bool cpu_rows = m_k.device().is_cpu() && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat &&
                        k.stride(2) == 1 && v.stride(2) == 1 && k.stride(1) == g.head_dim &&
                        v.stride(1) == g.head_dim && k.stride(0) == v.stride(0);
  if (cpu_rows && n_new > 0) {
    append_rows(il, k.data_ptr<float>(), v.data_ptr<float>(), k.stride(0), token_indices, log_beta);
    return;
  }
  const std::vector<int32_t> slots =
      m_book.append(il, token_indices, log_beta);  // [n_new, n_kv_head]
  grow_storage();
  refresh_views();
  if (n_new == 0) return;
  const at::Tensor index = slots_to_index(slots, m_k.device());
  m_k.view({-1, g.head_dim})
      .index_copy_(0, index, k.to(m_k.scalar_type()).reshape({-1, g.head_dim}));
  m_v.view({-1, g.head_dim})
      .index_copy_(0, index, v.to(m_v.scalar_type()).reshape({-1, g.head_dim}));
}

namespace {

// n float32 values stored as the pool's dtype (rounded to nearest even, as Tensor::to rounds).
void store_row(const float* src, at::ScalarType dtype, int64_t n, void* dst) {
  switch (dtype) {
    case at::kFloat: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case at::kBFloat16: {
      auto* d = static_cast<c10::BFloat16*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = c10::BFloat16(src[i]);
      break;
    }
    case at::kHalf: {
      auto* d = static_cast<c10::Half*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = c10::Half(src[i]);
      break;
    }
    default: TRIMKV_FAIL(Shape, "KvCache: pools of dtype ", dtype, " hold no float rows");
  }
}

}  // namespace

void KvCache::append_rows(int il, const float* k, const float* v, int64_t token_stride,
                          const std::vector<int32_t>& token_indices, const std::vector<float>& log_beta) {
  TRIMKV_CHECK(m_k.device().is_cpu(), Shape, "KvCache::append_rows: the pools are on ", m_k.device());
  const KvGeometry& g = geometry();
  const std::vector<int32_t> slots = m_book.append(il, token_indices, log_beta);  // [n_new, n_kv_head]
  grow_storage();
  refresh_views();
  const int64_t d = g.head_dim;
  const at::ScalarType dtype = m_k.scalar_type();
  const size_t row_bytes = static_cast<size_t>(d) * m_k.element_size();
  auto* kb = static_cast<uint8_t*>(m_k.data_ptr());
  auto* vb = static_cast<uint8_t*>(m_v.data_ptr());
  for (size_t i = 0; i < token_indices.size(); ++i) {
    for (int h = 0; h < g.n_kv_head; ++h) {
      const size_t slot = static_cast<size_t>(slots[i * g.n_kv_head + h]);
      const int64_t src = static_cast<int64_t>(i) * token_stride + h * d;
      store_row(k + src, dtype, d, kb + slot * row_bytes);
      store_row(v + src, dtype, d, vb + slot * row_bytes);
    }
  }
}

ApplyResult KvCache::apply(const EvictionPlan& plan, const std::function<void(int64_t)>& before_stream,
                           Compaction compaction) {
  ApplyHooks hooks;
  hooks.before = before_stream;
  if (m_k.device().is_cpu()) {
    // Each stream's rows move on the thread that compacted it, right away (its moves are still in
    // cache): in the bookkeeping's order no move reads a slot an earlier one wrote
    // (kv_bookkeeping.h), so they run in order; runs of consecutive source and destination slots
    // move as one memmove (kept entries mostly shift in runs).
    // The hook outlives this block: it holds copies (ASan found the first version's references
    // to these locals dangling).
    const size_t row = static_cast<size_t>(geometry().head_dim) * m_k.element_size();
    const std::array<uint8_t*, 2> bases = {static_cast<uint8_t*>(m_k.data_ptr()), static_cast<uint8_t*>(m_v.data_ptr())};
    hooks.run_moves = [row, bases](int64_t, const std::vector<SlotMove>& mv) {
      for (uint8_t* base : bases) {
        for (size_t i = 0, end = mv.size(); i < end;) {
          // A run ascends (compaction toward the front) or descends (toward the end); memmove
          // copies an overlapping run as the one-by-one moves would.
          const int32_t dir = i + 1 < end && mv[i + 1].src_slot == mv[i].src_slot - 1 ? -1 : 1;
          size_t n = 1;
          while (i + n < end && mv[i + n].src_slot == mv[i].src_slot + dir * static_cast<int32_t>(n) &&
                 mv[i + n].dst_slot == mv[i].dst_slot + dir * static_cast<int32_t>(n))
            ++n;
          const SlotMove& lo = dir > 0 ? mv[i] : mv[i + n - 1];
          std::memmove(base + static_cast<size_t>(lo.dst_slot) * row, base + static_cast<size_t>(lo.src_slot) * row,
                       n * row);
          i += n;
        }
      }
    };
  }
  ApplyResult result = m_book.apply(plan, hooks, compaction);
  refresh_views();
  if (!result.moves.empty()) {  // other devices: one gather then one scatter per pool
    std::vector<int32_t> src, dst;
    src.reserve(result.moves.size());
    dst.reserve(result.moves.size());
    for (const SlotMove& m : result.moves) {
      src.push_back(m.src_slot);
      dst.push_back(m.dst_slot);
    }
    const at::Tensor src_index = slots_to_index(src, m_k.device());
    const at::Tensor dst_index = slots_to_index(dst, m_k.device());
    const int64_t d = geometry().head_dim;
    for (at::Tensor* pool : {&m_k, &m_v}) {
      at::Tensor flat = pool->view({-1, d});
      flat.index_copy_(0, dst_index, flat.index_select(0, src_index));
    }
  }
  return result;
}

void KvCache::clear() {
  m_book.clear();
  refresh_views();
}

kernels::PagedKvView KvCache::layer_view(int il) const {
  const KvGeometry& g = geometry();
  TRIMKV_CHECK(il >= 0 && il < g.n_layer, Input, "KvCache::layer_view: layer ", il, " outside [0, ",
               g.n_layer, ")");
  const at::ScalarType st = m_k.scalar_type();
  TRIMKV_CHECK(st == at::kFloat || st == at::kBFloat16 || st == at::kHalf, Unsupported,
               "KvCache::layer_view: the attention kernels need float32, bfloat16 or float16 pools, got ", st);
  kernels::PagedKvView view;
  if (m_k.device().is_cpu()) {  // elsewhere the view is metadata only (kv_cache.h)
    view.k_pool = m_k.data_ptr();
    view.v_pool = m_v.data_ptr();
  }
  view.dtype = st == at::kFloat ? kernels::KvDtype::F32 : st == at::kBFloat16 ? kernels::KvDtype::BF16 : kernels::KvDtype::F16;
  view.n_blocks = m_k.size(0);
  view.block_size = g.block_size;
  view.head_dim = g.head_dim;
  view.n_kv_head = g.n_kv_head;
  view.block_tables = m_view_tables.data() + static_cast<size_t>(il) * g.n_kv_head;
  view.lengths = m_view_lengths.data() + static_cast<size_t>(il) * g.n_kv_head;
  view.first_rows = m_view_first_rows.data() + static_cast<size_t>(il) * g.n_kv_head;
  return view;
}

at::Tensor KvCache::gather(const at::Tensor& pool, int il, int h) const {
  const int32_t len = m_book.length(il, h);
  std::vector<int32_t> slots(static_cast<size_t>(len));
  for (int32_t e = 0; e < len; ++e) slots[static_cast<size_t>(e)] = m_book.slot(il, h, e);
  return pool.view({-1, geometry().head_dim})
      .index_select(0, slots_to_index(slots, pool.device()))
      .to(at::kCPU, at::kFloat);
}

at::Tensor KvCache::keys(int il, int h) const { return gather(m_k, il, h); }
at::Tensor KvCache::values(int il, int h) const { return gather(m_v, il, h); }

int64_t KvCache::bytes_per_entry() const {
  return 2 * static_cast<int64_t>(geometry().head_dim) * static_cast<int64_t>(m_k.element_size());
}

int64_t KvCache::bytes_held() const { return m_book.total_entries() * bytes_per_entry(); }

int64_t KvCache::bytes_reserved() const {
  return static_cast<int64_t>(n_blocks_used()) * geometry().block_size * bytes_per_entry();
}

int64_t KvCache::bytes_allocated() const {
  return static_cast<int64_t>(capacity_blocks()) * geometry().block_size * bytes_per_entry();
}

}  // namespace trimkv
