#include "trimkv/core/generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/kv_stats.h"

namespace trimkv {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Length of the longest prefix of `text` that may be shown: it contains no complete stop string
// (the caller checked) and must not end inside a UTF-8 character or with the beginning of a
// stop string.
size_t certain_prefix(const std::string& text, const std::vector<std::string>& stops) {
  size_t end = text.size();
  for (const auto& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > 0; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        end = std::min(end, text.size() - k);
        break;
      }
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

KvGeometry kv_geometry_of(const TextConfig& cfg, int block_size) {
  KvGeometry g;
  g.n_layer = static_cast<int>(cfg.n_layer);
  g.n_kv_head = static_cast<int>(cfg.n_kv_head);
  g.head_dim = static_cast<int>(cfg.head_dim);
  g.block_size = block_size;
  return g;
}

TextRunner::TextRunner(const TextModel& model, KvCache& cache, int prefill_chunk)
    : m_model(&model), m_cache(&cache), m_prefill_chunk(prefill_chunk) {
  TRIMKV_CHECK(prefill_chunk > 0, Input, "prefill chunk must be positive, got ", prefill_chunk);
  const KvGeometry g = cache.geometry();
  const KvGeometry want = kv_geometry_of(model.config, g.block_size);
  TRIMKV_CHECK(g.n_layer == want.n_layer && g.n_kv_head == want.n_kv_head &&
                   g.head_dim == want.head_dim,
               Input, "KV cache geometry does not match model '", model.dir, "'");
  m_n_tokens = static_cast<int64_t>(cache.bookkeeping().n_tokens());
  // A text stream already in the cache continues at its length (the Session starts multimodal
  // streams on an empty cache).
  m_next_position = m_n_tokens;
}

void TextRunner::set_eviction(Evictor* evictor, const EntryScorer* scorer) {
  if (evictor) evictor->require_gates(scorer != nullptr, m_model->dir);
  m_evictor = evictor;
  m_scorer = scorer;
}

at::Tensor TextRunner::forward_chunk(const std::vector<int32_t>& ids, const TokenInfo& info_template,
                                     bool more_chunks, const at::Tensor& embeds,
                                     const TokenInfo* per_token, const RopeOffset* rope,
                                     int64_t rope_base, const LayerInjection& inject,
                                     const std::atomic<bool>* cancel) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<TokenInfo> infos(ids.size(), info_template);
  if (per_token) infos.assign(per_token, per_token + n);
  std::vector<int32_t> token_indices(ids.size());
  // Rotary positions: the segment's offsets from its start, or sequential from the next free one.
  std::vector<RopeOffset> placed(ids.size());
  int64_t next = m_next_position;
  place_rotary_positions(rope, n, rope ? rope_base : m_next_position, placed.data(), next);
  for (int64_t i = 0; i < n; ++i) {
    token_indices[i] = static_cast<int32_t>(m_n_tokens + i);
    infos[i].token_index = token_indices[i];
    infos[i].rope_position = placed[i].t;
  }
  if (m_evictor) m_evictor->before_forward(*m_cache, n);
  m_cache->register_tokens(infos);
  at::Tensor id_t = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
  const at::Tensor positions = rotary_position_tensor(placed, m_model->config.rope.multimodal());
  const TextDecoder& dec = *m_model->decoder;
  at::Tensor hidden =
      dec.forward_cached(embeds.defined() ? embeds : dec.embed(id_t), positions, token_indices,
                         *m_cache, m_scorer, m_evictor, inject, cancel);
  m_n_tokens += n;
  m_next_position = next;
  if (m_evictor) m_evictor->after_forward(*m_cache, n, more_chunks);
  return dec.logits(hidden.narrow(0, n - 1, 1)).view({-1}).to(at::kCPU);  // sampled on the CPU
}

void TextRunner::check_prompt(const std::vector<int32_t>& ids) const {
  TRIMKV_CHECK(!ids.empty(), Input, "empty prompt: nothing to prefill");
  const int64_t limit = m_model->config.max_position_embeddings;
  TRIMKV_CHECK(m_n_tokens + static_cast<int64_t>(ids.size()) <= limit, Input, "prompt of ",
               ids.size(), " tokens", (m_n_tokens ? " (after " + std::to_string(m_n_tokens) + " in context)" : ""),
               " exceeds max_position_embeddings = ", limit, " of model '", m_model->dir, "'");
  const int64_t vocab = m_model->config.vocab_size;
  for (int32_t id : ids)
    TRIMKV_CHECK(id >= 0 && id < vocab, Input, "token id ", id, " is outside the vocabulary [0, ",
                 vocab, ") of model '", m_model->dir, "'");
}

at::Tensor TextRunner::prefill_embedded(const std::vector<int32_t>& ids, const at::Tensor& embeds,
                                        const std::vector<TokenInfo>& infos,
                                        const std::atomic<bool>* cancel,
                                        const std::vector<RopeOffset>& rope,
                                        const std::vector<at::Tensor>& deepstack) {
  check_prompt(ids);
  TRIMKV_ASSERT(infos.size() == ids.size() && embeds.dim() == 2 &&
                embeds.size(0) == static_cast<int64_t>(ids.size()) &&
                embeds.size(1) == m_model->config.hidden_size && (rope.empty() || rope.size() == ids.size()));
  const int64_t rope_base = m_next_position;  // the segment's offsets count from here
  int64_t image_seen = 0;                      // image positions in the chunks before
  at::Tensor logits;
  for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(m_prefill_chunk)) {
    if (begin > 0 && cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "prefill cancelled");
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(m_prefill_chunk));
    const int64_t n = static_cast<int64_t>(end - begin);
    LayerInjection inject;  // this chunk's share of the deepstack features
    if (!deepstack.empty()) {
      std::vector<int64_t> rows;
      for (size_t i = begin; i < end; ++i)
        if (infos[i].modality == Modality::Image) rows.push_back(static_cast<int64_t>(i - begin));
      if (!rows.empty()) {
        inject.rows = at::tensor(rows, at::kLong);
        for (const at::Tensor& d : deepstack)
          inject.adds.push_back(d.narrow(0, image_seen, static_cast<int64_t>(rows.size())));
        image_seen += static_cast<int64_t>(rows.size());
      }
    }
    logits = forward_chunk(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), {},
                           end < ids.size(), embeds.narrow(0, static_cast<int64_t>(begin), n),
                           infos.data() + begin, rope.empty() ? nullptr : rope.data() + begin, rope_base, inject,
                           cancel);
  }
  return logits;
}

