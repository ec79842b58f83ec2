// Idefics3 / SmolVLM against transformers on tiny random checkpoints (tests/oracle/vlm_fixtures.py):
// preprocessing (slow PIL processor), prompt expansion, tower, connector, logits, greedy.
#include <catch2/catch.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/session.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/vlm.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {

// float32 through a 2-layer tower and decoder: transformers and this runtime agree to ~1e-6;
// 1e-4 leaves room for summation order (oneDNN / OpenBLAS vs MKL).
constexpr double kTol = 1e-4;
// Pixel tensors after normalisation ((x/255 - 0.5) / 0.5): PNG, GIF and BMP are bit-identical
// (Pillow-exact resampling); JPEGs carry the decoder difference (stb_image vs libjpeg), which
// resampling carries through: measured max 4 levels = 0.0314, mean 0.0012 on these fixtures.
constexpr double kPixelTolLossless = 0.0;
constexpr double kPixelTolJpeg = 5 * 2.0 / 255;  // 5 levels after (x/255 - 0.5) / 0.5

nlohmann::json expected(const std::string& model) {
  return test::read_json(test::vlm_model(model) + "/expected.json");
}

const VlmModel& model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<VlmModel>> cache;
  auto& m = cache[name];
  if (!m) m = load_vlm(test::vlm_model(name));
  return *m;
}

std::vector<ContentPart> parts(const nlohmann::json& c) {
  std::vector<std::string> images;
  for (const auto& f : c["images"]) images.push_back(test::vlm_image(f.get<std::string>()));
  return content_from_prompt(c["text"].get<std::string>(), images);
}

// Logits of every position of a raw-prompt case, through the dense decoder path.
at::Tensor dense_logits(const VlmModel& m, const nlohmann::json& c) {
  std::vector<ImageRecord> images;
  const StreamSegment seg = m.encoder->raw_prompt(parts(c), 0, images, nullptr);
  const TextDecoder& dec = *m.text.decoder;
  at::Tensor x = dec.embed(at::tensor(std::vector<int64_t>(seg.ids.begin(), seg.ids.end()), at::kLong));
  std::vector<int64_t> rows;
  for (size_t i = 0; i < seg.infos.size(); ++i)
    if (seg.infos[i].modality == Modality::Image) rows.push_back(static_cast<int64_t>(i));
  if (!rows.empty()) x.index_copy_(0, at::tensor(rows, at::kLong), seg.image_embeddings);
  const int64_t n = x.size(0);
  return dec.logits(dec.forward_dense(x, at::arange(n, at::kLong)));
}

}  // namespace

TEST_CASE("Idefics3 preprocessing matches the slow HF processor: pixels and tile layout",
          "[vision][preprocess][oracle]") {
  const auto meta = test::read_json(test::vlm_dir() + "/preprocess.json");
  Idefics3ProcessorConfig cfg = Idefics3ProcessorConfig::from_folder(test::vlm_model("smolvlm"));
  REQUIRE(cfg.longest_edge == 64);
  REQUIRE(cfg.tile_size == 32);
  REQUIRE(cfg.resample == ResampleFilter::Lanczos);
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    const std::string key = it.key();
    CAPTURE(key);
    const std::string file = key.substr(0, key.rfind('.'));
    cfg.do_image_splitting = key.substr(key.rfind('.') + 1) == "split";
    const Idefics3Tiles t = idefics3_preprocess(decode_image_file(test::vlm_image(file)), cfg);
    REQUIRE(t.rows == it.value()["rows"].get<int>());
    REQUIRE(t.cols == it.value()["cols"].get<int>());
    const at::Tensor want = test::preprocess_expected().load({key}, {});
    REQUIRE(t.pixels.sizes() == want.sizes());
    const double diff = test::max_abs_diff(t.pixels, want);
    const bool jpeg = file.find(".jpg") != std::string::npos;
    if (jpeg) WARN(key << ": max pixel difference " << diff << ", mean " << test::mean_abs_diff(t.pixels, want));
    REQUIRE(diff <= (jpeg ? kPixelTolJpeg : kPixelTolLossless));
  }
}

