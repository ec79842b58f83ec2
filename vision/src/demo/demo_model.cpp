// The demo model's files and trainable weights (demo_internal.h).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "demo/demo_internal.h"
#include "trimkv/core/error.h"
#include "trimkv/core/random_init.h"
#include "trimkv/core/text_family.h"
#include "trimkv/core/weight_store.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace trimkv::vision::demo {

namespace {

constexpr double kInitStd = 0.02;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  TRIMKV_CHECK(out.good(), Io, "cannot write '", path, "'");
  out << text;
  TRIMKV_CHECK(out.good(), Io, "cannot write '", path, "'");
}

at::Tensor leaf(at::Tensor t) { return t.set_requires_grad(true); }

}  // namespace

SpecialIds SpecialIds::from(const Tokenizer& tok) {
  SpecialIds s;
  auto need = [&](const char* token) {
    const int32_t id = tok.token_to_id(token);
    TRIMKV_CHECK(id >= 0, Config, "the demo tokenizer lacks the special token '", token, "'");
    return id;
  };
  s.bos = need("<|im_start|>");
  s.pad = need("<|im_end|>");
  s.eos = need("<end_of_utterance>");
  s.image = need("<image>");
  return s;
}

void check_demo_size(const DemoModelSize& z) {
  TRIMKV_CHECK(z.text_heads > 0 && z.text_kv_heads > 0 && z.vision_heads > 0 && z.text_hidden % z.text_heads == 0 &&
                   z.text_heads % z.text_kv_heads == 0 && z.vision_hidden % z.vision_heads == 0,
               Input, "demo model sizes are inconsistent (heads must divide widths, KV heads the query heads)");
  const int token_side = z.patch_size * z.scale_factor;  // pixels of one visual token's side
  TRIMKV_CHECK(z.patch_size >= 1 && z.scale_factor >= 1 && z.image_size % token_side == 0, Input, "--image-size ",
               z.image_size, " must be a multiple of ", token_side, " (--patch-size ", z.patch_size, " x ",
               z.scale_factor, " patches per visual token's side)");
}

json demo_config_json(const DemoModelSize& z, int64_t vocab_size, const SpecialIds& ids) {
  check_demo_size(z);
  json text = {{"model_type", z.qk_norm ? "qwen3" : "llama"},
               {"vocab_size", vocab_size},
               {"hidden_size", z.text_hidden},
               {"intermediate_size", z.text_ffn},
               {"num_hidden_layers", z.text_layers},
               {"num_attention_heads", z.text_heads},
               {"num_key_value_heads", z.text_kv_heads},
               {"head_dim", z.text_hidden / z.text_heads},
               {"hidden_act", "silu"},
               {"max_position_embeddings", 16384},
               {"rms_norm_eps", 1e-5},
               {"rope_parameters", {{"rope_theta", z.rope_theta}, {"rope_type", "default"}}},
               {"attention_bias", false},
               {"attention_dropout", 0.0},
               {"mlp_bias", false},
               {"pretraining_tp", 1},
               {"initializer_range", kInitStd},
               {"tie_word_embeddings", false},
               {"use_cache", true},
               {"bos_token_id", ids.bos},
               {"eos_token_id", ids.eos},
               {"pad_token_id", ids.pad}};
  if (z.qk_norm) text["use_sliding_window"] = false;
  json vision = {{"model_type", "idefics3_vision"},
                 {"hidden_size", z.vision_hidden},
                 {"intermediate_size", z.vision_ffn},
                 {"num_hidden_layers", z.vision_layers},
                 {"num_attention_heads", z.vision_heads},
                 {"num_channels", 3},
                 {"image_size", z.image_size},
                 {"patch_size", z.patch_size},
                 {"hidden_act", "gelu_pytorch_tanh"},
                 {"layer_norm_eps", 1e-6},
                 {"attention_dropout", 0.0},
                 {"initializer_range", kInitStd}};
  return {{"architectures", {"Idefics3ForConditionalGeneration"}},
          {"model_type", "idefics3"},
          {"dtype", "float32"},
          {"image_token_id", ids.image},
          {"scale_factor", z.scale_factor},
          {"pad_token_id", ids.pad},
          {"tie_word_embeddings", false},
          {"use_cache", true},
          {"text_config", text},
          {"vision_config", vision}};
}

