// Qwen2 family (Qwen2, Qwen2.5): Llama blocks with q/k/v projection biases (no o bias). The
// Qwen2-VL line's decoders use the same table (qwen2_vl_text.cpp).
#include "trimkv/core/text_family.h"

namespace trimkv {

const std::vector<LayerTensorSpec>& qwen2_layer_tensors() {
  static const std::vector<LayerTensorSpec> kTable = {
      {LayerTensor::attn_norm, "input_layernorm.weight", Need::Required},
      {LayerTensor::q, "self_attn.q_proj.weight", Need::Required},
      {LayerTensor::k, "self_attn.k_proj.weight", Need::Required},
      {LayerTensor::v, "self_attn.v_proj.weight", Need::Required},
      {LayerTensor::o, "self_attn.o_proj.weight", Need::Required},
      {LayerTensor::q_bias, "self_attn.q_proj.bias", Need::Required},
      {LayerTensor::k_bias, "self_attn.k_proj.bias", Need::Required},
      {LayerTensor::v_bias, "self_attn.v_proj.bias", Need::Required},
      {LayerTensor::mlp_norm, "post_attention_layernorm.weight", Need::Required},
      {LayerTensor::gate, "mlp.gate_proj.weight", Need::Required},
      {LayerTensor::up, "mlp.up_proj.weight", Need::Required},
      {LayerTensor::down, "mlp.down_proj.weight", Need::Required},
  };
  return kTable;
}

const TextFamily& qwen2_family() {
  static const TextFamily kFamily{"qwen2", {"qwen2"}, qwen2_layer_tensors(),
                                  "Qwen2 decoder: Llama blocks with q/k/v biases"};
  return kFamily;
}

}  // namespace trimkv
