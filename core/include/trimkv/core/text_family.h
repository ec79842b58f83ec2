// A text-decoder family as a declarative table (STYLE.md §2): which per-layer tensors exist,
// under which names, and whether they are required. The shapes follow from the config and the
// tensor's role; binding, fusing and the forward are shared (text_decoder.cpp). One family per
// file in core/src/families/.
#pragma once
#include <string>
#include <vector>

#include "trimkv/core/model_config.h"

namespace trimkv {

enum class LayerTensor {
  attn_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm, mlp_norm, gate, up, down
};

enum class Need { Required, Optional };

struct LayerTensorSpec {
  LayerTensor role;
  const char* name;  // relative to "layers.{il}."
  Need need;
};

struct TextFamily {
  const char* name;                      // e.g. "llama"
  std::vector<std::string> model_types;  // config model_type values it serves
  std::vector<LayerTensorSpec> layer_tensors;
  const char* description;               // one line for `trimkv info`
  TextConfigDefaults defaults = {};      // its config class's defaults
};

// The registry. find_text_family throws Error{Unsupported} naming the model_type, the config
// file and every supported type.
const TextFamily& find_text_family(const std::string& model_type, const std::string& config_path);
// The family serving `model_type`, or null.
const TextFamily* find_text_family_or_null(const std::string& model_type);
std::vector<std::string> supported_text_model_types();

// Each family file defines one of these.
const TextFamily& llama_family();
const TextFamily& qwen2_family();
const TextFamily& qwen3_family();
const TextFamily& qwen2_vl_text_family();  // Qwen2-VL / Qwen2.5-VL decoders: Qwen2 + M-RoPE
const TextFamily& qwen3_vl_text_family();  // Qwen3-VL's decoder: Qwen3 + interleaved M-RoPE (qwen3.cpp)

// The Qwen2 decoder's tensor table (Qwen2 and the Qwen2-VL line share it).
const std::vector<LayerTensorSpec>& qwen2_layer_tensors();
const std::vector<LayerTensorSpec>& qwen3_layer_tensors();

}  // namespace trimkv