void write_demo_side_files(const std::string& dir, const DemoModelSize& z, const SpecialIds& ids) {
  const int64_t side = z.image_size / z.patch_size / z.scale_factor;
  const json processor = {
      {"image_processor",
       {{"image_processor_type", "Idefics3ImageProcessor"},
        {"do_convert_rgb", true},
        {"do_resize", true},
        {"size", {{"longest_edge", z.image_size}}},
        {"do_image_splitting", false},
        {"max_image_size", {{"longest_edge", z.image_size}}},
        {"resample", 1},
        {"do_rescale", true},
        {"rescale_factor", 1.0 / 255.0},
        {"do_normalize", true},
        {"image_mean", {0.5, 0.5, 0.5}},
        {"image_std", {0.5, 0.5, 0.5}},
        {"do_pad", true}}},
      {"image_seq_len", side * side},
      {"processor_class", "Idefics3Processor"}};
  write_text((fs::path(dir) / "processor_config.json").string(), processor.dump(2) + "\n");
  const json generation = {{"bos_token_id", ids.bos}, {"eos_token_id", ids.eos}, {"pad_token_id", ids.pad}};
  write_text((fs::path(dir) / "generation_config.json").string(), generation.dump(2) + "\n");
  const json tok_cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"processor_class", "Idefics3Processor"},
                        {"bos_token", "<|im_start|>"},
                        {"eos_token", "<end_of_utterance>"},
                        {"pad_token", "<|im_end|>"},
                        {"unk_token", "<|endoftext|>"},
                        {"extra_special_tokens", {"<fake_token_around_image>", "<image>", "<end_of_utterance>"}},
                        {"model_max_length", 16384}};
  write_text((fs::path(dir) / "tokenizer_config.json").string(), tok_cfg.dump(2) + "\n");
  write_text((fs::path(dir) / "chat_template.jinja").string(), kDemoChatTemplate);
}

