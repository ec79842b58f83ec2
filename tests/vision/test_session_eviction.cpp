// Eviction in vision-language conversations (Session / ChatEngine under a policy): the budget
// holds after every turn, per-modality counts add up to the cache, a budget >= context equals the
// full cache, settings are checked before any work, and reset / rollback start a fresh evictor.
#include <catch2/catch.hpp>

#include <algorithm>

#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/kv_stats.h"
#include "trimkv/core/session.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {

const VlmModel& smolvlm() {
  static const auto m = load_vlm(test::vlm_model("smolvlm"));
  return *m;
}

// Hand-set "gates" (as tests/core/test_eviction_runner.cpp): log β from the post-norm hidden
// state, different per token, head and layer.
class FixedScorer final : public EntryScorer {
 public:
  explicit FixedScorer(int64_t n_kv) : m_n_kv(n_kv) {}
  at::Tensor log_beta(int64_t il, const at::Tensor& x) const override {
    return (x.narrow(1, il, m_n_kv).abs() * -0.2 - 0.01).contiguous();
  }

 private:
  int64_t m_n_kv;
};

EvictionSettings settings(const std::string& policy, int64_t budget_per_head) {
  EvictionSettings s;
  s.policy = policy;
  s.budget_per_head = budget_per_head;
  s.slack = 0;  // compress after every forward that goes over: the budget holds after each turn
  return s;
}

const std::vector<std::vector<ContentPart>>& turns() {
  static const std::vector<std::vector<ContentPart>> t = {
      {ContentPart::image_part(test::vlm_image("a.png")), ContentPart::text_part("What is this?")},
      {ContentPart::text_part("And this one: "), ContentPart::image_part(test::vlm_image("alpha.png")),
       ContentPart::text_part(" Which is brighter?")},
      {ContentPart::text_part("Describe both pictures again, in detail please.")},
  };
  return t;
}

void require_counts_add_up(const KvCache& cache) {
  const ModalityCounts c = count_entries_by_modality(cache.bookkeeping());
  REQUIRE(c.text + c.image + c.special == cache.bookkeeping().total_entries());
}

GenerationParams params() {
  GenerationParams p;
  p.max_new_tokens = 6;
  p.stop_at_eos = false;
  return p;
}

// A three-turn conversation; returns every generated token.
std::vector<int32_t> converse(Session& s, int64_t budget_global) {
  std::vector<int32_t> all;
  for (const auto& t : turns()) {
    s.add_user_turn(t);
    if (budget_global > 0) REQUIRE(s.cache().bookkeeping().total_entries() <= budget_global);
    const GenerationResult r = s.generate(params());
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    require_counts_add_up(s.cache());
    REQUIRE(r.kv_entries == s.cache().bookkeeping().total_entries());
    REQUIRE(r.kv_text_entries + r.kv_image_entries <= r.kv_entries);
    if (budget_global > 0) {
      REQUIRE(r.kv_entries <= budget_global);
      REQUIRE(r.budget_global == budget_global);
      REQUIRE(r.trace);
      REQUIRE(r.eviction_events == static_cast<int64_t>(r.trace->events.size()));
    }
  }
  return all;
}

}  // namespace

TEST_CASE("Session: a VLM conversation under dbtrimkv / streamingllm / h2o keeps the budget after every turn",
          "[session][eviction]") {
  const VlmModel& m = smolvlm();
  const int64_t streams = m.text.config.n_layer * m.text.config.n_kv_head;
  FixedScorer scorer(m.text.config.n_kv_head);
  for (const char* policy : {"dbtrimkv", "streamingllm", "h2o"}) {
    CAPTURE(policy);
    Session s(m.text, m.encoder, {});
    s.set_eviction(settings(policy, 40), &scorer);
    converse(s, 40 * streams);
    REQUIRE(s.evictor());
    REQUIRE(s.evictor()->n_events() > 0);
    const ModalityCounts c = count_entries_by_modality(s.cache().bookkeeping());
    // Two images of 80 tokens each were (partly) evicted; streamingllm keeps only the sinks and
    // the recent window (the last, text-only turn), so no image entry survives it.
    REQUIRE(c.image < 160 * streams);
    if (std::string(policy) != "streamingllm") REQUIRE(c.image > 0);
    // reset() starts a fresh evictor: a new trace, the budget still holds.
    s.reset();
    REQUIRE(s.evictor()->n_events() == 0);
    s.add_user_turn(turns()[0]);
    REQUIRE(s.cache().bookkeeping().total_entries() <= 40 * streams);
  }
}

