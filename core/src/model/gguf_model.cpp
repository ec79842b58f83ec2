#include "trimkv/core/gguf_model.h"

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/text_family.h"
#include "trimkv/core/weight_cache.h"
#include "trimkv/core/weight_store.h"

namespace trimkv {

namespace {

using json = nlohmann::json;

struct GgufArchitecture {
  const char* arch;        // general.architecture
  const char* model_type;  // the config.json model_type it stands for
  const char* hf_class;
  bool interleaved_rope;   // llama.cpp's converter interleaves q/k rows (NEOX-rotated ones are not)
};
constexpr GgufArchitecture kArchitectures[] = {
    {"llama", "llama", "LlamaForCausalLM", true},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", false},
};

const GgufArchitecture& architecture_of(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture").value_or("");
  TRIMKV_CHECK(!arch.empty(), Format, "'", f.path(), "' has no general.architecture");
  for (const auto& a : kArchitectures)
    if (arch == a.arch) return a;
  TRIMKV_FAIL(Unsupported, "'", f.path(), "': GGUF architecture '", arch,
              "' is not supported (supported: llama, qwen2, qwen3)");
}

// GGUF tensor names -> Hugging Face names (per-layer parts after "blk.N.").
struct NamePair {
  const char* gguf;
  const char* hf;
};
constexpr NamePair kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
constexpr NamePair kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},     {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},     {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},      {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// The Hugging Face name of a GGUF tensor ("" for names outside the tables).
std::string hf_name(const std::string& name) {
  for (const auto& p : kGlobalNames)
    if (name == p.gguf) return p.hf;
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return "";
  const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const auto& p : kLayerNames)
    if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
  return "";
}

DType dtype_of(GgmlType t, const GgufTensor& tensor, const std::string& path) {
  switch (t) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    case GgmlType::Q8_0: return DType::Q8_0;
    case GgmlType::Q4_0: return DType::Q4_0;
    case GgmlType::Q4_1: return DType::Q4_1;
    default:
      TRIMKV_FAIL(Unsupported, "'", path, "': tensor '", tensor.name, "' is ", ggml_type_name(t),
                  " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1); re-quantise the model to one of those");
  }
}

}  // namespace

std::string gguf_model_type(const std::string& path) {
  try {
    if (!is_gguf_file(path)) return "";
    return architecture_of(GgufFile(path)).model_type;
  } catch (const Error&) {
    return "";
  }
}

