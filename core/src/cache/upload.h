// Host values to a tensor on `device`: on the CPU a plain tensor; elsewhere through pinned memory
// and an asynchronous copy on the current stream, so the host does not wait for the device
// (LibTorch's pinned allocator keeps the host block until the copy has run).
#pragma once
#include <ATen/ATen.h>

#include <cstring>
#include <vector>

namespace trimkv {

template <typename T>
at::Tensor upload_to(const std::vector<T>& values, const at::Device& device) {
  const at::ScalarType dtype = c10::CppTypeToScalarType<T>::value;
  const int64_t n = static_cast<int64_t>(values.size());
  at::Tensor host = at::empty({n}, at::TensorOptions().dtype(dtype).pinned_memory(!device.is_cpu()));
  if (n > 0) std::memcpy(host.data_ptr(), values.data(), static_cast<size_t>(n) * sizeof(T));
  return device.is_cpu() ? host : host.to(device, dtype, /*non_blocking=*/true);
}

}  // namespace trimkv
