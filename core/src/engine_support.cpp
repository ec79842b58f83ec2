#include "trimkv/core/engine_support.h"

#include <filesystem>

#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/kernels/linear.h"

namespace trimkv {

void check_weights_option(const std::string& weights) {
  if (!weights.empty()) (void)resolve_weight_format(weights, DType::F32);
}

void check_kv_dtype_option(const std::string& kv_dtype) {
  if (!kv_dtype.empty()) (void)resolve_kv_dtype(kv_dtype, DType::F32);
}

void apply_engine_options(const EngineOptions& options) {
  check_weights_option(options.weights);
  check_kv_dtype_option(options.kv_dtype);
  check_device_option(options.device);
  TRIMKV_CHECK(options.image_size >= 0 && options.image_size <= 16384, Input, "--image-size must be 0 (the "
               "processor's own) or a side of 1 to 16384 pixels, got ", options.image_size);
  TRIMKV_CHECK(options.threads >= 0, Input, "threads must be >= 0, got ", options.threads);
  TRIMKV_CHECK(options.prefill_chunk > 0, Input, "prefill chunk must be > 0, got ", options.prefill_chunk);
  TRIMKV_CHECK(options.block_size > 0, Input, "block size must be > 0, got ", options.block_size);
  set_compute_threads(options.threads);  // 0: every hardware thread, as the CLI help and the Studio say
}

ModelLoadOptions model_load_options(const EngineOptions& options) {
  ModelLoadOptions o(options.weights, options.kv_dtype, options.image_size);
  o.cancel = options.cancel;
  o.device = options.device;
  return o;
}

LoadedGates load_engine_gates(const EngineOptions& options, const std::string& checkpoint_dir,
                              const TextModel& model) {
  TRIMKV_CHECK(!(options.cancel && options.cancel->load()), Cancelled, "loading '", checkpoint_dir, "' stopped");
  LoadedGates out;
  out.path = options.gates == "none" ? ""
             : options.gates.empty() ? find_gates_file(checkpoint_dir)
                                     : options.gates;
  if (!out.path.empty()) {
    auto gates = std::make_shared<RetentionGates>(load_gates(out.path));
    check_gates_fit(*gates, model.config, out.path, model.dir);
    if (model.device != ComputeDevice::Cpu)  // scored where the decoder's hidden states are
      gates = std::make_shared<RetentionGates>(gates->to(at::TensorOptions().device(torch_device(model.device))));
    out.gates = std::move(gates);
  }
  return out;
}

ModelInfo describe_text_model(const TextModel& m, const LoadedGates& gates) {
  const TextConfig& c = m.config;
  ModelInfo i;
  i.dir = m.dir;
  i.architecture = c.architecture;
  i.model_type = c.model_type;
  i.family = m.family->name;
  i.family_description = m.family->description;
  i.weight_dtype = dtype_name(m.weight_dtype);
  i.weight_bytes = static_cast<int64_t>(m.weight_bytes);
  i.parameters = m.decoder->parameter_count();
  i.weights_held = kernels::weight_format_name(m.weight_format);
  i.weights_held_bytes = m.decoder->weight_bytes();
  i.weight_notes = m.weight_notes;
  i.weight_cache = m.weight_cache_note;
  i.kernel_isa = kernels::lowp_kernel_isa();
  i.n_layer = c.n_layer;
  i.hidden_size = c.hidden_size;
  i.intermediate_size = c.intermediate_size;
  i.n_head = c.n_head;
  i.n_kv_head = c.n_kv_head;
  i.head_dim = c.head_dim;
  i.vocab_size = c.vocab_size;
  i.max_position_embeddings = c.max_position_embeddings;
  i.tie_word_embeddings = c.tie_word_embeddings;
  i.rope_type = c.rope.type;
  if (c.rope.multimodal()) {  // e.g. "default + mrope [16, 24, 24] chunked"
    std::string sections;
    for (int64_t x : c.rope.mrope_section) sections += (sections.empty() ? "" : ", ") + std::to_string(x);
    i.rope_type += " + mrope [" + sections + "] " + (c.rope.mrope_interleaved ? "interleaved" : "chunked");
  }
  i.rope_theta = c.rope.theta;
  i.has_tokenizer = m.tokenizer != nullptr;
  i.tokenizer_vocab_size = m.tokenizer ? m.tokenizer->vocab_size() : 0;
  i.tokenizer_origin = m.tokenizer ? m.tokenizer->path() : "";
  i.embedded_chat_template = m.embedded_chat_template;
  i.eos_token_ids = c.eos_token_ids;
  i.kv_bytes_per_token = c.n_layer * c.n_kv_head * c.head_dim * 2 * static_cast<int64_t>(kernels::kv_dtype_size(m.kv_dtype));
  i.kv_dtype = kernels::kv_dtype_name(m.kv_dtype);
  i.device = compute_device_name(m.device);
  if (gates.gates) {
    i.gates_file = gates.path;
    i.gates_kind = gate_kind_name(gates.gates->config().kind);
    i.gates_parameters = gates.gates->parameter_count();
    i.gates_train_budget = gates.gates->config().train_budget;
  }
  return i;
}

GatesFileInfo check_gates_file(const std::string& gates_path, const std::string& model_dir) {
  GatesFileInfo i;
  i.path = gates_path;
  i.config_path = (std::filesystem::path(model_dir) / "config.json").string();
  const TextConfig cfg = load_text_config(i.config_path);
  const RetentionGates gates = load_gates(gates_path);
  check_gates_fit(gates, cfg, gates_path, model_dir);
  const GateConfig& g = gates.config();
  i.kind = gate_kind_name(g.kind);
  i.tied = g.is_tied();
  i.n_layer = g.n_layer;
  i.n_kv_head = g.n_kv_head;
  i.hidden_size = g.hidden_size;
  i.gate_hidden = g.gate_hidden;
  i.parameters = gates.parameter_count();
  i.model_type = cfg.model_type;
  i.model_layers = cfg.n_layer;
  i.model_hidden = cfg.hidden_size;
  i.model_kv_heads = cfg.n_kv_head;
  return i;
}

}  // namespace trimkv