TEST_CASE("Session: a budget >= the context gives exactly the full cache's answers", "[session][eviction]") {
  const VlmModel& m = smolvlm();
  FixedScorer scorer(m.text.config.n_kv_head);
  Session full(m.text, m.encoder, {});
  full.set_eviction(nullptr, &scorer);
  const std::vector<int32_t> want = converse(full, -1);
  for (const char* policy : {"dbtrimkv", "streamingllm", "h2o"}) {
    CAPTURE(policy);
    Session s(m.text, m.encoder, {});
    s.set_eviction(settings(policy, 1000), &scorer);
    REQUIRE(converse(s, 1000 * m.text.config.n_layer * m.text.config.n_kv_head) == want);
    REQUIRE(s.evictor()->n_events() == 0);
    REQUIRE(s.cache().bookkeeping().total_entries() == full.cache().bookkeeping().total_entries());
  }
}

using trimkv::test::CancelAfterEncoding;

TEST_CASE("Session: a rollback under eviction replays the kept segments through a fresh evictor",
          "[session][eviction][errors]") {
  const VlmModel& m = smolvlm();
  const int64_t budget = 30 * m.text.config.n_layer * m.text.config.n_kv_head;
  std::atomic<bool> cancel{false};
  auto enc = std::make_shared<CancelAfterEncoding>(m.encoder, &cancel);
  SessionOptions o;
  o.prefill_chunk = 8;  // many chunks: the cancel lands mid-prefill
  Session s(m.text, enc, o);
  s.set_eviction(settings("streamingllm", 30), nullptr);
  s.add_user_turn(turns()[0], &cancel);
  s.generate(params());
  const std::vector<int32_t> before = s.ids();
  const Evictor* first = s.evictor();
  REQUIRE(first->n_events() > 0);
  enc->m_armed = true;
  REQUIRE_THROWS_WITH(s.add_user_turn(turns()[1], &cancel), Catch::Contains("cancelled"));
  // The failed turn changed nothing; the cache is rebuilt under the budget by a fresh evictor.
  REQUIRE(s.ids() == before);
  REQUIRE_FALSE(s.cache_current());
  s.catch_up();
  REQUIRE(s.cache().bookkeeping().n_tokens() == static_cast<int32_t>(before.size()));
  REQUIRE(s.cache().bookkeeping().total_entries() <= budget);
  REQUIRE(s.evictor() != nullptr);
  enc->m_armed = false;
  cancel.store(false);
  s.add_user_turn(turns()[1], &cancel);
  s.generate(params());
  REQUIRE(s.cache().bookkeeping().total_entries() <= budget);
  require_counts_add_up(s.cache());
}

TEST_CASE("ChatEngine: eviction settings are checked against the model before any work",
          "[session][eviction][errors]") {
  EngineOptions o;
  o.gates = "none";
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"), o);
  REQUIRE_THROWS_WITH(engine->set_eviction(settings("dbtrimkv", 40)), Catch::Contains("needs retention gates"));
  REQUIRE_THROWS_WITH(engine->set_eviction(settings("trimkv", 40)), Catch::Contains("needs retention gates"));
  REQUIRE_THROWS_AS(engine->set_eviction(settings("h2o", 0)), Error);
  EvictionSettings bad_floor = settings("h2o", 4);
  bad_floor.policy = "dbtrimkv";
  bad_floor.options = {"floor=8"};
  REQUIRE_THROWS_AS(engine->set_eviction(bad_floor), Error);
  REQUIRE(engine->eviction().policy == "full");
  REQUIRE(engine->state().policy == "full");
  // One-shot generation refuses before any image is read (the file does not even exist).
  REQUIRE_THROWS_WITH(engine->generate("<image>", {"/no/such.png"}, params(), settings("dbtrimkv", 40)),
                      Catch::Contains("needs retention gates"));
}

