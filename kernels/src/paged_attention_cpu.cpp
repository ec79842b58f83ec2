// CPU paged attention (see paged_attention.h for the contract).
//
// Per (query head, query row) task: scores for the visible entries are computed block by block
// into a scratch row (contiguous dot products over head_dim, vectorised through `omp simd`
// reductions: -O3 alone does not reassociate float sums), then a max-subtracted softmax, then the
// weighted sum of V rows. fp32 throughout; exp is a vectorisable polynomial (exp_nonpositive).
// The optional attn_sum statistics are accumulated per chunk of tasks into private buffers and
// reduced afterwards, so no two threads write one value.
#include "trimkv/kernels/paged_attention.h"

#include "exp_poly.h"
#include "gemv_lowp.h"
#include "target_clones.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trimkv::kernels {

namespace {

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  os << "paged_attention: ";
  (os << ... << args);
  throw std::invalid_argument(os.str());
}

template <typename... Args>
void check(bool cond, const Args&... args) {
  if (!cond) fail(args...);
}

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// out[r] = q · rows[r] for 4 rows at stride n: four independent accumulator chains, q loaded once.
inline void dot4(const float* q, const float* rows, int n, float* out) {
  const float* r0 = rows;
  const float* r1 = rows + n;
  const float* r2 = rows + 2 * static_cast<int64_t>(n);
  const float* r3 = rows + 3 * static_cast<int64_t>(n);
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int k = 0; k < n; ++k) {
    s0 += q[k] * r0[k];
    s1 += q[k] * r1[k];
    s2 += q[k] * r2[k];
    s3 += q[k] * r3[k];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// acc[k] += w * x[k]
inline void axpy(float* acc, float w, const float* x, int n) {
#pragma omp simd
  for (int k = 0; k < n; ++k) acc[k] += w * x[k];
}

// acc[k] += Σ_r w[r] * rows[r][k] for 4 rows at stride n (one pass over acc instead of four).
inline void axpy4(float* acc, const float* w, const float* rows, int n) {
  const float* r0 = rows;
  const float* r1 = rows + n;
  const float* r2 = rows + 2 * static_cast<int64_t>(n);
  const float* r3 = rows + 3 * static_cast<int64_t>(n);
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
#pragma omp simd
  for (int k = 0; k < n; ++k) acc[k] += w0 * r0[k] + w1 * r1[k] + w2 * r2[k] + w3 * r3[k];
}

// exp(x) for x <= 0 (max-subtracted logits), written so that a loop over it vectorises (libm's
// expf does not without -ffast-math): Cephes-style range reduction x = n ln2 + r, |r| <= ln2/2,
// degree-6 polynomial, 2^n through the exponent bits. Relative error < 2e-7 on [-87, 0];
// underflows to exactly 0 below -87 (e^-87 < 2^-125: negligible against the max term, 1).
inline float exp_nonpositive(float x) {
  const bool underflow = x < -87.0f;
  x = underflow ? -87.0f : x;
  const float fn = static_cast<float>(static_cast<int>(x * kLog2e - 0.5f));  // round, x <= 0
  return underflow ? 0.0f : exp_split(x, fn);                                // n in [-126, 0]
}

// Multiply-adds below which splitting a chunk across threads costs more than it gains.
constexpr int64_t kMinWorkPerChunk = 1 << 15;

// The first n values of a 16-bit pool block widened to float32 (exact: every bf16 / f16 value is
// a float32 value), with the GEMV's vectorised conversion (F16C / AVX-512 where the CPU has it).
inline void widen_block(const uint16_t* src, KvDtype dtype, int64_t n, float* dst) {
  widen_row_16bit(src, dst, n, dtype == KvDtype::BF16);
}

// Block `block` of a pool as float32 rows: the block itself for float32 pools, else widened into
// `buf` (block_size * head_dim floats), first n_rows rows only.
inline const float* block_rows(const void* pool, KvDtype dtype, int32_t block, int64_t block_elems, int n_rows,
                               int d, float* buf) {
  if (dtype == KvDtype::F32) return static_cast<const float*>(pool) + block * block_elems;
  widen_block(static_cast<const uint16_t*>(pool) + block * block_elems, dtype, static_cast<int64_t>(n_rows) * d, buf);
  return buf;
}

// One (query head, query row) task. scores: scratch of >= visible length; acc: scratch [head_dim];
// block_buf: scratch [block_size * head_dim] (16-bit pools); sum_row: attn_sum row of this head's
// KV head, or nullptr. Compiled for the baseline ISA and for AVX2 + FMA (target_clones.h).
TRIMKV_CLONES_V3 void attend_row(const PagedAttentionParams& p, int qh, int row,
                                 float* scores, float* acc, float* block_buf, float* sum_row) {
  const PagedKvView& kv = p.kv;
  const int d = kv.head_dim;
  const int bs = kv.block_size;
  const int group = p.n_head / kv.n_kv_head;
  const int g = qh / group;
  const int64_t len = kv.lengths[g];
  const int64_t visible = std::min<int64_t>(len, len - p.n_q + row + 1);
  float* o = p.out + row * p.out_row_stride + qh * p.out_head_stride;
  if (visible <= 0) {
    std::fill(o, o + d, 0.0f);
    return;
  }
  const float* q = p.q + row * p.q_row_stride + qh * p.q_head_stride;
  const int32_t* table = kv.block_tables[g];
  const int64_t block_elems = static_cast<int64_t>(bs) * d;
  // Entry e sits at row r0 + e of the head's rows; block b holds rows [j0, j1) of them, entries
  // from b * bs + j0 - r0 on.
  const int r0 = kv.first_row(g);
  const int64_t end = r0 + visible;
  const int64_t n_blocks = (end + bs - 1) / bs;

  float m = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int j0 = b == 0 ? r0 : 0;
    const int j1 = static_cast<int>(std::min<int64_t>(bs, end - b * bs));
    const float* kb = block_rows(kv.k_pool, kv.dtype, table[b], block_elems, j1, d, block_buf);
    float* s = scores + (b * bs - r0);  // s[j]: the entry in row j (j >= j0)
    int j = j0;
    for (; j + 4 <= j1; j += 4) dot4(q, kb + static_cast<int64_t>(j) * d, d, s + j);
    for (; j < j1; ++j) s[j] = dot(q, kb + static_cast<int64_t>(j) * d, d);
    for (j = j0; j < j1; ++j) {
      s[j] *= p.scale;
      m = std::max(m, s[j]);
    }
  }
  float l = 0.0f;
#pragma omp simd reduction(+ : l)
  for (int64_t e = 0; e < visible; ++e) {
    const float w = exp_nonpositive(scores[e] - m);
    scores[e] = w;
    l += w;
  }
  const float inv_l = 1.0f / l;

  std::fill(acc, acc + d, 0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int j0 = b == 0 ? r0 : 0;
    const int j1 = static_cast<int>(std::min<int64_t>(bs, end - b * bs));
    const float* vb = block_rows(kv.v_pool, kv.dtype, table[b], block_elems, j1, d, block_buf);
    const float* w = scores + (b * bs - r0);
    int j = j0;
    for (; j + 4 <= j1; j += 4) axpy4(acc, w + j, vb + static_cast<int64_t>(j) * d, d);
    for (; j < j1; ++j) axpy(acc, w[j], vb + static_cast<int64_t>(j) * d, d);
  }
  for (int k = 0; k < d; ++k) o[k] = acc[k] * inv_l;

  if (sum_row != nullptr) {
    for (int64_t e = 0; e < visible; ++e) sum_row[e] += scores[e] * inv_l;
  }
}

