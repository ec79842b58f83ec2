// The eviction trace (JSON round trip, CSV, contents) and snapshots (== the cache's contents).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

class TraceScorer final : public EntryScorer {
 public:
  at::Tensor log_beta(int64_t il, const at::Tensor& x) const override {
    return (x.narrow(1, 0, 2).abs() * -0.3 - 0.02 * static_cast<double>(il + 1)).contiguous();
  }
};

const TextModel& model() {
  static const TextModel m = load_text_model(test::model_dir("llama_gqa"));
  return m;
}

// Runs dbtrimkv over a prompt whose middle is tagged as an image, then `steps` decode steps.
struct Traced {
  KvCache cache;
  std::unique_ptr<Evictor> evictor;
  std::vector<std::vector<std::set<int32_t>>> before_each_event;  // per event: per stream tokens
};

std::unique_ptr<Traced> traced_run(int steps) {
  const TextModel& m = model();
  const KvGeometry g = kv_geometry_of(m.config, 4);
  auto t = std::unique_ptr<Traced>(new Traced{KvCache(g), nullptr, {}});
  EvictionSettings s;
  s.policy = "dbtrimkv";
  s.budget_per_head = 24;
  s.slack = 5;
  s.options = {"lookahead=2", "floor=1"};
  t->evictor = std::make_unique<Evictor>(s, g);
  static const TraceScorer scorer;
  TextRunner runner(m, t->cache, 16);
  runner.set_eviction(t->evictor.get(), &scorer);
  std::vector<int32_t> text1(20), image(30), text2(20);
  for (int i = 0; i < 20; ++i) text1[i] = 3 + i;
  for (int i = 0; i < 30; ++i) image[i] = 50 + i;
  for (int i = 0; i < 20; ++i) text2[i] = 100 + i;
  TokenInfo img;
  img.modality = Modality::Image;
  img.image_id = 0;
  runner.prefill(text1);
  runner.prefill(image, img);
  at::Tensor logits = runner.prefill(text2);
  for (int i = 0; i < steps; ++i)
    logits = runner.step(static_cast<int32_t>(logits.argmax().item<int64_t>()));
  return t;
}

}  // namespace

TEST_CASE("Trace events record kept/evicted per head by modality and the evicted tokens",
          "[trace]") {
  // Replays the trace on a shadow copy of the per-head token sets and compares with the cache.
  auto t = traced_run(25);
  const Trace& trace = t->evictor->trace();
  const KvBookkeeping& kv = t->cache.bookkeeping();
  const KvGeometry& g = kv.geometry();
  REQUIRE(trace.events.size() >= 3);
  REQUIRE(trace.policy == "dbtrimkv");
  REQUIRE(trace.budget_global == 24 * g.n_streams());
  bool image_evicted = false, image_kept = false;
  // Shadow: every token is appended to every head; events remove their evicted tokens.
  std::vector<std::set<int32_t>> shadow(static_cast<size_t>(g.n_streams()));
  int32_t next_token = 0;
  for (const EvictionEvent& e : trace.events) {
    for (; next_token < e.n_tokens; ++next_token)
      for (auto& s : shadow) s.insert(next_token);
    REQUIRE(e.heads.size() == shadow.size());
    for (size_t si = 0; si < shadow.size(); ++si) {
      const HeadEviction& h = e.heads[si];
      REQUIRE(h.kept.total() + h.evicted.total() == static_cast<int64_t>(shadow[si].size()));
      REQUIRE(static_cast<int64_t>(h.evicted_tokens.size()) == h.evicted.total());
      int64_t img_evicted = 0;
      for (int32_t tok : h.evicted_tokens) {
        REQUIRE(shadow[si].count(tok) == 1);
        shadow[si].erase(tok);
        img_evicted += kv.token(tok).modality == Modality::Image;
      }
      REQUIRE(img_evicted == h.evicted.image);
      image_evicted = image_evicted || h.evicted.image > 0;
      image_kept = image_kept || h.kept.image > 0;
    }
  }
  for (; next_token < kv.n_tokens(); ++next_token)
    for (auto& s : shadow) s.insert(next_token);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      std::set<int32_t> have;
      for (const auto& en : kv.entries(il, h)) have.insert(en.token_index);
      REQUIRE(have == shadow[static_cast<size_t>(il * g.n_kv_head + h)]);
    }
  REQUIRE(image_evicted);
  REQUIRE(image_kept);
}

