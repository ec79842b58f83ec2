// The demo model's recipe (vision/demo_training.h) on a tiny budget: training conversations,
// the exported folder loads as an Idefics3 checkpoint, the training layout equals the Session's
// token stream, the training forward (batched tower, dense decoder) equals the Session's cached
// inference, resume continues bit for bit, bad options are refused.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "demo/demo_internal.h"
#include "test_util.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/error.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/session.h"
#include "trimkv/core/shard_gradients.h"
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
  o.polish = {2, 2, 5e-4, 4};
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

// A training aid drawn after every other weight: `with` holds two text tensors more than `plain`,
// and every weight they share is the same (the recipe's weights either way).
void check_drawn_last(const demo::DemoModel& plain, const demo::DemoModel& with) {
  REQUIRE(with.text_params.size() == plain.text_params.size() + 2);
  for (size_t k = 0; k < plain.text_params.size(); ++k) CHECK(at::equal(plain.text_params[k].tensor, with.text_params[k].tensor));
  for (size_t k = 0; k < plain.vision_params.size(); ++k) CHECK(at::equal(plain.vision_params[k].tensor, with.vision_params[k].tensor));
}

// The first n validation conversations of `seed`'s world, laid out as one batch.
demo::DemoBatch validation_batch(const demo::DemoData& data, uint64_t seed, int64_t n) {
  demo::DemoBatch batch;
  demo::DemoData::Images images;
  for (int64_t i = 0; i < n; ++i)
    batch.seqs.push_back(data.layout(world::make_conversation(seed, world::Split::Val, i, world::WorldOptions{}), images));
  demo::DemoData::finish(images, batch);
  return batch;
}

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
  CHECK(stages == std::vector<std::string>{"vision", "chat-short", "chat", "polish", "gates"});
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
  // The recipe's decoder is a Qwen3 one: per-head q/k norms, trained away from their start.
  CHECK(test::read_json(out + "/config.json")["text_config"]["model_type"] == "qwen3");
  const TensorInfo* q_norm = ws.find("model.text_model.layers.1.self_attn.q_norm.weight");
  REQUIRE(q_norm);
  CHECK(q_norm->shape == std::vector<int64_t>{16});  // head_dim = 32 / 2
  CHECK_FALSE(at::equal(tensor_to_float(*q_norm), at::ones({16})));
  CHECK(ws.find("model.text_model.layers.0.self_attn.k_norm.weight"));
  const std::shared_ptr<const VlmModel> vlm = load_vlm(out);
  CHECK(vlm->text.config.hidden_size == 32);
  CHECK(vlm->text.config.model_type == "qwen3");

  // A validation conversation: its images as PNG files for the Session.
  const DemoTrainOptions o = tiny(out);
  world::WorldOptions wo;
  const world::WorldFiles files = world::write_world(dir.file("val"), world::Split::Val, o.seed, 2, wo);
  const world::Conversation conv = world::make_conversation(o.seed, world::Split::Val, 1, wo);
  REQUIRE(conv.scenes.size() >= 1);
  const Tokenizer tok = Tokenizer::from_file(out + "/tokenizer.json");
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(out);
  const demo::DemoData data(tok, o.size, proc, false, false, 1.0);
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

  // Other options refuse the checkpoint, a Llama decoder's (--no-qk-norm) among them.
  o2.size.qk_norm = false;
  CHECK_THROWS_WITH(train_demo(o2, {}, {}), Catch::Contains("other options"));
  o2.size.qk_norm = true;
  o2.chat.lr = 1e-3;
  CHECK_THROWS_WITH(train_demo(o2, {}, {}), Catch::Contains("other options"));

  // The polish stage run alone from the checkpoint of a run without it (--init-from, the earlier
  // stages at 0 steps) ends with the whole run's weights: it starts from nothing but the weights.
  const std::string before = dir.file("no-polish"), after = dir.file("polish-only");
  DemoTrainOptions o3 = tiny(before);
  o3.polish.steps = 0;
  o3.skip_gates = true;
  REQUIRE_FALSE(train_demo(o3, {}, {}).interrupted);
  CHECK(file_bytes(before + "/model.safetensors") != file_bytes(out + "/model.safetensors"));
  DemoTrainOptions o4 = tiny(after);
  o4.vision.steps = o4.chat_short.steps = o4.chat.steps = 0;
  o4.init_from = before + "/train/checkpoint.safetensors";
  o4.skip_gates = true;
  REQUIRE_FALSE(train_demo(o4, {}, {}).interrupted);
  CHECK(file_bytes(after + "/model.safetensors") == file_bytes(out + "/model.safetensors"));

  // --init-from a model folder (another seed, so its own tokenizer and initial weights would
  // differ): the folder's tokenizer and weights, written back unchanged when no step runs.
  const std::string copy = dir.file("from-folder");
  DemoTrainOptions o5 = tiny(copy);
  o5.seed = 2;
  o5.vision.steps = o5.chat_short.steps = o5.chat.steps = o5.polish.steps = 0;
  o5.init_from = out;
  o5.skip_gates = true;
  REQUIRE_FALSE(train_demo(o5, {}, {}).interrupted);
  CHECK(file_bytes(copy + "/tokenizer.json") == file_bytes(out + "/tokenizer.json"));
  CHECK(file_bytes(copy + "/model.safetensors") == file_bytes(out + "/model.safetensors"));
  o5.out_dir = dir.file("from-nothing");
  o5.init_from = dir.file("no-such-model");
  CHECK_THROWS_WITH(train_demo(o5, {}, {}), Catch::Contains("no-such-model"));
}