at::Tensor TextRunner::prefill(const std::vector<int32_t>& ids, const TokenInfo& info_template) {
  check_prompt(ids);
  at::Tensor logits;
  for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(m_prefill_chunk)) {
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(m_prefill_chunk));
    logits = forward_chunk(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), info_template,
                           end < ids.size());
  }
  return logits;
}

at::Tensor TextRunner::step(int32_t id, const TokenInfo& info_template) {
  return prefill({id}, info_template);
}

namespace {
GenerationResult generate_from(TextRunner& runner, const std::vector<int32_t>& prompt,
                               const PrefilledPrompt* pre, const GenerationParams& params,
                               const TextCallback& on_text, const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(params.max_new_tokens >= 0, Input, "max new tokens must be >= 0, got ",
               params.max_new_tokens);
  for (const auto& s : params.stop_strings)
    TRIMKV_CHECK(!s.empty(), Input, "a stop string must not be empty");
  const TextModel& model = runner.model();
  Sampler sampler(params.sampling);
  std::unique_ptr<StreamDecoder> detok;
  if (model.tokenizer) detok = std::make_unique<StreamDecoder>(*model.tokenizer, true);

  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.prompt_ids = prompt;
  std::vector<int32_t> history = prompt;
  std::string text;     // decoded so far
  size_t emitted = 0;   // bytes of `text` already passed to on_text
  auto emit_until = [&](size_t end) {
    if (end > emitted) {
      if (on_text) on_text(text.substr(emitted, end - emitted));
      emitted = end;
    }
  };

  auto t0 = std::chrono::steady_clock::now();
  at::Tensor logits = pre ? pre->logits : runner.prefill(prompt);
  r.prefill_ms = pre ? pre->prefill_ms : ms_since(t0);
  const TokenInfo decode_info = pre ? pre->decode_info : TokenInfo{};
  const int64_t vocab = model.config.vocab_size;
  const int64_t limit = model.config.max_position_embeddings;
  r.stop_reason = "max_tokens";
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < params.max_new_tokens; ++i) {
    if (cancel && cancel->load()) {
      r.stop_reason = "cancelled";
      break;
    }
    logits = logits.contiguous();
    const int32_t next = sampler.sample(logits.data_ptr<float>(), vocab, history);
    if (r.tokens.empty()) r.first_token_ms = ms_since(t0);
    r.tokens.push_back(next);
    history.push_back(next);
    if (params.stop_at_eos && is_stop_token(model.config, params, next)) {
      r.stop_reason = "eos";
      break;
    }
    if (detok) {
      text += detok->push(next);
      size_t stop_at = std::string::npos;
      for (const auto& s : params.stop_strings) stop_at = std::min(stop_at, text.find(s));
      if (stop_at != std::string::npos) {
        text.resize(stop_at);
        r.stop_reason = "stop_string";
        break;
      }
      emit_until(certain_prefix(text, params.stop_strings));
    }
    if (i + 1 == params.max_new_tokens) break;  // no forward needed for a token never sampled from
    if (runner.n_tokens() + 1 > limit) {
      r.stop_reason = "context_full";
      break;
    }
    logits = runner.step(next, decode_info);
  }
  r.decode_ms = ms_since(t1);
  if (detok && r.stop_reason != "stop_string") text += detok->flush();
  emit_until(text.size());
  r.text = text;
  fill_kv_stats(runner.cache(), r);
  if (const Evictor* ev = runner.evictor()) {
    r.policy = ev->policy().name();
    r.budget_global = ev->budget_global();
    r.eviction_events = ev->n_events();
    r.peak_kv_entries = std::max(ev->peak_entries(), r.kv_entries);
    r.trace = std::make_shared<const Trace>(ev->trace());
  }
  return r;
}
}  // namespace

