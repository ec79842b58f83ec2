#include "trimkv/core/engine.h"

#include <ATen/Parallel.h>

#include "trimkv/core/engine_support.h"
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
  apply_engine_options(options);
  auto impl = std::make_unique<Impl>();
  impl->model = load_text_model(dir, model_load_options(options));
  impl->options = options;
  LoadedGates loaded = load_engine_gates(options, dir, impl->model);
  impl->gates = std::move(loaded.gates);
  impl->gates_path = std::move(loaded.path);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

ModelInfo Engine::info() const {
  return describe_text_model(m_impl->model, {m_impl->gates, m_impl->gates_path});
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
  KvCache cache(kv_geometry_of(m_impl->model.config, m_impl->options.block_size), kv_tensor_options(m_impl->model));
  TextRunner runner(m_impl->model, cache, m_impl->options.prefill_chunk);
  runner.set_eviction(nullptr, m_impl->gates.get());  // log β recorded in every entry
  return trimkv::generate(runner, prompt, params, on_text, cancel);
}

GenerationResult Engine::generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                                  const EvictionSettings& eviction, const TextCallback& on_text,
                                  const std::atomic<bool>* cancel) {
  const KvGeometry g = kv_geometry_of(m_impl->model.config, m_impl->options.block_size);
  KvCache cache(g, kv_tensor_options(m_impl->model));
  Evictor evictor(eviction, g, static_cast<int>(cache.k_pool().element_size()));  // validates policy, options, budget
  TextRunner runner(m_impl->model, cache, m_impl->options.prefill_chunk);
  runner.set_eviction(&evictor, m_impl->gates.get());  // gate policies refuse without gates
  return trimkv::generate(runner, prompt, params, on_text, cancel);
}

}  // namespace trimkv