TextConfig gguf_text_config(const GgufFile& f) {
  const GgufArchitecture& a = architecture_of(f);
  const std::string p = std::string(a.arch) + ".";
  auto required = [&](const std::string& key) {
    const auto v = f.get_int(p + key);
    TRIMKV_CHECK(v && *v > 0, Config, "'", f.path(), "' lacks a positive ", p + key);
    return *v;
  };
  const auto* tokens = f.get_array("tokenizer.ggml.tokens", GgufType::STRING);
  const int64_t vocab = f.get_int(p + "vocab_size").value_or(tokens ? static_cast<int64_t>(tokens->size()) : 0);
  const GgufTensor* embed = f.find_tensor("token_embd.weight");
  TRIMKV_CHECK(embed, Config, "'", f.path(), "' has no token_embd.weight");
  json c = {{"model_type", a.model_type},
            {"architectures", {a.hf_class}},
            {"vocab_size", vocab > 0 ? vocab : embed->ne.back()},
            {"hidden_size", required("embedding_length")},
            {"intermediate_size", required("feed_forward_length")},
            {"num_hidden_layers", required("block_count")},
            {"num_attention_heads", required("attention.head_count")},
            {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
            {"hidden_act", "silu"},
            {"torch_dtype", "gguf"}};
  if (const auto kv = f.get_int(p + "attention.head_count_kv")) c["num_key_value_heads"] = *kv;
  if (const auto hd = f.get_int(p + "attention.key_length")) c["head_dim"] = *hd;
  if (const auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon")) c["rms_norm_eps"] = *eps;
  if (const auto ctx = f.get_int(p + "context_length")) c["max_position_embeddings"] = *ctx;
  if (const auto theta = f.get_float(p + "rope.freq_base")) c["rope_theta"] = *theta;
  const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c["rope_scaling"] = {{"type", "linear"}, {"factor", f.get_float(p + "rope.scaling.factor").value_or(1.0)}};
  } else {
    TRIMKV_CHECK(scaling == "none", Unsupported, "'", f.path(), "': ", p, "rope.scaling.type '", scaling,
                 "' is not supported (none, linear)");
  }
  if (const auto eos = f.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  if (const auto bos = f.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  const std::string origin = f.path() + " (GGUF metadata)";
  TextConfig cfg = text_config_from_json(c, origin);
  if (const auto rot = f.get_int(p + "rope.dimension_count"))
    TRIMKV_CHECK(*rot == cfg.head_dim, Unsupported, "'", f.path(), "': ", p, "rope.dimension_count ", *rot,
                 " rotates part of each ", cfg.head_dim, "-wide head (partial rotary is not supported)");
  if (const GgufTensor* factors = f.find_tensor("rope_freqs.weight")) {
    TRIMKV_CHECK(factors->type == GgmlType::F32 && factors->ne.size() == 1 && factors->ne[0] == cfg.head_dim / 2,
                 Shape, "'", f.path(), "': rope_freqs.weight must be ", cfg.head_dim / 2, " float32 values");
    cfg.rope.freq_factors.resize(static_cast<size_t>(cfg.head_dim / 2));
    std::memcpy(cfg.rope.freq_factors.data(), factors->data, factors->n_bytes);
    for (float x : cfg.rope.freq_factors)
      TRIMKV_CHECK(x > 0 && std::isfinite(x), Config, "'", f.path(), "': rope_freqs.weight holds ", x);
  }
  return cfg;
}

WeightStore gguf_weight_store(std::shared_ptr<const GgufFile> file, const TextConfig& config) {
  const GgufArchitecture& a = architecture_of(*file);
  std::vector<TensorInfo> infos;
  for (const GgufTensor& t : file->tensors()) {
    const std::string name = hf_name(t.name);
    if (name.empty()) continue;  // rope_freqs and anything no decoder reads
    TensorInfo info;
    info.name = name;
    info.dtype = dtype_of(t.type, t, file->path());
    info.shape = t.shape();
    info.data = t.data;
    info.n_bytes = t.n_bytes;
    info.file = file->path() + " (" + t.name + ")";
    if (a.interleaved_rope) {
      if (name.find("self_attn.q_proj.") != std::string::npos) info.interleaved_rope_heads = config.n_head;
      if (name.find("self_attn.k_proj.") != std::string::npos) info.interleaved_rope_heads = config.n_kv_head;
    }
    infos.push_back(std::move(info));
  }
  const std::shared_ptr<const MappedFile> mapping(file, &file->mapping());  // keeps the file alive
  return WeightStore::from_tensors(file->path(), std::move(infos), mapping);
}

DType gguf_dominant_dtype(const WeightStore& weights) {
  // The layers' matrices decide (as llama.cpp's file types do): embeddings are often kept wider,
  // and so are rows that are not whole blocks: a quantised type, when there is one, names the file.
  std::map<DType, size_t> bytes;
  for (const std::string& name : weights.names()) {
    const TensorInfo* t = weights.find(name);
    if (name.rfind("model.layers.", 0) == 0 && t->shape.size() == 2) bytes[t->dtype] += t->n_bytes;
  }
  auto quantised = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1; };
  DType d = weights.dominant_dtype();
  size_t most = 0;
  bool any_quantised = false;
  for (const auto& [dtype, n] : bytes) any_quantised |= quantised(dtype);
  for (const auto& [dtype, n] : bytes)
    if (n > most && (!any_quantised || quantised(dtype))) most = n, d = dtype;
  return d;
}

TextModel load_gguf_text_model(const std::string& path, const ModelLoadOptions& options) {
  const auto file = std::make_shared<const GgufFile>(path);
  TextModel m;
  m.dir = path;
  m.config = gguf_text_config(*file);
  m.family = &find_text_family(m.config.model_type, path);
  WeightStore weights = gguf_weight_store(file, m.config);
  weights.set_cancel(options.cancel);
  m.weight_dtype = gguf_dominant_dtype(weights);
  m.weight_bytes = weights.total_bytes();
  // By default every matrix stays as the file stores it (a q4_0 file's embedding is often q8_0);
  // no kernel reads Q4_1: requantised to q8_0 it loses nothing a q4 copy would keep.
  const bool as_stored = options.weights.empty();
  m.kv_dtype = resolve_kv_dtype(options.kv_dtype, m.weight_dtype);
  m.weight_format = resolve_weight_format(options.weights, m.weight_dtype == DType::Q4_1 ? DType::Q8_0 : m.weight_dtype);
  if (as_stored && m.weight_dtype == DType::Q4_1)
    m.weight_notes.push_back("the file's Q4_1 matrices are held as q8 (no kernel reads Q4_1; --weights q4 requantises "
                             "them to q4_0)");
  const kernels::WeightFormat format = as_stored ? kernels::WeightFormat::Q8_0 : m.weight_format;
  const auto cache = attach_weight_cache(weights, format, options.weight_cache);
  m.decoder = TextDecoder::load(m.config, *m.family, weights, format, &m.weight_notes, as_stored);
  if (cache) m.weight_cache_note = cache->finish();
  m.weight_root = text_weight_root(weights);
  m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_gguf(*file));
  TRIMKV_CHECK(m.tokenizer->vocab_size() <= m.config.vocab_size, Config, "'", path, "': the vocabulary has ids up to ",
               m.tokenizer->vocab_size() - 1, " but the model's vocab_size is ", m.config.vocab_size);
  m.embedded_chat_template = file->get_string("tokenizer.chat_template").value_or("");
  return m;
}

}  // namespace trimkv
