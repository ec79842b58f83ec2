// The system prompt of a conversation (Session::set_system_prompt through ChatEngine): the ids
// equal the chat template's rendering, it opens every fresh conversation and a failed first turn
// keeps nothing of it.
//
// The expected texts are the shipped template (tests/data/vlm/*/chat_template.jinja, SmolVLM's)
// rendered with a system message of one text part, written out here by hand; rendering the
// template with jinja2 gives exactly these strings:
//   System: S<end_of_utterance>\n before the user turn, "<|im_start|>" only before the first.
#include <catch2/catch.hpp>

#include "trimkv/core/error.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {

const char* kSystem = "You answer briefly.";

const VlmModel& smolvlm() {
  static const auto m = load_vlm(test::vlm_model("smolvlm"));
  return *m;
}

std::vector<int32_t> ids_of(const ChatEngine& engine) {
  std::vector<int32_t> ids;
  for (const StreamToken& t : engine.tokens()) ids.push_back(t.id);
  return ids;
}

}  // namespace

TEST_CASE("a system prompt is tokenized as the chat template renders it", "[session][system]") {
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"));
  const Tokenizer& tok = *smolvlm().text.tokenizer;
  engine->set_system_prompt(kSystem);
  REQUIRE(engine->system_prompt() == kSystem);

  SECTION("text-only user turn") {
    engine->add_user_turn("How many stars?", {});
    const std::string rendered =
        "<|im_start|>System: You answer briefly.<end_of_utterance>\nUser: How many stars?<end_of_utterance>\nAssistant:";
    REQUIRE(ids_of(*engine) == tok.encode(rendered));
  }

  SECTION("user turn opening with an image") {
    engine->add_user_turn("<image>What is this?", {test::vlm_image("a.png")});
    const ImageRecord img = engine->state().images.at(0);
    const std::string rendered = "<|im_start|>System: You answer briefly.<end_of_utterance>\nUser:" +
                                 idefics3_image_prompt(img.tile_rows, img.tile_cols,
                                                       engine->vision_info().image_seq_len) +
                                 "What is this?<end_of_utterance>\nAssistant:";
    REQUIRE(ids_of(*engine) == tok.encode(rendered));
    // The system positions are text of message 0; the user turn is message 1.
    const std::vector<StreamToken> tokens = engine->tokens();
    const size_t n_system = tok.encode("<|im_start|>System: You answer briefly.<end_of_utterance>\n").size();
    REQUIRE(tokens.at(0).info.turn == 0);
    REQUIRE(tokens.at(n_system - 1).info.turn == 0);
    REQUIRE(tokens.at(n_system).info.turn == 1);
    REQUIRE(tokens.at(n_system - 1).info.modality == Modality::Text);
  }

  // The transcript says so (Hugging Face messages: system first).
  const std::vector<Message>& t = engine->transcript();
  REQUIRE(t.size() == 2);
  REQUIRE(t[0].role == "system");
  REQUIRE(t[0].content.at(0).text == kSystem);
  REQUIRE(t[1].role == "user");
  REQUIRE(engine->state().turns == 2);
}

TEST_CASE("the system prompt applies from the next fresh conversation", "[session][system]") {
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"));
  const Tokenizer& tok = *smolvlm().text.tokenizer;
  GenerationParams p;
  p.max_new_tokens = 3;
  p.stop_at_eos = false;

  engine->add_user_turn("Hi.", {});
  engine->respond(p);
  const std::vector<int32_t> before = ids_of(*engine);
  // A started conversation keeps its (absent) system message; the next one starts with it.
  engine->set_system_prompt(kSystem);
  engine->add_user_turn("Again.", {});
  const std::vector<int32_t> after = ids_of(*engine);
  REQUIRE(std::equal(before.begin(), before.end(), after.begin()));
  REQUIRE(engine->transcript().front().role == "user");

  engine->reset();
  engine->add_user_turn("Hi.", {});
  REQUIRE(ids_of(*engine) ==
          tok.encode("<|im_start|>System: You answer briefly.<end_of_utterance>\nUser: Hi.<end_of_utterance>\nAssistant:"));
  // The generated answer is message 2 and the conversation continues as usual.
  const GenerationResult r = engine->respond(p);
  REQUIRE(r.tokens.size() == 3);
  REQUIRE(engine->transcript().size() == 3);
  REQUIRE(engine->tokens().back().info.turn == 2);

  // Cleared: the next conversation has none.
  engine->set_system_prompt("");
  engine->reset();
  engine->add_user_turn("Hi.", {});
  REQUIRE(ids_of(*engine) == tok.encode("<|im_start|>User: Hi.<end_of_utterance>\nAssistant:"));
}

TEST_CASE("a first turn that fails keeps nothing of the system turn", "[session][system][errors]") {
  auto engine = ChatEngine::load(test::vlm_model("smolvlm"));
  engine->set_system_prompt(kSystem);
  // Refused while encoding (before the system turn is prefilled).
  REQUIRE_THROWS_AS(engine->add_user_turn("Look.", {test::vlm_image("not_an_image.png")}), Error);
  REQUIRE(engine->tokens().empty());
  REQUIRE(engine->transcript().empty());
  REQUIRE(engine->state().kv_entries == 0);

  // Refused after the system turn went in (the user turn overflows the context): both go.
  std::string too_long;
  for (int i = 0; i < 1100; ++i) too_long += " word";
  REQUIRE_THROWS_WITH(engine->add_user_turn(too_long, {}), Catch::Contains("max_position_embeddings"));
  REQUIRE(engine->tokens().empty());
  REQUIRE(engine->transcript().empty());
  REQUIRE(engine->state().kv_entries == 0);

  // And the conversation then starts normally, system turn first.
  engine->add_user_turn("Look.", {});
  REQUIRE(engine->transcript().size() == 2);
  REQUIRE(engine->transcript().front().role == "system");
}

TEST_CASE("a first turn cancelled during its prefill rolls back its system turn", "[session][system][errors]") {
  std::atomic<bool> cancel{false};
  auto enc = std::make_shared<test::CancelAfterEncoding>(smolvlm().encoder, &cancel);
  SessionOptions o;
  o.prefill_chunk = 4;  // many chunks: the cancel lands mid-prefill
  Session s(smolvlm().text, enc, o);
  s.set_system_prompt(kSystem);
  enc->m_armed = true;
  REQUIRE_THROWS_WITH(s.add_user_turn({ContentPart::text_part("Look.")}, &cancel), Catch::Contains("cancelled"));
  REQUIRE(s.ids().empty());
  REQUIRE(s.cache().bookkeeping().n_tokens() == 0);
  REQUIRE(s.transcript().empty());
  REQUIRE(s.turn() == 0);
  enc->m_armed = false;
  cancel.store(false);
  s.add_user_turn({ContentPart::text_part("Look.")}, &cancel);
  REQUIRE(s.transcript().size() == 2);
  REQUIRE(s.turn() == 2);
  const Tokenizer& tok = *smolvlm().text.tokenizer;
  REQUIRE(s.ids() == tok.encode("<|im_start|>System: You answer briefly.<end_of_utterance>\nUser: Look.<end_of_utterance>\nAssistant:"));
}