TEST_CASE("Trace JSON round-trips and follows the documented schema", "[trace]") {
  auto t = traced_run(10);
  Trace trace = t->evictor->trace();
  TokenMerge merge;
  merge.image_id = 0;
  merge.first_token = 20;
  merge.n_in = 4;
  merge.n_out = 3;
  merge.dominant = {1, 2};
  merge.assignment = {0, -1, -1, 0};
  trace.token_merges.push_back(merge);
  const std::string text = trace_to_json(trace, 2);
  const Trace back = trace_from_json(text);
  REQUIRE(back == trace);
  REQUIRE(trace_to_json(back) == trace_to_json(trace));
  const nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j["format"] == "trimkv-trace");
  REQUIRE(j["version"] == 1);
  REQUIRE(j["geometry"]["n_layer"] == 2);
  REQUIRE(j["budget"]["per_head"] == 24);
  REQUIRE(j["options"]["floor"] == "1");
  const auto& e0 = j["events"][0];
  for (const char* key : {"index", "kind", "step", "n_tokens", "phase", "entries_before",
                          "entries_after", "blocks_freed", "select_ms", "apply_ms", "heads"})
    REQUIRE(e0.contains(key));
  REQUIRE(e0["heads"][3]["layer"] == 1);
  REQUIRE(e0["heads"][3]["head"] == 1);
  REQUIRE(e0["heads"][0]["kept"].contains("image"));
  // Damaged input fails with a Format error naming the field.
  nlohmann::json bad = j;
  bad["events"][0].erase("heads");
  REQUIRE_THROWS_WITH(trace_from_json(bad.dump()), Contains("events[0]") && Contains("heads"));
  REQUIRE_THROWS_WITH(trace_from_json("{\"format\": \"other\"}"), Contains("not a trimkv trace"));
  REQUIRE_THROWS_WITH(trace_from_json("{"), Contains("does not parse"));
}

TEST_CASE("Per-head CSV has one row per event and head with the modality counts", "[trace]") {
  auto t = traced_run(5);
  const Trace& trace = t->evictor->trace();
  const std::string csv = trace_per_head_csv(trace);
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  REQUIRE(line ==
          "event,step,n_tokens,phase,layer,head,kept_text,kept_image,kept_special,evicted_text,"
          "evicted_image,evicted_special");
  size_t rows = 0;
  while (std::getline(in, line)) {
    const size_t ev = rows / 4, s = rows % 4;
    const EvictionEvent& e = trace.events[ev];
    const HeadEviction& h = e.heads[s];
    std::ostringstream want;
    want << ev << ',' << e.step << ',' << e.n_tokens << ',' << e.phase << ',' << s / 2 << ','
         << s % 2 << ',' << h.kept.text << ',' << h.kept.image << ',' << h.kept.special << ','
         << h.evicted.text << ',' << h.evicted.image << ',' << h.evicted.special;
    REQUIRE(line == want.str());
    ++rows;
  }
  REQUIRE(rows == trace.events.size() * 4);
}

TEST_CASE("A snapshot after N steps matches the cache contents", "[trace][snapshot]") {
  auto t = traced_run(17);
  const KvSnapshot snap = t->evictor->snapshot(t->cache);
  const KvBookkeeping& kv = t->cache.bookkeeping();
  const KvGeometry& g = kv.geometry();
  REQUIRE(snap.n_tokens == kv.n_tokens());
  REQUIRE(snap.step == t->evictor->step());
  REQUIRE(snap.policy == "dbtrimkv");
  REQUIRE(snap.total_entries == kv.total_entries());
  REQUIRE(snap.bytes_held == t->cache.bytes_held());
  REQUIRE(snap.blocks_used == t->cache.n_blocks_used());
  REQUIRE(snap.blocks_free == t->cache.n_blocks_free());
  REQUIRE(snap.blocks_capacity == t->cache.capacity_blocks());
  REQUIRE(snap.peak_blocks_used == t->cache.peak_blocks_used());
  REQUIRE(snap.n_events == t->evictor->n_events());
  PolicyContext ctx;
  ctx.kv = &kv;
  ctx.cache = &t->cache;
  const StreamScores scores = t->evictor->policy().entry_scores(ctx);
  ModalityCounts totals;
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const HeadSnapshot& hs = snap.head(il, h);
      const auto& entries = kv.entries(il, h);
      REQUIRE(hs.entries.size() == entries.size());
      ModalityCounts c;
      for (size_t e = 0; e < entries.size(); ++e) {
        const SnapshotEntry& se = hs.entries[e];
        const TokenInfo& ti = kv.token(entries[e].token_index);
        REQUIRE(se.token_index == entries[e].token_index);
        REQUIRE(se.log_beta == entries[e].log_beta);
        REQUIRE(se.score == scores[static_cast<size_t>(il * g.n_kv_head + h)][e]);
        REQUIRE(se.modality == ti.modality);
        REQUIRE(se.image_id == ti.image_id);
        REQUIRE(se.turn == ti.turn);
        c.add(ti.modality);
      }
      REQUIRE(hs.counts == c);
      totals += c;
      std::set<int32_t> have;
      for (const auto& en : entries) have.insert(en.token_index);
      for (int32_t tok = 0; tok < kv.n_tokens(); ++tok)
        REQUIRE(hs.kept(tok) == (have.count(tok) == 1));
    }
  REQUIRE(snap.totals == totals);
  REQUIRE(snap.totals.image > 0);
  // A value type: a copy handed to another thread stays valid while the cache moves on.
  KvSnapshot copy = snap;
  int64_t counted = 0;
  std::thread th([&] {
    for (const auto& h : copy.heads) counted += static_cast<int64_t>(h.entries.size());
  });
  t->cache.clear();
  th.join();
  REQUIRE(counted == snap.total_entries);
}
