// The text decoders of Qwen2-VL and Qwen2.5-VL (shared/QWEN-VL.md §1, §5): Qwen2 blocks (the
// same tensor table) rotated by multimodal RoPE with chunked sections. Served for the flat
// legacy configs (model_type qwen2_vl / qwen2_5_vl, text fields top-level) and the nested v5
// ones (text_config.model_type qwen2_vl_text / qwen2_5_vl_text). The config classes' defaults:
// rms_norm_eps 1e-5, rope_theta 1e6, mrope_section [16, 24, 24], 32768 positions; head_dim is
// always hidden_size / heads.
#include "trimkv/core/text_family.h"

namespace trimkv {

const TextFamily& qwen2_vl_text_family() {
  static const TextFamily kFamily{
      "qwen2_vl",
      {"qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text"},
      qwen2_layer_tensors(),
      "Qwen2-VL / Qwen2.5-VL decoder: Qwen2 blocks, multimodal RoPE (chunked sections)",
      TextConfigDefaults{1e-5, 1e6, 32768, {16, 24, 24}, false, false}};
  return kFamily;
}

}  // namespace trimkv