TEST_CASE("ChatEngine: a conversation under dbtrimkv with a gates file reports budget, events and modalities",
          "[session][eviction]") {
  const VlmModel& m = smolvlm();
  test::ScratchDir dir("vlm-gates");
  GateConfig cfg = GateConfig::for_model(m.text.config, GateKind::DBTrimKV);
  cfg.gate_hidden = 8;
  cfg.bias_init = 0.0;  // log β clearly below 0 and different per token
  cfg.init_std = 0.5;
  save_gates(dir.file("g.safetensors"), RetentionGates::init(cfg, 7));
  EngineOptions o;
  o.gates = dir.file("g.safetensors");
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"), o);
  REQUIRE(engine->info().gates_kind == "dbtrimkv");
  engine->set_eviction(settings("dbtrimkv", 40));
  const int64_t budget = 40 * m.text.config.n_layer * m.text.config.n_kv_head;
  for (const auto& t : turns()) {
    engine->add_user_turn(t);
    const GenerationResult r = engine->respond(params());
    const ConversationState st = engine->state();
    REQUIRE(st.kv_entries <= budget);
    REQUIRE(st.kv_text_entries + st.kv_image_entries + st.kv_special_entries == st.kv_entries);
    REQUIRE(st.policy == "dbtrimkv");
    REQUIRE(st.budget_global == budget);
    REQUIRE(st.eviction_events == r.eviction_events);
    REQUIRE(st.peak_kv_entries >= st.kv_entries);
  }
  REQUIRE(engine->state().eviction_events > 0);
  REQUIRE(static_cast<int64_t>(engine->trace().events.size()) == engine->state().eviction_events);
  const KvSnapshot snap = engine->snapshot();
  REQUIRE(snap.total_entries == engine->state().kv_entries);
  REQUIRE(snap.n_events == engine->state().eviction_events);
  // One-shot generation under a policy: its own evictor, the conversation untouched.
  const int64_t events = engine->state().eviction_events;
  const GenerationResult one =
      engine->generate("Look: <image>", {test::vlm_image("wide.png")}, params(), settings("h2o", 20));
  REQUIRE(one.policy == "h2o");
  REQUIRE(one.kv_entries <= 20 * m.text.config.n_layer * m.text.config.n_kv_head);
  REQUIRE(one.eviction_events > 0);
  REQUIRE(engine->state().eviction_events == events);
  // reset keeps the policy with a fresh trace.
  engine->reset();
  REQUIRE(engine->state().policy == "dbtrimkv");
  REQUIRE(engine->state().eviction_events == 0);
}

namespace {

EvictionSettings visionzip(int dominant, int contextual) {
  EvictionSettings s;
  s.policy = "visionzip";
  s.options = {"dominant=" + std::to_string(dominant), "contextual=" + std::to_string(contextual)};
  return s;
}

int64_t count_id(const std::vector<int32_t>& ids, int32_t id) {
  return static_cast<int64_t>(std::count(ids.begin(), ids.end(), id));
}

}  // namespace