// Task t -> (query head, query row). Rows are interleaved from both ends (0, n-1, 1, n-2, ...) so
// that contiguous task ranges carry similar causal work in prefill.
inline void task_coords(int64_t t, int n_head, int n_q, int* qh, int* row) {
  const int64_t r = t / n_head;
  *qh = static_cast<int>(t % n_head);
  *row = static_cast<int>((r % 2 == 0) ? r / 2 : n_q - 1 - r / 2);
}

}  // namespace

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::F32: return "f32";
    case KvDtype::BF16: return "bf16";
    case KvDtype::F16: return "f16";
  }
  return "?";
}

KvDtype parse_kv_dtype(const std::string& name) {
  for (KvDtype d : {KvDtype::F32, KvDtype::BF16, KvDtype::F16})
    if (name == kv_dtype_name(d)) return d;
  throw std::invalid_argument("unknown KV dtype '" + name + "' (f32, bf16 or f16)");
}

int kv_dtype_size(KvDtype d) { return d == KvDtype::F32 ? 4 : 2; }

int32_t PagedKvView::max_length() const {
  int32_t m = 0;
  for (int h = 0; h < n_kv_head; ++h) m = std::max(m, lengths[h]);
  return m;
}

namespace {

// Query rows from which a 16-bit cache is widened once per call (below) rather than per task: a
// task widens every block it reads, so a prefill chunk of n rows would convert each value
// n * group times.
constexpr int kPrewidenMinRows = 4;

// The visible blocks of every KV head of a 16-bit view, widened into float32 pools of their own
// (head h's blocks consecutive), and the float32 view over them.
struct WidenedKv {
  std::vector<float> k, v;
  std::vector<int32_t> tables;
  std::vector<const int32_t*> table_ptrs;
  PagedKvView view;

