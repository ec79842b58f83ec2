// bfloat16 prefill GEMM through oneDNN's matmul primitive, used where it runs on AMX tiles
// (gemm_bf16.h).
#include "gemm_bf16.h"
#include "target_clones.h"

#ifdef TRIMKV_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trimkv::kernels {

namespace {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
}

}  // namespace

TRIMKV_CLONES_WIDE
void narrow_row_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

#ifdef TRIMKV_HAVE_DNNL

namespace {

// Owns one oneDNN handle (engine, stream, descriptor, primitive, memory).
template <class T, dnnl_status_t (*Destroy)(T)>
struct Handle {
  T h = nullptr;
  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (h) Destroy(h);
  }
};

// One CPU engine for the process; a stream per calling thread (oneDNN streams are not meant to be
// shared between threads that execute at the same time).
dnnl_engine_t engine() {
  static Handle<dnnl_engine_t, dnnl_engine_destroy> e;
  static const bool made = [] {
    if (dnnl_engine_create(&e.h, dnnl_cpu, 0) == dnnl_success) return true;
    e.h = nullptr;
    return false;
  }();
  return made ? e.h : nullptr;
}

dnnl_stream_t stream() {
  thread_local Handle<dnnl_stream_t, dnnl_stream_destroy> s;
  thread_local const bool made = [] {
    if (engine() && dnnl_stream_create(&s.h, engine(), dnnl_stream_default_flags) == dnnl_success) return true;
    s.h = nullptr;
    return false;
  }();
  return made ? s.h : nullptr;
}

// The oneDNN objects of one call, released however it ends (memory first, the descriptor last).
struct Owned {
  Handle<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy> pd;
  Handle<dnnl_primitive_t, dnnl_primitive_destroy> prim;
  Handle<dnnl_memory_t, dnnl_memory_destroy> mem[4];
};

void ok(dnnl_status_t st, const char* what) {
  if (st != dnnl_success)
    throw std::runtime_error(std::string("bf16 GEMM: oneDNN ") + what + " failed with status " + std::to_string(int(st)));
}

// The matmul's descriptors: src [n, in] bf16, weights [in, out] read from a row-major [out, in]
// matrix (strides 1, ldw), dst [n, out] f32 at row stride ldy, bias [1, out] f32 when wanted.
void make_pd(Owned& o, int64_t n, int64_t in, int64_t ldw, int64_t out, int64_t ldy, bool bias,
             dnnl_memory_desc_t md[4]) {
  const dnnl_dims_t sd = {n, in}, ss = {in, 1}, wd = {in, out}, ws = {1, ldw}, dd = {n, out}, ds = {ldy, 1},
                    bd = {1, out}, bs = {out, 1};
  ok(dnnl_memory_desc_init_by_strides(&md[0], 2, sd, dnnl_bf16, ss), "source descriptor");
  ok(dnnl_memory_desc_init_by_strides(&md[1], 2, wd, dnnl_bf16, ws), "weight descriptor");
  ok(dnnl_memory_desc_init_by_strides(&md[2], 2, dd, dnnl_f32, ds), "destination descriptor");
  if (bias) ok(dnnl_memory_desc_init_by_strides(&md[3], 2, bd, dnnl_f32, bs), "bias descriptor");
  dnnl_matmul_desc_t desc;
  ok(dnnl_matmul_desc_init(&desc, &md[0], &md[1], bias ? &md[3] : nullptr, &md[2]), "matmul descriptor");
  ok(dnnl_primitive_desc_create(&o.pd.h, &desc, nullptr, engine(), nullptr), "matmul implementation");
}

bool probe_amx() {
  if (const char* env = std::getenv("TRIMKV_BF16_GEMM")) {
    const std::string v = env;
    if (v == "0" || v == "off" || v == "no") return false;
  }
  if (!engine() || !stream()) return false;
  try {
    Owned o;
    dnnl_memory_desc_t md[4];
    make_pd(o, 64, 64, 64, 64, 64, true, md);
    const char* impl = nullptr;
    ok(dnnl_primitive_desc_query(o.pd.h, dnnl_query_impl_info_str, 0, &impl), "implementation query");
    return impl && std::strstr(impl, "amx") != nullptr;
  } catch (const std::runtime_error&) {
    return false;
  }
}

bool amx_available() {
  static const bool yes = probe_amx();
  return yes;
}

std::atomic<bool> g_enabled{true};

}  // namespace

bool amx_bf16_gemm() { return amx_available() && g_enabled.load(std::memory_order_relaxed); }

bool set_amx_bf16_gemm(bool on) {
  g_enabled.store(on, std::memory_order_relaxed);
  return amx_bf16_gemm();
}

void gemm_bf16_into(const uint16_t* x, int64_t n, int64_t in, const uint16_t* w, int64_t ldw, int64_t out,
                    const float* b, float* y, int64_t ldy) {
  if (!amx_bf16_gemm()) throw std::runtime_error("bf16 GEMM: no AMX implementation on this CPU");
  if (n <= 0 || out <= 0) return;
  if (!stream()) throw std::runtime_error("bf16 GEMM: oneDNN stream could not be created");
  Owned o;
  dnnl_memory_desc_t md[4];
  make_pd(o, n, in, ldw, out, ldy, b != nullptr, md);
  ok(dnnl_primitive_create(&o.prim.h, o.pd.h), "primitive");
  // oneDNN takes non-const handles; it only reads the source, weights and bias.
  ok(dnnl_memory_create(&o.mem[0].h, &md[0], engine(), const_cast<uint16_t*>(x)), "source memory");
  ok(dnnl_memory_create(&o.mem[1].h, &md[1], engine(), const_cast<uint16_t*>(w)), "weight memory");
  ok(dnnl_memory_create(&o.mem[2].h, &md[2], engine(), y), "destination memory");
  int nargs = 3;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, o.mem[0].h}, {DNNL_ARG_WEIGHTS, o.mem[1].h}, {DNNL_ARG_DST, o.mem[2].h}, {}};
  if (b) {
    ok(dnnl_memory_create(&o.mem[3].h, &md[3], engine(), const_cast<float*>(b)), "bias memory");
    args[nargs++] = {DNNL_ARG_BIAS, o.mem[3].h};
  }
  ok(dnnl_primitive_execute(o.prim.h, stream(), nargs, args), "execution");
  ok(dnnl_stream_wait(stream()), "stream wait");
}

#else

bool amx_bf16_gemm() { return false; }
bool set_amx_bf16_gemm(bool) { return false; }

void gemm_bf16_into(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, const float*, float*,
                    int64_t) {
  throw std::runtime_error("bf16 GEMM: this build has no oneDNN");
}

#endif

}  // namespace trimkv::kernels