TEST_CASE("train-demo --average-last: the last steps' mean weights, the same after a resume inside the window",
          "[demo][training]") {
  test::ScratchDir dir("demo-average");
  // The stages before the polish once; the polish alone from their checkpoint three times.
  DemoTrainOptions pre = tiny(dir.file("pre"));
  pre.polish.steps = 0;
  pre.skip_gates = true;
  REQUIRE_FALSE(train_demo(pre, {}, {}).interrupted);
  auto polish_only = [&](const std::string& name, int64_t average_last) {
    DemoTrainOptions o = tiny(dir.file(name));
    o.polish.steps = 3;
    o.polish.lr = 5e-3;  // the last step at the cosine's floor still moves the weights visibly
    o.vision.steps = o.chat_short.steps = o.chat.steps = 0;
    o.init_from = dir.file("pre") + "/train/checkpoint.safetensors";
    o.skip_gates = true;
    o.average_last = average_last;
    return o;
  };
  auto params = [&](const std::string& name) {  // a run's checkpoint's weights (its last one: the stage's end)
    std::map<std::string, at::Tensor> out;
    const SafetensorsFile f(dir.file(name) + "/train/checkpoint.safetensors");
    for (const auto& [key, info] : f.tensors())
      if (key.rfind("param.", 0) == 0) out[key] = tensor_to_float(info).clone();
    return out;
  };
  REQUIRE_FALSE(train_demo(polish_only("plain", 0), {}, {}).interrupted);
  const auto last = params("plain");  // after step 3

  // Stopped after the polish's second step: the checkpoint holds that step's weights and the
  // window's first sample; resumed, the run ends with the mean of steps 2 and 3.
  std::atomic<bool> stop{false};
  DemoTrainOptions o = polish_only("averaged", 2);
  std::vector<std::string> messages;
  REQUIRE(train_demo(o, {}, [&](const DemoProgress& p) { if (p.stage == "polish" && p.step == 2) stop.store(true); },
                     &stop).interrupted);
  const auto second = params("averaged");
  {
    const SafetensorsFile f(dir.file("averaged") + "/train/checkpoint.safetensors");
    CHECK(f.tensors().count("average.text.layers.0.q_norm"));
  }
  o.resume = true;
  REQUIRE_FALSE(train_demo(o, [&](const std::string& m) { messages.push_back(m); }, {}).interrupted);
  CHECK(std::count(messages.begin(), messages.end(), "stage polish: the weights are the average of its last 2 steps'") == 1);
  const auto mean = params("averaged");
  REQUIRE(mean.size() == last.size());
  double moved = 0;
  for (const auto& [key, w] : last) {
    REQUIRE(mean.count(key));
    moved = std::max(moved, test::max_abs_diff(w, second.at(key)));
    CHECK(test::max_abs_diff(mean.at(key), (second.at(key) + w) / 2) < 1e-6);
  }
  CHECK(moved > 1e-4);  // the two steps' weights differ: the mean is neither of them

  // The same options without the stop: the same model, byte for byte.
  REQUIRE_FALSE(train_demo(polish_only("straight", 2), {}, {}).interrupted);
  CHECK(file_bytes(dir.file("straight") + "/model.safetensors") == file_bytes(dir.file("averaged") + "/model.safetensors"));
  CHECK(file_bytes(dir.file("straight") + "/model.safetensors") != file_bytes(dir.file("plain") + "/model.safetensors"));
  // A negative window is refused, naming the option.
  o = polish_only("bad", -1);
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("--average-last"));
}

TEST_CASE("demo q/k norms: a Qwen3 decoder whose other weights are the Llama recipe's", "[demo][training]") {
  test::ScratchDir dir("demo-qk");
  const std::string model_dir = default_model_dir();
  const Tokenizer tok = Tokenizer::from_file(model_dir + "/tokenizer.json");
  const demo::SpecialIds ids = demo::SpecialIds::from(tok);
  auto make = [&](bool qk_norm) {
    DemoModelSize z;
    z.qk_norm = qk_norm;
    const std::string path = dir.file(qk_norm ? "qwen3.json" : "llama.json");
    std::ofstream(path) << demo::demo_config_json(z, tok.vocab_size(), ids).dump(2);
    CHECK(test::read_json(path)["text_config"]["model_type"] == (qk_norm ? "qwen3" : "llama"));
    return demo::make_demo_model(path, 4);
  };
  const demo::DemoModel llama = make(false), qwen3 = make(true);
  // Two ones-initialised norms more per layer, no random draw taken from the other weights.
  std::vector<std::string> extra;
  size_t k = 0;
  for (const auto& p : qwen3.text_params) {
    if (k < llama.text_params.size() && p.name == llama.text_params[k].name) {
      CHECK(at::equal(p.tensor, llama.text_params[k].tensor));
      ++k;
    } else {
      extra.push_back(p.name);
      CHECK(at::equal(p.tensor, at::ones({qwen3.tcfg.head_dim})));
      CHECK_FALSE(p.decay);
    }
  }
  CHECK(k == llama.text_params.size());
  CHECK(extra.size() == 2 * static_cast<size_t>(qwen3.tcfg.n_layer));
  CHECK(extra.front() == "text.layers.0.q_norm");
  // Exported under transformers' Qwen3 names, one q and one k norm per layer.
  auto exported_norms = [](const demo::DemoModel& m) {
    int64_t n = 0;
    for (const auto& [name, t] : demo::demo_reference_tensors(m))
      n += name.find("self_attn.q_norm.weight") != std::string::npos || name.find("self_attn.k_norm.weight") != std::string::npos;
    return n;
  };
  CHECK(exported_norms(llama) == 0);
  CHECK(exported_norms(qwen3) == 2 * qwen3.tcfg.n_layer);
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
  o = tiny(dir.file("m"));
  o.shards = 0;
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("--shards"));
  o = tiny(dir.file("m"));
  o.vision.min_objects = 7;  // more than the stage's 6
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("stage vision: min objects must be in 1..6"));
  o = tiny(dir.file("m"));
  o.shape_weight = -1;
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("--shape-weight"));
  o = tiny(dir.file("m"));
  o.size.image_size = 100;  // 12.5 patches of 8: refused before the tokenizer is trained
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("--image-size 100 must be a multiple of 16"));
  o.size.patch_size = 10;
  o.size.image_size = 150;  // 15 patches of 10 a side: not pairs of patches
  CHECK_THROWS_WITH(train_demo(o, {}, {}), Catch::Contains("multiple of 20 (--patch-size 10"));
}

