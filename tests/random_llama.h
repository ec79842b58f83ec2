// A Llama checkpoint of random weights written by the tests (any width, MLP width and depth):
// for formats, odd shapes, and loads big enough to stop midway. No tokenizer unless asked for.
#pragma once
#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "trimkv/core/safetensors.h"

namespace trimkv::test {

struct RandomLlama {
  int64_t hidden = 64, mlp = 128, layers = 2;
  DType dtype = DType::F32;  // F32 or BF16
  int64_t vocab = 384;       // the fixtures' tokenizer's (model_dir("llama_gqa")/tokenizer.json)
  bool with_tokenizer = false;  // copies llama_gqa's tokenizer.json beside the weights
};

inline void write_random_llama(const ScratchDir& dir, const RandomLlama& m) {
  test::write_text(dir.file("config.json"),
                   nlohmann::json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                                  {"hidden_size", m.hidden}, {"intermediate_size", m.mlp},
                                  {"num_hidden_layers", m.layers}, {"num_attention_heads", m.hidden / 16},
                                  {"num_key_value_heads", m.hidden / 16}, {"head_dim", 16},
                                  {"vocab_size", m.vocab}, {"max_position_embeddings", 128},
                                  {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false}}
                       .dump());
  if (m.with_tokenizer)
    std::filesystem::copy_file(model_dir("llama_gqa") + "/tokenizer.json", dir.file("tokenizer.json"));
  at::manual_seed(4);
  std::vector<TensorToWrite> out;
  auto put = [&](const std::string& name, std::vector<int64_t> shape) {
    const at::Tensor t = (at::randn(shape) * 0.1).to(m.dtype == DType::BF16 ? at::kBFloat16 : at::kFloat).contiguous();
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    out.push_back({name, m.dtype, shape, std::vector<uint8_t>(p, p + t.nbytes())});
  };
  const int64_t d = m.hidden, f = m.mlp;
  put("model.embed_tokens.weight", {m.vocab, d});
  put("model.norm.weight", {d});
  put("lm_head.weight", {m.vocab, d});
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) put(p + "self_attn." + n + ".weight", {d, d});
    put(p + "mlp.gate_proj.weight", {f, d});
    put(p + "mlp.up_proj.weight", {f, d});
    put(p + "mlp.down_proj.weight", {d, f});
    put(p + "input_layernorm.weight", {d});
    put(p + "post_attention_layernorm.weight", {d});
  }
  write_safetensors(dir.file("model.safetensors"), out);
}

}  // namespace trimkv::test
