// Session: a two-image, two-turn conversation against transformers, incremental prefill, reset,
// cancel, and recovery after bad input.
#include <catch2/catch.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/session.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {

constexpr double kTol = 1e-4;  // see test_idefics3.cpp

const VlmModel& smolvlm() {
  static const auto m = load_vlm(test::vlm_model("smolvlm"));
  return *m;
}

struct Conversation {
  nlohmann::json expected = test::read_json(test::vlm_model("smolvlm") + "/expected.json");
  std::vector<ContentPart> turn1 = {ContentPart::image_part(test::vlm_image("a.png")),
                                    ContentPart::text_part("What is this?")};
  std::string answer = "A small test picture.";
  std::vector<ContentPart> turn2 = {ContentPart::text_part("And this one: "),
                                    ContentPart::image_part(test::vlm_image("alpha.png")),
                                    ContentPart::text_part(" Which is brighter?")};
  std::vector<int32_t> ids() const { return expected["cases"]["conversation"]["input_ids"]; }
  std::vector<int32_t> turn1_ids() const { return expected["cases"]["conversation_turn1"]["input_ids"]; }
};

at::Tensor expected_logits() {
  static const WeightStore ws = WeightStore::open_file(test::vlm_model("smolvlm") + "/expected.safetensors");
  return ws.load({"conversation.logits"}, {});
}

}  // namespace

TEST_CASE("Session: a two-image, two-turn conversation matches transformers' ids and logits",
          "[session][oracle]") {
  Conversation c;
  Session s(smolvlm().text, smolvlm().encoder, {});
  s.add_user_turn(c.turn1);
  REQUIRE(s.ids() == c.turn1_ids());
  const at::Tensor want = expected_logits();
  const int64_t n1 = static_cast<int64_t>(c.turn1_ids().size());
  REQUIRE(test::max_abs_diff(s.pending_logits(), want[n1 - 1]) < kTol);
  s.add_assistant_text(c.answer);
  s.add_user_turn(c.turn2);
  REQUIRE(s.ids() == c.ids());  // only the new turn's tokens were appended
  REQUIRE(s.cache().bookkeeping().n_tokens() == static_cast<int32_t>(c.ids().size()));
  REQUIRE(test::max_abs_diff(s.pending_logits(), want[want.size(0) - 1]) < kTol);
  // Images got consecutive ids and their metadata reached the cache.
  REQUIRE(s.images().size() == 2);
  REQUIRE((s.images()[0].image_id == 0 && s.images()[1].image_id == 1));
  REQUIRE((s.images()[1].tile_rows == 2 && s.images()[1].tile_cols == 2 && s.images()[1].n_tiles == 5));
  int64_t image_tokens[2] = {0, 0};
  for (const TokenInfo& t : s.cache().bookkeeping().tokens())
    if (t.modality == Modality::Image) {
      ++image_tokens[t.image_id];
      REQUIRE(t.turn == (t.image_id == 0 ? 0 : 2));
    }
  REQUIRE((image_tokens[0] == 5 * 16 && image_tokens[1] == 5 * 16));
  // Greedy continuation, as transformers' generate.
  GenerationParams p;
  const auto greedy = c.expected["cases"]["conversation"]["greedy"].get<std::vector<int32_t>>();
  p.max_new_tokens = static_cast<int>(greedy.size());
  p.stop_at_eos = false;
  const GenerationResult r = s.generate(p);
  REQUIRE(r.tokens == greedy);
  REQUIRE(r.kv_image_entries == 2 * 80 * 2 * 2);  // tokens x layers x KV heads
  REQUIRE_FALSE(s.awaiting_answer());
  REQUIRE(s.turn() == 4);
}

TEST_CASE("Session: the answer is closed and the next turn continues the same cache", "[session]") {
  Conversation c;
  Session s(smolvlm().text, smolvlm().encoder, {});
  s.add_user_turn(c.turn1);
  GenerationParams p;
  p.max_new_tokens = 5;
  p.stop_at_eos = false;
  const GenerationResult r = s.generate(p);
  REQUIRE(r.tokens.size() == 5);
  // Stream: turn 1, the 5 answer tokens, then "<end_of_utterance>\n".
  const std::vector<int32_t> close = smolvlm().encoder->close_assistant_turn({{"user", c.turn1}});
  std::vector<int32_t> want = c.turn1_ids();
  want.insert(want.end(), r.tokens.begin(), r.tokens.end());
  want.insert(want.end(), close.begin(), close.end());
  REQUIRE(s.ids() == want);
  REQUIRE(s.cache().bookkeeping().n_tokens() == static_cast<int32_t>(want.size()));
  const size_t before = s.ids().size();
  s.add_user_turn({ContentPart::text_part("Thanks.")});
  REQUIRE(std::equal(want.begin(), want.end(), s.ids().begin()));
  REQUIRE(s.ids().size() > before);
  REQUIRE(s.images().size() == 1);
  REQUIRE_THROWS_WITH(s.add_user_turn({ContentPart::text_part("again")}), Catch::Contains("not been answered"));
}