TEST_CASE("idefics3_image_prompt expands tiles row-major with the global image last", "[vision][prompt]") {
  REQUIRE(idefics3_image_prompt(0, 0, 2) ==
          "<fake_token_around_image><global-img><image><image><fake_token_around_image>");
  REQUIRE(idefics3_image_prompt(1, 2, 1) ==
          "<fake_token_around_image><row_1_col_1><image><fake_token_around_image><row_1_col_2><image>\n"
          "\n<fake_token_around_image><global-img><image><fake_token_around_image>");
}

TEST_CASE("idefics3_tag_tokens gives every position its image, tile and patch (hand-made case)",
          "[vision][prompt]") {
  // ids: text(5) fake row11 img img img img  fake row12 img img img img  nl(7)  nl nl(8)
  //      fake global img img img img fake  text(5)   with image 40, fake 41, global 42, markers 50, 51
  Idefics3TokenIds tok;
  tok.image = 40;
  tok.fake = 41;
  tok.global = 42;
  tok.row_col.assign(6, std::vector<int32_t>(6, -1));
  tok.row_col[0][0] = 50;
  tok.row_col[0][1] = 51;
  const std::vector<int32_t> ids = {5, 41, 50, 40, 40, 40, 40, 41, 51, 40, 40, 40, 40, 7, 8,
                                    41, 42, 40, 40, 40, 40, 41, 5};
  const auto t = idefics3_tag_tokens(ids, tok, {{1, 2}}, 2, 3);
  REQUIRE(t.size() == ids.size());
  REQUIRE(t[0].modality == Modality::Text);
  REQUIRE(t[0].image_id == -1);
  REQUIRE(t.back().modality == Modality::Text);
  REQUIRE(t.back().image_id == -1);
  // Tile 1 (row 1, col 2): its marker pair and 4 patches.
  REQUIRE((t[7].modality == Modality::Special && t[7].tile == 1 && t[7].image_id == 3));
  REQUIRE((t[8].modality == Modality::Special && t[8].tile == 1));
  const int rows[] = {0, 0, 1, 1}, cols[] = {0, 1, 0, 1};
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    REQUIRE(t[3 + k].modality == Modality::Image);
    REQUIRE((t[3 + k].tile == 0 && t[3 + k].patch_row == rows[k] && t[3 + k].patch_col == cols[k]));
    REQUIRE((t[9 + k].tile == 1 && t[9 + k].patch_row == rows[k] && t[9 + k].patch_col == cols[k]));
    REQUIRE((t[17 + k].tile == 2 && t[17 + k].patch_row == rows[k] && t[17 + k].patch_col == cols[k]));
    REQUIRE(t[17 + k].image_id == 3);
  }
  REQUIRE((t[13].modality == Modality::Special && t[14].modality == Modality::Special));  // newlines
  REQUIRE((t[16].modality == Modality::Special && t[16].tile == 2));                      // <global-img>
  REQUIRE((t[21].modality == Modality::Special && t[21].tile == 2 && t[21].image_id == 3));  // closing
  // A tile short of tokens is refused.
  std::vector<int32_t> bad = ids;
  bad.erase(bad.begin() + 3);
  REQUIRE_THROWS_AS(idefics3_tag_tokens(bad, tok, {{1, 2}}, 2, 0), Error);
}

TEST_CASE("SmolVLM and Idefics3 checkpoints load through the family registry", "[vision][oracle]") {
  REQUIRE(is_vlm_checkpoint(test::vlm_model("smolvlm")));
  REQUIRE(is_vlm_checkpoint(test::vlm_model("idefics3")));
  REQUIRE_FALSE(is_vlm_checkpoint(test::model_dir("llama_gqa")));
  const VlmModel& m = model("smolvlm");
  REQUIRE(m.info.family == "idefics3");
  REQUIRE(m.info.model_type == "smolvlm");
  REQUIRE(m.info.image_seq_len == 16);
  REQUIRE(m.info.image_token_id == expected("smolvlm")["image_token_id"].get<int>());
  REQUIRE_THROWS_WITH(load_vlm(test::model_dir("llama_gqa")), Catch::Contains("model_type 'llama'"));
}

