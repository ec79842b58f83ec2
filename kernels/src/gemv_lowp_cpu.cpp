// Decode-time matrix-vector products on bfloat16, float16, q8_0 and q4_0 weights
// (linear.h: gemv_rows_lowp). Each format has an AVX-512, an AVX2 (+FMA, F16C) and a portable
// version; the CPU's best is chosen once at run time (never by compile flags: the machines this
// ships to differ). Float formats accumulate in float32 against float32 activations; quantised
// formats quantise each activation row to q8_0-style blocks (int8 with a float32 scale) and take
// integer block dot products, as llama.cpp does, the AVX-512 one with VNNI. The quantised AVX-512
// and AVX2 versions give identical results (exact integer block sums, the same float order);
// the float formats' versions sum in a different order per vector width, as the f32 kernel does.
#include <ATen/Parallel.h>
#include <immintrin.h>

// GCC 12's AVX-512 headers start some conversions from a deliberately undefined vector and
// warn about it where they are inlined; nothing here reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <cstring>
#include <vector>

#include "gemv_lowp.h"

namespace trimkv::kernels {

namespace {

enum class Isa { Avx512, Avx2, Portable };

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::Avx2;
  return Isa::Portable;
}

Isa best_isa() {
  static const Isa best = detect_isa();
  return best;
}

std::atomic<int> g_forced{-1};  // force_lowp_kernel_isa(): an Isa, or -1 = the best

Isa isa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : best_isa();
}

inline float half_to_float(uint16_t h) {
  // IEEE binary16 -> binary32, portable (subnormals, inf, NaN).
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float bf16_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- float formats -----------------------------------------------------------------------

inline float widen16(uint16_t v, bool bf16) { return bf16 ? bf16_to_float(v) : half_to_float(v); }

__attribute__((target("avx2,fma,f16c")))
float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// 16 bfloat16 (bit shift) or float16 (F16C) values widened to float32.
template <bool BF16>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
inline __m512 widen16_avx512(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else return _mm512_cvtph_ps(h);
}

template <bool BF16>
__attribute__((target("avx2,fma,f16c")))
inline __m256 widen8_avx2(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}

template <bool BF16>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
float dot16_avx512(const float* x, const uint16_t* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), widen16_avx512<BF16>(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), widen16_avx512<BF16>(w + i + 16), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * widen16(w[i], BF16);
  return s;
}

template <bool BF16>
__attribute__((target("avx2,fma,f16c")))
float dot16_avx2(const float* x, const uint16_t* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), widen8_avx2<BF16>(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), widen8_avx2<BF16>(w + i + 8), a1);
  }
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * widen16(w[i], BF16);
  return s;
}

float dot_16bit_portable(const float* x, const uint16_t* w, int64_t n, bool bf16) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * widen16(w[i], bf16);
  return s;
}

// ---- quantised formats ---------------------------------------------------------------------

// One activation row as blocks of 32 int8 with a float32 scale each.
struct QuantRow {
  std::vector<int8_t> q;
  std::vector<float> d;
};

void quantize_activations(const float* x, int64_t n, QuantRow& r) {
  const int64_t nb = n / kQuantBlock;
  r.q.resize(static_cast<size_t>(n));
  r.d.resize(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    r.d[b] = d;
    for (int64_t j = 0; j < kQuantBlock; ++j) {
      // Half away from zero, as lroundf (|v| <= 127, exact in double; truncation is baseline x86-64).
      const double v = static_cast<double>(xb[j] * id);
      r.q[b * kQuantBlock + j] = static_cast<int8_t>(v >= 0 ? static_cast<int>(v + 0.5) : -static_cast<int>(0.5 - v));
    }
  }
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// w: 32 signed weights (int8 lanes), x: 32 int8 activations -> 8 int32 partial sums.
__attribute__((target("avx2,fma,f16c")))
inline __m256i block_dot_avx2(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
inline __m256i block_dot_vnni(__m256i w, __m256i x) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

__attribute__((target("avx2,fma,f16c")))
inline __m256i q4_lanes_avx2(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
  return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}

// One block's 8 integer partial sums as floats; the caller scales them by d_w * d_x.
// Four independent accumulators (blocks b, b+1, b+2, b+3) hide the FMA latency. The body is a
// macro because the two versions need different target attributes around the same code; both
// reduce in the same order, so their results stay identical.
template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
inline __m256 block_term_avx2(const uint8_t* blk, const int8_t* xq) {
  const __m256i wl = Q4 ? q4_lanes_avx2(blk + 2) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return _mm256_cvtepi32_ps(block_dot_avx2(wl, xl));
}

template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
inline __m256 block_term_vnni(const uint8_t* blk, const int8_t* xq) {
  const __m256i wl = Q4 ? q4_lanes_avx2(blk + 2) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return _mm256_cvtepi32_ps(block_dot_vnni(wl, xl));
}

#define TRIMKV_DOT_Q_BODY(TERM)                                                                        \
  constexpr int64_t bb = Q4 ? kQ4BlockBytes : kQ8BlockBytes;                                           \
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
  int64_t b = 0;                                                                                       \
  for (; b + 4 <= nb; b += 4)                                                                          \
    for (int k = 0; k < 4; ++k) {                                                                      \
      const uint8_t* blk = w + (b + k) * bb;                                                           \
      const __m256 scale = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)) * x.d[b + k]);                      \
      acc[k] = _mm256_fmadd_ps(scale, TERM<Q4>(blk, x.q.data() + (b + k) * kQuantBlock), acc[k]); \
    }                                                                                                  \
  for (; b < nb; ++b) {                                                                                \
    const uint8_t* blk = w + b * bb;                                                                   \
    const __m256 scale = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)) * x.d[b]);                            \
    acc[0] = _mm256_fmadd_ps(scale, TERM<Q4>(blk, x.q.data() + b * kQuantBlock), acc[0]);        \
  }                                                                                                    \
  return hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));

