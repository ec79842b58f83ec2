// The demo model's recipe (vision/demo_training.h) on a tiny budget: training conversations,
// the exported folder loads as an Idefics3 checkpoint, the training layout equals the Session's
// token stream, the training forward (batched tower, dense decoder) equals the Session's cached
// inference, resume continues bit for bit, bad options are refused.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "demo/demo_internal.h"
#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/session.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/demo_training.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;
namespace fs = std::filesystem;

namespace {

DemoTrainOptions tiny(const std::string& out) {
  DemoTrainOptions o;
  o.out_dir = out;
  o.seed = 3;
  o.size.vision_hidden = 32, o.size.vision_layers = 1, o.size.vision_heads = 2, o.size.vision_ffn = 64;
  o.size.text_hidden = 32, o.size.text_layers = 2, o.size.text_heads = 2, o.size.text_kv_heads = 1, o.size.text_ffn = 64;
  o.vision = {3, 4, 2e-3, 1};
  o.chat_short = {2, 2, 2e-3, 3};
  o.chat = {4, 2, 2e-3, 4};
  o.warmup = 1;
  o.tokenizer_conversations = 200;
  o.val_conversations = 3;
  o.val_every = 2;
  o.checkpoint_every = 1;
  o.gate_steps = 2;
  o.gate_batch = 1;
  o.gate_conversations = 3;
  o.threads = 1;
  return o;
}

std::string file_bytes(const std::string& path) { return test::read_bytes(path); }

}  // namespace

TEST_CASE("world training conversations: base turns unchanged, extras and captions", "[demo][world]") {
  world::WorldOptions wo;
  world::TrainingExtras ex;
  ex.max_extra_turns = 5;
  ex.describe_probability = 0.5;
  int described = 0, extra_total = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const world::Conversation base = world::make_conversation(9, world::Split::Train, i, wo);
    const world::Conversation c = world::make_training_conversation(9, i, wo, ex);
    REQUIRE(c.turns.size() >= base.turns.size());
    REQUIRE(c.turns.size() <= base.turns.size() + 5);
    extra_total += static_cast<int>(c.turns.size() - base.turns.size());
    for (size_t k = 0; k < base.turns.size(); ++k) {
      CHECK(c.turns[k].text == base.turns[k].text);
      CHECK(c.turns[k].answer == base.turns[k].answer);
    }
    for (size_t k = base.turns.size(); k < c.turns.size(); ++k) {
      const world::Turn& t = c.turns[k];
      CHECK(t.new_images.empty());
      CHECK(t.text.find("<image>") == std::string::npos);
      if (t.type == "describe") {
        ++described;
        REQUIRE(t.about.size() == 1);
        CHECK(t.text == "Describe image " + std::to_string(t.about[0] + 1) + ".");
        CHECK(t.answer == world::describe_scene(c.scenes[static_cast<size_t>(t.about[0])]));
      }
    }
    // Same arguments, same conversation.
    CHECK(world::make_training_conversation(9, i, wo, ex).turns.back().answer == c.turns.back().answer);
  }
  CHECK(extra_total > 40);
  CHECK(described > 5);
}

TEST_CASE("describe_scene lists objects in reading order with size, colour, shape, quadrant", "[demo][world]") {
  world::Scene s;
  s.image_size = 96;
  world::Object a, b;
  a.shape = world::Shape::Star, a.color = world::Color::Blue, a.size = world::ObjectSize::Large, a.cx = 70, a.cy = 80;
  b.shape = world::Shape::Circle, b.color = world::Color::Red, b.size = world::ObjectSize::Small, b.cx = 20, b.cy = 10;
  s.objects = {a, b};
  CHECK(world::describe_scene(s) == "small red circle top left, large blue star bottom right");
}

