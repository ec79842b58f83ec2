// Process-level CPU tuning, done once at the start of main().
//
// LibTorch's matrix products (everything autograd runs: training, the dense reference path) go
// through the BLAS it was built with. Debian's OpenBLAS picks its kernels from the CPU's model
// name at load time; on a CPU whose model is masked (common in virtual machines) it falls back to
// generic SSE3 kernels, measured here 4.5x slower for a linear layer and ~600x slower for batched
// matmuls than its AVX-512 kernels on the same machine. OpenBLAS reads OPENBLAS_CORETYPE when it is
// loaded, before main(), so the only way to fix it from inside is to re-execute the program with
// the variable set.
#pragma once

namespace trimkv {

// Unless TRIMKV_NO_CPU_TUNING is set: turns on flush-to-zero / denormals-are-zero for the process
// (denormal operands cost a microcode assist each; sharp softmaxes make many); then sets what is
// unset of OMP_WAIT_POLICY (PASSIVE: idle OpenMP threads sleep instead of spinning) and
// OPENBLAS_CORETYPE (from the CPU's instruction sets: AVX-512 -> SkylakeX, AVX2 -> Haswell) and,
// if it set either, re-executes /proc/self/exe with the same arguments. Returns normally when
// there is nothing to do or the re-execution fails (the program then runs as before).
void tune_cpu_runtime(char** argv);

// For training loops that allocate and free the same large tensors every step: keeps freed
// memory in the process (glibc: blocks up to 32 MiB from the heap instead of fresh mappings, and
// no trimming of the heap's top), so a step no longer faults in and zeroes the pages the step
// before gave back. Measured on the 2-core AMD machine: 80 vision steps of train-demo 32.0 s wall
// / 7.5 s system without it, 27.2 s / 0.5 s with it; the whole vision stage 31 min 0 s -> 28 min
// 25 s; weights bit-identical; the chat and gate stages unchanged. The peak resident size is kept
// for the rest of the process. No effect with other C libraries.
void keep_freed_memory();

// The machine's hardware threads (at least 1).
int hardware_threads();

// Sets the threads the model's math uses from the calling thread on (n = 0: every hardware
// thread, or OMP_NUM_THREADS when that is set to a positive number, as OpenMP programs take it;
// more than the machine's hardware threads: that many, with a warning on stderr; n < 0:
// Error{Input}) and returns the number now in use there. OpenMP keeps this per thread: a worker thread
// (the Studio's) must call it itself, or it runs with whatever its runtime defaults to.
int set_compute_threads(int n);

}  // namespace trimkv
