// Gate training on a VLM (vision/gate_training_media.h): a two-image, two-turn JSONL line laid
// out with the real chat template (ids equal to the Session's), labels on the answers and their
// end-of-turn token, teacher logits equal to the Session's and transformers', a few training
// steps with frozen tower / connector / decoder, and bad image lines skipped with a warning.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "small_gate_run.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/session.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/gate_training_media.h"
#include "trimkv/vision/train_gates_vlm.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;
namespace fs = std::filesystem;

namespace {

constexpr double kTol = 1e-4;  // see test_idefics3.cpp

std::shared_ptr<const VlmModel> smolvlm() {
  static const std::shared_ptr<const VlmModel> m = load_vlm(test::vlm_model("smolvlm"));
  return m;
}

const char* kAnswer1 = "A small test picture.";
const char* kAnswer2 = "The second one.";

// A dataset folder: images under img/ (paths in the JSONL are relative to it).
struct Data {
  test::ScratchDir dir{"vlm-gates"};
  std::string path = dir.file("data.jsonl");
  Data() {
    fs::create_directories(dir.file("img"));
    fs::copy_file(test::vlm_image("a.png"), dir.file("img/a.png"));
    fs::copy_file(test::vlm_image("alpha.png"), dir.file("img/alpha.png"));
    fs::copy_file(test::vlm_image("not_an_image.png"), dir.file("img/bad.png"));
    std::ofstream out(path);
    out << R"({"images": ["img/a.png", "img/alpha.png"], "turns": [{"text": "<image>What is this?", "answer": "A small test picture."}, {"text": "And this one: <image> Which is brighter?", "answer": "The second one."}]})"
        << "\n"
        << R"({"images": ["img/missing.png"], "turns": [{"text": "<image>Hi", "answer": "Hello."}]})" << "\n"
        << R"({"images": ["img/bad.png"], "turns": [{"text": "<image>Hi", "answer": "Hello."}]})" << "\n"
        << R"({"turns": [{"text": "Hello?", "answer": "Hi there."}]})" << "\n"
        << R"({"images": ["img/a.png"], "turns": [{"text_ids": [1, 2], "answer_ids": [3]}]})" << "\n";
  }
};

// The same conversation through a Session: user turn, answer, user turn (logits checked there),
// answer.
struct SessionRun {
  std::vector<int32_t> ids;  // the whole stream
  std::vector<int32_t> ids_turn1, ids_turn2;  // after each user turn
  at::Tensor logits1, logits2;                // pending logits after each user turn
};
SessionRun run_session() {
  const auto& m = *smolvlm();
  Session s(m.text, m.encoder, {});
  SessionRun r;
  s.add_user_turn(content_from_prompt("<image>What is this?", {test::vlm_image("a.png")}));
  r.ids_turn1 = s.ids();
  r.logits1 = s.pending_logits().clone();
  s.add_assistant_text(kAnswer1);
  s.add_user_turn(content_from_prompt("And this one: <image> Which is brighter?", {test::vlm_image("alpha.png")}));
  r.ids_turn2 = s.ids();
  r.logits2 = s.pending_logits().clone();
  s.add_assistant_text(kAnswer2);
  r.ids = s.ids();
  return r;
}

std::vector<at::Tensor> base_weights(const TextModel& m) {
  std::vector<at::Tensor> out;
  const auto& w = m.decoder->weights();
  for (const at::Tensor* t : {&w.embed, &w.final_norm, &w.lm_head}) out.push_back(t->clone());
  for (const auto& lw : w.layers)
    for (const at::Tensor* t : {&lw.attn_norm, &lw.w_qkv, &lw.b_qkv, &lw.w_o, &lw.b_o, &lw.q_norm, &lw.k_norm,
                                &lw.mlp_norm, &lw.w_gate_up, &lw.w_down})
      out.push_back(t->defined() ? t->clone() : at::Tensor());
  return out;
}

}  // namespace