TEST_CASE("Session: a bad image or cancel leaves the conversation as it was", "[session][errors]") {
  Conversation c;
  Session s(smolvlm().text, smolvlm().encoder, {});
  for (const char* bad : {"not_an_image.png", "empty.png", "truncated.png", "truncated.jpg", "bomb.png"}) {
    CAPTURE(bad);
    REQUIRE_THROWS_WITH(s.add_user_turn({ContentPart::image_part(test::vlm_image(bad)), ContentPart::text_part("hi")}),
                        Catch::Contains(bad));
    REQUIRE(s.ids().empty());
    REQUIRE(s.turn() == 0);
  }
  std::atomic<bool> cancel{true};
  REQUIRE_THROWS_AS(s.add_user_turn(c.turn1, &cancel), Error);
  REQUIRE(s.ids().empty());
  REQUIRE(s.cache().bookkeeping().n_tokens() == 0);
  // The same session still produces exactly the reference conversation.
  s.add_user_turn(c.turn1);
  s.add_assistant_text(c.answer);
  REQUIRE_THROWS(s.add_user_turn({ContentPart::image_part(test::vlm_image("missing.png"))}));
  s.add_user_turn(c.turn2);
  REQUIRE(s.ids() == c.ids());
  const at::Tensor want = expected_logits();
  REQUIRE(test::max_abs_diff(s.pending_logits(), want[want.size(0) - 1]) < kTol);
}

using trimkv::test::CancelAfterEncoding;

TEST_CASE("Session: a prefill cancelled between chunks is rolled back", "[session][errors]") {
  Conversation c;
  std::atomic<bool> cancel{false};
  auto enc = std::make_shared<CancelAfterEncoding>(smolvlm().encoder, &cancel);
  SessionOptions o;
  o.prefill_chunk = 8;  // many chunks: the cancel lands mid-prefill
  Session s(smolvlm().text, enc, o);
  s.add_user_turn(c.turn1, &cancel);
  s.add_assistant_text(c.answer);
  const std::vector<int32_t> before = s.ids();
  enc->m_armed = true;
  REQUIRE_THROWS_WITH(s.add_user_turn(c.turn2, &cancel), Catch::Contains("cancelled"));
  REQUIRE(s.ids() == before);
  REQUIRE(s.images().size() == 1);
  // The stop did not wait for the earlier turns to be prefilled again: that happens next.
  REQUIRE_FALSE(s.cache_current());
  REQUIRE(s.cache().bookkeeping().n_tokens() > static_cast<int32_t>(before.size()));
  enc->m_armed = false;
  cancel.store(false);
  s.add_user_turn(c.turn2, &cancel);
  REQUIRE(s.cache_current());
  REQUIRE(s.ids() == c.ids());
  const at::Tensor want = expected_logits();
  REQUIRE(test::max_abs_diff(s.pending_logits(), want[want.size(0) - 1]) < kTol);
}

TEST_CASE("Session: a checkpoint restores the conversation at once; the cache catches up exactly",
          "[session][errors]") {
  Conversation c;
  SessionOptions o;
  o.prefill_chunk = 8;
  Session s(smolvlm().text, smolvlm().encoder, o);
  s.add_user_turn(c.turn1);
  s.add_assistant_text(c.answer);
  const Session::Checkpoint mark = s.checkpoint();
  const std::vector<int32_t> ids = s.ids();
  const std::vector<Message> transcript = s.transcript();
  // A later request that went further (an edited turn, a replay): then back.
  s.add_user_turn({ContentPart::text_part("Something else entirely, then an answer.")});
  s.generate(GenerationParams{});
  s.restore(mark);
  REQUIRE(s.ids() == ids);
  REQUIRE(s.transcript().size() == transcript.size());
  REQUIRE(s.turn() == 2);
  REQUIRE(s.images().size() == 1);
  REQUIRE_FALSE(s.awaiting_answer());
  REQUIRE_FALSE(s.cache_current());
  // A stopped catch-up leaves it for later; a finished one holds exactly the kept turns.
  std::atomic<bool> stop{true};
  REQUIRE_THROWS_WITH(s.catch_up(&stop), Catch::Contains("cancelled"));
  REQUIRE_FALSE(s.cache_current());
  s.catch_up();
  REQUIRE(s.cache_current());
  REQUIRE(s.cache().bookkeeping().n_tokens() == static_cast<int32_t>(ids.size()));
  s.add_user_turn(c.turn2);
  REQUIRE(s.ids() == c.ids());
  const at::Tensor want = expected_logits();
  REQUIRE(test::max_abs_diff(s.pending_logits(), want[want.size(0) - 1]) < kTol);
  // Restoring a checkpoint of an empty conversation empties the cache at once.
  Session fresh(smolvlm().text, smolvlm().encoder, o);
  const Session::Checkpoint empty = fresh.checkpoint();
  fresh.add_user_turn(c.turn1);
  fresh.restore(empty);
  REQUIRE(fresh.cache_current());
  REQUIRE(fresh.cache().bookkeeping().n_tokens() == 0);
  REQUIRE(fresh.transcript().empty());
}

