// Eviction on the real model path (TextRunner + KvCache + Evictor): the budget and invariants hold
// after every compression, peaks stay bounded, a budget >= context changes nothing (tokens and
// logits bit-identical to the full cache) for every policy, and gate policies refuse a model
// without gates before any work.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "test_util.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

// Hand-set "gates": log β = -0.2·|x_0..x_{H-1}| - 0.01 from the post-norm hidden state, so values
// differ per token, head and layer; layer 1 head 0 never forgets (log β = 0).
class FixedScorer final : public EntryScorer {
 public:
  explicit FixedScorer(int64_t n_kv) : m_n_kv(n_kv) {}
  at::Tensor log_beta(int64_t il, const at::Tensor& x) const override {
    at::Tensor lb = (x.narrow(1, il, m_n_kv).abs() * -0.2 - 0.01).contiguous();
    if (il == 1) lb.select(1, 0).zero_();
    return lb;
  }

 private:
  int64_t m_n_kv;
};

const TextModel& model() {
  static const TextModel m = load_text_model(test::model_dir("llama_gqa"));
  return m;
}

std::vector<int32_t> prompt_ids(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = 5 + (i * 37) % 200;
  return ids;
}

struct Run {
  std::vector<int32_t> tokens;
  std::vector<at::Tensor> logits;  // per step [vocab]
};

// Greedy run of `steps` tokens after `prompt`, checking the cache after every forward.
Run run(const EvictionSettings* settings, const std::vector<int32_t>& prompt, int steps, int chunk,
        std::unique_ptr<Evictor>* keep_evictor = nullptr, KvCache* cache_out = nullptr,
        const std::function<void(const KvCache&, const Evictor*)>& check = {}) {
  const TextModel& m = model();
  const KvGeometry g = kv_geometry_of(m.config, 4);
  KvCache local(g);
  KvCache& cache = cache_out ? *cache_out : local;
  TextRunner runner(m, cache, chunk);
  FixedScorer scorer(m.config.n_kv_head);
  std::unique_ptr<Evictor> evictor;
  if (settings) {
    evictor = std::make_unique<Evictor>(*settings, g);
    runner.set_eviction(evictor.get(), &scorer);
  } else {
    runner.set_eviction(nullptr, &scorer);
  }
  Run r;
  at::Tensor logits = runner.prefill(prompt);
  if (check) check(cache, evictor.get());
  for (int i = 0; i < steps; ++i) {
    r.logits.push_back(logits.clone());
    const int32_t next = static_cast<int32_t>(logits.argmax().item<int64_t>());
    r.tokens.push_back(next);
    logits = runner.step(next);
    if (check) check(cache, evictor.get());
  }
  if (keep_evictor) *keep_evictor = std::move(evictor);
  return r;
}

}  // namespace

TEST_CASE("Budget >= context: every policy gives the full cache's tokens and logits",
          "[eviction][runner]") {
  const auto prompt = prompt_ids(40);
  const int steps = 12, context = 40 + steps;
  const Run full = run(nullptr, prompt, steps, 16);
  for (const auto& name : policy_names()) {
    EvictionSettings s;
    s.policy = name;
    s.slack = 0;
    if (policy_info(name).uses_budget) s.budget_per_head = context;
    if (name == "snapkv" || name == "adakv" || name == "pyramidkv") s.options = {"window=8"};
    if (name == "fastv") s.options = {"layer=0"};
    std::unique_ptr<Evictor> ev;
    const Run r = run(&s, prompt, steps, 16, &ev);
    INFO(name);
    REQUIRE(ev->n_events() == 0);
    REQUIRE(r.tokens == full.tokens);
    for (size_t i = 0; i < r.logits.size(); ++i) REQUIRE(at::equal(r.logits[i], full.logits[i]));
  }
  // The comparison can fail: one entry less than the context evicts and changes the logits.
  EvictionSettings tight;
  tight.policy = "streamingllm";
  tight.slack = 0;
  tight.budget_per_head = context - 8;
  std::unique_ptr<Evictor> ev;
  const Run r = run(&tight, prompt, steps, 16, &ev);
  REQUIRE(ev->n_events() > 0);
  bool differs = false;
  for (size_t i = 0; i < r.logits.size(); ++i)
    differs = differs || !at::equal(r.logits[i], full.logits[i]);
  REQUIRE(differs);
}