bool is_stop_token(const TextConfig& config, const GenerationParams& params, int32_t id) {
  const auto& eos = config.eos_token_ids;
  const auto& extra = params.stop_token_ids;
  return std::find(eos.begin(), eos.end(), id) != eos.end() || std::find(extra.begin(), extra.end(), id) != extra.end();
}

void fill_kv_stats(const KvCache& cache, GenerationResult& r) {
  const KvBookkeeping& kv = cache.bookkeeping();
  r.kv_entries = kv.total_entries();
  r.kv_bytes = cache.bytes_held();
  const ModalityCounts by_modality = count_entries_by_modality(kv);
  r.kv_text_entries = by_modality.text;
  r.kv_image_entries = by_modality.image;
  r.peak_kv_entries = std::max(r.peak_kv_entries, r.kv_entries);
}

GenerationResult generate(TextRunner& runner, const std::vector<int32_t>& prompt,
                          const GenerationParams& params, const TextCallback& on_text,
                          const std::atomic<bool>* cancel) {
  return generate_from(runner, prompt, nullptr, params, on_text, cancel);
}

GenerationResult generate(TextRunner& runner, const PrefilledPrompt& prompt,
                          const GenerationParams& params, const TextCallback& on_text,
                          const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(prompt.logits.defined() && !prompt.ids.empty(), Input,
               "nothing to answer: the prompt has not been prefilled");
  return generate_from(runner, prompt.ids, &prompt, params, on_text, cancel);
}

}  // namespace trimkv
