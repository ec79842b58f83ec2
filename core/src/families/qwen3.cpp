// Qwen3 family (Qwen3, and the text side of Qwen3-VL with its multimodal RoPE): per-head
// RMSNorm on q and k before RoPE, no projection biases, explicit head_dim.
#include "trimkv/core/text_family.h"

namespace trimkv {

const std::vector<LayerTensorSpec>& qwen3_layer_tensors() {
  static const std::vector<LayerTensorSpec> kTable = {
      {LayerTensor::attn_norm, "input_layernorm.weight", Need::Required},
      {LayerTensor::q, "self_attn.q_proj.weight", Need::Required},
      {LayerTensor::k, "self_attn.k_proj.weight", Need::Required},
      {LayerTensor::v, "self_attn.v_proj.weight", Need::Required},
      {LayerTensor::o, "self_attn.o_proj.weight", Need::Required},
      {LayerTensor::q_norm, "self_attn.q_norm.weight", Need::Required},
      {LayerTensor::k_norm, "self_attn.k_norm.weight", Need::Required},
      {LayerTensor::mlp_norm, "post_attention_layernorm.weight", Need::Required},
      {LayerTensor::gate, "mlp.gate_proj.weight", Need::Required},
      {LayerTensor::up, "mlp.up_proj.weight", Need::Required},
      {LayerTensor::down, "mlp.down_proj.weight", Need::Required},
  };
  return kTable;
}

const TextFamily& qwen3_family() {
  static const TextFamily kFamily{"qwen3", {"qwen3"}, qwen3_layer_tensors(),
                                  "Qwen3 decoder: Llama blocks with per-head q/k RMSNorm"};
  return kFamily;
}

// The text decoder of Qwen3-VL: Qwen3 blocks rotated by multimodal RoPE with interleaved
// sections (mrope_interleaved is never read: always interleaved); the config class's defaults
// are eps 1e-6, theta 5e5, sections [24, 20, 20], 128000 positions, head_dim as given.
const TextFamily& qwen3_vl_text_family() {
  static const TextFamily kFamily{
      "qwen3_vl",
      {"qwen3_vl", "qwen3_vl_text"},
      qwen3_layer_tensors(),
      "Qwen3-VL decoder: Qwen3 blocks, multimodal RoPE (interleaved sections)",
      TextConfigDefaults{1e-6, 5e5, 128000, {24, 20, 20}, true, true}};
  return kFamily;
}

}  // namespace trimkv
