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
#include <utility>
#include <vector>

#include <cpuid.h>

#include "gemv_lowp.h"

namespace trimkv::kernels {

namespace {

enum class Isa { Avx512, Avx2, Portable };

// F16C from CPUID (leaf 1, ECX bit 29): clang before 16 has no "f16c" for __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("fma") && cpu_has_f16c())
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
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

// Software prefetch distance of the GEMV kernels: a decode step reads ~120 matrices of
// 0.2-1 MB once each, rows split between threads; the hardware prefetcher alone left the q4_0
// step at ~8 GB/s here, 2 KiB ahead made it ~11 (bench_kernels' decode-step table).
constexpr int kPrefetchBytes = 2048;

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
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
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
    if (i % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
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

// One activation row as blocks of 32 int8 with a float32 scale each, plus what the q4_0 vector
// kernels read. They take two blocks (2p, 2p + 1) per step; a q4_0 block's byte j holds values j
// (low nibble) and j + 16 (high nibble), so the activations are stored once more per pair in the
// order of the unpacked nibbles: block 2p's values 0-15, block 2p+1's 0-15, block 2p's 16-31,
// block 2p+1's 16-31. The nibbles are multiplied as unsigned values (0..15) and q4_0's -8 comes
// back through `corr`: -8 x the sum of each group of 4 activations in that order (the groups the
// integer dot instructions sum into one lane), the value each lane's sum starts from.
struct QuantRow {
  std::vector<int8_t> q;      // [n]
  std::vector<float> d;       // [n / 32]
  std::vector<int8_t> q4p;    // [pairs * 64], q4_0 only
  std::vector<int32_t> corr;  // [pairs * 16], q4_0 only: -8 x each lane's activation sum
};

void quantize_activations(const float* x, int64_t n, QuantRow& r, bool q4) {
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
  if (!q4) return;
  const int64_t pairs = nb / 2;
  r.q4p.resize(static_cast<size_t>(pairs * 64));
  r.corr.resize(static_cast<size_t>(pairs * 16));
  for (int64_t p = 0; p < pairs; ++p) {
    const int8_t* b0 = r.q.data() + 2 * p * kQuantBlock;
    const int8_t* b1 = b0 + kQuantBlock;
    int8_t* o = r.q4p.data() + p * 64;
    std::memcpy(o, b0, 16);
    std::memcpy(o + 16, b1, 16);
    std::memcpy(o + 32, b0 + 16, 16);
    std::memcpy(o + 48, b1 + 16, 16);
    for (int l = 0; l < 16; ++l) r.corr[p * 16 + l] = -8 * (o[4 * l] + o[4 * l + 1] + o[4 * l + 2] + o[4 * l + 3]);
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

// One block's 8 integer partial sums as floats (the odd block left after the pairs).
template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
inline __m256 block_term_avx2(const uint8_t* blk, const int8_t* xq) {
  __m256i wl;
  if constexpr (Q4) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    wl = _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
  } else {
    wl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  }
  const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return _mm256_cvtepi32_ps(block_dot_avx2(wl, xl));
}

// The 8 lanes both kernels reduce to, plus the odd block after the pairs, summed.
template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
inline float finish_dot(const uint8_t* w, const QuantRow& x, int64_t nb, __m256 v) {
  constexpr int64_t bb = Q4 ? kQ4BlockBytes : kQ8BlockBytes;
  if (nb % 2) {
    const uint8_t* blk = w + (nb - 1) * bb;
    v = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(load_u16(blk)) * x.d[nb - 1]),
                        block_term_avx2<Q4>(blk, x.q.data() + (nb - 1) * kQuantBlock), v);
  }
  return hsum256(v);
}

// d_w * d_x of blocks 2p and 2p+1 in lanes 0 and 1.
__attribute__((target("avx2,fma,f16c")))
inline __m128 pair_scales(const uint8_t* b0, const uint8_t* b1, const float* dx) {
  const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u16(b0) | (uint32_t{load_u16(b1)} << 16))));
  return _mm_mul_ps(dw, _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx))));
}

// The 16 integer lanes of a block pair, as float32, for 512-bit (AVX-512) and 2 x 256-bit (AVX2)
// registers. Lanes 0-7 and 8-15 are the two 256-bit halves; which block a lane belongs to:
//   q8_0: lanes 0-7 block 2p, 8-15 block 2p+1;
//   q4_0: lanes 0-3 and 8-11 block 2p, 4-7 and 12-15 block 2p+1 (the q4p order above).
// Both kernels compute each lane's integer exactly, scale and accumulate it with the same float
// operations in the same order, and reduce the same way: their results are identical.
template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
inline __m512 pair_term_vnni(const uint8_t* b0, const uint8_t* b1, const QuantRow& x, int64_t p) {
  __m512i ints;
  if constexpr (Q4) {
    const __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)), 1);
    const __m512i nib = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1),
                                         _mm512_set1_epi8(0x0F));
    const __m512i xv = _mm512_loadu_si512(x.q4p.data() + p * 64);
    ints = _mm512_dpbusd_epi32(_mm512_loadu_si512(x.corr.data() + p * 16), nib, xv);
  } else {
    const __m512i wv = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
    const __m512i xv = _mm512_loadu_si512(x.q.data() + p * 64);
    // |w| times x with w's sign (AVX-512 has no byte sign instruction).
    const __m512i xs = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), xv);
    ints = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wv), xs);
  }
  return _mm512_cvtepi32_ps(ints);
}


