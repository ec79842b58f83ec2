#include "trimkv/core/weight_store.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "trimkv/core/error.h"
#include "trimkv/core/weight_cache.h"

namespace fs = std::filesystem;

namespace trimkv {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// GGUF's q4_1 block (20 bytes): float16 scale d, float16 minimum m, 16 bytes of nibbles (low
// nibbles are values 0..15, high nibbles 16..31); value = d * nibble + m.
void dequantize_row_q4_1(const uint8_t* blocks, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, blocks += 20, y += 32) {
    uint16_t dh, mh;
    std::memcpy(&dh, blocks, 2);
    std::memcpy(&mh, blocks + 2, 2);
    const float d = static_cast<float>(c10::Half(dh, c10::Half::from_bits()));
    const float m = static_cast<float>(c10::Half(mh, c10::Half::from_bits()));
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(blocks[4 + j] & 0x0f) + m;
      y[j + 16] = d * static_cast<float>(blocks[4 + j] >> 4) + m;
    }
  }
}

}  // namespace

std::optional<kernels::WeightFormat> stored_weight_format(DType d) {
  switch (d) {
    case DType::F32: return kernels::WeightFormat::F32;
    case DType::BF16: return kernels::WeightFormat::BF16;
    case DType::F16: return kernels::WeightFormat::F16;
    case DType::Q8_0: return kernels::WeightFormat::Q8_0;
    case DType::Q4_0: return kernels::WeightFormat::Q4_0;
    default: return std::nullopt;
  }
}

namespace {

// Rows of `t` (dim 0) from GGUF's per-head interleaved rotary order (row 2i + j of a head) back
// to Hugging Face's half-split order (row j * head_dim / 2 + i).
at::Tensor uninterleave_rope_rows(const at::Tensor& t, int64_t heads, const TensorInfo& info) {
  const int64_t rows = t.size(0);
  TRIMKV_CHECK(heads > 0 && rows % (2 * heads) == 0, Shape, "tensor '", info.name, "' in '", info.file, "' has ",
               rows, " rows, not whole rotary heads of ", heads);
  const int64_t hd = rows / heads, half = hd / 2;
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i) order[h * hd + j * half + i] = h * hd + 2 * i + j;
  return t.index_select(0, at::tensor(order, at::kLong)).contiguous();
}

}  // namespace

at::Tensor tensor_to_float(const TensorInfo& info) {
  at::ScalarType st = at::kFloat;
  switch (info.dtype) {
    case DType::F32: st = at::kFloat; break;
    case DType::F16: st = at::kHalf; break;
    case DType::BF16: st = at::kBFloat16; break;
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: st = at::kByte; break;
    default:
      TRIMKV_FAIL(Unsupported, "tensor '", info.name, "' in '", info.file, "' has dtype ",
                  dtype_name(info.dtype), "; weights must be F32, F16, BF16, Q8_0, Q4_0 or Q4_1");
  }
  at::Tensor out;
  if (st != at::kByte) {
    // The mapping is read-only and may be unaligned for the dtype: copy the bytes into an owned
    // tensor first, then convert.
    at::Tensor raw = at::empty(info.shape, at::TensorOptions().dtype(st));
    if (info.n_bytes) std::memcpy(raw.data_ptr(), info.data, info.n_bytes);
    out = st == at::kFloat ? raw : raw.to(at::kFloat);
  } else {
    const int64_t cols = info.shape.empty() ? 1 : info.shape.back();
    const int64_t rows = cols ? info.numel() / cols : 0;
    const size_t row_bytes = info.n_bytes / static_cast<size_t>(std::max<int64_t>(rows, 1));
    out = at::empty(info.shape, at::kFloat);
    float* y = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = info.data + static_cast<size_t>(r) * row_bytes;
      if (info.dtype == DType::Q4_1) dequantize_row_q4_1(row, y + r * cols, cols);
      else
        kernels::dequantize_row(info.dtype == DType::Q8_0 ? kernels::WeightFormat::Q8_0 : kernels::WeightFormat::Q4_0,
                                row, y + r * cols, cols);
    }
  }
  return info.interleaved_rope_heads ? uninterleave_rope_rows(out, info.interleaved_rope_heads, info) : out;
}

TensorToWrite float_tensor_to_write(const std::string& name, const at::Tensor& t_in) {
  const at::Tensor t = t_in.detach().to(at::kCPU, at::kFloat).contiguous();
  TensorToWrite w;
  w.name = name;
  w.dtype = DType::F32;
  w.shape = t.sizes().vec();
  w.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(float));
  if (t.numel()) std::memcpy(w.bytes.data(), t.data_ptr<float>(), w.bytes.size());
  return w;
}