TEST_CASE("VLM gate training: chat-template layout, labels, teacher logits, bad lines", "[training][vision]") {
  Data d;
  const auto model = smolvlm();
  const VlmSampleEncoder media(model);
  DatasetOptions dopt;
  dopt.max_len = 4096;
  dopt.media = &media;
  const Dataset ds = load_dataset(d.path, model->text, dopt);

  // Lines 2 (missing image), 3 (not an image) and 5 (images with token-id turns) are skipped,
  // each with a warning naming it.
  REQUIRE(ds.samples.size() == 2);
  REQUIRE(ds.warnings.size() == 3);
  CHECK_THAT(ds.warnings[0], Catch::StartsWith("line 2: ") && Catch::Contains("missing.png") && Catch::Contains("skipped"));
  CHECK_THAT(ds.warnings[1], Catch::StartsWith("line 3: ") && Catch::Contains("bad.png"));
  CHECK_THAT(ds.warnings[2], Catch::StartsWith("line 5: ") && Catch::Contains("token ids"));

  // The token stream is the Session's, and its first part transformers' (the fixture).
  const TrainingSample& s = ds.samples[0];
  REQUIRE(s.line == 1);
  const SessionRun sr = run_session();
  REQUIRE(s.ids == sr.ids);
  const auto expected = test::read_json(test::vlm_model("smolvlm") + "/expected.json");
  const std::vector<int32_t> hf_ids = expected["cases"]["conversation"]["input_ids"];
  REQUIRE(sr.ids_turn2 == hf_ids);

  // Labels: the answer tokens and the end-of-turn token after each, nothing else.
  const std::vector<Message> one_turn = {{"user", {ContentPart::text_part("x")}}};
  const std::vector<int32_t> close = model->encoder->close_assistant_turn(one_turn);
  REQUIRE(!close.empty());
  std::vector<uint8_t> want(s.ids.size(), 0);
  auto mark = [&](size_t begin, const std::string& answer) {
    const size_t n = model->encoder->assistant_turn(one_turn, answer).size();
    for (size_t i = begin; i < begin + n - close.size() + 1; ++i) want[i] = 1;
  };
  mark(sr.ids_turn1.size(), kAnswer1);
  mark(sr.ids_turn2.size(), kAnswer2);
  REQUIRE(s.is_label == want);
  std::vector<int32_t> labelled;
  for (size_t i = 0; i < s.ids.size(); ++i)
    if (s.is_label[i]) labelled.push_back(s.ids[i]);
  CHECK(model->text.tokenizer->decode(labelled).find("A small test picture.") != std::string::npos);

  // Media: 2 images x 5 tiles x 16 tokens, frozen features.
  REQUIRE(s.media.defined());
  REQUIRE(s.media.size(0) == 2 * 5 * 16);
  REQUIRE_FALSE(s.media.requires_grad());

  // Teacher logits of the training path (gate_loss's: dense decoder over embed()).
  TrainingSample copy = s;
  const at::Tensor x = media.embed(copy);
  REQUIRE(x.size(0) == static_cast<int64_t>(s.ids.size()));
  at::Tensor logits;
  {
    at::NoGradGuard ng;
    const TextDecoder& dec = *model->text.decoder;
    logits = dec.logits(dec.forward_dense(x, at::arange(x.size(0), at::kLong)));
  }
  const int64_t n1 = static_cast<int64_t>(sr.ids_turn1.size()), n2 = static_cast<int64_t>(sr.ids_turn2.size());
  CHECK(test::max_abs_diff(logits[n1 - 1], sr.logits1) < kTol);
  CHECK(test::max_abs_diff(logits[n2 - 1], sr.logits2) < kTol);
  static const WeightStore hf = WeightStore::open_file(test::vlm_model("smolvlm") + "/expected.safetensors");
  const at::Tensor hf_logits = hf.load({"conversation.logits"}, {});
  REQUIRE(hf_logits.size(0) == n2);
  CHECK(test::max_abs_diff(logits.slice(0, 0, n2), hf_logits) < kTol);

  // The text-only conversation (line 4) got the chat template too, without media.
  const TrainingSample& t = ds.samples[1];
  REQUIRE(t.line == 4);
  REQUIRE_FALSE(t.media.defined());
  Session st(model->text, model->encoder, {});
  st.add_user_turn({ContentPart::text_part("Hello?")});
  st.add_assistant_text("Hi there.");
  REQUIRE(t.ids == st.ids());
}