TEST_CASE("prompt ids equal the HF processor's for single, split, multi-image and chat prompts",
          "[vision][prompt][oracle]") {
  const VlmModel& m = model("smolvlm");
  const auto e = expected("smolvlm");
  for (const char* name : {"single", "split", "wide", "multi", "conversation_turn1"}) {
    CAPTURE(name);
    const auto& c = e["cases"][name];
    std::vector<ImageRecord> images;
    // The "single" case ran the processor without splitting.
    std::shared_ptr<const TurnEncoder> enc = m.encoder;
    if (!c["splitting"].get<bool>()) {
      REQUIRE(std::string(name) == "single");
      continue;  // checked below with a no-split encoder
    }
    const StreamSegment seg = enc->raw_prompt(parts(c), 0, images, nullptr);
    REQUIRE(seg.ids == c["input_ids"].get<std::vector<int32_t>>());
    REQUIRE(seg.image_embeddings.size(0) == static_cast<int64_t>(std::count(seg.ids.begin(), seg.ids.end(), m.info.image_token_id)));
  }
}

TEST_CASE("the no-splitting path expands one image to the global tile only", "[vision][prompt][oracle]") {
  // Same checkpoint with do_image_splitting = false in its processor settings.
  test::ScratchDir dir("nosplit");
  test::copy_model("../vlm/smolvlm", dir.path());
  auto pc = test::read_json(dir.file("processor_config.json"));
  pc["image_processor"]["do_image_splitting"] = false;
  test::write_text(dir.file("processor_config.json"), pc.dump());
  const auto m = load_vlm(dir.path());
  const auto c = expected("smolvlm")["cases"]["single"];
  std::vector<ImageRecord> images;
  const StreamSegment seg = m->encoder->raw_prompt(parts(c), 0, images, nullptr);
  REQUIRE(seg.ids == c["input_ids"].get<std::vector<int32_t>>());
  REQUIRE((images.size() == 1 && images[0].n_tiles == 1 && images[0].tile_rows == 0));
  // Logits of its last positions.
  const WeightStore want = WeightStore::open_file(test::vlm_model("smolvlm") + "/expected.safetensors");
  const at::Tensor lg = dense_logits(*m, c);
  const at::Tensor w = want.load({"single.logits"}, {});
  REQUIRE(test::max_abs_diff(lg.narrow(0, lg.size(0) - w.size(0), w.size(0)), w) < kTol);
}

TEST_CASE("SigLIP tower and connector match transformers for identical pixel values",
          "[vision][tower][oracle]") {
  // The cases each fixture holds (tests/oracle/vlm_fixtures.py): a missing one is an error, not a skip.
  const std::vector<std::pair<const char*, std::vector<const char*>>> fixtures = {{"smolvlm", {"split", "wide"}},
                                                                                  {"idefics3", {"split"}}};
  for (const auto& fixture : fixtures) {
    const char* name = fixture.first;  // (not a structured binding: the lambda below captures it)
    const std::vector<const char*>& cases = fixture.second;
    const auto& m = model(name);
    const WeightStore want = WeightStore::open_file(test::vlm_model(name) + "/expected.safetensors");
    for (const char* c : cases) {
      CAPTURE(name, c);
      REQUIRE(want.contains(std::string(c) + ".pixel_values"));
      // The family's vision module, reached through a fresh load (the encoder hides it).
      const Idefics3Config cfg = [&] {
        Idefics3Config k = Idefics3Config::from_file(test::vlm_model(name) + "/config.json");
        k.text_hidden_size = m.text.config.hidden_size;
        return k;
      }();
      const auto vision = Idefics3Vision::load(cfg, WeightStore::open_folder(test::vlm_model(name)));
      const at::Tensor px = want.load({std::string(c) + ".pixel_values"}, {});
      const at::Tensor hidden = vision->tower(px);
      REQUIRE(test::max_abs_diff(hidden, want.load({std::string(c) + ".vision"}, {})) < kTol);
      REQUIRE(test::max_abs_diff(vision->connector(hidden), want.load({std::string(c) + ".connector"}, {})) < kTol);
    }
  }
}

TEST_CASE("logits match transformers for split and multi-image prompts (file to logits)",
          "[vision][oracle]") {
  for (auto [name, c] : {std::pair{"smolvlm", "split"}, {"smolvlm", "multi"}, {"idefics3", "split"}}) {
    CAPTURE(name, c);
    const WeightStore want = WeightStore::open_file(test::vlm_model(name) + "/expected.safetensors");
    const at::Tensor lg = dense_logits(model(name), expected(name)["cases"][c]);
    const at::Tensor w = want.load({std::string(c) + ".logits"}, {});
    REQUIRE(test::max_abs_diff(lg.narrow(0, lg.size(0) - w.size(0), w.size(0)), w) < kTol);
  }
}