WeightStore WeightStore::open_file(const std::string& path) {
  WeightStore ws;
  ws.m_source = path;
  auto f = std::make_shared<SafetensorsFile>(path);
  for (const auto& [name, info] : f->tensors()) ws.m_index[name] = &info;
  ws.m_files.push_back(std::move(f));
  return ws;
}

WeightStore WeightStore::from_tensors(const std::string& source, std::vector<TensorInfo> tensors,
                                      std::shared_ptr<const MappedFile> mapping) {
  WeightStore ws;
  ws.m_source = source;
  ws.m_mapping = std::move(mapping);
  auto owned = std::make_shared<std::map<std::string, TensorInfo>>();
  for (auto& t : tensors) {
    const std::string name = t.name;
    TRIMKV_CHECK(owned->emplace(name, std::move(t)).second, Format, "'", source, "' holds tensor '", name, "' twice");
  }
  for (const auto& [name, info] : *owned) ws.m_index[name] = &info;
  ws.m_owned = std::move(owned);
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

const TensorInfo& WeightStore::require(const std::vector<std::string>& aliases,
                                      const std::vector<int64_t>& shape) const {
  TRIMKV_CHECK(!(m_cancel && m_cancel->load()), Cancelled, "loading '", m_source, "' stopped");
  const TensorInfo* info = find_any(aliases);
  if (!info) {
    std::string tried;
    for (const auto& a : aliases) tried += (tried.empty() ? "'" : ", '") + a + "'";
    TRIMKV_FAIL(Config, "checkpoint '", m_source, "' lacks required tensor ", tried);
  }
  TRIMKV_CHECK(shape.empty() || info->shape == shape, Shape, "tensor '", info->name, "' in '",
               info->file, "' has shape ", shape_to_string(info->shape), " but the config implies ",
               shape_to_string(shape));
  return *info;
}

void WeightStore::release(const TensorInfo& info) const {
  if (m_mapping) {
    m_mapping->release(info.data, info.n_bytes);
    return;
  }
  for (const auto& f : m_files) {
    const auto it = f->tensors().find(info.name);
    if (it != f->tensors().end() && &it->second == &info) f->release(info);
  }
}

at::Tensor WeightStore::load(const std::vector<std::string>& aliases,
                             const std::vector<int64_t>& shape) const {
  const TensorInfo& info = require(aliases, shape);
  at::Tensor t = tensor_to_float(info);
  release(info);  // the converted copy is what stays: forget the mapped bytes
  return t;
}

at::Tensor WeightStore::load_matrix(const std::vector<std::string>& aliases, const std::vector<int64_t>& shape,
                                    kernels::WeightFormat format) const {
  const TensorInfo& info = require(aliases, shape);
  const std::optional<kernels::WeightFormat> stored = stored_weight_format(info.dtype);
  if (format == kernels::WeightFormat::F32 || stored != format || info.shape.size() != 2) {
    if (format == kernels::WeightFormat::F32) return load(aliases, shape);
    const bool cached = m_cache && kernels::is_quantized(format) && info.shape.size() == 2;
    if (cached) {
      at::Tensor held = m_cache->take(info.name, info.shape[0], info.shape[1]);
      if (held.defined()) return held;
    }
    at::Tensor held = kernels::pack_weight(load(aliases, shape), format);
    if (cached) m_cache->keep(info.name, held);
    return held;
  }
  const int64_t out = info.shape[0], in = info.shape[1];
  at::Tensor held;
  if (kernels::is_quantized(format)) {
    held = at::empty({out, in / kernels::kQuantBlock, kernels::quant_block_bytes(format)}, at::kByte);
  } else {
    held = at::empty({out, in}, format == kernels::WeightFormat::BF16 ? at::kBFloat16 : at::kHalf);
  }
  TRIMKV_ASSERT(static_cast<size_t>(kernels::weight_bytes(held)) == info.n_bytes, "tensor ", info.name);
  if (info.n_bytes) std::memcpy(held.data_ptr(), info.data, info.n_bytes);
  release(info);
  return info.interleaved_rope_heads ? uninterleave_rope_rows(held, info.interleaved_rope_heads, info) : held;
}

std::vector<std::string> WeightStore::files() const {
  if (m_mapping) return {m_mapping->path()};
  std::vector<std::string> out;
  for (const auto& f : m_files) out.push_back(f->path());
  return out;
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
