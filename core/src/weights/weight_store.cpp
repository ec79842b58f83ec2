#include "trimkv/core/weight_store.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "trimkv/core/error.h"

namespace fs = std::filesystem;

namespace trimkv {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

at::Tensor tensor_to_float(const TensorInfo& info) {
  at::ScalarType st;
  switch (info.dtype) {
    case DType::F32: st = at::kFloat; break;
    case DType::F16: st = at::kHalf; break;
    case DType::BF16: st = at::kBFloat16; break;
    default:
      TRIMKV_FAIL(Unsupported, "tensor '", info.name, "' in '", info.file, "' has dtype ",
                  dtype_name(info.dtype), "; weights must be F32, F16 or BF16");
  }
  // The mapping is read-only and may be unaligned for the dtype: copy the bytes into an owned
  // tensor first, then convert.
  at::Tensor raw = at::empty(info.shape, at::TensorOptions().dtype(st));
  if (info.n_bytes) std::memcpy(raw.data_ptr(), info.data, info.n_bytes);
  return st == at::kFloat ? raw : raw.to(at::kFloat);
}

TensorToWrite float_tensor_to_write(const std::string& name, const at::Tensor& t_in) {
  const at::Tensor t = t_in.detach().to(at::kFloat).contiguous();
  TensorToWrite w;
  w.name = name;
  w.dtype = DType::F32;
  w.shape = t.sizes().vec();
  w.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(float));
  if (t.numel()) std::memcpy(w.bytes.data(), t.data_ptr<float>(), w.bytes.size());
  return w;
}

void write_safetensors_atomic(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::string tmp = path + ".tmp";
  write_safetensors(tmp, tensors, metadata);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  TRIMKV_CHECK(!ec, Io, "cannot move '", tmp, "' to '", path, "': ", ec.message());
}

WeightStore WeightStore::open_file(const std::string& path) {
  WeightStore ws;
  ws.m_source = path;
  auto f = std::make_shared<SafetensorsFile>(path);
  for (const auto& [name, info] : f->tensors()) ws.m_index[name] = &info;
  ws.m_files.push_back(std::move(f));
  return ws;
}

WeightStore WeightStore::open_folder(const std::string& dir) {
  TRIMKV_CHECK(fs::is_directory(dir), Io, "model folder '", dir, "' does not exist");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (!fs::exists(index_path)) {
    TRIMKV_CHECK(fs::exists(single_path), Io, "'", dir,
                 "' holds neither model.safetensors nor model.safetensors.index.json");
    WeightStore ws = open_file(single_path.string());
    ws.m_source = dir;
    return ws;
  }
  nlohmann::json index;
  {
    std::ifstream in(index_path);
    TRIMKV_CHECK(in.good(), Io, "cannot read '", index_path.string(), "'");
    try {
      in >> index;
    } catch (const nlohmann::json::exception& e) {
      TRIMKV_FAIL(Format, "'", index_path.string(), "': malformed JSON: ", e.what());
    }
  }
  TRIMKV_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               Format, "'", index_path.string(), "' has no weight_map object");
  WeightStore ws;
  ws.m_source = dir;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    TRIMKV_CHECK(it.value().is_string(), Format, "'", index_path.string(), "': weight_map entry '",
                 it.key(), "' is not a file name");
    const std::string shard = it.value().get<std::string>();
    TRIMKV_CHECK(shard.find("..") == std::string::npos && shard.find('/') == std::string::npos,
                 Format, "'", index_path.string(), "': shard name '", shard, "' is not a plain file name");
    auto sit = shards.find(shard);
    if (sit == shards.end()) {
      const fs::path p = fs::path(dir) / shard;
      TRIMKV_CHECK(fs::exists(p), Io, "shard '", p.string(), "' named by '", index_path.string(),
                   "' does not exist");
      sit = shards.emplace(shard, std::make_shared<SafetensorsFile>(p.string())).first;
      ws.m_files.push_back(sit->second);
    }
    const auto& tensors = sit->second->tensors();
    auto t = tensors.find(it.key());
    TRIMKV_CHECK(t != tensors.end(), Format, "'", index_path.string(), "' places tensor '", it.key(),
                 "' in '", shard, "' but that shard does not hold it");
    ws.m_index[it.key()] = &t->second;
  }
  return ws;
}

bool WeightStore::contains(const std::string& name) const { return m_index.count(name) != 0; }

const TensorInfo* WeightStore::find(const std::string& name) const {
  auto it = m_index.find(name);
  return it == m_index.end() ? nullptr : it->second;
}

const TensorInfo* WeightStore::find_any(const std::vector<std::string>& aliases) const {
  for (const auto& a : aliases)
    if (const TensorInfo* t = find(a)) return t;
  return nullptr;
}

at::Tensor WeightStore::load(const std::vector<std::string>& aliases,
                             const std::vector<int64_t>& shape) const {
  const TensorInfo* info = find_any(aliases);
  if (!info) {
    std::string tried;
    for (const auto& a : aliases) tried += (tried.empty() ? "'" : ", '") + a + "'";
    TRIMKV_FAIL(Config, "checkpoint '", m_source, "' lacks required tensor ", tried);
  }
  TRIMKV_CHECK(shape.empty() || info->shape == shape, Shape, "tensor '", info->name, "' in '",
               info->file, "' has shape ", shape_to_string(info->shape), " but the config implies ",
               shape_to_string(shape));
  at::Tensor t = tensor_to_float(*info);
  for (const auto& f : m_files) {  // the converted copy is what stays: forget the mapped bytes
    const auto it = f->tensors().find(info->name);
    if (it != f->tensors().end() && &it->second == info) f->release(*info);
  }
  return t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : m_index) out.push_back(n);
  return out;
}

DType WeightStore::dominant_dtype() const {
  std::map<DType, size_t> bytes;
  for (const auto& [_, info] : m_index) bytes[info->dtype] += info->n_bytes;
  DType best = DType::F32;
  size_t most = 0;
  for (const auto& [d, b] : bytes)
    if (b > most) most = b, best = d;
  return best;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, info] : m_index) n += info->n_bytes;
  return n;
}

}  // namespace trimkv