TEST_CASE("demo data parallelism: the parts' shares add up to the batch's losses and gradients", "[demo][training]") {
  const std::string src = default_model_dir();
  demo::DemoModel model = demo::make_demo_model(src + "/config.json", 4, true);  // with the image probe
  const Tokenizer tok = Tokenizer::from_file(src + "/tokenizer.json");
  const demo::DemoData data(tok, DemoModelSize{}, Idefics3ProcessorConfig::from_folder(src), true, true, 1.0);  // number hops, counts on the second KV head
  demo::DemoBatch batch;
  demo::DemoData::Images images;
  world::TrainingExtras extras;
  extras.max_extra_turns = 4;
  for (int64_t i = 0; i < 5; ++i)
    batch.seqs.push_back(data.layout(world::make_training_conversation(6, i, world::WorldOptions{}, extras), images));
  demo::DemoData::finish(images, batch);

  // Every conversation in one part, with its own images; the parts' costs balanced (greedy: the
  // heavier part exceeds the lighter by at most one conversation's cost).
  const std::vector<demo::DemoBatch> parts = data.split(batch, 2);
  REQUIRE(parts.size() == 2);
  size_t seen = 0;
  double costliest = 0;
  std::vector<double> load;
  for (const auto& part : parts) {
    load.push_back(0);
    for (const auto& s : part.seqs) {
      const auto it = std::find_if(batch.seqs.begin(), batch.seqs.end(), [&](const auto& b) { return b.ids == s.ids; });
      REQUIRE(it != batch.seqs.end());
      ++seen;
      load.back() += data.sequence_cost(s);
      costliest = std::max(costliest, data.sequence_cost(s));
      CHECK(test::max_abs_diff(part.pixels.narrow(0, s.first_image, s.n_images),
                               batch.pixels.narrow(0, it->first_image, it->n_images)) == 0.0);
    }
  }
  CHECK(seen == batch.seqs.size());
  CHECK(std::max(load[0], load[1]) - std::min(load[0], load[1]) <= costliest);
  CHECK(data.split(batch, 9).size() == batch.seqs.size());  // no empty parts
  // More tokens or images cost more.
  demo::DemoSequence longer = batch.seqs[0];
  longer.ids.push_back(1);
  CHECK(data.sequence_cost(longer) > data.sequence_cost(batch.seqs[0]));
  ++longer.n_images;
  CHECK(data.sequence_cost(longer) > data.sequence_cost(batch.seqs[0]) + 1e6);

  std::vector<NamedParameter> params = model.text_params;
  params.insert(params.end(), model.vision_params.begin(), model.vision_params.end());
  auto objective = [](const demo::BatchLoss& l) { return l.answer + 0.5 * (l.aux + l.found) + 4.0 * l.attn + l.image; };
  const demo::BatchLoss whole = demo::batch_loss(model, batch, true, false);
  objective(whole).backward();
  std::vector<at::Tensor> expected;
  for (auto& p : params) {
    expected.push_back(p.tensor.grad().defined() ? p.tensor.grad().clone() : at::Tensor());
    p.tensor.mutable_grad() = at::Tensor();
  }
  const demo::LossCounts counts = demo::loss_counts(model, batch, true);
  {  // the objects hop's terms: heads 0 and 1 on every row, head 2 on each count's
    int64_t rows = 0, count_rows = 0;
    for (const auto& seq : batch.seqs) {
      rows += static_cast<int64_t>(seq.hops[2].rows.size());
      for (int8_t g : seq.hops[2].lookup) count_rows += g == demo::kLookupCount;
    }
    REQUIRE(count_rows > 0);
    CHECK(counts.hop_terms[2] == 2 * rows + count_rows);
  }
  for (bool parallel : {true, false}) {
    std::vector<demo::BatchLoss> shares(parts.size());
    shard_gradients(params, static_cast<int>(parts.size()), parallel, [&](int k) {
      shares[static_cast<size_t>(k)] = demo::batch_loss(model, parts[static_cast<size_t>(k)], true, false, &counts);
      return objective(shares[static_cast<size_t>(k)]);
    });
    const demo::BatchLoss sum = demo::add_parts(shares);
    for (const auto& [name, a, b] : std::vector<std::tuple<const char*, at::Tensor, at::Tensor>>{
             {"answer", sum.answer, whole.answer}, {"aux", sum.aux, whole.aux}, {"attn", sum.attn, whole.attn},
             {"found", sum.found, whole.found}, {"image", sum.image, whole.image}}) {
      INFO(name);
      CHECK(std::abs(a.item<double>() - b.item<double>()) < 1e-5 * (1 + std::abs(b.item<double>())));
    }
    CHECK(whole.found.item<double>() > 0);
    CHECK(sum.n_turns == whole.n_turns);
    CHECK(sum.n_correct == whole.n_correct);
    CHECK(sum.n_found == whole.n_found);
    CHECK(sum.n_image == whole.n_image);
    CHECK(sum.n_object_cells == whole.n_object_cells);
    for (size_t h = 0; h < whole.attn_hops.size(); ++h) CHECK(sum.attn_hops[h] == Approx(whole.attn_hops[h]).epsilon(1e-4));
    for (size_t g = 0; g < whole.lookups.size(); ++g) CHECK(sum.lookups[g] == Approx(whole.lookups[g]).epsilon(1e-4));
    for (size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].name << " parallel " << parallel);
      const at::Tensor got = params[i].tensor.grad();
      REQUIRE(got.defined() == expected[i].defined());
      if (got.defined())
        CHECK(test::max_abs_diff(got, expected[i]) < 1e-5 * (1.0 + expected[i].abs().max().item<double>()));
      params[i].tensor.mutable_grad() = at::Tensor();
    }
  }
}