  explicit WidenedKv(const PagedKvView& kv) : view(kv) {
    const int64_t block_elems = static_cast<int64_t>(kv.block_size) * kv.head_dim;
    std::vector<int64_t> first(kv.n_kv_head + 1, 0);
    for (int h = 0; h < kv.n_kv_head; ++h)
      first[h + 1] = first[h] + (kv.first_row(h) + static_cast<int64_t>(kv.lengths[h]) + kv.block_size - 1) / kv.block_size;
    const int64_t total = first[kv.n_kv_head];
    k.resize(static_cast<size_t>(total * block_elems));
    v.resize(static_cast<size_t>(total * block_elems));
    tables.resize(static_cast<size_t>(std::max<int64_t>(1, total)));
    table_ptrs.resize(kv.n_kv_head);
    for (int h = 0; h < kv.n_kv_head; ++h) {
      for (int64_t b = first[h]; b < first[h + 1]; ++b) tables[b] = static_cast<int32_t>(b);
      table_ptrs[h] = tables.data() + first[h];
    }
    const auto* k16 = static_cast<const uint16_t*>(kv.k_pool);
    const auto* v16 = static_cast<const uint16_t*>(kv.v_pool);
    const int64_t grain = std::max<int64_t>(1, kMinWorkPerChunk / block_elems);
    at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
      int h = 0;
      for (int64_t b = begin; b < end; ++b) {
        while (b >= first[h + 1]) ++h;
        const int32_t src = kv.block_tables[h][b - first[h]];
        widen_block(k16 + src * block_elems, kv.dtype, block_elems, k.data() + b * block_elems);
        widen_block(v16 + src * block_elems, kv.dtype, block_elems, v.data() + b * block_elems);
      }
    });
    view.k_pool = k.data();
    view.v_pool = v.data();
    view.dtype = KvDtype::F32;
    view.n_blocks = total;
    view.block_tables = table_ptrs.data();
  }
};

}  // namespace

void paged_attention_cpu(const PagedAttentionParams& p) {
  const int64_t n_tasks = static_cast<int64_t>(p.n_q) * p.n_head;
  if (n_tasks == 0) return;
  if (p.kv.dtype != KvDtype::F32 && p.n_q >= kPrewidenMinRows) {
    const WidenedKv widened(p.kv);
    PagedAttentionParams wide = p;
    wide.kv = widened.view;
    paged_attention_cpu(wide);
    return;
  }
  const int d = p.kv.head_dim;
  const int n_kv_head = p.kv.n_kv_head;
  const int64_t max_len = p.kv.max_length();

  // Chunking: at most one chunk per thread, and none smaller than kMinWorkPerChunk.
  const int64_t work_per_task = std::max<int64_t>(1, max_len) * d * 2;
  const int64_t min_tasks_per_chunk =
      std::max<int64_t>(1, (kMinWorkPerChunk + work_per_task - 1) / work_per_task);
  const int64_t n_chunks =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n_tasks / min_tasks_per_chunk));

  // Chunk 0 accumulates attn_sum in place; chunks 1.. into private rows, reduced below.
  const int64_t sum_stride = p.attn_sum_stride;
  std::vector<float> private_sums;
  if (p.attn_sum != nullptr) {
    std::fill(p.attn_sum, p.attn_sum + n_kv_head * sum_stride, 0.0f);
    private_sums.assign(static_cast<size_t>((n_chunks - 1) * n_kv_head * sum_stride), 0.0f);
  }
  const int group = p.n_head / n_kv_head;

  auto run_chunk = [&](int64_t c) {
    const int64_t t_begin = c * n_tasks / n_chunks;
    const int64_t t_end = (c + 1) * n_tasks / n_chunks;
    std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(1, max_len)));
    std::vector<float> acc(static_cast<size_t>(d));
    std::vector<float> block_buf(p.kv.dtype == KvDtype::F32 ? 0 : static_cast<size_t>(p.kv.block_size) * d);
    float* sums = nullptr;
    if (p.attn_sum != nullptr)
      sums = c == 0 ? p.attn_sum : private_sums.data() + (c - 1) * n_kv_head * sum_stride;
    for (int64_t t = t_begin; t < t_end; ++t) {
      int qh = 0, row = 0;
      task_coords(t, p.n_head, p.n_q, &qh, &row);
      float* sum_row = sums != nullptr ? sums + (qh / group) * sum_stride : nullptr;
      attend_row(p, qh, row, scores.data(), acc.data(), block_buf.data(), sum_row);
    }
  };

  if (n_chunks == 1) {
    run_chunk(0);
  } else {
    at::parallel_for(0, n_chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) run_chunk(c);
    });
  }

  if (p.attn_sum != nullptr && n_chunks > 1) {
    for (int64_t c = 1; c < n_chunks; ++c) {
      const float* src = private_sums.data() + (c - 1) * n_kv_head * sum_stride;
      float* dst = p.attn_sum;
      const int64_t n = n_kv_head * sum_stride;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    }
  }
}