TEST_CASE("Every budgeted policy holds its budget and the cache invariants after every compression",
          "[eviction][runner]") {
  const auto prompt = prompt_ids(90);
  const int chunk = 16, slack = 6, m = 20;
  for (const auto& name : policy_names()) {
    if (!policy_info(name).uses_budget) continue;
    EvictionSettings s;
    s.policy = name;
    s.slack = slack;
    s.budget_per_head = m;
    if (name == "snapkv" || name == "adakv" || name == "pyramidkv") s.options = {"window=4"};
    if (name == "dbtrimkv") s.options = {"floor=2", "window=3"};
    const KvGeometry g = kv_geometry_of(model().config, 4);
    const int64_t streams = g.n_streams(), budget = m * streams;
    int64_t last_events = 0;
    bool prefill_done = false;
    auto check = [&](const KvCache& cache, const Evictor* ev) {
      const KvBookkeeping& kv = cache.bookkeeping();
      kv.check_invariants();  // blocks owned once, lengths add up, freed blocks back in the pool
      int64_t sum = 0, blocks = 0;
      for (int il = 0; il < g.n_layer; ++il)
        for (int h = 0; h < g.n_kv_head; ++h) {
          sum += kv.length(il, h);
          blocks += (kv.first_row(il, h) + kv.length(il, h) + g.block_size - 1) / g.block_size;
        }
      REQUIRE(sum == kv.total_entries());
      REQUIRE(blocks == kv.pool().n_used());
      // Between compressions the cache stays within budget + slack (+ the newest token).
      REQUIRE(kv.total_entries() <= budget + (slack + 1) * streams);
      for (int64_t i = last_events; i < ev->n_events(); ++i) {
        const EvictionEvent& e = ev->trace().events[static_cast<size_t>(i)];
        REQUIRE(e.entries_after <= budget);
        REQUIRE(e.entries_before > e.entries_after);
        REQUIRE(e.kept_total().total() == e.entries_after);
        REQUIRE(e.kept_total().total() + e.evicted_total().total() == e.entries_before);
      }
      if (ev->n_events() > last_events) {
        const EvictionEvent& e = ev->trace().events.back();
        if (e.blocks_freed == 0)
          REQUIRE(e.entries_before - e.entries_after < g.block_size * streams);
        if (name == "dbtrimkv") {  // floor and protected window hold
          for (int il = 0; il < g.n_layer; ++il)
            for (int h = 0; h < g.n_kv_head; ++h) {
              REQUIRE(kv.length(il, h) >= 2);
              std::set<int32_t> have;
              for (const auto& en : kv.entries(il, h)) have.insert(en.token_index);
              for (int32_t t = kv.n_tokens() - 3; t < kv.n_tokens(); ++t) REQUIRE(have.count(t));
            }
        }
      }
      last_events = ev->n_events();
      if (!prefill_done) {
        // Chunked prefill: the peak stays within budget + one chunk.
        REQUIRE(ev->peak_entries() <= budget + chunk * streams);
        prefill_done = true;
      }
    };
    INFO(name);
    std::unique_ptr<Evictor> ev;
    run(&s, prompt, 30, chunk, &ev, nullptr, check);
    REQUIRE(ev->n_events() >= 2);
    REQUIRE(ev->peak_entries() <= budget + chunk * streams);
  }
}

TEST_CASE("Whole-prompt eviction compresses once after the prompt (reference behaviour)",
          "[eviction][runner]") {
  const auto prompt = prompt_ids(90);
  EvictionSettings s;
  s.policy = "dbtrimkv";
  s.budget_per_head = 20;
  s.whole_prompt = true;
  std::unique_ptr<Evictor> ev;
  const KvGeometry g = kv_geometry_of(model().config, 4);
  KvCache cache(g);
  run(&s, prompt, 0, 16, &ev, &cache);
  REQUIRE(ev->n_events() == 1);
  REQUIRE(ev->peak_entries() == 90 * g.n_streams());
  REQUIRE(ev->trace().events[0].n_tokens == 90);
  REQUIRE(cache.bookkeeping().total_entries() == 20 * g.n_streams());
  s.whole_prompt = false;
  KvCache cache2(g);
  run(&s, prompt, 0, 16, &ev, &cache2);
  // Chunks end at 16, 32, 36, 36, 36 entries per head (inside the prompt: no slack) and the last
  // at 30 <= 20 + slack 32: four compressions.
  REQUIRE(ev->n_events() == 4);
  REQUIRE(ev->peak_entries() <= (20 + 16) * g.n_streams());
}