TEST_CASE("demo count weight: the counts' terms of the objects hop scaled, nothing else", "[demo][training]") {
  const std::string src = default_model_dir();
  const demo::DemoModel model = demo::make_demo_model(src + "/config.json", 4);
  const Tokenizer tok = Tokenizer::from_file(src + "/tokenizer.json");
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(src);
  world::TrainingExtras extras;
  extras.max_extra_turns = 4;
  for (bool second_head : {false, true}) {
    INFO("counts on the second KV head: " << second_head);
    auto loss = [&](double weight, demo::LossCounts* counts) {
      const demo::DemoData data(tok, DemoModelSize{}, proc, true, second_head, weight);
      demo::DemoBatch batch;
      demo::DemoData::Images images;
      for (int64_t i = 0; i < 6; ++i)
        batch.seqs.push_back(data.layout(world::make_training_conversation(8, i, world::WorldOptions{}, extras), images));
      demo::DemoData::finish(images, batch);
      for (const auto& seq : batch.seqs)
        for (size_t r = 0; r < seq.hops[2].rows.size(); ++r)
          CHECK(seq.hops[2].row_weights()[r] == (seq.hops[2].lookup[r] == demo::kLookupCount ? weight : 1.0));
      if (counts) *counts = demo::loss_counts(model, batch, true);
      at::NoGradGuard no_grad;
      return demo::batch_loss(model, batch, true, false);
    };
    demo::LossCounts counts;
    const demo::BatchLoss one = loss(1.0, &counts), three = loss(3.0, nullptr);
    REQUIRE(counts.lookup_terms[demo::kLookupCount] > 0);
    CHECK(three.answer.item<double>() == one.answer.item<double>());
    for (int hop : {0, 1, 3}) CHECK(three.attn_hops[hop] == one.attn_hops[hop]);
    CHECK(three.lookups == one.lookups);  // the diagnostics stay unweighted
    // The hop's mean over its terms grows by twice the counts' terms.
    const double counts_part = one.lookups[demo::kLookupCount] *
                               static_cast<double>(counts.lookup_terms[demo::kLookupCount]) /
                               static_cast<double>(counts.hop_terms[2]);
    REQUIRE(counts_part > 0);
    CHECK(three.attn_hops[2] == Approx(one.attn_hops[2] + 2 * counts_part).epsilon(1e-5));
  }
}

TEST_CASE("demo shape weight: the dense targets' shape terms scaled, nothing else", "[demo][training]") {
  const std::string src = default_model_dir();
  const demo::DemoModel model = demo::make_demo_model(src + "/config.json", 4);
  const Tokenizer tok = Tokenizer::from_file(src + "/tokenizer.json");
  const demo::DemoData data(tok, DemoModelSize{}, Idefics3ProcessorConfig::from_folder(src), true, false, 1.0);
  const demo::DemoBatch batch = validation_batch(data, 8, 4);
  at::NoGradGuard no_grad;
  const demo::BatchLoss plain = demo::batch_loss(model, batch, true, false);
  const demo::BatchLoss one = demo::batch_loss(model, batch, true, false, nullptr, 1.0);
  const demo::BatchLoss three = demo::batch_loss(model, batch, true, false, nullptr, 3.0);
  CHECK(at::equal(one.aux, plain.aux));  // weight 1 is the recipe's loss, bit for bit
  CHECK(three.answer.item<double>() == plain.answer.item<double>());
  CHECK(three.c_object_attrs == plain.c_object_attrs);  // the probe's accuracy is not a loss
  // The shape terms, recomputed from the probes: the token's object shape and each patch's.
  const at::Tensor tower = model.vision->tower_batched(batch.pixels);
  const at::Tensor cells = at::linear(model.vision->connector(tower), model.aux_w, model.aux_b)
                               .narrow(-1, demo::kAuxColors, demo::kAuxShapes);
  const at::Tensor patches = at::linear(tower, model.patch_w, model.patch_b).narrow(-1, demo::kAuxColors, demo::kAuxShapes);
  auto ce = [](const at::Tensor& logits, const at::Tensor& t) {
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), t.reshape({-1})).item<double>();
  };
  const double shape = ce(cells, batch.aux_targets.select(-1, 1)) + ce(patches, batch.patch_targets.select(-1, 1));
  REQUIRE(shape > 0.1);
  CHECK(three.aux.item<double>() == Approx(plain.aux.item<double>() + 2 * shape).epsilon(1e-5));
}

TEST_CASE("train-demo in parts: the same weights on one thread or two", "[demo][training]") {
  test::ScratchDir dir("demo-shards");
  std::vector<std::string> bytes;
  for (int threads : {1, 2}) {
    DemoTrainOptions o = tiny(dir.file("t" + std::to_string(threads)));
    o.shards = 2;
    o.threads = threads;
    o.skip_gates = true;
    REQUIRE_FALSE(train_demo(o, {}, {}).interrupted);
    bytes.push_back(file_bytes(o.out_dir + "/model.safetensors"));
  }
  CHECK(bytes[0] == bytes[1]);
}