DemoModel make_demo_model(const std::string& config_path, uint64_t seed, bool image_probe, bool cell_readout) {
  DemoModel m;
  m.tcfg = load_text_config(config_path);
  m.vcfg = Idefics3Config::from_file(config_path);
  m.vcfg.text_hidden_size = m.tcfg.hidden_size;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0xDE30);
  auto normal = [&](std::vector<int64_t> shape) { return leaf(normal_tensor(rng, std::move(shape), kInitStd)); };
  auto zeros = [](int64_t n) { return leaf(at::zeros({n}, at::kFloat)); };
  auto ones = [](int64_t n) { return leaf(at::ones({n}, at::kFloat)); };

  // Vision tower and connector.
  const VitConfig& v = m.vcfg.vision;
  const int64_t d = v.hidden_size, f = v.intermediate_size, p = v.patch_size, g = v.patches_per_side();
  Idefics3Vision::Weights vw;
  vw.patch_w = normal({d, 3 * p * p});
  vw.patch_b = zeros(d);
  vw.pos_embed = normal({g * g, d});
  auto& vp = m.vision_params;
  vp.push_back({"vision.patch_w", vw.patch_w, true});
  vp.push_back({"vision.patch_b", vw.patch_b, false});
  vp.push_back({"vision.pos_embed", vw.pos_embed, false});
  for (int64_t il = 0; il < v.n_layer; ++il) {
    VitLayerWeights w;
    w.ln1_w = ones(d), w.ln1_b = zeros(d);
    w.w_qkv = normal({3 * d, d}), w.b_qkv = zeros(3 * d);
    w.w_o = normal({d, d}), w.b_o = zeros(d);
    w.ln2_w = ones(d), w.ln2_b = zeros(d);
    w.w_fc1 = normal({f, d}), w.b_fc1 = zeros(f);
    w.w_fc2 = normal({d, f}), w.b_fc2 = zeros(d);
    const std::string pre = "vision.layers." + std::to_string(il) + ".";
    for (auto [name, t, decay] : std::vector<std::tuple<const char*, at::Tensor, bool>>{
             {"ln1_w", w.ln1_w, false}, {"ln1_b", w.ln1_b, false}, {"w_qkv", w.w_qkv, true},
             {"b_qkv", w.b_qkv, false}, {"w_o", w.w_o, true},      {"b_o", w.b_o, false},
             {"ln2_w", w.ln2_w, false}, {"ln2_b", w.ln2_b, false}, {"w_fc1", w.w_fc1, true},
             {"b_fc1", w.b_fc1, false}, {"w_fc2", w.w_fc2, true},  {"b_fc2", w.b_fc2, false}})
      vp.push_back({pre + name, t, decay});
    vw.layers.push_back(std::move(w));
  }
  vw.post_ln_w = ones(d);
  vw.post_ln_b = zeros(d);
  const int64_t s2 = m.vcfg.scale_factor * m.vcfg.scale_factor;
  const int64_t h = m.tcfg.hidden_size;
  vw.proj = normal({h, d * s2});
  vp.push_back({"vision.post_ln_w", vw.post_ln_w, false});
  vp.push_back({"vision.post_ln_b", vw.post_ln_b, false});
  vp.push_back({"connector.proj", vw.proj, true});
  m.aux_w = normal({kAuxOutputs, h});
  m.aux_b = zeros(kAuxOutputs);
  vp.push_back({"probe.w", m.aux_w, true});
  vp.push_back({"probe.b", m.aux_b, false});
  m.patch_w = normal({kPatchOutputs, d});
  m.patch_b = zeros(kPatchOutputs);
  vp.push_back({"patch_probe.w", m.patch_w, true});
  vp.push_back({"patch_probe.b", m.patch_b, false});
  const int64_t side = g / m.vcfg.scale_factor;
  m.pos_w = normal({2 * side, h});
  m.pos_b = zeros(2 * side);
  vp.push_back({"position_probe.w", m.pos_w, true});
  vp.push_back({"position_probe.b", m.pos_b, false});
  // The lookup probe reads decoder states: it is trained with the decoder (text_params below).
  int64_t found_outputs = 0;
  for (int64_t c : found_classes(side)) found_outputs += c;
  m.found_w = normal({found_outputs, h});
  m.found_b = zeros(found_outputs);
  m.vision = std::make_shared<Idefics3Vision>(m.vcfg, vw);

  // Text decoder (Llama, or Qwen3 with per-head q/k norms).
  const TextConfig& t = m.tcfg;
  const int64_t hd = t.head_dim, nq = t.n_head * hd, nkv = t.n_kv_head * hd;
  const TextFamily& family = find_text_family(t.model_type, config_path);
  bool qk_norm = false;  // a family whose layers norm queries and keys (Qwen3)
  for (const auto& spec : family.layer_tensors) qk_norm = qk_norm || spec.role == LayerTensor::q_norm;
  DecoderWeights dw;
  dw.embed = normal({t.vocab_size, h});
  auto& tp = m.text_params;
  tp.push_back({"text.embed", dw.embed, false});
  for (int64_t il = 0; il < t.n_layer; ++il) {
    DecoderLayerWeights w;
    w.attn_norm = ones(h);
    w.w_qkv = normal({nq + 2 * nkv, h});
    w.w_o = normal({h, nq});
    w.mlp_norm = ones(h);
    w.w_gate_up = normal({2 * t.intermediate_size, h});
    w.w_down = normal({h, t.intermediate_size});
    const std::string pre = "text.layers." + std::to_string(il) + ".";
    tp.push_back({pre + "attn_norm", w.attn_norm, false});
    tp.push_back({pre + "w_qkv", w.w_qkv, true});
    tp.push_back({pre + "w_o", w.w_o, true});
    if (qk_norm) {
      w.q_norm = ones(hd);
      w.k_norm = ones(hd);
      tp.push_back({pre + "q_norm", w.q_norm, false});
      tp.push_back({pre + "k_norm", w.k_norm, false});
    }
    tp.push_back({pre + "mlp_norm", w.mlp_norm, false});
    tp.push_back({pre + "w_gate_up", w.w_gate_up, true});
    tp.push_back({pre + "w_down", w.w_down, true});
    dw.layers.push_back(std::move(w));
  }
  dw.final_norm = ones(h);
  dw.lm_head = normal({t.vocab_size, h});
  tp.push_back({"text.final_norm", dw.final_norm, false});
  tp.push_back({"text.lm_head", dw.lm_head, true});
  tp.push_back({"lookup_probe.w", m.found_w, true});
  tp.push_back({"lookup_probe.b", m.found_b, false});
  m.decoder = std::make_shared<TextDecoder>(t, family, dw);
  if (image_probe) {
    m.image_w = normal({world::kMaxImagesLimit, h});
    m.image_b = zeros(world::kMaxImagesLimit);
    tp.push_back({"image_probe.w", m.image_w, true});
    tp.push_back({"image_probe.b", m.image_b, false});
  }
  if (cell_readout) {
    m.cell_w = normal({world::kNumColors + world::kNumShapes, h});
    m.cell_b = zeros(world::kNumColors + world::kNumShapes);
    tp.push_back({"cell_probe.w", m.cell_w, true});
    tp.push_back({"cell_probe.b", m.cell_b, false});
  }
  return m;
}

