// WeightStore: the tensors of a checkpoint folder, single-file (model.safetensors) or sharded
// (model.safetensors.index.json + shards). Files stay memory-mapped; tensors are converted to
// float32 on request. Lookups that fail name the folder and every alias that was tried.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trimkv/core/safetensors.h"
#include "trimkv/kernels/weight_format.h"

namespace trimkv {

class WeightCache;

class WeightStore {
 public:
  // Opens `dir`: reads the index if present (every shard it names must exist and hold the tensors
  // the index says), else model.safetensors. Throws Error{Io} when neither exists.
  static WeightStore open_folder(const std::string& dir);
  // Opens a single .safetensors file.
  static WeightStore open_file(const std::string& path);
  // The tensors of another container (a GGUF file, gguf_model.h) under the names given: their
  // data points into `mapping`, which the store keeps alive.
  static WeightStore from_tensors(const std::string& source, std::vector<TensorInfo> tensors,
                                  std::shared_ptr<const MappedFile> mapping);

  bool contains(const std::string& name) const;
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  // The first of `aliases` that exists, or nullptr.
  const TensorInfo* find_any(const std::vector<std::string>& aliases) const;

  // float32 copy of a tensor, checked against `shape` (empty = any). Error{Shape} names the
  // tensor, its file, and both shapes; Error{Config} when no alias exists.
  at::Tensor load(const std::vector<std::string>& aliases, const std::vector<int64_t>& shape) const;
  // A weight matrix [out, in] held in `format` (kernels/weight_format.h): the stored bytes as
  // they are when the file holds it in that format (bf16, f16, q8_0, q4_0: no conversion, no
  // float32 copy), else load() packed. The caller checks kernels::format_fits first.
  at::Tensor load_matrix(const std::vector<std::string>& aliases, const std::vector<int64_t>& shape,
                         kernels::WeightFormat format) const;

  std::vector<std::string> names() const;
  const std::string& source() const { return m_source; }
  // The files holding the tensors (the weight cache's fingerprint of the checkpoint).
  std::vector<std::string> files() const;
  // A stop for the load reading from this store: polled before every tensor is read
  // (Error{Cancelled} naming the source). Must outlive the reads; null: none.
  void set_cancel(const std::atomic<bool>* cancel) { m_cancel = cancel; }
  // Matrices quantised by load_matrix are taken from / kept in `cache` (weight_cache.h).
  void set_weight_cache(std::shared_ptr<WeightCache> cache) { m_cache = std::move(cache); }
  // The dtype of most tensors (what `trimkv info` reports).
  DType dominant_dtype() const;
  size_t total_bytes() const;

 private:
  std::string m_source;  // folder or file, for messages
  const TensorInfo& require(const std::vector<std::string>& aliases, const std::vector<int64_t>& shape) const;
  void release(const TensorInfo& info) const;  // forget the mapped bytes once copied

  std::vector<std::shared_ptr<SafetensorsFile>> m_files;
  std::shared_ptr<const MappedFile> m_mapping;                        // from_tensors
  std::shared_ptr<const std::map<std::string, TensorInfo>> m_owned;   // from_tensors
  std::map<std::string, const TensorInfo*> m_index;  // name -> info inside m_files
  std::shared_ptr<WeightCache> m_cache;               // set_weight_cache
  const std::atomic<bool>* m_cancel = nullptr;        // set_cancel
};

// float32 copy of one tensor's data (F32, F16, BF16, and GGUF's Q8_0, Q4_0, Q4_1 supported; other
// dtypes -> Error{Unsupported}), its rows in Hugging Face order (TensorInfo::interleaved_rope_heads).
at::Tensor tensor_to_float(const TensorInfo& info);

// The float32 bytes of `t` (detached, made contiguous) as a tensor to write under `name`.
TensorToWrite float_tensor_to_write(const std::string& name, const at::Tensor& t);

// The held matrix format whose bytes are exactly those of a tensor stored as `d` (F32, BF16, F16,
// Q8_0, Q4_0), or nullopt.
std::optional<kernels::WeightFormat> stored_weight_format(DType d);

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace trimkv
