#include "trimkv/core/text_model.h"

#include <filesystem>

#include "trimkv/core/error.h"
#include "trimkv/core/gguf_model.h"
#include "trimkv/core/weight_cache.h"
#include "trimkv/core/weight_store.h"

namespace fs = std::filesystem;

namespace trimkv {

kernels::WeightFormat resolve_weight_format(const std::string& requested, DType stored) {
  if (requested.empty())
    switch (stored) {
      case DType::BF16: return kernels::WeightFormat::BF16;
      case DType::F16: return kernels::WeightFormat::F16;
      case DType::Q8_0: return kernels::WeightFormat::Q8_0;
      case DType::Q4_0: return kernels::WeightFormat::Q4_0;
      default: return kernels::WeightFormat::F32;
    }
  try {
    return kernels::parse_weight_format(requested);
  } catch (const std::invalid_argument& e) {
    TRIMKV_FAIL(Input, "--weights: ", e.what());
  }
}

kernels::KvDtype resolve_kv_dtype(const std::string& requested, DType stored) {
  // Checkpoints stored in 16 bits or fewer keep K/V in float16 (llama.cpp's default; ten more
  // mantissa bits than bf16 where transformers would keep bf16); float32 checkpoints keep float32,
  // so the oracle paths stay exact.
  if (requested.empty()) return stored == DType::F32 ? kernels::KvDtype::F32 : kernels::KvDtype::F16;
  try {
    return kernels::parse_kv_dtype(requested);
  } catch (const std::invalid_argument& e) {
    TRIMKV_FAIL(Input, "--kv-dtype: ", e.what());
  }
}

at::TensorOptions kv_tensor_options(const TextModel& model) {
  const at::TensorOptions on = at::TensorOptions().device(torch_device(model.device));
  switch (model.kv_dtype) {
    case kernels::KvDtype::BF16: return on.dtype(at::kBFloat16);
    case kernels::KvDtype::F16: return on.dtype(at::kHalf);
    default: return on.dtype(at::kFloat);
  }
}

namespace {

TextModel load_text_folder(const std::string& dir, const ModelLoadOptions& options) {
  TRIMKV_CHECK(fs::is_directory(dir), Io, "model folder '", dir, "' does not exist");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  TRIMKV_CHECK(fs::exists(config_path), Io, "model folder '", dir, "' has no config.json");
  TextModel m;
  m.dir = dir;
  m.config = load_text_config(config_path);
  TRIMKV_CHECK(!m.config.has_vision_tower || options.text_of_vlm, Unsupported, "'", config_path,
               "' describes a vision-language model (it has a vision_config) of a type this program cannot run: '",
               m.config.architecture.empty() ? m.config.model_type : m.config.architecture,
               "'; refusing to load only its text decoder, which would drop its images without a word");
  merge_generation_config((fs::path(dir) / "generation_config.json").string(), m.config);
  m.family = &find_text_family(m.config.model_type, config_path);
  WeightStore weights = WeightStore::open_folder(dir);
  weights.set_cancel(options.cancel);
  m.weight_dtype = weights.dominant_dtype();
  m.weight_bytes = weights.total_bytes();
  m.weight_format = resolve_weight_format(options.weights, m.weight_dtype);
  m.kv_dtype = resolve_kv_dtype(options.kv_dtype, m.weight_dtype);
  const auto cache = attach_weight_cache(weights, m.weight_format, options.weight_cache);
  m.decoder = TextDecoder::load(m.config, *m.family, weights, m.weight_format, &m.weight_notes);
  if (cache) m.weight_cache_note = cache->finish();
  m.weight_root = text_weight_root(weights);
  if (fs::exists(fs::path(dir) / "tokenizer.json")) {
    m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_folder(dir));
    TRIMKV_CHECK(m.tokenizer->vocab_size() <= m.config.vocab_size, Config, "tokenizer '",
                 m.tokenizer->path(), "' has ids up to ", m.tokenizer->vocab_size() - 1,
                 " but the model's vocab_size is ", m.config.vocab_size);
  }
  return m;
}

}  // namespace

TextModel load_text_model(const std::string& dir, const ModelLoadOptions& options) {
  const ComputeDevice device = resolve_compute_device(options.device);  // refused before any read
  // A file can only be GGUF.
  TextModel m = fs::is_regular_file(dir) ? load_gguf_text_model(dir, options) : load_text_folder(dir, options);
  if (device != ComputeDevice::Cpu) {
    m.decoder = m.decoder->on_device(torch_device(device), &m.weight_notes);
    m.device = device;
  }
  return m;
}

}  // namespace trimkv
