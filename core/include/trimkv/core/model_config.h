// Text-decoder hyper-parameters read from a checkpoint's config.json. Accepts flat configs
// (text fields top-level) and nested ones (`text_config`), and rope settings given as
// `rope_scaling` + `rope_theta` (transformers v4) or `rope_parameters` (v5).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace trimkv {

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3
  double theta = 10000.0;
  double factor = 1.0;                       // linear, llama3
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int64_t original_max_position = 8192;      // llama3
  // Multimodal rotary (Qwen-VL, shared/QWEN-VL.md §4): positions come on three axes (time, row,
  // column) and frequency k of the head_dim/2 rotates by the axis its section assigns. Empty:
  // plain one-axis RoPE. Sums to head_dim/2 (checked when the config is read).
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;  // Qwen3-VL: sections interleaved (t h w t h w ...), else chunked
  bool multimodal() const { return !mrope_section.empty(); }
  // Per-frequency divisors given as a tensor (GGUF's rope_freqs of Llama 3.1-style files, which
  // stand for the llama3 scaling); empty: none. head_dim / 2 entries.
  std::vector<float> freq_factors;
};

// Defaults of a decoder family's config class, for fields a config.json leaves out.
struct TextConfigDefaults {
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  std::vector<int64_t> mrope_section;  // multimodal rotary default (empty: plain RoPE)
  bool mrope_interleaved = false;
  bool head_dim_from_config = true;    // false: head_dim = hidden_size / heads whatever it says
};

struct TextConfig {
  std::string model_type;    // of the text decoder: llama, qwen2, qwen3
  std::string architecture;  // first entry of "architectures", for reports
  bool has_vision_tower = false;  // config.json has a vision_config: a vision-language checkpoint
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // llama's optional q/k/v/o bias flag
  std::string hidden_act = "silu";
  RopeConfig rope;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
  std::string torch_dtype;
};

// The model_type of <dir>/config.json, or of a GGUF file's architecture when `dir` is a file (""
// when the folder, the file or the field is missing or unreadable).
std::string checkpoint_model_type(const std::string& dir);

// Parses `config_path` (a config.json); fields it leaves out take the defaults of the decoder
// family its model_type names (text_family.h), the generic ones for a type no family serves.
// Errors name the file and the field (an mrope_section that does not sum to head_dim / 2 too).
TextConfig load_text_config(const std::string& config_path);
// The same from a parsed config object; `origin` names it in errors (e.g. a GGUF file's header).
TextConfig text_config_from_json(const nlohmann::json& config, const std::string& origin);

// Reads eos ids from generation_config.json next to config.json when present (they override the
// config's). Returns false when the file is absent.
bool merge_generation_config(const std::string& path, TextConfig& cfg);

}  // namespace trimkv