TEST_CASE("Session: generation can be cancelled and the session reset at any point", "[session]") {
  Conversation c;
  Session s(smolvlm().text, smolvlm().encoder, {});
  s.add_user_turn(c.turn1);
  std::atomic<bool> cancel{false};
  GenerationParams p;
  p.max_new_tokens = 50;
  p.stop_at_eos = false;
  int pieces = 0;
  const GenerationResult r = s.generate(p, [&](const std::string&) {
    if (++pieces == 2) cancel.store(true);
  }, &cancel);
  REQUIRE(r.stop_reason == "cancelled");
  REQUIRE(r.tokens.size() < 50);
  REQUIRE_FALSE(s.awaiting_answer());
  s.add_user_turn({ContentPart::text_part("Go on.")});
  REQUIRE(s.awaiting_answer());
  s.reset();
  REQUIRE((s.ids().empty() && s.images().empty() && s.turn() == 0 && !s.awaiting_answer()));
  REQUIRE(s.cache().bookkeeping().total_entries() == 0);
  s.add_user_turn(c.turn1);
  REQUIRE(s.ids() == c.turn1_ids());
  REQUIRE(test::max_abs_diff(s.pending_logits(), expected_logits()[c.turn1_ids().size() - 1]) < kTol);
}

TEST_CASE("content_from_prompt fills placeholders in order and refuses a count mismatch", "[session]") {
  auto p = content_from_prompt("A <image> and <image>.", {"x.png", "y.png"});
  REQUIRE(p.size() == 5);
  REQUIRE((p[1].kind == ContentPart::Kind::Image && p[1].path == "x.png" && p[3].path == "y.png"));
  REQUIRE(p[4].text == ".");
  p = content_from_prompt("Describe.", {"x.png"});
  REQUIRE((p.size() == 2 && p[0].kind == ContentPart::Kind::Image && p[1].text == "Describe."));
  REQUIRE_THROWS_WITH(content_from_prompt("<image> <image>", {"x.png"}),
                      Catch::Contains("2 <image> placeholders but 1 image was given"));
  REQUIRE_THROWS_WITH(content_from_prompt("<image>", {"x.png", "y.png"}),
                      Catch::Contains("1 <image> placeholder but 2 images were given"));
}

TEST_CASE("ChatEngine: plain-value conversation API with per-modality KV counts", "[session]") {
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"));
  REQUIRE(engine->vision_info().image_seq_len == 16);
  REQUIRE(engine->info().family == "idefics3");
  GenerationParams p;
  p.max_new_tokens = 4;
  p.stop_at_eos = false;
  engine->add_user_turn("What is this?", {test::vlm_image("a.png")});
  std::string streamed;
  const GenerationResult r = engine->respond(p, [&](const std::string& s) { streamed += s; });
  REQUIRE(streamed == r.text);
  ConversationState st = engine->state();
  REQUIRE(st.turns == 2);
  REQUIRE(st.images.size() == 1);
  REQUIRE(st.kv_image_entries == 80 * 2 * 2);
  REQUIRE(st.kv_text_entries + st.kv_image_entries + st.kv_special_entries == st.kv_entries);
  REQUIRE_THROWS_WITH(engine->add_user_turn("<image> <image>", {test::vlm_image("a.png")}),
                      Catch::Contains("placeholders"));
  REQUIRE(engine->state().turns == 2);
  test::ScratchDir dir("transcript");
  engine->save_transcript(dir.file("t.json"));
  const auto j = test::read_json(dir.file("t.json"));
  REQUIRE(j["messages"].size() == 2);
  REQUIRE(j["messages"][0]["content"][0]["type"] == "image");
  // One-shot generation does not touch the conversation.
  const GenerationResult one = engine->generate("Look: <image>", {test::vlm_image("wide.png")}, p);
  REQUIRE(one.prompt_tokens == static_cast<int64_t>(
                                   test::read_json(test::vlm_model("smolvlm") + "/expected.json")["cases"]["wide"]["input_ids"].size()));
  REQUIRE(engine->state().turns == 2);
}