TEST_CASE("Session: visionzip keeps dominant + contextual image tokens per tile and records the merge",
          "[session][eviction][visionzip]") {
  const VlmModel& m = smolvlm();
  const int64_t streams = m.text.config.n_layer * m.text.config.n_kv_head;
  const int32_t image_token = static_cast<int32_t>(m.info.image_token_id);
  const int64_t seq = m.info.image_seq_len;
  REQUIRE(seq == 16);
  Session full(m.text, m.encoder, {});
  Session s(m.text, m.encoder, {});
  s.set_eviction(visionzip(5, 3), nullptr);  // 16 -> 8 tokens per tile
  for (size_t turn = 0; turn < 2; ++turn) {
    CAPTURE(turn);
    const size_t full_before = full.ids().size(), before = s.ids().size();
    full.add_user_turn(turns()[turn]);
    s.add_user_turn(turns()[turn]);
    const ImageRecord& rec = s.images().back();
    const int64_t tiles = rec.n_tiles;
    REQUIRE(tiles == 5);  // 2x2 tiles + the global image
    REQUIRE(full.images().back().n_image_tokens == tiles * seq);
    REQUIRE(rec.n_image_tokens == tiles * 8);
    // The stream shrank by 8 per tile; the <image> run of every tile holds 8 ids.
    const std::vector<int32_t> new_full(full.ids().begin() + full_before, full.ids().end());
    const std::vector<int32_t> new_vz(s.ids().begin() + before, s.ids().end());
    REQUIRE(new_vz.size() == new_full.size() - tiles * 8);
    REQUIRE(count_id(new_full, image_token) == tiles * seq);
    REQUIRE(count_id(new_vz, image_token) == tiles * 8);
    // Everything but the image tokens is unchanged.
    std::vector<int32_t> a, b;
    for (int32_t id : new_full) if (id != image_token) a.push_back(id);
    for (int32_t id : new_vz) if (id != image_token) b.push_back(id);
    REQUIRE(a == b);
    // One merge event per tile of this image, pointing at the tile's run in the stream.
    const Trace& tr = s.evictor()->trace();
    REQUIRE(static_cast<int64_t>(tr.token_merges.size()) == tiles * static_cast<int64_t>(turn + 1));
    for (int64_t k = 0; k < tiles; ++k) {
      const TokenMerge& tm = tr.token_merges[static_cast<size_t>(turn * tiles + k)];
      REQUIRE(tm.image_id == static_cast<int32_t>(turn));
      REQUIRE(tm.n_in == seq);
      REQUIRE(tm.n_out == 8);
      REQUIRE(tm.dominant.size() == 5);
      REQUIRE(tm.assignment.size() == static_cast<size_t>(seq));
      REQUIRE(std::count(tm.assignment.begin(), tm.assignment.end(), -1) == 5);
      REQUIRE(static_cast<size_t>(tm.first_token) >= before);
      for (int32_t q = 0; q < 8; ++q) REQUIRE(s.ids()[static_cast<size_t>(tm.first_token + q)] == image_token);
      REQUIRE(s.ids()[static_cast<size_t>(tm.first_token - 1)] != image_token);
      REQUIRE(s.ids()[static_cast<size_t>(tm.first_token + 8)] != image_token);
    }
    // Per-modality counts: the image entries dropped by 8 per tile (nothing else changed).
    const ModalityCounts cf = count_entries_by_modality(full.cache().bookkeeping());
    const ModalityCounts cv = count_entries_by_modality(s.cache().bookkeeping());
    REQUIRE(cv.image == cf.image - static_cast<int64_t>(turn + 1) * tiles * 8 * streams);
    REQUIRE(cv.text == cf.text);
    REQUIRE(cv.special == cf.special);
    // Generation runs; the cache holds exactly the (shorter) stream: visionzip evicts nothing.
    const GenerationResult r = s.generate(params());
    full.generate(params());
    REQUIRE(r.tokens.size() == 6);
    REQUIRE(r.kv_entries == static_cast<int64_t>(s.ids().size()) * streams);
    REQUIRE(r.eviction_events == 0);
    REQUIRE(r.kv_image_entries == cv.image);
    REQUIRE(r.trace);
    REQUIRE(r.trace->token_merges.size() == tr.token_merges.size());
    REQUIRE(trace_from_json(trace_to_json(*r.trace)) == *r.trace);
  }
  // reset(): a fresh evictor and trace; the merges of the new turn are recorded again.
  s.reset();
  REQUIRE(s.evictor()->trace().token_merges.empty());
  s.add_user_turn(turns()[0]);
  REQUIRE(s.evictor()->trace().token_merges.size() == 5);
}

TEST_CASE("Session: visionzip with dominant + contextual >= tokens per tile equals the full cache",
          "[session][eviction][visionzip]") {
  const VlmModel& m = smolvlm();
  Session full(m.text, m.encoder, {});
  const std::vector<int32_t> want = converse(full, -1);
  for (const auto& dc : std::vector<std::pair<int, int>>{{16, 0}, {10, 6}, {4, 40}}) {
    CAPTURE(dc.first, dc.second);
    Session s(m.text, m.encoder, {});
    s.set_eviction(visionzip(dc.first, dc.second), nullptr);
    REQUIRE(converse(s, -1) == want);
    REQUIRE(s.ids() == full.ids());
    REQUIRE(s.evictor()->trace().token_merges.empty());
    REQUIRE(s.evictor()->n_events() == 0);
  }
}

TEST_CASE("Session: a rollback under visionzip keeps the earlier turns' merges in the fresh trace",
          "[session][eviction][visionzip][errors]") {
  const VlmModel& m = smolvlm();
  std::atomic<bool> cancel{false};
  auto enc = std::make_shared<CancelAfterEncoding>(m.encoder, &cancel);
  SessionOptions o;
  o.prefill_chunk = 8;  // many chunks: the cancel lands mid-prefill (the cache is rebuilt)
  Session s(m.text, enc, o);
  s.set_eviction(visionzip(2, 2), nullptr);
  s.add_user_turn(turns()[0]);
  s.generate(params());
  const std::vector<TokenMerge> merges = s.evictor()->trace().token_merges;
  REQUIRE(merges.size() == 5);
  const std::vector<int32_t> ids = s.ids();
  enc->m_armed = true;
  REQUIRE_THROWS_WITH(s.add_user_turn(turns()[1], &cancel), Catch::Contains("cancelled"));
  REQUIRE(s.ids() == ids);
  s.catch_up();
  REQUIRE(s.cache().bookkeeping().n_tokens() == static_cast<int32_t>(ids.size()));
  REQUIRE((s.evictor()->trace().token_merges == merges));
  enc->m_armed = false;
  cancel = false;
  s.add_user_turn(turns()[1]);
  REQUIRE(s.evictor()->trace().token_merges.size() == 10);
}
