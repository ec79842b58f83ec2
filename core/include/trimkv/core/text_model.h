// A runnable text model loaded from a checkpoint folder: config, family, decoder weights and
// (when the folder has one) the tokenizer.
#pragma once
#include <memory>
#include <string>

#include "trimkv/core/model_config.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv {

struct TextModel {
  std::string dir;
  TextConfig config;
  const TextFamily* family = nullptr;
  std::shared_ptr<TextDecoder> decoder;
  std::shared_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer.json
  DType weight_dtype = DType::F32;        // as stored in the files
  size_t weight_bytes = 0;                // as stored in the files
  std::string weight_root;                // text_weight_root: e.g. "model.language_model." 
};

// Loads `dir` (config.json, safetensors, optional generation_config.json and tokenizer.json).
// Errors name the folder, file, field or tensor; nothing is half-loaded on failure.
TextModel load_text_model(const std::string& dir);

}  // namespace trimkv