TEST_CASE("world turns name their subjects: the objects a question is about, recomputed", "[demo][world]") {
  world::WorldOptions wo;
  world::TrainingExtras ex;
  ex.max_extra_turns = 4;
  ex.describe_probability = 0.3;
  std::map<std::string, int> seen;
  for (int64_t i = 0; i < 150; ++i) {
    const world::Conversation c = world::make_training_conversation(5, i, wo, ex);
    for (const world::Turn& t : c.turns) {
      INFO(t.text << " -> " << t.answer);
      if (t.type == "describe") {
        CHECK(t.subjects.empty());
        continue;
      }
      REQUIRE((t.subjects.size() == 1 || t.subjects.size() == 2));
      CHECK((t.subjects.size() == 2) == (t.type.find("left_of") != std::string::npos));
      // Every attribute a subject names is in the question's text.
      for (const world::Subject& s : t.subjects) {
        REQUIRE((s.color >= 0 || s.shape >= 0));
        if (s.color >= 0) CHECK(t.text.find(world::color_name(static_cast<world::Color>(s.color))) != std::string::npos);
        if (s.shape >= 0) CHECK(t.text.find(world::shape_name(static_cast<world::Shape>(s.shape))) != std::string::npos);
      }
      std::vector<const world::Object*> first;
      for (int img : t.about)
        for (const world::Object& o : c.scenes[static_cast<size_t>(img)].objects)
          if (t.subjects[0].matches(o)) first.push_back(&o);
      const std::string base = t.type.rfind("in_image_", 0) == 0 ? t.type.substr(9) : t.type;
      ++seen[base];
      if (base == "color_of_shape") {
        REQUIRE(first.size() == 1);
        CHECK(t.answer == world::color_name(first[0]->color));
      } else if (base == "shape_of_color") {
        REQUIRE(first.size() == 1);
        CHECK(t.answer == world::shape_name(first[0]->shape));
      } else if (base == "count_shape" || base == "count_color" || base == "total_shape") {
        CHECK(t.answer == std::to_string(first.size()));
      } else if (base == "exists") {
        CHECK(t.answer == (first.empty() ? "no" : "yes"));
      } else if (base == "position") {
        CHECK(first.size() == 1);
      } else if (base == "left_of") {
        std::vector<const world::Object*> second;
        for (const world::Object& o : c.scenes[static_cast<size_t>(t.about[0])].objects)
          if (t.subjects[1].matches(o)) second.push_back(&o);
        REQUIRE(first.size() == 1);
        REQUIRE(second.size() == 1);
        CHECK(t.answer == (first[0]->cx < second[0]->cx ? "yes" : "no"));
      }
    }
  }
  for (const char* type : {"color_of_shape", "shape_of_color", "count_shape", "count_color", "exists", "position",
                           "left_of", "more_shape", "total_shape"})
    CHECK(seen[type] > 0);
}