void validate_paged_kv_view(const PagedKvView& kv) {
  check(kv.block_size > 0, "block_size must be > 0, got ", kv.block_size);
  check(kv.head_dim > 0, "head_dim must be > 0, got ", kv.head_dim);
  check(kv.n_kv_head > 0, "n_kv_head must be > 0, got ", kv.n_kv_head);
  check(kv.n_blocks >= 0, "n_blocks must be >= 0, got ", kv.n_blocks);
  check(kv.lengths != nullptr, "lengths is null");
  check(kv.block_tables != nullptr, "block_tables is null");
  bool any_entry = false;
  for (int h = 0; h < kv.n_kv_head; ++h) {
    const int32_t len = kv.lengths[h];
    check(len >= 0, "KV head ", h, ": length must be >= 0, got ", len);
    if (len == 0) continue;
    any_entry = true;
    const int32_t* table = kv.block_tables[h];
    check(table != nullptr, "KV head ", h, ": block table is null but length is ", len);
    const int32_t r0 = kv.first_row(h);
    check(r0 >= 0 && r0 < kv.block_size, "KV head ", h, ": first row ", r0, " is outside [0, ", kv.block_size, ")");
    const int64_t n_blocks = (r0 + static_cast<int64_t>(len) + kv.block_size - 1) / kv.block_size;
    for (int64_t b = 0; b < n_blocks; ++b) {
      check(table[b] >= 0 && table[b] < kv.n_blocks, "KV head ", h, ": block table entry ", b,
            " = ", table[b], " is outside the pool [0, ", kv.n_blocks, ")");
    }
  }
  if (any_entry) check(kv.k_pool != nullptr && kv.v_pool != nullptr, "k_pool / v_pool is null");
}

namespace {

PagedAttentionOutput launch(const at::Tensor& q_in, const PagedKvView& kv, double scale,
                            bool with_stats) {
  check(q_in.defined(), "q is undefined");
  check(q_in.scalar_type() == at::kFloat, "q must be float32, got ", q_in.scalar_type());
  check(q_in.device().is_cpu(), "q must be on the CPU, got ", q_in.device());
  check(q_in.dim() == 3, "q must be [n_q, n_head, head_dim], got ", q_in.sizes());
  validate_paged_kv_view(kv);
  check(q_in.size(2) == kv.head_dim, "q head_dim ", q_in.size(2), " != cache head_dim ",
        kv.head_dim);
  const int64_t n_head = q_in.size(1);
  check(n_head > 0 && n_head % kv.n_kv_head == 0, "n_head ", n_head,
        " must be a positive multiple of n_kv_head ", kv.n_kv_head);
  check(std::isfinite(scale), "scale must be finite, got ", scale);

  const at::Tensor q = q_in.stride(2) == 1 ? q_in : q_in.contiguous();
  const int64_t n_q = q.size(0);
  PagedAttentionOutput result;
  result.out = at::empty({n_q, n_head, kv.head_dim}, q.options());  // [n_q, n_head, head_dim]
  const int32_t max_len = kv.max_length();
  if (with_stats) result.attn_sum = at::zeros({kv.n_kv_head, max_len}, q.options());
  if (n_q == 0) return result;

  PagedAttentionParams p;
  p.q = q.data_ptr<float>();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.out = result.out.data_ptr<float>();
  p.out_row_stride = result.out.stride(0);
  p.out_head_stride = result.out.stride(1);
  p.n_q = static_cast<int>(n_q);
  p.n_head = static_cast<int>(n_head);
  p.scale = static_cast<float>(scale);
  p.kv = kv;
  if (with_stats && max_len > 0) {
    p.attn_sum = result.attn_sum.data_ptr<float>();
    p.attn_sum_stride = max_len;
  }
  paged_attention_cpu(p);
  return result;
}

}  // namespace

at::Tensor paged_attention(const at::Tensor& q, const PagedKvView& kv, double scale) {
  return launch(q, kv, scale, false).out;
}

PagedAttentionOutput paged_attention_with_stats(const at::Tensor& q, const PagedKvView& kv,
                                                double scale) {
  return launch(q, kv, scale, true);
}

}  // namespace trimkv::kernels