TEST_CASE("train-demo end to end on a tiny recipe: folder, layout == Session, forward == Session, resume",
          "[demo][training]") {
  test::ScratchDir dir("demo-train");
  const std::string out = dir.file("model");
  std::vector<std::string> stages;
  std::vector<double> vals;
  const DemoResult r = train_demo(tiny(out), {}, [&](const DemoProgress& p) {
    if (stages.empty() || stages.back() != p.stage) stages.push_back(p.stage);
    if (p.val_accuracy >= 0) vals.push_back(p.val_accuracy);
  });
  REQUIRE_FALSE(r.interrupted);
  CHECK(stages == std::vector<std::string>{"vision", "chat-short", "chat", "gates"});
  CHECK(vals.size() >= 3);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "chat_template.jinja", "processor_config.json", "generation_config.json",
                        "retention_gates.safetensors"})
    CHECK(fs::is_regular_file(fs::path(out) / f));

  // The folder is an Idefics3 checkpoint with the reference tensor names and no training probe.
  const WeightStore ws = WeightStore::open_folder(out);
  CHECK(ws.find("model.vision_model.encoder.layers.0.self_attn.q_proj.weight"));
  CHECK(ws.find("model.text_model.layers.1.mlp.gate_proj.weight"));
  CHECK(ws.find("lm_head.weight"));
  const std::shared_ptr<const VlmModel> vlm = load_vlm(out);
  CHECK(vlm->text.config.hidden_size == 32);

  // A validation conversation: its images as PNG files for the Session.
  const DemoTrainOptions o = tiny(out);
  world::WorldOptions wo;
  const world::WorldFiles files = world::write_world(dir.file("val"), world::Split::Val, o.seed, 2, wo);
  const world::Conversation conv = world::make_conversation(o.seed, world::Split::Val, 1, wo);
  REQUIRE(conv.scenes.size() >= 1);
  const Tokenizer tok = Tokenizer::from_file(out + "/tokenizer.json");
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(out);
  const demo::DemoData data(tok, o.size, proc);
  demo::DemoData::Images images;
  const demo::DemoSequence seq = data.layout(conv, images);

  Session session(vlm->text, vlm->encoder);
  size_t next_image = 0;
  at::Tensor first_logits;
  for (size_t k = 0; k < conv.turns.size(); ++k) {
    std::vector<std::string> imgs;
    for (size_t i = 0; i < conv.turns[k].new_images.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "images/val/%06d_%zu.png", 1, next_image + 1);
      imgs.push_back(dir.file("val") + "/" + name);
      ++next_image;
    }
    session.add_user_turn(content_from_prompt(conv.turns[k].text, imgs));
    if (k == 0) first_logits = session.pending_logits().clone();
    session.add_assistant_text(conv.turns[k].answer);
  }
  std::vector<int64_t> session_ids(session.ids().begin(), session.ids().end());
  CHECK(session_ids == seq.ids);

  // Rendering in memory gives the pixels the Session reads back from the PNG file.
  const at::Tensor pixels = at::cat(images.pixels, 0);
  const RgbImage png = decode_image_file(dir.file("val") + "/images/val/000001_1.png");
  CHECK(test::max_abs_diff(idefics3_preprocess(png, proc).pixels, pixels.narrow(0, 0, 1)) == 0.0);

  // The training forward (batched tower, connector, dense decoder) with the exported weights read
  // back gives the Session's cached-inference logits at the first answer's position.
  {
    at::NoGradGuard no_grad;
    demo::DemoModel model = demo::make_demo_model(out + "/config.json", 99);
    demo::load_demo_weights(model, out + "/model.safetensors");
    const at::Tensor feats = model.vision->connector(model.vision->tower_batched(pixels));
    const at::Tensor logits = demo::sequence_label_logits(model, feats, seq);
    REQUIRE(first_logits.defined());
    CHECK(test::max_abs_diff(logits[0], first_logits) < 1e-4);
    // Export -> import -> export is the identity.
    demo::write_demo_weights(model, dir.file("again.safetensors"));
    CHECK(file_bytes(dir.file("again.safetensors")) == file_bytes(out + "/model.safetensors"));
  }

  // Resume: stop during the chat stage, continue, and end with the same weights.
  const std::string out2 = dir.file("model2");
  std::atomic<bool> stop{false};
  DemoTrainOptions o2 = tiny(out2);
  o2.skip_gates = true;
  const DemoResult r2 = train_demo(o2, {}, [&](const DemoProgress& p) {
    if (p.stage == "chat" && p.step == 2) stop.store(true);
  }, &stop);
  REQUIRE(r2.interrupted);
  CHECK_FALSE(fs::exists(fs::path(out2) / "model.safetensors"));
  o2.resume = true;
  const DemoResult r3 = train_demo(o2, {}, {});
  REQUIRE_FALSE(r3.interrupted);
  CHECK(file_bytes(out2 + "/model.safetensors") == file_bytes(out + "/model.safetensors"));

  // Other options refuse the checkpoint.
  o2.chat.lr = 1e-3;
  CHECK_THROWS_WITH(train_demo(o2, {}, {}), Catch::Contains("other options"));
}

TEST_CASE("train-demo refuses bad options naming them", "[demo][training]") {
  DemoTrainOptions o = tiny("");
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("--out"));
  test::ScratchDir dir("demo-bad");
  o = tiny(dir.file("m"));
  o.chat.batch = 0;
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("chat"));
  o = tiny(dir.file("m"));
  o.size.text_heads = 3;
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("inconsistent"));
}