TEST_CASE("demo attention targets: labels, question words, named objects' cells, answer", "[demo][training]") {
  const std::string dir = default_model_dir();
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(dir);
  const DemoModelSize size;
  const demo::DemoData data(tok, size, proc, false, false, 1.0);
  const demo::DemoData counting_twice(tok, size, proc, false, true, 1.0);  // counts on the second KV head too
  const int32_t image_id = tok.token_to_id("<image>");
  world::WorldOptions wo;
  int checked_objects = 0, checked_found = 0, checked_counts = 0, checked_answers = 0;
  for (int64_t i = 0; i < 30; ++i) {
    const world::Conversation conv = world::make_conversation(11, world::Split::Val, i, wo);
    demo::DemoData::Images images;
    const demo::DemoSequence seq = data.layout(conv, images);
    // Counts on the second KV head: the same layout, and query head 2 gets each count's targets
    // (those of heads 0 and 1), no other row's; without the option no row has any.
    {
      demo::DemoData::Images more;
      const demo::DemoSequence twin = counting_twice.layout(conv, more);
      REQUIRE(twin.ids == seq.ids);
      REQUIRE(twin.hops[2].rows == seq.hops[2].rows);
      for (size_t r = 0; r < seq.hops[2].rows.size(); ++r) {
        CHECK(seq.hops[2].head2(r).empty());
        const bool count = seq.hops[2].lookup[r] == demo::kLookupCount;
        CHECK(twin.hops[2].head2(r) == (count ? seq.hops[2].head0[r] : std::vector<int64_t>{}));
      }
    }
    auto text_of = [&](const std::vector<int64_t>& pos) {
      std::vector<int32_t> ids;
      for (int64_t p : pos) ids.push_back(static_cast<int32_t>(seq.ids[static_cast<size_t>(p)]));
      return tok.decode(ids);
    };
    // Hop 0: every visual token once, looking at its own image's label.
    const demo::AttnHop& labels = seq.hops[0];
    REQUIRE(labels.rows == seq.image_pos);
    for (size_t r = 0; r < labels.rows.size(); ++r) {
      const int img = static_cast<int>(r / static_cast<size_t>(data.image_seq_len()));
      CHECK(text_of(labels.head0[r]).find(world::image_label(img)) != std::string::npos);
    }
    // Hop 3 rows: the positions that predict each supervised turn's first answer token; hop 1 and
    // 2 rows: question words naming the subjects, before them.
    const demo::AttnHop& answer = seq.hops[3];
    for (size_t t = 0; t < answer.rows.size(); ++t) {
      CHECK(std::find(seq.label_pos.begin(), seq.label_pos.end(), answer.rows[t]) != seq.label_pos.end());
      for (int64_t w : {answer.head0[t][0], answer.head1[t][0]}) {
        CHECK(w < answer.rows[t]);
        CHECK(std::find(seq.hops[2].rows.begin(), seq.hops[2].rows.end(), w) != seq.hops[2].rows.end());
      }
    }
    REQUIRE(seq.hops[1].rows == seq.hops[2].rows);
    for (size_t r = 0; r < seq.hops[2].rows.size(); ++r) {
      const std::string word = text_of({seq.hops[2].rows[r]});
      INFO(word);
      bool names_attribute = false;
      for (int s = 0; s < world::kNumShapes; ++s)
        names_attribute |= word == std::string(" ") + world::shape_name(static_cast<world::Shape>(s)) ||
                           word == std::string(" ") + world::shape_plural(static_cast<world::Shape>(s));
      for (int c = 0; c < world::kNumColors; ++c)
        names_attribute |= word == std::string(" ") + world::color_name(static_cast<world::Color>(c));
      CHECK(names_attribute);
      // The targets of hop 2 are visual tokens, earlier than the word; a count's also the word
      // itself (last).
      REQUIRE(seq.hops[2].lookup.size() == seq.hops[2].rows.size());
      const int8_t lookup = seq.hops[2].lookup[r];
      std::vector<int64_t> visual = seq.hops[2].head0[r];
      if (lookup == demo::kLookupCount) {
        REQUIRE(!visual.empty());
        CHECK(visual.back() == seq.hops[2].rows[r]);
        visual.pop_back();
      }
      for (int64_t p : visual) {
        CHECK(seq.ids[static_cast<size_t>(p)] == image_id);
        CHECK(p < seq.hops[2].rows[r]);
      }
      checked_objects += static_cast<int>(visual.size());
      // The lookup tag: a shape word finds one object by shape, a colour word by colour; counts
      // every match; whole images for absent objects (then every target is a visual token of the
      // images asked about).
      if (lookup == demo::kLookupCount) {
        // A count's probe target is the number of cells looked at.
        const auto f = std::find(seq.found_rows.begin(), seq.found_rows.end(), seq.hops[2].rows[r]);
        REQUIRE(f != seq.found_rows.end());
        const int64_t count = seq.found[static_cast<size_t>(f - seq.found_rows.begin())][demo::kFoundCount];
        if (count != demo::DemoSequence::kNoTarget) CHECK(count == static_cast<int64_t>(visual.size()));
      } else if (lookup == demo::kLookupImage) {
        CHECK(seq.hops[2].head0[r].size() % static_cast<size_t>(data.image_seq_len()) == 0);
      } else {
        bool shape_word = false;
        for (int sh = 0; sh < world::kNumShapes; ++sh)
          shape_word |= word == std::string(" ") + world::shape_name(static_cast<world::Shape>(sh)) ||
                        word == std::string(" ") + world::shape_plural(static_cast<world::Shape>(sh));
        CHECK(lookup == (shape_word ? demo::kLookupShape : demo::kLookupColor));
      }
    }
    // Counts and comparisons against the answers: the probe's count is the answer of a count,
    // its image the answer of "Which image has more" (turns with subjects, in order, have one
    // answer hop each, at their first subject's word).
    std::vector<const world::Turn*> asked;
    for (const world::Turn& turn : conv.turns)
      if (!turn.subjects.empty()) asked.push_back(&turn);
    REQUIRE(asked.size() == answer.rows.size());
    for (size_t a = 0; a < asked.size(); ++a) {
      const world::Turn& turn = *asked[a];
      const bool count = turn.type.find("count") != std::string::npos || turn.type == "total_shape";
      if (!count && turn.type != "more_shape") continue;
      const auto f = std::find(seq.found_rows.begin(), seq.found_rows.end(), answer.head0[a][0]);
      REQUIRE(f != seq.found_rows.end());
      const auto& t = seq.found[static_cast<size_t>(f - seq.found_rows.begin())];
      INFO(turn.text << " -> " << turn.answer);
      if (count) CHECK(std::to_string(t[demo::kFoundCount]) == turn.answer);
      else CHECK("image " + std::to_string(t[demo::kFoundImage] + 1) == turn.answer);
      ++checked_answers;
    }
    // Lookup probe targets: words that found exactly one object, with the colour and shape the
    // word names (a shape word's shape, a colour word's colour) among them.
    REQUIRE(seq.found_rows.size() == seq.found.size());
    for (size_t f = 0; f < seq.found_rows.size(); ++f) {
      const auto& t = seq.found[f];
      if (t[demo::kFoundColor] == demo::DemoSequence::kNoTarget) {  // a count or a comparison
        CHECK(t[demo::kFoundRow] == demo::DemoSequence::kNoTarget);
        CHECK((t[demo::kFoundCount] == demo::DemoSequence::kNoTarget) != (t[demo::kFoundImage] == demo::DemoSequence::kNoTarget));
        CHECK(t[demo::kFoundCount] <= demo::kMaxCountAnswer);
        CHECK(t[demo::kFoundImage] < seq.n_images);
        ++checked_counts;
        continue;
      }
      const auto it = std::find(seq.hops[2].rows.begin(), seq.hops[2].rows.end(), seq.found_rows[f]);
      REQUIRE(it != seq.hops[2].rows.end());
      const size_t r = static_cast<size_t>(it - seq.hops[2].rows.begin());
      REQUIRE(seq.hops[2].head0[r].size() == 1);
      CHECK(seq.hops[2].lookup[r] != demo::kLookupImage);
      // The cell is the one hop 2 looks at: that visual token's index within its image.
      const auto cell = std::find(seq.image_pos.begin(), seq.image_pos.end(), seq.hops[2].head0[r][0]);
      REQUIRE(cell != seq.image_pos.end());
      const int64_t k = (cell - seq.image_pos.begin()) % data.image_seq_len(), side = 6;
      CHECK(t[demo::kFoundRow] == k / side);
      CHECK(t[demo::kFoundCol] == k % side);
      CHECK(t[demo::kFoundImage] == (cell - seq.image_pos.begin()) / data.image_seq_len());
      const std::string word = text_of({seq.found_rows[f]});
      const std::string shape = world::shape_name(static_cast<world::Shape>(t[demo::kFoundShape]));
      const std::string colour = world::color_name(static_cast<world::Color>(t[demo::kFoundColor]));
      CHECK((word == " " + colour || word.rfind(" " + shape, 0) == 0));
      ++checked_found;
    }
  }
  CHECK(checked_objects > 100);
  CHECK(checked_found > 20);
  CHECK(checked_counts > 5);
  CHECK(checked_answers > 10);
}

