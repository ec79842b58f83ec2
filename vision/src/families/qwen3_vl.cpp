// Qwen3-VL family (model_type qwen3_vl; shared/QWEN-VL.md): the Qwen-VL line's tower with a patch
// bias, learned position embeddings resampled to each image's grid, tanh-GELU blocks and the
// deepstack mergers whose outputs are added to the image positions after the first decoder
// layers; the Qwen3 decoder (q/k norm) with interleaved M-RoPE (core's qwen3_vl_text); the
// checkpoint's ChatML template (no default system message). Shared code: qwen2_vl.cpp's loader
// and tower, qwen_vl_encoder.cpp.
#include "families/qwen_vl_encoder.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

namespace {
std::shared_ptr<VlmModel> load_qwen3_vl(const std::string& dir, const std::vector<TemplateVar>& vars,
                                        const ModelLoadOptions& options) {
  return load_qwen_vl(dir, vars, options, qwen3_vl_family());
}
}  // namespace

const VlmFamily& qwen3_vl_family() {
  static const VlmFamily kFamily{
      "qwen3_vl",
      {"qwen3_vl"},
      "Qwen3-VL: ViT with learned + 2D rotary positions, deepstack mergers into the first decoder layers, "
      "Qwen3 decoder with interleaved M-RoPE, any-resolution images",
      &load_qwen3_vl};
  return kFamily;
}

}  // namespace trimkv::vision
