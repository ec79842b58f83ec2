// The narrow public API that app/ (CLI, GUI) uses (STYLE.md §1): plain value types in and out,
// no LibTorch header. An Engine owns a loaded model; each generate() call runs on a fresh KV
// cache (multi-turn conversations are the Session's job).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/generation_types.h"

namespace trimkv {

struct ModelInfo {
  std::string dir;
  std::string architecture;   // config "architectures"[0]
  std::string model_type;     // of the text decoder
  std::string family;         // our family file that runs it
  std::string family_description;
  std::string weight_dtype;   // as stored: F32, F16, BF16
  int64_t weight_bytes = 0;
  int64_t parameters = 0;
  std::string weights_held;         // how the matrices are held in memory: f32, bf16, f16, q8, q4
  int64_t weights_held_bytes = 0;   // bytes of every weight as held
  std::vector<std::string> weight_notes;  // matrices held otherwise than asked, and why
  std::string weight_cache;               // what the weight cache did at load (weight_cache.h), or ""
  std::string kernel_isa;           // what the low-precision kernels use on this CPU
  int64_t n_layer = 0, hidden_size = 0, intermediate_size = 0, n_head = 0, n_kv_head = 0,
          head_dim = 0, vocab_size = 0, max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string rope_type;
  double rope_theta = 0;
  bool has_tokenizer = false;
  int64_t tokenizer_vocab_size = 0;
  std::string tokenizer_origin;       // the tokenizer.json, or a GGUF file's metadata
  std::string embedded_chat_template; // a template carried in the model file ("" for folders)
  std::vector<int32_t> eos_token_ids;
  int64_t kv_bytes_per_token = 0;  // K and V of one token over all layers and KV heads, as stored
  std::string kv_dtype;            // how the KV cache stores K and V: f32, bf16, f16
  std::string device;              // where the model runs: cpu | cuda
  std::string gates_file;          // retention gates in use ("" = none)
  std::string gates_kind;          // dbtrimkv | trimkv
  int64_t gates_parameters = 0;
  int64_t gates_train_budget = 0;  // M per head they were trained with (0 = unknown)
};

struct EngineOptions {
  int threads = 0;          // 0 = every hardware thread (LibTorch alone would count physical cores)
  int prefill_chunk = 256;  // tokens per prefill forward
  int block_size = 16;      // KV entries per cache block
  // Retention gates (gate_file.h): a gates file (.safetensors ours, .pth the reference's);
  // "" = the model folder's own retention_gates.safetensors / trimkv_weights.pth when present;
  // "none" = no gates. A file that does not fit the model is refused (Error{Config}).
  std::string gates;
  // Chat-template variables (e.g. {"enable_thinking", "false"}) for conversations.
  std::vector<TemplateVar> template_vars;
  // How the weight matrices are held (text_model.h ModelLoadOptions): "" = the checkpoint's own
  // bf16/f16, else f32; or f32, bf16, f16, q8, q4.
  std::string weights;
  // How the KV cache stores K and V (ModelLoadOptions): "" = f16 for checkpoints stored in 16
  // bits or fewer, else f32; or f32, bf16, f16.
  std::string kv_dtype;
  // Where the model runs (compute_device.h): cpu, cuda, or auto (the GPU when one can be used).
  std::string device = "cpu";
  // Vision-language checkpoints: image resolution in pixels on a side (ModelLoadOptions); 0 = the
  // processor's own.
  int image_size = 0;
  // A stop for the load (ModelLoadOptions::cancel): Error{Cancelled}, nothing loaded. Must
  // outlive the load; null: none.
  const std::atomic<bool>* cancel = nullptr;
};

// Error{Input} naming `weights` unless it is "" or a weight format (f32, bf16, f16, q8, q4).
void check_weights_option(const std::string& weights);
// Error{Input} naming `kv_dtype` unless it is "" or f32, bf16, f16.
void check_kv_dtype_option(const std::string& kv_dtype);

// A retention-gates file checked against a model's config.json alone (no weights needed: the
// released gates' real shapes against a config-only folder).
struct GatesFileInfo {
  std::string path, config_path;
  std::string kind;  // trimkv | dbtrimkv
  bool tied = false;
  int64_t n_layer = 0, n_kv_head = 0, hidden_size = 0, gate_hidden = 0, parameters = 0;
  std::string model_type;  // of the config
  int64_t model_layers = 0, model_hidden = 0, model_kv_heads = 0;
};
// Error{Config} naming the file and every mismatch (layers, hidden size, KV heads) when the gates
// do not fit; Error{Format} / Error{Io} naming the file when it cannot be read.
GatesFileInfo check_gates_file(const std::string& gates_path, const std::string& model_dir);

class Engine {
 public:
  // Loads a checkpoint folder. Throws trimkv::Error naming the folder / file / field / tensor.
  static std::unique_ptr<Engine> load(const std::string& dir, const EngineOptions& options = {});
  ~Engine();

  ModelInfo info() const;
  bool has_tokenizer() const;
  // Error{Input} when the model has no tokenizer.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens = true) const;
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                            const TextCallback& on_text = {},
                            const std::atomic<bool>* cancel = nullptr);
  // Same, with the KV cache under an eviction policy and budget. The settings are checked against
  // the model (geometry, gates) before any work starts: Error{Input}. The result carries the
  // policy, budget, eviction count and trace.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                            const EvictionSettings& eviction, const TextCallback& on_text = {},
                            const std::atomic<bool>* cancel = nullptr);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace trimkv