TEST_CASE("greedy continuation of an image prompt equals transformers'", "[vision][oracle]") {
  for (const char* name : {"smolvlm", "idefics3"}) {
    CAPTURE(name);
    const auto c = expected(name)["cases"]["split"];
    const auto& m = model(name);
    Session s(m.text, m.encoder, {});
    s.add_raw_prompt(parts(c));
    GenerationParams p;
    p.max_new_tokens = static_cast<int>(c["greedy"].size());
    p.stop_at_eos = false;
    REQUIRE(s.generate(p).tokens == c["greedy"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("a checkpoint whose vision config contradicts its connector is refused", "[vision][errors]") {
  test::ScratchDir dir("contradict");
  test::copy_model("../vlm/smolvlm", dir.path());
  auto cfg = test::read_json(dir.file("config.json"));
  cfg["scale_factor"] = 4;  // 8 patches per side shuffle by 4: connector input 32*16, file has 32*4
  test::write_text(dir.file("config.json"), cfg.dump());
  try {
    load_vlm(dir.path());
    FAIL("no error");
  } catch (const Error& e) {
    CAPTURE(e.what());
    REQUIRE(e.kind() == ErrorKind::Shape);
    REQUIRE_THAT(e.what(), Catch::Contains("connector") && Catch::Contains("contradicts") &&
                               Catch::Contains("modality_projection"));
  }
  cfg["scale_factor"] = 3;  // 8 patches per side cannot be shuffled by 3
  test::write_text(dir.file("config.json"), cfg.dump());
  REQUIRE_THROWS_WITH(load_vlm(dir.path()), Catch::Contains("scale_factor 3"));
}

TEST_CASE("a vision-language checkpoint of an unknown type is refused, not loaded as text only", "[vision][errors]") {
  // Its text_config names a decoder we run (llama), but the images would be dropped silently.
  test::ScratchDir dir("unknown-vlm");
  test::copy_model("../vlm/smolvlm", dir.path());
  auto cfg = test::read_json(dir.file("config.json"));
  cfg["model_type"] = "llava";
  cfg["architectures"] = {"LlavaForConditionalGeneration"};
  test::write_text(dir.file("config.json"), cfg.dump());
  REQUIRE_FALSE(ChatEngine::is_vlm_checkpoint(dir.path()));
  try {
    ChatEngine::load(dir.path(), {});
    FAIL("no error");
  } catch (const Error& e) {
    CAPTURE(e.what());
    REQUIRE(e.kind() == ErrorKind::Unsupported);
    REQUIRE_THAT(e.what(), Catch::Contains(dir.path()) && Catch::Contains("'llava'") && Catch::Contains("idefics3") &&
                               Catch::Contains("drop its images"));
  }
  // The core loader (the CLI's text path) refuses it too.
  REQUIRE_THROWS_WITH(load_text_model(dir.path()), Catch::Contains("LlavaForConditionalGeneration") &&
                                                       Catch::Contains("vision_config"));
}

TEST_CASE("vit_block attention statistics and their pooling over the pixel-shuffle groups",
          "[vision][tower][visionzip]") {
  const auto& m = model("smolvlm");
  Idefics3Config cfg = Idefics3Config::from_file(test::vlm_model("smolvlm") + "/config.json");
  cfg.text_hidden_size = m.text.config.hidden_size;
  const WeightStore ws = WeightStore::open_folder(test::vlm_model("smolvlm"));
  const auto vision = Idefics3Vision::load(cfg, ws);
  const VitConfig& v = cfg.vision;
  const std::vector<VitLayerWeights> layers =
      load_vit_layers(ws, "model.vision_model.encoder.layers.",
                      {{VitTensor::ln1_w, "layer_norm1.weight"},     {VitTensor::ln1_b, "layer_norm1.bias"},
                       {VitTensor::q_w, "self_attn.q_proj.weight"},  {VitTensor::q_b, "self_attn.q_proj.bias"},
                       {VitTensor::k_w, "self_attn.k_proj.weight"},  {VitTensor::k_b, "self_attn.k_proj.bias"},
                       {VitTensor::v_w, "self_attn.v_proj.weight"},  {VitTensor::v_b, "self_attn.v_proj.bias"},
                       {VitTensor::o_w, "self_attn.out_proj.weight"}, {VitTensor::o_b, "self_attn.out_proj.bias"},
                       {VitTensor::ln2_w, "layer_norm2.weight"},     {VitTensor::ln2_b, "layer_norm2.bias"},
                       {VitTensor::fc1_w, "mlp.fc1.weight"},         {VitTensor::fc1_b, "mlp.fc1.bias"},
                       {VitTensor::fc2_w, "mlp.fc2.weight"},         {VitTensor::fc2_b, "mlp.fc2.bias"}},
                      v);
  // vit_block: the statistics do not change the output and equal a direct computation.
  at::manual_seed(3);
  const int64_t n = v.patches_per_side() * v.patches_per_side(), d = v.hidden_size, nh = v.n_head,
                hd = v.head_dim();
  const at::Tensor x = at::randn({n, d});
  VitAttentionStats st;
  REQUIRE(test::max_abs_diff(vit_block(x, layers[0], v, &st), vit_block(x, layers[0], v)) == 0.0);
  const at::Tensor h = at::layer_norm(x, {d}, layers[0].ln1_w, layers[0].ln1_b, v.layer_norm_eps);
  const at::Tensor qkv = at::linear(h, layers[0].w_qkv, layers[0].b_qkv);
  const at::Tensor q = qkv.narrow(1, 0, d).reshape({n, nh, hd}).permute({1, 0, 2});
  const at::Tensor k = qkv.narrow(1, d, d).reshape({n, nh, hd}).permute({1, 0, 2});
  const at::Tensor probs = at::softmax(at::matmul(q, k.transpose(1, 2)) / std::sqrt(double(hd)), -1);
  REQUIRE(test::max_abs_diff(st.received, probs.sum(1).mean(0) / double(n)) < 1e-6);
  REQUIRE(test::max_abs_diff(st.keys, k.mean(0)) < 1e-5);
  REQUIRE(st.received.sum().item<double>() == Approx(1.0).epsilon(1e-5));
  // encode_with_attention: the same embeddings as encode(); attention pooled over each output
  // token's s x s patch group (mean), so a tile's pooled attention sums to 1 / s^2.
  const at::Tensor px = at::rand({2, 3, v.image_size, v.image_size}) * 2 - 1;
  const Idefics3Vision::Encoded e = vision->encode_with_attention(px);
  REQUIRE(test::max_abs_diff(e.embeddings, vision->encode(px)) == 0.0);
  const int64_t seq = cfg.image_seq_len(), s = cfg.scale_factor;
  REQUIRE(e.attention.sizes() == at::IntArrayRef({2, seq}));
  REQUIRE(e.keys.sizes() == at::IntArrayRef({2, seq, hd}));
  for (int64_t t = 0; t < 2; ++t)
    REQUIRE(e.attention[t].sum().item<double>() == Approx(1.0 / double(s * s)).epsilon(1e-5));
  // Output token (r, c) pools patches (r*s + dh, c*s + dw) of the last layer.
  std::vector<VitAttentionStats> last;
  vision->tower(px, nullptr, &last);
  REQUIRE(last.size() == 2);
  const int64_t g = v.patches_per_side(), gs = g / s;
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t r = 0; r < gs; ++r)
      for (int64_t c = 0; c < gs; ++c) {
        double a = 0;
        at::Tensor kk = at::zeros({hd});
        for (int64_t dh = 0; dh < s; ++dh)
          for (int64_t dw = 0; dw < s; ++dw) {
            a += last[t].received[(r * s + dh) * g + c * s + dw].item<double>();
            kk += last[t].keys[(r * s + dh) * g + c * s + dw];
          }
        REQUIRE(e.attention[t][r * gs + c].item<double>() == Approx(a / double(s * s)).epsilon(1e-5));
        REQUIRE(test::max_abs_diff(e.keys[t][r * gs + c], kk / double(s * s)) < 1e-5);
      }
}