TEST_CASE("demo number hops: labels and in-image words look at the image's digit", "[demo][training]") {
  const std::string dir = default_model_dir();
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(dir);
  const demo::DemoData plain(tok, DemoModelSize{}, proc, false, false, 1.0), numbered(tok, DemoModelSize{}, proc, true, false, 1.0);
  int labels = 0, named = 0, unnamed = 0;
  for (int64_t i = 0; i < 30; ++i) {
    const world::Conversation conv = world::make_conversation(11, world::Split::Val, i, world::WorldOptions{});
    demo::DemoData::Images a, b;
    const demo::DemoSequence base = plain.layout(conv, a), seq = numbered.layout(conv, b);
    REQUIRE(seq.ids == base.ids);
    auto text_at = [&](int64_t p) { return tok.decode({static_cast<int32_t>(seq.ids[static_cast<size_t>(p)])}); };
    // Hop 0: head 0 at the digit of the image's own label (inside the whole label, which head 1
    // still looks at); nothing else moves.
    REQUIRE(seq.hops[0].rows == base.hops[0].rows);
    for (size_t r = 0; r < seq.hops[0].rows.size(); ++r) {
      const int img = static_cast<int>(r / static_cast<size_t>(numbered.image_seq_len()));
      REQUIRE(seq.hops[0].head0[r].size() == 1);
      const int64_t digit = seq.hops[0].head0[r][0];
      CHECK(text_at(digit) == std::to_string(img + 1));
      const auto& label = base.hops[0].head0[r];
      CHECK(std::find(label.begin(), label.end(), digit) != label.end());
      CHECK(seq.hops[0].head1[r] == label);
      ++labels;
    }
    // Hop 1: head 1 of a word whose question names images ("In image k", "image a or image b")
    // looks at those digits; other questions keep the whole question.
    REQUIRE(seq.hops[1].rows == base.hops[1].rows);
    CHECK(seq.hops[1].head0 == base.hops[1].head0);
    CHECK(seq.hops[2].head0 == base.hops[2].head0);
    size_t row = 0;
    for (const world::Turn& turn : conv.turns) {
      if (turn.subjects.empty()) continue;
      const size_t last_image = turn.text.rfind("<image>");  // the question: after the turn's images
      std::string lower = last_image == std::string::npos ? turn.text : turn.text.substr(last_image);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const bool names = (turn.type.rfind("in_image_", 0) == 0 || turn.type == "more_shape") &&
                         lower.find("image " + std::to_string(turn.about.front() + 1)) != std::string::npos;
      for (size_t s = 0; s < turn.subjects.size() && s < 2 && row < seq.hops[1].rows.size(); ++s, ++row) {
        INFO(turn.text);
        const auto& h = seq.hops[1].head1[row];
        if (!names) {
          CHECK(h == base.hops[1].head1[row]);
          ++unnamed;
          continue;
        }
        REQUIRE(h.size() == turn.about.size());
        for (size_t k = 0; k < h.size(); ++k) {
          CHECK(h[k] < seq.hops[1].rows[row]);
          CHECK(text_at(h[k]) == std::to_string(turn.about[k] + 1));
        }
        ++named;
      }
    }
    REQUIRE(row == seq.hops[1].rows.size());
  }
  CHECK(labels > 1000);
  CHECK(named > 10);
  CHECK(unnamed > 10);
}