template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
float dot_q_avx2(const uint8_t* w, const QuantRow& x, int64_t nb) {
  TRIMKV_DOT_Q_BODY(block_term_avx2)
}

template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
float dot_q_vnni(const uint8_t* w, const QuantRow& x, int64_t nb) {
  TRIMKV_DOT_Q_BODY(block_term_vnni)
}

#undef TRIMKV_DOT_Q_BODY

template <bool Q4>
float dot_q_portable(const uint8_t* w, const QuantRow& x, int64_t nb) {
  constexpr int64_t bb = Q4 ? kQ4BlockBytes : kQ8BlockBytes;
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * bb;
    const int8_t* xq = x.q.data() + b * kQuantBlock;
    int32_t acc = 0;
    if (Q4) {
      for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
        acc += ((blk[2 + j] & 0x0F) - 8) * xq[j];
        acc += ((blk[2 + j] >> 4) - 8) * xq[j + 16];
      }
    } else {
      const auto* wq = reinterpret_cast<const int8_t*>(blk + 2);
      for (int64_t j = 0; j < kQuantBlock; ++j) acc += wq[j] * xq[j];
    }
    s += half_to_float(load_u16(blk)) * x.d[b] * static_cast<float>(acc);
  }
  return s;
}

}  // namespace

namespace {

template <bool BF16>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
void widen_row_avx512(const uint16_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, widen16_avx512<BF16>(s + i));
  for (; i < n; ++i) y[i] = widen16(s[i], BF16);
}

template <bool BF16>
__attribute__((target("avx2,fma,f16c")))
void widen_row_avx2(const uint16_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, widen8_avx2<BF16>(s + i));
  for (; i < n; ++i) y[i] = widen16(s[i], BF16);
}

}  // namespace

void widen_row_16bit(const uint16_t* s, float* y, int64_t n, bool bf16) {
  switch (isa()) {
    case Isa::Avx512: return bf16 ? widen_row_avx512<true>(s, y, n) : widen_row_avx512<false>(s, y, n);
    case Isa::Avx2: return bf16 ? widen_row_avx2<true>(s, y, n) : widen_row_avx2<false>(s, y, n);
    case Isa::Portable: break;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = widen16(s[i], bf16);
}

const char* gemv_isa_name() {
  switch (isa()) {
    case Isa::Avx512: return "avx512+vnni";
    case Isa::Avx2: return "avx2+fma+f16c";
    case Isa::Portable: return "portable";
  }
  return "?";
}

bool force_gemv_isa(const std::string& name) {
  const Isa best = best_isa();
  if (name.empty() || name == "best") {
    g_forced.store(-1);
    return true;
  }
  Isa want;
  if (name == "avx512") want = Isa::Avx512;
  else if (name == "avx2") want = Isa::Avx2;
  else if (name == "portable") want = Isa::Portable;
  else return false;
  if (static_cast<int>(want) < static_cast<int>(best)) return false;  // the CPU lacks it
  g_forced.store(static_cast<int>(want));
  return true;
}

void gemv_rows_lowp(WeightFormat f, const float* x, int64_t x_stride, const uint8_t* w, int64_t w_row_bytes,
                    const float* b, float* y, int64_t y_stride, int64_t n, int64_t in, int64_t out) {
  const Isa which = isa();
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(w_row_bytes, 1));
  if (is_quantized(f)) {
    // Reused per calling thread: a decode step makes ~4 of these calls per layer.
    // (A reference, so the worker threads below read this thread's rows, not their own.)
    thread_local std::vector<QuantRow> scratch;
    std::vector<QuantRow>& xq = scratch;
    if (xq.size() < static_cast<size_t>(n)) xq.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) quantize_activations(x + r * x_stride, in, xq[r]);
    const int64_t nb = in / kQuantBlock;
    const bool q4 = f == WeightFormat::Q4_0;
    at::parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* wr = w + o * w_row_bytes;
        for (int64_t r = 0; r < n; ++r) {
          float s;
          if (which == Isa::Avx512) s = q4 ? dot_q_vnni<true>(wr, xq[r], nb) : dot_q_vnni<false>(wr, xq[r], nb);
          else if (which == Isa::Avx2) s = q4 ? dot_q_avx2<true>(wr, xq[r], nb) : dot_q_avx2<false>(wr, xq[r], nb);
          else s = q4 ? dot_q_portable<true>(wr, xq[r], nb) : dot_q_portable<false>(wr, xq[r], nb);
          y[r * y_stride + o] = s + (b ? b[o] : 0.0f);
        }
      }
    });
    return;
  }
  const bool bf16 = f == WeightFormat::BF16;
  at::parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const auto* wr = reinterpret_cast<const uint16_t*>(w + o * w_row_bytes);
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * x_stride;
        float s;
        if (which == Isa::Avx512) s = bf16 ? dot16_avx512<true>(xr, wr, in) : dot16_avx512<false>(xr, wr, in);
        else if (which == Isa::Avx2) s = bf16 ? dot16_avx2<true>(xr, wr, in) : dot16_avx2<false>(xr, wr, in);
        else s = dot_16bit_portable(xr, wr, in, bf16);
        y[r * y_stride + o] = s + (b ? b[o] : 0.0f);
      }
    }
  });
}

}  // namespace trimkv::kernels
