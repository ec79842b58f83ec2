#include "trimkv/core/cpu_tuning.h"

#include <unistd.h>

#include <cstdlib>

namespace trimkv {

void tune_blas_for_cpu(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("TRIMKV_NO_CPU_TUNING")) return;
  const char* core = nullptr;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
#endif
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  // execv returned: it failed; carry on untuned.
}

}  // namespace trimkv