std::vector<std::pair<std::string, at::Tensor>> demo_reference_tensors(const DemoModel& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto put = [&](const std::string& name, const at::Tensor& t) { out.emplace_back(name, t); };
  const auto& vw = m.vision->weights();
  const VitConfig& v = m.vcfg.vision;
  const int64_t d = v.hidden_size, p = v.patch_size;
  const std::string vis = "model.vision_model.";
  put(vis + "embeddings.patch_embedding.weight", vw.patch_w.view({d, 3, p, p}));
  put(vis + "embeddings.patch_embedding.bias", vw.patch_b);
  put(vis + "embeddings.position_embedding.weight", vw.pos_embed);
  for (size_t il = 0; il < vw.layers.size(); ++il) {
    const VitLayerWeights& w = vw.layers[il];
    const std::string pre = vis + "encoder.layers." + std::to_string(il) + ".";
    put(pre + "layer_norm1.weight", w.ln1_w);
    put(pre + "layer_norm1.bias", w.ln1_b);
    const char* qkv[3] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t k = 0; k < 3; ++k) {
      put(pre + "self_attn." + qkv[k] + ".weight", w.w_qkv.narrow(0, k * d, d));
      put(pre + "self_attn." + qkv[k] + ".bias", w.b_qkv.narrow(0, k * d, d));
    }
    put(pre + "self_attn.out_proj.weight", w.w_o);
    put(pre + "self_attn.out_proj.bias", w.b_o);
    put(pre + "layer_norm2.weight", w.ln2_w);
    put(pre + "layer_norm2.bias", w.ln2_b);
    put(pre + "mlp.fc1.weight", w.w_fc1);
    put(pre + "mlp.fc1.bias", w.b_fc1);
    put(pre + "mlp.fc2.weight", w.w_fc2);
    put(pre + "mlp.fc2.bias", w.b_fc2);
  }
  put(vis + "post_layernorm.weight", vw.post_ln_w);
  put(vis + "post_layernorm.bias", vw.post_ln_b);
  put("model.connector.modality_projection.proj.weight", vw.proj);

  const auto& dw = m.decoder->weights();
  const TextConfig& t = m.tcfg;
  const int64_t nq = t.n_head * t.head_dim, nkv = t.n_kv_head * t.head_dim, ffn = t.intermediate_size;
  const std::string txt = "model.text_model.";
  put(txt + "embed_tokens.weight", dw.embed);
  for (size_t il = 0; il < dw.layers.size(); ++il) {
    const DecoderLayerWeights& w = dw.layers[il];
    const std::string pre = txt + "layers." + std::to_string(il) + ".";
    put(pre + "input_layernorm.weight", w.attn_norm);
    put(pre + "self_attn.q_proj.weight", w.w_qkv.narrow(0, 0, nq));
    put(pre + "self_attn.k_proj.weight", w.w_qkv.narrow(0, nq, nkv));
    put(pre + "self_attn.v_proj.weight", w.w_qkv.narrow(0, nq + nkv, nkv));
    put(pre + "self_attn.o_proj.weight", w.w_o);
    if (w.q_norm.defined()) put(pre + "self_attn.q_norm.weight", w.q_norm);
    if (w.k_norm.defined()) put(pre + "self_attn.k_norm.weight", w.k_norm);
    put(pre + "post_attention_layernorm.weight", w.mlp_norm);
    put(pre + "mlp.gate_proj.weight", w.w_gate_up.narrow(0, 0, ffn));
    put(pre + "mlp.up_proj.weight", w.w_gate_up.narrow(0, ffn, ffn));
    put(pre + "mlp.down_proj.weight", w.w_down);
  }
  put(txt + "norm.weight", dw.final_norm);
  put("lm_head.weight", dw.lm_head);
  return out;
}

void write_demo_weights(const DemoModel& m, const std::string& path) {
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : demo_reference_tensors(m)) out.push_back(float_tensor_to_write(name, t));
  write_safetensors(path, out, {{"format", "pt"}});
}

void load_demo_weights(DemoModel& m, const SafetensorsFile& file) {
  at::NoGradGuard no_grad;
  for (auto& [name, view] : demo_reference_tensors(m)) {
    const auto it = file.tensors().find(name);
    TRIMKV_CHECK(it != file.tensors().end(), Format, "'", file.path(), "' lacks tensor '", name, "'");
    const at::Tensor t = tensor_to_float(it->second);
    TRIMKV_CHECK(t.sizes() == view.sizes(), Shape, "'", file.path(), "': tensor '", name, "' has shape ", t.sizes(),
                 ", expected ", view.sizes());
    view.copy_(t);
  }
}

void load_demo_weights(DemoModel& m, const std::string& path) { load_demo_weights(m, SafetensorsFile(path)); }

}  // namespace trimkv::vision::demo