TEST_CASE("VLM gate training: steps lower the loss, tower / connector / decoder stay bit-identical",
          "[training][vision]") {
  Data d;
  const auto model = smolvlm();
  const VlmSampleEncoder media(model);
  DatasetOptions dopt;
  dopt.max_len = 4096;
  dopt.media = &media;
  const Dataset ds = load_dataset(d.path, model->text, dopt);
  const std::vector<at::Tensor> before = base_weights(model->text);
  std::vector<ImageRecord> rec;
  const std::vector<ContentPart> turn = content_from_prompt("<image>x", {test::vlm_image("alpha.png")});
  const at::Tensor feats_before = model->encoder->user_turn({}, turn, 0, rec, nullptr).image_embeddings.clone();

  TrainOptions o = test::small_gate_run(d.dir.file("g.safetensors"), 4096);
  o.batch = 2;        // both samples every step: the losses compare
  o.steps = 8;
  o.lr = 0.2;
  o.min_lr = 0.02;
  o.lambda = 5.0;
  o.bias_init = 3.0;  // β = σ(3): S^g starts above the budget (from 18 it takes thousands of steps)
  GateTrainer trainer(model->text, ds, o, &media);
  const TrainResult r = trainer.run();
  REQUIRE(r.steps_done == o.steps);
  REQUIRE(r.losses.size() == static_cast<size_t>(o.steps));
  CAPTURE(r.losses);
  CHECK(r.losses.back() < 0.9 * r.losses.front());
  REQUIRE(fs::exists(o.out_path));

  const std::vector<at::Tensor> after = base_weights(model->text);
  REQUIRE(before.size() == after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    REQUIRE(before[i].defined() == after[i].defined());
    if (before[i].defined()) REQUIRE(at::equal(before[i], after[i]));
  }
  const at::Tensor feats_after = model->encoder->user_turn({}, turn, 0, rec, nullptr).image_embeddings;
  REQUIRE(at::equal(feats_before, feats_after));  // tower + connector unchanged
}

TEST_CASE("train_gates_vlm: a VLM folder trains end to end, warnings name the skipped lines",
          "[training][vision]") {
  Data d;
  TrainOptions o = test::small_gate_run(d.dir.file("g.safetensors"), 4096);
  o.model_dir = test::vlm_model("smolvlm");
  o.data_path = d.path;
  o.steps = 2;
  std::vector<std::string> warnings;
  TrainSetup setup;
  const TrainResult r = train_gates_vlm(
      o, [&](const std::string& w) { warnings.push_back(w); }, [&](const TrainSetup& s) { setup = s; });
  REQUIRE(r.steps_done == 2);
  REQUIRE(fs::exists(o.out_path));
  REQUIRE(setup.n_samples == 2);
  REQUIRE(setup.n_lines == 5);
  REQUIRE(warnings.size() == 3);
  CHECK_THAT(warnings[0], Catch::Contains("line 2") && Catch::Contains("missing.png"));
}

TEST_CASE("train_gates_vlm: a text instruct model's conversations follow its chat template, as chat shows them",
          "[training][vision]") {
  test::ScratchDir dir("text-layout");
  const std::string data = dir.file("d.jsonl");
  test::write_text(data,
                   R"({"turns": [{"text": "Where is the key?", "answer": "Under the mat."}, {"text": "And the door?", "answer": "Blue."}]})"
                   "\n"
                   R"({"text": "plain words for the capacity loss"})"
                   "\n");
  // The layout: what a Session holds after the same two turns with the answers given.
  auto model = std::make_shared<VlmModel>();
  model->text = load_text_model(test::model_dir("llama_gqa"), {"f32"});
  model->encoder = make_text_turn_encoder(model->text, {});
  const VlmSampleEncoder layout(model);
  DatasetOptions dopt;
  dopt.media = &layout;
  const Dataset ds = load_dataset(data, model->text, dopt);
  REQUIRE(ds.samples.size() == 2);
  Session session(model->text, model->encoder);
  session.add_user_turn({ContentPart::text_part("Where is the key?")});
  session.add_assistant_text("Under the mat.");
  session.add_user_turn({ContentPart::text_part("And the door?")});
  session.add_assistant_text("Blue.");
  CHECK(ds.samples[0].ids == session.ids());
  CHECK(ds.samples[1].ids == model->text.tokenizer->encode("plain words for the capacity loss", true));

  // train-gates on the folder says so; the same folder without a template keeps the plain layout.
  auto train = [&](const std::string& model_dir) {
    TrainOptions o = test::small_gate_run(dir.file("g.safetensors"), 4096);
    o.model_dir = model_dir;
    o.data_path = data;
    o.steps = 1;
    TrainSetup setup;
    train_gates_vlm(o, {}, [&](const TrainSetup& s) { setup = s; });
    return setup;
  };
  CHECK(train(test::model_dir("llama_gqa")).chat_template);
  const std::string bare = dir.file("bare");
  test::copy_model("llama_gqa", bare);
  fs::remove(fs::path(bare) / "chat_template.jinja");
  CHECK_FALSE(train(bare).chat_template);
}
