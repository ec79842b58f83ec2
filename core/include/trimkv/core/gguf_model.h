// A text model from one GGUF file, as llama.cpp users hold their models: the llama, qwen2 and
// qwen3 architectures, f32 / f16 / bf16 / q8_0 / q4_0 / q4_1 tensors, the tokenizer, special
// tokens and chat template from the file's metadata.
//
// GGUF names tensors its own way (token_embd, blk.N.attn_q, ...): they are given their Hugging
// Face names, and their shapes in row-major order, so the decoder binds them as it binds a
// safetensors checkpoint. Llama-architecture files hold q and k with each head's rows in
// interleaved rotary order; those rows are put back in half-split order on load.
#pragma once
#include <memory>
#include <string>

#include "trimkv/core/gguf.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"

namespace trimkv {

// The decoder hyper-parameters a GGUF file's metadata gives ({arch}.block_count, ...), as
// config.json would hold them. Error{Unsupported} names the file and the architecture when it is
// not llama, qwen2 or qwen3; Error{Config} names a missing or impossible key.
TextConfig gguf_text_config(const GgufFile& file);

// The file's tensors under Hugging Face names (model.layers.N.self_attn.q_proj.weight, ...).
WeightStore gguf_weight_store(std::shared_ptr<const GgufFile> file, const TextConfig& config);

// The dtype most of a GGUF file's layer matrices are stored in (embeddings, and rows that are not
// whole blocks, are often kept wider; a quantised type present names the file): what `trimkv
// info` reports. By default (--weights not given) each matrix is held as the file stores it, q8
// standing in for Q4_1.
DType gguf_dominant_dtype(const WeightStore& weights);

// The config.json model_type a GGUF file's general.architecture stands for ("" when the file is
// unreadable, not GGUF, or of another architecture).
std::string gguf_model_type(const std::string& path);

// load_text_model for a .gguf file.
TextModel load_gguf_text_model(const std::string& path, const ModelLoadOptions& options);

}  // namespace trimkv
