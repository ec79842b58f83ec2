// The TurnEncoder of the Qwen-VL line (private to vision/): the checkpoint's ChatML template
// writes <|vision_start|><|image_pad|><|vision_end|> per image; each <|image_pad|> becomes the
// image's merged-token count of pads (processing_qwen2_vl.replace_image_token), tagged with the
// image's grid and given M-RoPE offsets; the tower encodes the image's patches.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/vision/qwen2_vl.h"
#include "trimkv/vision/qwen2_vl_processor.h"

namespace trimkv::vision {

inline constexpr const char* kQwenImagePad = "<|image_pad|>";
inline constexpr const char* kQwenVisionStart = "<|vision_start|>";
inline constexpr const char* kQwenVisionEnd = "<|vision_end|>";

struct VlmFamily;
struct VlmModel;

// Loads a checkpoint of the Qwen-VL line (qwen2_vl.cpp): text model, tower, processor settings,
// token ids checked against the tokenizer, the encoder; `family` names it in VisionInfo.
std::shared_ptr<VlmModel> load_qwen_vl(const std::string& dir, const std::vector<TemplateVar>& vars,
                                       const ModelLoadOptions& options, const VlmFamily& family);

std::shared_ptr<const TurnEncoder> make_qwen_vl_encoder(std::string dir, std::shared_ptr<Tokenizer> tokenizer,
                                                        LoadedChatFormat format, std::vector<TemplateVar> vars,
                                                        std::shared_ptr<const QwenVisionTower> tower,
                                                        Qwen2VlProcessorConfig processor, QwenVlTokenIds ids);

}  // namespace trimkv::vision
