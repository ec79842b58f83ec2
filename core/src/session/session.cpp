#include "trimkv/core/session.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "trimkv/core/error.h"
#include "trimkv/core/kv_stats.h"

namespace trimkv {

Session::Session(const TextModel& model, std::shared_ptr<const TurnEncoder> encoder,
                 const SessionOptions& options)
    : m_model(&model),
      m_encoder(std::move(encoder)),
      m_options(options),
      m_cache(kv_geometry_of(model.config, options.block_size), kv_tensor_options(model)) {
  TRIMKV_CHECK(m_encoder, Input, "a session needs a turn encoder (model '", model.dir, "')");
  new_runner();
}

Session::~Session() = default;

void Session::new_runner() {
  m_runner = std::make_unique<TextRunner>(*m_model, m_cache, m_options.prefill_chunk);
  if (m_owned_settings) {  // a fresh evictor for the rebuilt cache (its trace starts anew)
    m_owned_evictor = std::make_unique<Evictor>(*m_owned_settings, m_cache.geometry(),
                                                 static_cast<int>(m_cache.k_pool().element_size()));
    m_evictor = m_owned_evictor.get();
  }
  if (m_evictor || m_scorer) m_runner->set_eviction(m_evictor, m_scorer);
}

void Session::set_eviction(Evictor* evictor, const EntryScorer* scorer) {
  m_runner->set_eviction(evictor, scorer);  // validates first (gates a policy needs)
  m_owned_settings.reset();
  m_owned_evictor.reset();
  m_evictor = evictor;
  m_scorer = scorer;
}

void Session::set_eviction(const EvictionSettings& settings, const EntryScorer* scorer) {
  auto evictor = std::make_unique<Evictor>(settings, m_cache.geometry(),
                                           static_cast<int>(m_cache.k_pool().element_size()));  // validates
  m_runner->set_eviction(evictor.get(), scorer);  // gates the policy needs
  m_owned_settings = std::make_unique<EvictionSettings>(settings);
  m_owned_evictor = std::move(evictor);
  m_evictor = m_owned_evictor.get();
  m_scorer = scorer;
}

void Session::catch_up(const std::atomic<bool>* cancel) {
  if (!m_stale) return;
  m_cache.clear();
  new_runner();
  int64_t done = 0;
  for (const Stored& s : m_conv.stored) {
    // A fresh (owned) evictor gets the segment's token merges again; an external one has them.
    if (m_owned_settings && m_evictor)
      for (const TokenMerge& tm : s.merges) m_evictor->record_token_merge(tm);
    m_runner->prefill_embedded(s.ids, embeds_of(s), s.infos, cancel, s.rope, s.deepstack);  // may stop
    done += static_cast<int64_t>(s.ids.size());
  }
  TRIMKV_ASSERT(done == static_cast<int64_t>(m_conv.ids.size()) && m_runner->n_tokens() == done);
  m_stale = false;
}

void Session::drop_unkept() {
  // A stop inside a chunk leaves the chunk registered in the cache, not counted by the runner.
  const auto kept = static_cast<int64_t>(m_conv.ids.size());
  if (m_runner->n_tokens() != kept || m_cache.bookkeeping().n_tokens() != kept) invalidate_cache();
}

void Session::invalidate_cache() {
  m_stale = true;
  if (m_conv.stored.empty()) catch_up(nullptr);  // nothing to prefill: an empty cache, now
}

Session::Checkpoint Session::checkpoint() const {
  Checkpoint c;
  c.m_conv = std::make_shared<const Conversation>(m_conv);
  return c;
}

void Session::restore(const Checkpoint& c) {
  TRIMKV_CHECK(c.m_conv, Input, "an empty checkpoint: take one with checkpoint()");
  m_conv = *c.m_conv;
  invalidate_cache();  // whatever the cache holds now, it is rebuilt from the restored segments
}

int64_t Session::positions_left() const {
  return m_model->config.max_position_embeddings - static_cast<int64_t>(m_conv.ids.size());
}

at::Tensor Session::embeds_of(const Stored& s) const {
  at::Tensor e = m_model->decoder->embed(at::tensor(std::vector<int64_t>(s.ids.begin(), s.ids.end()), at::kLong));
  if (s.image_embeds.defined()) {
    std::vector<int64_t> image_rows;
    for (size_t i = 0; i < s.infos.size(); ++i)
      if (s.infos[i].modality == Modality::Image) image_rows.push_back(static_cast<int64_t>(i));
    // The image features may come from a tower on another device than the decoder's.
    e.index_copy_(0, at::tensor(image_rows, at::kLong).to(e.device()), s.image_embeds.to(e.device()));
  }
  return e;
}

at::Tensor Session::append(const StreamSegment& seg, int turn, const std::atomic<bool>* cancel) {
  const int64_t n = static_cast<int64_t>(seg.ids.size());
  TRIMKV_ASSERT(seg.infos.size() == seg.ids.size() && (seg.rope.empty() || seg.rope.size() == seg.ids.size()));
  TRIMKV_CHECK(n <= positions_left(), Input, "this turn needs ", n, " positions but only ", positions_left(),
               " of the context (max_position_embeddings = ", m_model->config.max_position_embeddings,
               " of model '", m_model->dir, "') are left: reset the conversation");
  Stored s;
  s.ids = seg.ids;
  s.infos = seg.infos;
  s.rope = seg.rope;
  s.deepstack = seg.deepstack;
  for (TokenInfo& t : s.infos) t.turn = static_cast<int16_t>(turn);
  const int64_t hidden = m_model->config.hidden_size;
  const int64_t n_image = std::count_if(s.infos.begin(), s.infos.end(),
                                        [](const TokenInfo& t) { return t.modality == Modality::Image; });
  if (n_image > 0) {
    TRIMKV_ASSERT(seg.image_embeddings.defined() && seg.image_embeddings.size(0) == n_image &&
                  seg.image_embeddings.size(1) == hidden);
    s.image_embeds = seg.image_embeddings.to(at::kFloat);
  }
  for (const at::Tensor& d : s.deepstack)
    TRIMKV_ASSERT(d.dim() == 2 && d.size(0) == n_image && d.size(1) == hidden);
  catch_up(cancel);
  const size_t mark = m_conv.ids.size();
  for (TokenMerge tm : seg.token_merges) {
    tm.first_token += static_cast<int32_t>(mark);
    s.merges.push_back(std::move(tm));
  }
  try {
    at::Tensor logits = m_runner->prefill_embedded(s.ids, embeds_of(s), s.infos, cancel, s.rope, s.deepstack);
    if (m_evictor)
      for (const TokenMerge& tm : s.merges) m_evictor->record_token_merge(tm);
    m_conv.ids.insert(m_conv.ids.end(), s.ids.begin(), s.ids.end());
    m_conv.stored.push_back(std::move(s));
    return logits;
  } catch (...) {
    drop_unkept();
    throw;
  }
}

void Session::add_prompt(const std::vector<ContentPart>& content, bool chat,
                         const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(!awaiting_answer(), Input,
               "the previous prompt has not been answered yet: generate or give the answer first");
  TRIMKV_CHECK(!content.empty(), Input, "an empty message: give text or an image");
  std::vector<ImageRecord> images;
  const int first_image = static_cast<int>(m_conv.images.size());
  auto t0 = std::chrono::steady_clock::now();
  const ImageTokenReducer reduce = image_token_reducer();
  // A fresh conversation's first chat turn brings the system turn, which then opens it.
  const bool opening = m_conv.stored.empty();
  const bool with_system = chat && opening && !m_system_prompt.empty();
  std::vector<Message> history = m_conv.transcript;
  if (with_system) history.push_back({"system", {ContentPart::text_part(m_system_prompt)}});
  // Encoded first: a bad image changes nothing.
  StreamSegment seg = chat ? m_encoder->user_turn(history, content, first_image, images, cancel, reduce)
                           : m_encoder->raw_prompt(content, first_image, images, cancel, reduce);
  int turn = m_conv.turn;
  PrefilledPrompt p;
  StreamSegment system;
  if (with_system) {
    system.ids = m_encoder->system_turn(m_system_prompt);
    system.infos.assign(system.ids.size(), TokenInfo{});
    // Some templates fold the system message into the first user message (Gemma 3): then the
    // opening may be empty and the user turn carries it.
    if (!system.ids.empty()) append(system, turn, cancel);  // rolls itself back on error
    ++turn;
  }
  try {
    p.logits = append(seg, turn, cancel);
  } catch (...) {
    if (with_system && !system.ids.empty()) {  // the conversation is as before: empty
      m_conv.stored.pop_back();
      m_conv.ids.clear();
      invalidate_cache();
    }
    throw;
  }
  p.prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  p.ids = system.ids;  // the prompt the answer follows: system turn (if any) and user turn
  p.ids.insert(p.ids.end(), seg.ids.begin(), seg.ids.end());
  p.decode_info.turn = static_cast<int16_t>(turn + 1);  // the answer is the next message
  m_conv.images.insert(m_conv.images.end(), images.begin(), images.end());
  if (with_system) m_conv.transcript.push_back({"system", {ContentPart::text_part(m_system_prompt)}});
  m_conv.transcript.push_back({"user", content});
  m_conv.chat_turn = chat;
  m_conv.pending = std::move(p);
  m_conv.turn = turn + 1;
}

ImageTokenReducer Session::image_token_reducer() const {
  int dominant = 0, contextual = 0;
  if (!m_evictor || !visionzip_settings(m_evictor->policy(), dominant, contextual)) return {};
  return [dominant, contextual](const at::Tensor& attention, const at::Tensor& keys,
                                const at::Tensor& embeddings) {
    return visionzip_select(attention, keys, embeddings, dominant, contextual);
  };
}

void Session::add_user_turn(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel) {
  add_prompt(content, true, cancel);
}

void Session::add_raw_prompt(const std::vector<ContentPart>& content, const std::atomic<bool>* cancel) {
  add_prompt(content, false, cancel);
}

GenerationParams Session::answer_params(const GenerationParams& params) const {
  GenerationParams p = params;
  if (m_conv.chat_turn) {
    const std::vector<int32_t> eot = m_encoder->end_of_turn_ids();
    p.stop_token_ids.insert(p.stop_token_ids.end(), eot.begin(), eot.end());
  }
  return p;
}

GenerationResult Session::generate_pending(const GenerationParams& params, const TextCallback& on_text,
                                           const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(awaiting_answer(), Input, "nothing to answer: add a user turn first");
  catch_up(cancel);
  try {
    return trimkv::generate(*m_runner, m_conv.pending, answer_params(params), on_text, cancel);
  } catch (...) {
    // Drop whatever the failed generation appended; the prompt stays pending.
    drop_unkept();
    throw;
  }
}

GenerationResult Session::generate(const GenerationParams& params, const TextCallback& on_text,
                                   const std::atomic<bool>* cancel) {
  const size_t mark = m_conv.ids.size();
  const GenerationParams stops = answer_params(params);  // what ends the answer
  // What closes the answer, found before anything changes (a template may refuse).
  const std::vector<int32_t> close = m_conv.chat_turn ? m_encoder->close_assistant_turn(m_conv.transcript) : std::vector<int32_t>{};
  GenerationResult r = generate_pending(params, on_text, cancel);
  const int answer_turn = m_conv.turn;
  // Tokens the decode loop already fed through the model (every sampled token but the last).
  const size_t fed = static_cast<size_t>(m_runner->n_tokens()) - mark;
  TRIMKV_ASSERT(fed <= r.tokens.size());
  if (fed > 0) {
    Stored s;
    s.ids.assign(r.tokens.begin(), r.tokens.begin() + static_cast<std::ptrdiff_t>(fed));
    s.infos.assign(fed, m_conv.pending.decode_info);
    for (size_t i = 0; i < fed; ++i) s.infos[i].token_index = static_cast<int32_t>(mark + i);
    m_conv.ids.insert(m_conv.ids.end(), s.ids.begin(), s.ids.end());
    m_conv.stored.push_back(std::move(s));
  }
  m_conv.pending = {};
  m_conv.transcript.push_back({"assistant", {ContentPart::text_part(r.text)}});
  ++m_conv.turn;
  if (m_conv.chat_turn) {
    // Close the answer: its unfed tokens (not an end-of-turn token), then the family's closing.
    std::vector<int32_t> rest(r.tokens.begin() + static_cast<std::ptrdiff_t>(fed), r.tokens.end());
    if (!rest.empty() && is_stop_token(m_model->config, stops, rest.back())) rest.pop_back();
    rest.insert(rest.end(), close.begin(), close.end());
    // An answer stopped by the position limit (context_full) leaves no room to close it: the
    // conversation is full; its next turn is refused naming the limit (reset, or roll back).
    if (!rest.empty() && static_cast<int64_t>(rest.size()) <= positions_left()) {
      StreamSegment seg;
      seg.ids = rest;
      seg.infos.assign(rest.size(), TokenInfo{});
      append(seg, answer_turn, nullptr);
    }
  }
  fill_kv_stats(m_cache, r);
  if (m_evictor) {  // the closing tokens may have compressed again
    r.eviction_events = m_evictor->n_events();
    r.peak_kv_entries = std::max(m_evictor->peak_entries(), r.kv_entries);
    r.trace = std::make_shared<const Trace>(m_evictor->trace());
  }
  return r;
}

void Session::add_assistant_text(const std::string& text, const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(awaiting_answer(), Input, "an assistant answer must follow a user turn");
  StreamSegment seg;
  seg.ids = m_encoder->assistant_turn(m_conv.transcript, text);
  seg.infos.assign(seg.ids.size(), TokenInfo{});
  append(seg, m_conv.turn, cancel);
  m_conv.pending = {};
  m_conv.transcript.push_back({"assistant", {ContentPart::text_part(text)}});
  ++m_conv.turn;
}

GenerationResult Session::generate_then_give(const std::string& given, const GenerationParams& params,
                                             const TextCallback& on_text, const std::atomic<bool>* cancel) {
  GenerationResult r = generate_pending(params, on_text, cancel);
  if (m_evictor) {
    r.eviction_events = m_evictor->n_events();
    r.peak_kv_entries = std::max(r.peak_kv_entries, m_evictor->peak_entries());
  }
  r.peak_kv_entries = std::max(r.peak_kv_entries, m_cache.bookkeeping().total_entries());
  drop_unkept();  // the generated tokens: the cache is rebuilt without them
  add_assistant_text(given, cancel);
  fill_kv_stats(m_cache, r);
  if (m_evictor) r.trace = std::make_shared<const Trace>(m_evictor->trace());
  return r;
}

void Session::set_encoder(std::shared_ptr<const TurnEncoder> encoder) {
  TRIMKV_CHECK(encoder, Input, "a session needs a turn encoder (model '", m_model->dir, "')");
  reset();
  m_encoder = std::move(encoder);
}

ContinuationScore Session::score_tokens(const std::vector<int32_t>& ids, int64_t last,
                                        const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(last >= 1 && last < static_cast<int64_t>(ids.size()), Input, "cannot score the last ", last,
               " tokens of a text of ", ids.size(), " (at least one token must come before them)");
  reset();
  const auto split = ids.end() - static_cast<std::ptrdiff_t>(last);
  try {
    const ContinuationScore s = score_continuation(*m_runner, {ids.begin(), split}, {split, ids.end()}, cancel);
    reset();
    return s;
  } catch (...) {
    reset();
    throw;
  }
}

void Session::reset() {
  m_conv.stored.clear();
  m_conv.ids.clear();
  m_conv.images.clear();
  m_conv.transcript.clear();
  m_conv.turn = 0;
  m_conv.pending = {};
  m_cache.clear();
  new_runner();
  m_stale = false;
}

}  // namespace trimkv
