#include "trimkv/core/compute_device.h"

#include <ATen/Context.h>

#include "trimkv/core/error.h"
#if TRIMKV_HAVE_CUDA_RUNTIME
#include "trimkv/kernels/cuda_kernels.h"
#endif

namespace trimkv {

const char* compute_device_name(ComputeDevice d) { return d == ComputeDevice::Cuda ? "cuda" : "cpu"; }

at::Device torch_device(ComputeDevice d) {
  return d == ComputeDevice::Cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

bool built_with_cuda_runtime() { return TRIMKV_HAVE_CUDA_RUNTIME != 0; }

bool cuda_usable(std::string* why) {
#if TRIMKV_HAVE_CUDA_RUNTIME
  if (!kernels::cuda::device_available(why)) return false;
  if (!at::hasCUDA()) {
    if (why) *why = "LibTorch sees no CUDA device";
    return false;
  }
  return true;
#else
  if (why)
    *why = "this build has no CUDA runtime (it was built against a LibTorch without CUDA or without a CUDA "
           "compiler; README: \"Building against LibTorch 2.x\")";
  return false;
#endif
}

void check_device_option(const std::string& requested) {
  TRIMKV_CHECK(requested.empty() || requested == "auto" || requested == "cpu" || requested == "cuda", Input,
               "--device: unknown device '", requested, "' (expected auto, cpu or cuda)");
}

ComputeDevice resolve_compute_device(const std::string& requested) {
  check_device_option(requested);
  if (requested == "cpu") return ComputeDevice::Cpu;
  std::string why;
  const bool usable = cuda_usable(&why);
  if (requested == "cuda") {
    TRIMKV_CHECK(usable, Unsupported, "--device cuda: ", why);
    return ComputeDevice::Cuda;
  }
  return usable ? ComputeDevice::Cuda : ComputeDevice::Cpu;
}

}  // namespace trimkv
