// Function multiversioning for the hot loops: a function compiled for several x86-64 levels, the
// best one the CPU runs picked once at load time (an ifunc resolver), so the build stays portable
// (no -march=native) while any post-2013 x86 CPU gets 8-wide FMA code (~2x on decode).
//   TRIMKV_CLONES_V3    baseline and x86-64-v3 (AVX2 + FMA)
//   TRIMKV_CLONES_WIDE  baseline, AVX2 and AVX-512F
// GCC 11+ on x86-64 only (clang's resolvers differ); empty under ThreadSanitizer, whose
// instrumented resolvers run before its runtime is up and crash the program at load.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && !defined(__SANITIZE_THREAD__)
#define TRIMKV_CLONES_V3 __attribute__((target_clones("arch=x86-64-v3", "default")))
#define TRIMKV_CLONES_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRIMKV_CLONES_V3
#define TRIMKV_CLONES_WIDE
#endif
