// Perplexity under a KV policy (continuation_score.h): with the full cache the summed -ln p of the
// last tokens equals the one computed from transformers' logits of the whole prompt (the oracle
// fixture), whatever the prefill chunking; a budget that holds everything changes nothing; a small
// one keeps the cache under its budget and moves the score; bad requests are refused.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <atomic>

#include "test_util.h"
#include "trimkv/core/continuation_score.h"
#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;

namespace {

struct Oracle {
  TextModel model;
  std::vector<int32_t> ids;  // the fixture's longest prompt
  at::Tensor logits;         // [n, vocab], transformers
};

const Oracle& oracle() {
  static const Oracle o = [] {
    Oracle x;
    x.model = load_text_model(test::model_dir("llama_gqa"));
    const auto prompts = test::read_json(test::model_dir("llama_gqa") + "/expected.json")["prompts"]
                             .get<std::vector<std::vector<int32_t>>>();
    WeightStore expected = WeightStore::open_file(test::model_dir("llama_gqa") + "/expected.safetensors");
    x.ids = prompts.back();
    x.logits = expected.load({"logits." + std::to_string(prompts.size() - 1)}, {});
    return x;
  }();
  return o;
}

// Sum of -ln softmax(logits[i - 1])[ids[i]] over the last `last` positions (the brute-force reference).
double reference_nll(const Oracle& o, int64_t last) {
  const at::Tensor lp = at::log_softmax(o.logits.to(at::kDouble), 1);
  const int64_t n = static_cast<int64_t>(o.ids.size());
  double nll = 0;
  for (int64_t i = n - last; i < n; ++i) nll -= lp[i - 1][o.ids[static_cast<size_t>(i)]].item<double>();
  return nll;
}

ContinuationScore score(const std::vector<int32_t>& ids, int64_t last, int chunk, const EvictionSettings* settings,
                        KvCache* keep = nullptr) {
  const TextModel& m = oracle().model;
  const KvGeometry g = kv_geometry_of(m.config, 4);
  KvCache local(g);
  KvCache& cache = keep ? *keep : local;
  TextRunner runner(m, cache, chunk);
  std::unique_ptr<Evictor> ev;
  if (settings) {
    ev = std::make_unique<Evictor>(*settings, g);
    runner.set_eviction(ev.get(), nullptr);
  }
  const auto split = ids.end() - last;
  return score_continuation(runner, {ids.begin(), split}, {split, ids.end()});
}

}  // namespace

TEST_CASE("score: full-cache perplexity equals transformers' on the whole prompt", "[perplexity]") {
  const Oracle& o = oracle();
  REQUIRE(o.ids.size() >= 60);
  for (int64_t last : {1, 10, 40}) {
    const double want = reference_nll(o, last);
    for (int chunk : {7, 64}) {
      const ContinuationScore s = score(o.ids, last, chunk, nullptr);
      INFO("last " << last << ", chunk " << chunk);
      CHECK(s.scored_tokens == last);
      CHECK(s.context_tokens == static_cast<int64_t>(o.ids.size()) - last);
      CHECK(s.nll == Approx(want).epsilon(1e-4));
      CHECK(s.perplexity() == Approx(std::exp(want / static_cast<double>(last))).epsilon(1e-4));
      CHECK(s.eviction_events == 0);
    }
  }
}

TEST_CASE("score: a budget holding everything changes nothing; a small one holds and moves the score", "[perplexity]") {
  const Oracle& o = oracle();
  const int64_t n = static_cast<int64_t>(o.ids.size()), last = 30;
  const ContinuationScore full = score(o.ids, last, 16, nullptr);
  EvictionSettings roomy;
  roomy.policy = "streamingllm";
  roomy.budget_per_head = n;
  roomy.slack = 0;
  const ContinuationScore same = score(o.ids, last, 16, &roomy);
  CHECK(same.nll == full.nll);
  CHECK(same.eviction_events == 0);

  EvictionSettings tight = roomy;
  tight.budget_per_head = 12;
  tight.slack = 2;
  const TextModel& m = o.model;
  KvCache cache(kv_geometry_of(m.config, 4));
  const ContinuationScore small = score(o.ids, last, 16, &tight, &cache);
  CHECK(small.eviction_events > 0);
  CHECK(small.nll != full.nll);
  const int64_t heads = m.config.n_layer * m.config.n_kv_head;
  CHECK(small.kv_entries <= (12 + 2) * heads);
  CHECK(small.kv_entries == cache.bookkeeping().total_entries());
  CHECK(small.peak_kv_entries >= small.kv_entries);
}

TEST_CASE("score: bad requests are refused before any work", "[perplexity]") {
  const Oracle& o = oracle();
  const TextModel& m = o.model;
  KvCache cache(kv_geometry_of(m.config, 4));
  TextRunner runner(m, cache, 16);
  CHECK_THROWS_WITH(score_continuation(runner, {}, {5}), Catch::Contains("at least one token of context"));
  CHECK_THROWS_WITH(score_continuation(runner, {5}, {}), Catch::Contains("nothing to score"));
  const std::vector<int32_t> too_long(static_cast<size_t>(m.config.max_position_embeddings), 5);
  CHECK_THROWS_WITH(score_continuation(runner, too_long, {5, 6}), Catch::Contains("position limit"));
  CHECK(runner.n_tokens() == 0);
  std::atomic<bool> cancel{true};
  try {
    score_continuation(runner, {5, 6, 7}, {8, 9}, &cancel);
    FAIL("not cancelled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Cancelled);
  }
}
