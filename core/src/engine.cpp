#include "trimkv/core/engine.h"

#include <ATen/Parallel.h>

#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

struct Engine::Impl {
  TextModel model;
  EngineOptions options;
  std::shared_ptr<const RetentionGates> gates;  // null when the model runs without gates
  std::string gates_path;
};

Engine::Engine(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string& dir, const EngineOptions& options) {
  TRIMKV_CHECK(options.threads >= 0, Input, "threads must be >= 0, got ", options.threads);
  TRIMKV_CHECK(options.prefill_chunk > 0, Input, "prefill chunk must be > 0, got ", options.prefill_chunk);
  TRIMKV_CHECK(options.block_size > 0, Input, "block size must be > 0, got ", options.block_size);
  if (options.threads > 0) at::set_num_threads(options.threads);
  auto impl = std::make_unique<Impl>();
  impl->model = load_text_model(dir);
  impl->options = options;
  impl->gates_path = options.gates == "none" ? ""
                     : options.gates.empty() ? find_gates_file(dir)
                                             : options.gates;
  if (!impl->gates_path.empty()) {
    auto gates = std::make_shared<RetentionGates>(load_gates(impl->gates_path));
    check_gates_fit(*gates, impl->model.config, impl->gates_path, dir);
    impl->gates = std::move(gates);
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

ModelInfo Engine::info() const {
  const TextModel& m = m_impl->model;
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
  i.rope_theta = c.rope.theta;
  i.has_tokenizer = m.tokenizer != nullptr;
  i.tokenizer_vocab_size = m.tokenizer ? m.tokenizer->vocab_size() : 0;
  i.eos_token_ids = c.eos_token_ids;
  i.kv_bytes_per_token = c.n_layer * c.n_kv_head * c.head_dim * 2 * static_cast<int64_t>(sizeof(float));
  if (m_impl->gates) {
    i.gates_file = m_impl->gates_path;
    i.gates_kind = gate_kind_name(m_impl->gates->config().kind);
    i.gates_parameters = m_impl->gates->parameter_count();
    i.gates_train_budget = m_impl->gates->config().train_budget;
  }
  return i;
}

bool Engine::has_tokenizer() const { return m_impl->model.tokenizer != nullptr; }

std::vector<int32_t> Engine::tokenize(const std::string& text, bool add_special_tokens) const {
  TRIMKV_CHECK(has_tokenizer(), Input, "model '", m_impl->model.dir,
               "' has no tokenizer.json: give token ids instead of text");
  return m_impl->model.tokenizer->encode(text, add_special_tokens);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  TRIMKV_CHECK(has_tokenizer(), Input, "model '", m_impl->model.dir, "' has no tokenizer.json");
  return m_impl->model.tokenizer->decode(ids, skip_special_tokens);
}

GenerationResult Engine::generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                                  const TextCallback& on_text, const std::atomic<bool>* cancel) {
  KvCache cache(kv_geometry_of(m_impl->model.config, m_impl->options.block_size));
  TextRunner runner(m_impl->model, cache, m_impl->options.prefill_chunk);
  runner.set_eviction(nullptr, m_impl->gates.get());  // log β recorded in every entry
  return trimkv::generate(runner, prompt, params, on_text, cancel);
}

GenerationResult Engine::generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                                  const EvictionSettings& eviction, const TextCallback& on_text,
                                  const std::atomic<bool>* cancel) {
  const KvGeometry g = kv_geometry_of(m_impl->model.config, m_impl->options.block_size);
  Evictor evictor(eviction, g);  // validates policy, options and budget for this model
  KvCache cache(g);
  TextRunner runner(m_impl->model, cache, m_impl->options.prefill_chunk);
  runner.set_eviction(&evictor, m_impl->gates.get());  // gate policies refuse without gates
  return trimkv::generate(runner, prompt, params, on_text, cancel);
}

}  // namespace trimkv
