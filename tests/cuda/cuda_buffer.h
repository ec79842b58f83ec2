// Device memory for the CUDA tests and benchmark: a typed buffer filled from and read back to
// host vectors.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trimkv::test {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n = 0) : m_n(n) {
    if (n) cuda_check(cudaMalloc(&m_ptr, n * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (m_n) cuda_check(cudaMemcpy(m_ptr, host.data(), m_n * sizeof(T), cudaMemcpyHostToDevice), "to device");
  }
  ~DeviceBuffer() {
    if (m_ptr) cudaFree(m_ptr);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : m_ptr(o.m_ptr), m_n(o.m_n) { o.m_ptr = nullptr; o.m_n = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(m_ptr, o.m_ptr);
    std::swap(m_n, o.m_n);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return m_ptr; }
  size_t size() const { return m_n; }
  std::vector<T> host() const {
    std::vector<T> h(m_n);
    cuda_check(cudaDeviceSynchronize(), "kernel");
    if (m_n) cuda_check(cudaMemcpy(h.data(), m_ptr, m_n * sizeof(T), cudaMemcpyDeviceToHost), "to host");
    return h;
  }

 private:
  T* m_ptr = nullptr;
  size_t m_n = 0;
};

}  // namespace trimkv::test
