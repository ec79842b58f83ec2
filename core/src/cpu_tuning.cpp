#include "trimkv/core/cpu_tuning.h"

#include "trimkv/core/error.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <thread>

namespace trimkv {

void tune_cpu_runtime(char** argv) {
  if (std::getenv("TRIMKV_NO_CPU_TUNING")) return;
  // Flush denormals to zero (FTZ/DAZ) on this thread before any worker thread exists: threads
  // created later inherit the setting. A trained model's sharp softmaxes produce denormal
  // probabilities, and each operation on one costs a microcode assist (a training run slowed
  // down 2x over its first minutes without this).
  at::globalContext().setFlushDenormal(true);
  bool changed = false;
  // OpenMP's default is to spin while waiting for work. With as many threads as cores, a spinning
  // worker takes the core the main thread needs for its serial parts (data, autograd
  // bookkeeping): a training run went from 1.3 to 0.65 s per step with passive waiting.
  // Waiting passively from the first moment costs a decode step instead: it opens ~150 short
  // parallel regions (each GEMV, each layer's attention) with microseconds of serial work between
  // them, and waking a sleeping worker for each took longer than the work (SmolLM2-135M q4_0:
  // 37-82 tok/s passive, 108-118 spinning). So workers spin a short while first (libgomp's
  // GOMP_SPINCOUNT overrides the policy's spin count: 10^4 pauses, ~0.1-0.5 ms) and then sleep,
  // which keeps a training run's long serial stretches free of a spinning worker.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    if (!std::getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", "10000", 1);
    changed = true;
  }
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const char* core = nullptr;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      core = "Haswell";
#endif
    if (core) {
      setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  // Both variables are read when the libraries load, before main(): start again with them set.
  if (changed) execv("/proc/self/exe", argv);
  // Here execv failed or nothing changed: carry on as we are.
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit systems (larger is refused).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
}

int hardware_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int set_compute_threads(int n) {
  TRIMKV_CHECK(n >= 0, Input, "a thread count must be 0 (every hardware thread) or more, got ", n);
  const int cores = hardware_threads();
  if (n > cores) {  // more threads than the machine has only queue behind each other (and 10^5 never start)
    std::fprintf(stderr, "trimkv: %d threads asked for; this machine has %d hardware threads: using %d\n", n, cores,
                 cores);
    n = cores;
  }
  int want = n > 0 ? n : cores;
  if (n == 0)
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      const int asked = std::atoi(env);  // "4" (a list such as "4,2" gives its first level)
      if (asked > 0) want = std::min(asked, cores);
    }
  at::set_num_threads(want);
  return at::get_num_threads();
}

}  // namespace trimkv
