// The VLM family registry (STYLE.md §2): a checkpoint folder is recognised from its config.json
// model_type and turned into a runnable model: the text model (core) plus the family's
// TurnEncoder (chat template, image preprocessing, vision tower, connector, prompt expansion).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/session.h"
#include "trimkv/core/text_model.h"
#include "trimkv/vision/vlm_info.h"

namespace trimkv::vision {

struct VlmModel {
  TextModel text;
  std::shared_ptr<const TurnEncoder> encoder;
  VisionInfo info;
};

struct VlmFamily {
  const char* name;                      // e.g. "idefics3"
  std::vector<std::string> model_types;  // config.json model_type values it serves
  const char* description;               // one line for `trimkv info`
  // Loads the folder; `template_vars` go to its chat template (e.g. enable_thinking=false),
  // `options` say how the text decoder holds its weights.
  std::shared_ptr<VlmModel> (*load)(const std::string& dir, const std::vector<TemplateVar>& template_vars,
                                    const ModelLoadOptions& options);
};

// Whether <dir> holds a checkpoint of a registered VLM family.
bool is_vlm_checkpoint(const std::string& dir);
// Loads a VLM checkpoint. Error{Unsupported} naming the model_type and every VLM type known when
// the folder is not one; other errors name the file, field or tensor.
std::shared_ptr<VlmModel> load_vlm(const std::string& dir, const std::vector<TemplateVar>& template_vars = {},
                                   const ModelLoadOptions& options = {});
std::vector<std::string> supported_vlm_model_types();
// The family that runs checkpoints of `model_type`: a VLM family's name, else the text decoder
// family's, else "" (not supported).
std::string family_for_model_type(const std::string& model_type);

const VlmFamily& idefics3_family();  // idefics3.cpp
const VlmFamily& qwen2_vl_family();  // qwen2_vl.cpp
const VlmFamily& qwen3_vl_family();  // qwen3_vl.cpp

}  // namespace trimkv::vision