// acc + pair p's scales x its integer lanes (AVX-512).
template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
inline __m512 pair_fma_vnni(const uint8_t* w, const QuantRow& x, int64_t p, __m512i lane_block, __m512 acc) {
  constexpr int64_t bb = Q4 ? kQ4BlockBytes : kQ8BlockBytes;
  const uint8_t* b0 = w + 2 * p * bb;
  _mm_prefetch(reinterpret_cast<const char*>(b0) + kPrefetchBytes, _MM_HINT_T0);
  const __m512 scale =
      _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(pair_scales(b0, b0 + bb, x.d.data() + 2 * p)));
  return _mm512_fmadd_ps(scale, pair_term_vnni<Q4>(b0, b0 + bb, x, p), acc);
}

template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
float dot_q_vnni(const uint8_t* w, const QuantRow& x, int64_t nb) {
  const __m512i lane_block = Q4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                                : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  // Even pairs accumulate into acc0, odd ones into acc1 (two chains; named registers, not an
  // array indexed by p & 1, which GCC kept in memory).
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const int64_t pairs = nb / 2;
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) {
    acc0 = pair_fma_vnni<Q4>(w, x, p, lane_block, acc0);
    acc1 = pair_fma_vnni<Q4>(w, x, p + 1, lane_block, acc1);
  }
  if (p < pairs) acc0 = pair_fma_vnni<Q4>(w, x, p, lane_block, acc0);
  const __m512 sum = _mm512_add_ps(acc0, acc1);
  __m256 v = _mm256_add_ps(_mm512_castps512_ps256(sum),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
  return finish_dot<Q4>(w, x, nb, v);
}

// lo, hi + pair p's scales x its integer lanes (AVX2; the two halves of pair_fma_vnni's).
template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
inline void pair_fma_avx2(const uint8_t* w, const QuantRow& x, int64_t p, __m256i lo_block, __m256i hi_block,
                          __m256& lo, __m256& hi) {
  constexpr int64_t bb = Q4 ? kQ4BlockBytes : kQ8BlockBytes;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* b0 = w + 2 * p * bb;
  const uint8_t* b1 = b0 + bb;
  _mm_prefetch(reinterpret_cast<const char*>(b0) + kPrefetchBytes, _MM_HINT_T0);
  __m256i ilo, ihi;
  if constexpr (Q4) {
    const __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)), 1);
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i* xp = reinterpret_cast<const __m256i*>(x.q4p.data() + p * 64);
    const __m256i* cp = reinterpret_cast<const __m256i*>(x.corr.data() + p * 16);
    ilo = _mm256_add_epi32(
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(t, mask), _mm256_loadu_si256(xp)), ones),
        _mm256_loadu_si256(cp));
    ihi = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(t, 4), mask),
                                                                  _mm256_loadu_si256(xp + 1)),
                                             ones),
                           _mm256_loadu_si256(cp + 1));
  } else {
    const int8_t* xq = x.q.data() + p * 64;
    ilo = block_dot_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
    ihi = block_dot_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32)));
  }
  const __m256 s = _mm256_castps128_ps256(pair_scales(b0, b1, x.d.data() + 2 * p));
  lo = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, lo_block), _mm256_cvtepi32_ps(ilo), lo);
  hi = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, hi_block), _mm256_cvtepi32_ps(ihi), hi);
}

template <bool Q4>
__attribute__((target("avx2,fma,f16c")))
float dot_q_avx2(const uint8_t* w, const QuantRow& x, int64_t nb) {
  const __m256i lo_block = Q4 ? _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1) : _mm256_set1_epi32(0);
  const __m256i hi_block = Q4 ? _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1) : _mm256_set1_epi32(1);
  // Even pairs into lo0/hi0, odd ones into lo1/hi1: the lanes of dot_q_vnni's acc0 and acc1.
  __m256 lo0 = _mm256_setzero_ps(), hi0 = _mm256_setzero_ps(), lo1 = _mm256_setzero_ps(), hi1 = _mm256_setzero_ps();
  const int64_t pairs = nb / 2;
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) {
    pair_fma_avx2<Q4>(w, x, p, lo_block, hi_block, lo0, hi0);
    pair_fma_avx2<Q4>(w, x, p + 1, lo_block, hi_block, lo1, hi1);
  }
  if (p < pairs) pair_fma_avx2<Q4>(w, x, p, lo_block, hi_block, lo0, hi0);
  __m256 v = _mm256_add_ps(_mm256_add_ps(lo0, lo1), _mm256_add_ps(hi0, hi1));
  return finish_dot<Q4>(w, x, nb, v);
}

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
    const bool q4 = f == WeightFormat::Q4_0;
    for (int64_t r = 0; r < n; ++r) quantize_activations(x + r * x_stride, in, xq[r], q4 && which != Isa::Portable);
    const int64_t nb = in / kQuantBlock;
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
