// Qwen3 family (Qwen3, the text side of Qwen3-VL): per-head RMSNorm on q and k before RoPE,
// no projection biases, explicit head_dim.
#include "trimkv/core/text_family.h"

namespace trimkv {

const TextFamily& qwen3_family() {
  static const TextFamily kFamily{
      "qwen3",
      {"qwen3"},
      {
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
      },
      "Qwen3 decoder: Llama blocks with per-head q/k RMSNorm"};
  return kFamily;
}

}  // namespace trimkv