TEST_CASE("demo image probe: rows are every visual token and each 'In image k' subject word", "[demo][training]") {
  const std::string dir = default_model_dir();
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  const demo::DemoData data(tok, DemoModelSize{}, Idefics3ProcessorConfig::from_folder(dir), false, false, 1.0);
  int checked = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const world::Conversation conv = world::make_conversation(11, world::Split::Val, i, world::WorldOptions{});
    demo::DemoData::Images images;
    const demo::DemoSequence seq = data.layout(conv, images);
    REQUIRE(seq.asked_rows.size() == seq.asked_image.size());
    // One row per in-image question that has a subject word (its first), in turn order.
    std::vector<int> asked;
    for (const world::Turn& t : conv.turns)
      if (t.type.rfind("in_image_", 0) == 0) asked.push_back(t.about.front());
    CHECK(seq.asked_image == std::vector<int64_t>(asked.begin(), asked.end()));
    for (size_t r = 0; r < seq.asked_rows.size(); ++r) {
      // The row is the subject word hop 2 looks up from, and the question names the image before it.
      CHECK(std::find(seq.hops[2].rows.begin(), seq.hops[2].rows.end(), seq.asked_rows[r]) != seq.hops[2].rows.end());
      std::vector<int32_t> before;
      for (int64_t p = std::max<int64_t>(0, seq.asked_rows[r] - 12); p < seq.asked_rows[r]; ++p)
        before.push_back(static_cast<int32_t>(seq.ids[static_cast<size_t>(p)]));
      CHECK(tok.decode(before).find("mage " + std::to_string(seq.asked_image[r] + 1)) != std::string::npos);
      ++checked;
    }
  }
  CHECK(checked > 10);

  // The probe is drawn after every other weight (those are the recipe's own either way), and
  // batch_loss reads it over every visual token and asked word, with a gradient.
  demo::DemoModel plain = demo::make_demo_model(dir + "/config.json", 4);
  demo::DemoModel probed = demo::make_demo_model(dir + "/config.json", 4, true);
  check_drawn_last(plain, probed);
  const demo::DemoBatch batch = validation_batch(data, 11, 6);
  int64_t rows = 0;
  for (const auto& s : batch.seqs) rows += static_cast<int64_t>(s.image_pos.size() + s.asked_rows.size());
  CHECK_FALSE(demo::batch_loss(plain, batch, true, false).image.defined());
  const demo::BatchLoss l = demo::batch_loss(probed, batch, true, false);
  REQUIRE(l.image.defined());
  CHECK(l.n_image == rows);
  l.image.backward();
  CHECK(probed.image_w.grad().defined());
  CHECK(probed.image_w.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("demo cell readout: squared error of colour and shape indicators at the objects hop's input", "[demo][training]") {
  const std::string dir = default_model_dir();
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  const demo::DemoData data(tok, DemoModelSize{}, Idefics3ProcessorConfig::from_folder(dir), true, false, 1.0);
  const demo::DemoModel plain = demo::make_demo_model(dir + "/config.json", 4);
  const demo::DemoModel model = demo::make_demo_model(dir + "/config.json", 4, false, true);
  check_drawn_last(plain, model);
  const demo::DemoBatch batch = validation_batch(data, 12, 4);
  CHECK_FALSE(demo::batch_loss(plain, batch, true, false).cell.defined());
  const demo::BatchLoss l = demo::batch_loss(model, batch, true, false);
  REQUIRE(l.cell.defined());

  // By hand: the states layer 1 (the objects hop) attends from, after its RMSNorm, each visual
  // token's 10 readings against 0/1 indicators, summed over outputs, averaged over every visual token.
  double sum = 0;
  int64_t rows = 0, objects = 0;
  at::NoGradGuard no_grad;
  const at::Tensor feats = model.vision->connector(model.vision->tower_batched(batch.pixels));
  const at::Tensor w = model.cell_w.contiguous(), b = model.cell_b.contiguous();
  const int64_t hidden = w.size(1), colors = world::kNumColors;
  for (const demo::DemoSequence& s : batch.seqs) {
    at::Tensor h;
    demo::sequence_label_logits(model, feats, s, [&](int64_t layer, const at::Tensor& x, const at::Tensor&, const at::Tensor&) {
      if (layer == 1) h = x.contiguous();
    });
    REQUIRE(h.defined());
    const at::Tensor t = batch.aux_targets.narrow(0, s.first_image, s.n_images).reshape({-1, 3}).contiguous();
    for (size_t r = 0; r < s.image_pos.size(); ++r) {
      const float* x = h.data_ptr<float>() + s.image_pos[r] * hidden;
      const int64_t color = t[static_cast<int64_t>(r)][0].item<int64_t>(), shape = t[static_cast<int64_t>(r)][1].item<int64_t>();
      objects += color > 0;
      for (int64_t o = 0; o < w.size(0); ++o) {
        double y = b.data_ptr<float>()[o];
        for (int64_t d = 0; d < hidden; ++d) y += static_cast<double>(w.data_ptr<float>()[o * hidden + d]) * x[d];
        const double want = o < colors ? (color == o + 1 ? 1.0 : 0.0) : (shape == o - colors + 1 ? 1.0 : 0.0);
        sum += (y - want) * (y - want);
      }
      ++rows;
    }
  }
  REQUIRE(objects > 0);
  CHECK(l.cell.item<double>() == Approx(sum / static_cast<double>(rows)).epsilon(1e-4));
  // Its gradient reaches the decoder's first layer: the states are what it shapes.
  {
    at::AutoGradMode grad(true);
    demo::batch_loss(model, batch, true, false).cell.backward();
  }
  bool layer0 = false;
  for (const auto& p : model.text_params)
    if (p.name.find("layers.0.") != std::string::npos && p.tensor.grad().defined() && p.tensor.grad().abs().sum().item<double>() > 0)
      layer0 = true;
  CHECK(layer0);
  CHECK(model.cell_w.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("demo attention loss: -log of the causal softmax mass on the targets, or KL to even mass", "[demo][training]") {
  at::manual_seed(3);
  const int64_t n = 9, heads = 4, kv = 2, hd = 8;
  const at::Tensor q = at::randn({n, heads, hd}), k = at::randn({n, kv, hd});
  const std::vector<int64_t> rows = {2, 5, 8};
  const std::vector<std::vector<int64_t>> targets = {{0, 2}, {4}, {1, 3, 7}};
  for (int64_t head : {0, 1, 3}) {
    double expected = 0;
    for (size_t t = 0; t < rows.size(); ++t) {
      // Brute force: the head's attention row over positions 0..rows[t] (scaled dot products).
      std::vector<double> logit;
      for (int64_t j = 0; j <= rows[t]; ++j)
        logit.push_back((q[rows[t]][head] * k[j][head / (heads / kv)]).sum().item<double>() / std::sqrt(8.0));
      double z = 0, mass = 0, kl = 0;
      for (double l : logit) z += std::exp(l);
      for (int64_t j : targets[t]) {
        const double p = std::exp(logit[static_cast<size_t>(j)]) / z;
        mass += p;
        const double u = 1.0 / static_cast<double>(targets[t].size());  // KL(uniform || p)
        kl += u * std::log(u / p);
      }
      expected -= std::log(mass);
      // Spread rows: KL to the uniform distribution over the targets (0 only when even).
      const at::Tensor per_row = demo::attention_mass_rows(q, k, head, rows, targets, {0, 1, 1});
      if (t == 0) CHECK(per_row[0].item<double>() == Approx(-std::log(mass)).epsilon(1e-5));
      else CHECK(per_row[static_cast<int64_t>(t)].item<double>() == Approx(kl).epsilon(1e-5));
      CHECK(per_row[static_cast<int64_t>(t)].item<double>() >= -1e-6);
    }
    CHECK(demo::attention_mass_loss(q, k, head, rows, targets).item<double>() == Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("demo chat stages with a frozen tower give the tower no gradient", "[demo][training]") {
  test::ScratchDir dir("demo-frozen");
  const std::string src = default_model_dir();
  demo::DemoModel model = demo::make_demo_model(src + "/config.json", 4);
  const Tokenizer tok = Tokenizer::from_file(src + "/tokenizer.json");
  const demo::DemoData data(tok, DemoModelSize{}, Idefics3ProcessorConfig::from_folder(src), false, false, 1.0);
  demo::DemoBatch batch;
  demo::DemoData::Images images;
  batch.seqs.push_back(data.layout(world::make_conversation(2, world::Split::Train, 0, world::WorldOptions{}), images));
  demo::DemoData::finish(images, batch);
  for (bool train_tower : {false, true}) {
    for (auto* list : {&model.vision_params, &model.text_params})
      for (auto& p : *list) p.tensor.mutable_grad() = at::Tensor();
    const demo::BatchLoss l = demo::batch_loss(model, batch, true, train_tower);
    (l.answer + l.aux + l.attn).backward();
    for (const auto& p : model.vision_params) {
      INFO(p.name << " train_tower " << train_tower);
      const bool tower = p.name.rfind("vision.", 0) == 0;
      CHECK(p.tensor.grad().defined() == (train_tower || !tower));
    }
    CHECK(model.text_params.front().tensor.grad().defined());
  }
  // What the optimiser gets: no tower when frozen; when not, the tower at its own rate scale.
  const auto is_tower = [](const NamedParameter& p) { return p.name.rfind("vision.", 0) == 0; };
  const auto frozen = demo::stage_params(model, false, true, 0.1);
  CHECK(std::none_of(frozen.begin(), frozen.end(), is_tower));
  CHECK(frozen.size() + std::count_if(model.vision_params.begin(), model.vision_params.end(), is_tower) ==
        model.vision_params.size() + model.text_params.size());
  for (const NamedParameter& p : demo::stage_params(model, false, false, 0.1)) {
    INFO(p.name);
    CHECK(p.lr_scale == (is_tower(p) ? 0.1 : 1.0));
  }
  for (const NamedParameter& p : demo::stage_params(model, true, true, 0.1)) CHECK(p.lr_scale == 1.0);
}
