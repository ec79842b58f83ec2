// Whether a CUDA device is there, and its memory bandwidth (cuda_kernels.h).
#include "cuda_common.cuh"
#include "trimkv/kernels/cuda_kernels.h"

namespace trimkv::kernels::cuda {

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no CUDA device (") + cudaGetErrorString(e) + ")" : "no CUDA device";
    cudaGetLastError();  // clear the sticky error for later calls
    return false;
  }
  return true;
}

double peak_bandwidth_bytes_per_s() {
  int dev = 0, clock_khz = 0, bus_bits = 0;
  detail::check(cudaGetDevice(&dev), "cudaGetDevice");
  detail::check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev), "memory clock");
  detail::check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev), "bus width");
  return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);  // double data rate
}

}  // namespace trimkv::kernels::cuda