TEST_CASE("Gate policies refuse a model without gates before any work",
          "[eviction][runner][errors]") {
  const TextModel& m = model();
  const KvGeometry g = kv_geometry_of(m.config, 4);
  KvCache cache(g);
  TextRunner runner(m, cache, 16);
  for (const char* name : {"dbtrimkv", "trimkv"}) {
    EvictionSettings s;
    s.policy = name;
    s.budget_per_head = 16;
    Evictor ev(s, g);
    REQUIRE_THROWS_WITH(
        runner.set_eviction(&ev, nullptr),
        Contains(std::string("policy ") + name) && Contains("needs retention gates"));
  }
  REQUIRE(cache.bookkeeping().n_tokens() == 0);
  EngineOptions no_gates;
  no_gates.gates = "none";
  auto engine = Engine::load(test::model_dir("llama_gqa"), no_gates);
  EvictionSettings s;
  s.policy = "dbtrimkv";
  s.budget_per_head = 16;
  GenerationParams p;
  p.max_new_tokens = 4;
  REQUIRE_THROWS_WITH(engine->generate({1, 2, 3}, p, s), Contains("needs retention gates"));
  s.policy = "nope";
  REQUIRE_THROWS_WITH(engine->generate({1, 2, 3}, p, s), Contains("unknown eviction policy"));
}

TEST_CASE("Engine::generate reports policy, budget, evictions and per-modality counts",
          "[eviction][runner]") {
  EngineOptions o;
  o.prefill_chunk = 16;
  o.block_size = 4;
  o.gates = "none";
  auto engine = Engine::load(test::model_dir("llama_gqa"), o);
  EvictionSettings s;
  s.policy = "snapkv";
  s.budget_per_head = 24;
  s.slack = 4;
  s.options = {"window=8"};
  GenerationParams p;
  p.max_new_tokens = 20;
  p.stop_at_eos = false;
  const GenerationResult r = engine->generate(prompt_ids(60), p, s);
  const int64_t streams = model().config.n_layer * model().config.n_kv_head;
  REQUIRE(r.policy == "snapkv");
  REQUIRE(r.budget_global == 24 * streams);
  REQUIRE(r.eviction_events >= 2);
  REQUIRE(r.trace);
  REQUIRE(static_cast<int64_t>(r.trace->events.size()) == r.eviction_events);
  REQUIRE(r.kv_entries <= (24 + 4) * streams);
  REQUIRE(r.kv_text_entries == r.kv_entries);
  REQUIRE(r.kv_image_entries == 0);
  REQUIRE(r.peak_kv_entries <= (24 + 16) * streams);
  REQUIRE(r.kv_bytes == r.kv_entries * 2 * model().config.head_dim * 4);
}

TEST_CASE("dbtrimkv threshold mode keeps exactly the entries scoring >= log(alpha)",
          "[eviction][runner]") {
  EvictionSettings s;
  s.policy = "dbtrimkv";
  s.slack = 4;
  s.options = {"threshold=0.3", "lookahead=2"};
  const float log_alpha = std::log(0.3f);
  std::unique_ptr<Evictor> ev;
  KvCache cache(kv_geometry_of(model().config, 4));
  run(&s, prompt_ids(50), 20, 16, &ev, &cache,
      [](const KvCache& c, const Evictor*) { c.bookkeeping().check_invariants(); });
  REQUIRE(ev->n_events() >= 3);  // fires every `slack` new entries per head, no budget
  REQUIRE(ev->budget_global() == -1);
  // A compression now keeps exactly the entries that score >= log(alpha) at the current q.
  const StreamScores before = retention_scores(cache.bookkeeping(), 2);
  int64_t want = 0;
  for (const auto& head : before)
    for (float x : head) want += x >= log_alpha;
  REQUIRE(want < cache.bookkeeping().total_entries());
  ev->compress(cache, "decode");
  REQUIRE(cache.bookkeeping().total_entries() == want);
  for (const auto& head : retention_scores(cache.bookkeeping(), 2))
    for (float x : head) REQUIRE(x >= log_alpha);
}

TEST_CASE("A prefill after decode steps stays within budget + one chunk", "[eviction][runner]") {
  // After decode steps the cache may sit at budget + slack; the next prompt's first chunk
  // compresses before it is appended.
  const TextModel& m = model();
  const KvGeometry g = kv_geometry_of(m.config, 4);
  KvCache cache(g);
  TextRunner runner(m, cache, 16);
  EvictionSettings s;
  s.policy = "streamingllm";
  s.budget_per_head = 20;
  s.slack = 12;
  Evictor ev(s, g);
  runner.set_eviction(&ev, nullptr);
  at::Tensor logits = runner.prefill(prompt_ids(40));
  for (int i = 0; i < 10; ++i) logits = runner.step(static_cast<int32_t>(logits.argmax().item<int64_t>()));
  REQUIRE(cache.bookkeeping().total_entries() > 20 * g.n_streams());  // inside the slack
  runner.prefill(prompt_ids(40));
  REQUIRE(ev.peak_entries() <= (20 + 16) * g.n_streams());
  cache.bookkeeping().check_invariants();
}
