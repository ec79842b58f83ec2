// Llama family (Llama 2/3, SmolLM/SmolLM2, the text side of Idefics3/SmolVLM and LLaVA):
// pre-norm blocks, GQA attention with optional biases (`attention_bias`), SiLU-gated MLP.
#include "trimkv/core/text_family.h"

namespace trimkv {

const TextFamily& llama_family() {
  static const TextFamily kFamily{
      "llama",
      {"llama", "smollm", "mistral"},
      {
          {LayerTensor::attn_norm, "input_layernorm.weight", Need::Required},
          {LayerTensor::q, "self_attn.q_proj.weight", Need::Required},
          {LayerTensor::k, "self_attn.k_proj.weight", Need::Required},
          {LayerTensor::v, "self_attn.v_proj.weight", Need::Required},
          {LayerTensor::o, "self_attn.o_proj.weight", Need::Required},
          {LayerTensor::q_bias, "self_attn.q_proj.bias", Need::Optional},
          {LayerTensor::k_bias, "self_attn.k_proj.bias", Need::Optional},
          {LayerTensor::v_bias, "self_attn.v_proj.bias", Need::Optional},
          {LayerTensor::o_bias, "self_attn.o_proj.bias", Need::Optional},
          {LayerTensor::mlp_norm, "post_attention_layernorm.weight", Need::Required},
          {LayerTensor::gate, "mlp.gate_proj.weight", Need::Required},
          {LayerTensor::up, "mlp.up_proj.weight", Need::Required},
          {LayerTensor::down, "mlp.down_proj.weight", Need::Required},
      },
      "Llama-family decoder: RMSNorm, rotary GQA attention, SiLU-gated MLP"};
  return kFamily;
}

}  // namespace trimkv
