// Where the model runs: `--device auto|cpu|cuda` (CLI), the Studio's device setting.
//
// The CPU path is the reference and is always there. The CUDA path (weights, KV cache, decoder on
// the GPU; kernels/cuda for attention over the paged cache) exists in builds made against a
// LibTorch with CUDA (2.x) and a CUDA compiler (TRIMKV_CUDA): trimkv was then built "with the
// CUDA runtime". Debian's LibTorch 1.13 is CPU-only: such builds run on the CPU whatever is asked,
// and "cuda" is refused with the reason.
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace trimkv {

enum class ComputeDevice { Cpu, Cuda };

const char* compute_device_name(ComputeDevice d);  // "cpu" | "cuda"
at::Device torch_device(ComputeDevice d);          // cuda:0 for Cuda

// Whether this build has the CUDA runtime path (see above).
bool built_with_cuda_runtime();
// Whether the model can run on a CUDA device now; when not, `why` says why (the build, the
// driver's message, LibTorch seeing no device).
bool cuda_usable(std::string* why = nullptr);

// "" or "auto": CUDA when cuda_usable(), else the CPU; "cpu"; "cuda": Error{Unsupported} naming
// why it cannot be used. Anything else: Error{Input} naming the value and the choices.
ComputeDevice resolve_compute_device(const std::string& requested);
// The spelling check alone (no device query): Error{Input} unless "", auto, cpu or cuda.
void check_device_option(const std::string& requested);

}  // namespace trimkv
