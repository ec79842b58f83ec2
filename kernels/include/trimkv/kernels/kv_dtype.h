// How the paged pools store K and V (shared by the CPU and CUDA kernels; no LibTorch here).
#pragma once
#include <string>

namespace trimkv::kernels {

// float32, or 16-bit (bfloat16 / IEEE half) widened to float32 as they are read; scores, softmax
// and the weighted sum are float32 whatever the storage.
enum class KvDtype { F32, BF16, F16 };
const char* kv_dtype_name(KvDtype d);  // "f32", "bf16", "f16"
// Accepts f32, bf16, f16; throws std::invalid_argument naming the text.
KvDtype parse_kv_dtype(const std::string& name);
int kv_dtype_size(KvDtype d);  // bytes per value: 4 or 2

}  // namespace trimkv::kernels
