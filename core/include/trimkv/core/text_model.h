// A runnable text model loaded from a checkpoint folder: config, family, decoder weights and
// (when the folder has one) the tokenizer.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "trimkv/core/compute_device.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/tokenizer.h"
#include "trimkv/kernels/paged_attention.h"
#include "trimkv/kernels/weight_format.h"

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
  kernels::WeightFormat weight_format = kernels::WeightFormat::F32;  // how the matrices are held
  kernels::KvDtype kv_dtype = kernels::KvDtype::F32;                // how the KV cache stores K and V
  ComputeDevice device = ComputeDevice::Cpu;  // where the decoder's weights and the KV cache live
  std::vector<std::string> weight_notes;  // matrices held in another format than asked, and why
  std::string weight_cache_note;          // what the weight cache did (weight_cache.h); "" if unused
  // A chat template carried inside the model file (GGUF's tokenizer.chat_template); "" for
  // folders, whose templates are files beside the weights.
  std::string embedded_chat_template;
};

// How to hold a model's weight matrices: "" = the checkpoint's own dtype when it is bfloat16,
// float16, q8_0 or q4_0, float32 otherwise; or one of f32, bf16, f16, q8, q4 (kernels/weight_format.h).
// Norms, biases and everything outside the matrices stay float32.
struct ModelLoadOptions {
  ModelLoadOptions(std::string weights_ = {}, std::string kv_dtype_ = {}, int image_size_ = 0)  // NOLINT: {"q8"}
      : weights(std::move(weights_)), kv_dtype(std::move(kv_dtype_)), image_size(image_size_) {}
  std::string weights;
  // How the KV cache stores K and V: "" = f16 for checkpoints stored in 16 bits or fewer
  // (bf16, f16, quantised GGUF), f32 for f32 ones; or f32, bf16, f16.
  std::string kv_dtype;
  // Vision-language checkpoints: the image resolution, in pixels on a side; 0 = the processor's
  // own. SmolVLM / Idefics3: the longest edge images are resized to (then cut into tiles of the
  // tower's size: fewer pixels, fewer tiles); Qwen-VL: at most image_size² pixels per image.
  int image_size = 0;
  // Keep the blocks of matrices quantised at load in the weight cache (weight_cache.h) and read
  // them from it next time.
  bool weight_cache = true;
  // The caller is a vision-language family loading its checkpoint's text decoder (it loads the
  // tower itself). Otherwise a checkpoint with a vision tower is refused: loading only its text
  // decoder would drop the images without a word.
  bool text_of_vlm = false;
  // Where the model runs (compute_device.h): "cpu", "cuda", or "" / "auto" (the GPU when one can
  // be used). The weights are read on the CPU and then sent there.
  std::string device = "cpu";
  // A stop polled before every tensor is read (WeightStore::set_cancel): Error{Cancelled} naming
  // the checkpoint; nothing is kept. Null: the load runs to its end.
  const std::atomic<bool>* cancel = nullptr;
};

// The KV dtype `requested` resolves to for a checkpoint stored as `stored` (Error{Input} naming
// an unknown dtype).
kernels::KvDtype resolve_kv_dtype(const std::string& requested, DType stored);
// Tensor options of a KvCache for `model` (its kv_dtype, on its device).
at::TensorOptions kv_tensor_options(const TextModel& model);

// The format `requested` resolves to for a checkpoint stored as `stored` (Error{Input} naming an
// unknown format).
kernels::WeightFormat resolve_weight_format(const std::string& requested, DType stored);

// Loads `dir` (config.json, safetensors, optional generation_config.json and tokenizer.json), or
// a .gguf file (gguf_model.h). Errors name the folder, file, field or tensor; nothing is
// half-loaded on failure.
TextModel load_text_model(const std::string& dir, const ModelLoadOptions& options = {});

}  // namespace trimkv
