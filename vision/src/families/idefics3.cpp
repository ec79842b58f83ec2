// Idefics3 / SmolVLM family (model_type idefics3, smolvlm): SigLIP tower with bucketed position
// ids, pixel-shuffle connector, a core text decoder (Llama; Qwen3 in the demo model), the SmolVLM
// chat template. Weight names in one table; the blocks are the shared ones of vit.h.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "processors/processor_settings.h"
#include "trimkv/core/error.h"
#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/kernels/linear.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// --- tensor table ---------------------------------------------------------------------------
// Roots of the tower and of the connector: transformers v4/v5 ("model.") and bare exports.
const std::vector<std::string> kVisionRoots = {"model.vision_model.", "vision_model."};
const std::vector<std::string> kConnector = {"model.connector.modality_projection.proj.weight",
                                             "connector.modality_projection.proj.weight"};
constexpr const char* kPatchW = "embeddings.patch_embedding.weight";  // [D, C, p, p]
constexpr const char* kPatchB = "embeddings.patch_embedding.bias";    // [D]
constexpr const char* kPosEmbed = "embeddings.position_embedding.weight";  // [(S/p)^2, D]
constexpr const char* kPostLnW = "post_layernorm.weight";
constexpr const char* kPostLnB = "post_layernorm.bias";
constexpr const char* kLayers = "encoder.layers.";
const std::vector<VitTensorSpec> kLayerTable = {
    {VitTensor::ln1_w, "layer_norm1.weight"},     {VitTensor::ln1_b, "layer_norm1.bias"},
    {VitTensor::q_w, "self_attn.q_proj.weight"},  {VitTensor::q_b, "self_attn.q_proj.bias"},
    {VitTensor::k_w, "self_attn.k_proj.weight"},  {VitTensor::k_b, "self_attn.k_proj.bias"},
    {VitTensor::v_w, "self_attn.v_proj.weight"},  {VitTensor::v_b, "self_attn.v_proj.bias"},
    {VitTensor::o_w, "self_attn.out_proj.weight"}, {VitTensor::o_b, "self_attn.out_proj.bias"},
    {VitTensor::ln2_w, "layer_norm2.weight"},     {VitTensor::ln2_b, "layer_norm2.bias"},
    {VitTensor::fc1_w, "mlp.fc1.weight"},         {VitTensor::fc1_b, "mlp.fc1.bias"},
    {VitTensor::fc2_w, "mlp.fc2.weight"},         {VitTensor::fc2_b, "mlp.fc2.bias"},
};

}  // namespace

namespace {

// The chat pieces come from the checkpoint's own template (TextTurnEncoder, content as parts:
// the template writes "<image>" for each image); user turns and raw prompts expand every
// "<image>" into the image's tiles and encode them.
class Idefics3Encoder final : public TextTurnEncoder {
 public:
  Idefics3Encoder(std::string dir, std::shared_ptr<Tokenizer> tok, LoadedChatFormat format,
                  std::vector<TemplateVar> vars, std::shared_ptr<Idefics3Vision> vision, Idefics3ProcessorConfig proc,
                  Idefics3TokenIds ids)
      : TextTurnEncoder(std::move(dir), std::move(tok), std::move(format), std::move(vars)),
        m_vision(std::move(vision)), m_proc(proc), m_ids(std::move(ids)) {}

  StreamSegment user_turn(const std::vector<Message>& history, const std::vector<ContentPart>& content,
                          int first_image_id, std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                          const ImageTokenReducer& reduce) const override {
    TRIMKV_CHECK(!content.empty(), Input, "an empty user message");
    check_no_image_markers(content, {kImagePlaceholder});
    return encode_content(format().user_text(history, content), content, first_image_id, images, cancel, reduce);
  }
  StreamSegment raw_prompt(const std::vector<ContentPart>& content, int first_image_id,
                           std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                           const ImageTokenReducer& reduce) const override {
    check_no_image_markers(content, {kImagePlaceholder});
    std::string text;
    for (const ContentPart& part : content) text += part.kind == ContentPart::Kind::Text ? part.text : kImagePlaceholder;
    return encode_content(text, content, first_image_id, images, cancel, reduce, true);
  }
  int64_t image_token_count(int width, int height) const override {
    return static_cast<int64_t>(idefics3_grid(width, height, m_proc).n_tiles) * m_vision->config().image_seq_len();
  }

 protected:
  std::shared_ptr<TextTurnEncoder> clone() const override { return std::make_shared<Idefics3Encoder>(*this); }

 private:
  // `text` holds one kImagePlaceholder per image part of `content`, in order: each becomes the
  // image's expanded prompt (tile markers and image tokens). Raw prompts keep the tokenizer's
  // special tokens (as the processor does on plain text); rendered template text adds none.
  StreamSegment encode_content(const std::string& text, const std::vector<ContentPart>& content, int first_image_id,
                               std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                               const ImageTokenReducer& reduce, bool raw = false) const {
    const Idefics3Config& cfg = m_vision->config();
    const int seq = static_cast<int>(cfg.image_seq_len());
    const int side = static_cast<int>(cfg.vision.patches_per_side() / cfg.scale_factor);
    std::vector<Idefics3Tiles> tiles;
    std::vector<std::pair<int, int>> grids;
    std::vector<ImageRecord> records;
    std::vector<std::string> prompts;  // the expansion of each image's placeholder
    for (const ContentPart& part : content) {
      if (part.kind == ContentPart::Kind::Text) continue;
      const RgbImage img = decode_image_file(part.path);
      Idefics3Tiles t = idefics3_preprocess(img, m_proc);
      prompts.push_back(idefics3_image_prompt(t.rows, t.cols, seq));
      ImageRecord r;
      r.image_id = static_cast<int16_t>(first_image_id + static_cast<int>(records.size()));
      r.source = part.path;
      r.width = t.width;
      r.height = t.height;
      r.resized_width = t.resized_width;
      r.resized_height = t.resized_height;
      r.tile_rows = t.rows;
      r.tile_cols = t.cols;
      r.n_tiles = static_cast<int>(t.pixels.size(0));
      r.tile_size = m_proc.tile_size;
      r.grid_side = side;
      r.grid_rows = r.grid_cols = side;
      r.n_image_tokens = static_cast<int64_t>(r.n_tiles) * seq;
      records.push_back(r);
      grids.emplace_back(t.rows, t.cols);
      tiles.push_back(std::move(t));
    }
    const std::string expanded =
        expand_image_placeholders(text, prompts, raw ? "the prompt" : "the chat template of '" + model_dir() + "'");
    StreamSegment seg;
    seg.ids = raw ? tokenizer().encode(expanded) : encode(expanded);
    seg.infos = idefics3_tag_tokens(seg.ids, m_ids, grids, side, first_image_id);
    if (reduce && !tiles.empty()) {
      reduce_image_tokens(seg, tiles, records, first_image_id, seq, reduce, cancel);
    } else {
      std::vector<at::Tensor> feats;
      for (const Idefics3Tiles& t : tiles)
        feats.push_back(m_vision->encode(t.pixels, cancel).reshape({-1, cfg.text_hidden_size}));
      if (!feats.empty()) seg.image_embeddings = at::cat(feats, 0);
    }
    images.insert(images.end(), records.begin(), records.end());
    return seg;
  }

  // visionzip after the connector: every tile's seq image tokens (pooled last-layer attention and
  // keys over each token's shuffle group) go through `reduce`; the tile's run of <image> ids
  // becomes the kept tokens: the dominant ones in their original order with their own metadata
  // (tile, patch row/col), then the merged contextual ones (image id and tile of the tile, modality
  // Image, patch row/col -1: a merge of patches has no single grid position). A tile whose
  // reduction keeps every token (dominant + contextual >= seq) is left exactly as it was, with no
  // merge recorded. records' n_image_tokens become the kept counts.
  void reduce_image_tokens(StreamSegment& seg, const std::vector<Idefics3Tiles>& tiles,
                           std::vector<ImageRecord>& records, int first_image_id, int seq,
                           const ImageTokenReducer& reduce, const std::atomic<bool>* cancel) const {
    struct TileResult {
      at::Tensor embeddings;  // [seq, H] (unchanged) or the reduced rows
      bool reduced = false;
      VisionZipResult r;
    };
    std::vector<std::vector<TileResult>> per_image;
    for (const Idefics3Tiles& t : tiles) {
      const Idefics3Vision::Encoded e = m_vision->encode_with_attention(t.pixels, cancel);
      std::vector<TileResult> res;
      for (int64_t j = 0; j < e.embeddings.size(0); ++j) {
        TileResult tr;
        tr.r = reduce(e.attention[j], e.keys[j], e.embeddings[j]);
        tr.reduced = tr.r.embeddings.size(0) < seq;
        tr.embeddings = tr.reduced ? tr.r.embeddings : e.embeddings[j];
        res.push_back(std::move(tr));
      }
      per_image.push_back(std::move(res));
    }
    std::vector<int32_t> ids;
    std::vector<TokenInfo> infos;
    std::vector<at::Tensor> rows;
    for (auto& r : records) r.n_image_tokens = 0;
    const size_t n = seg.ids.size();
    for (size_t i = 0; i < n;) {
      const TokenInfo& head = seg.infos[i];
      if (head.modality != Modality::Image) {
        ids.push_back(seg.ids[i]);
        infos.push_back(head);
        ++i;
        continue;
      }
      const int k = head.image_id - first_image_id;
      TRIMKV_ASSERT(k >= 0 && k < static_cast<int>(per_image.size()) && head.tile >= 0 &&
                        head.tile < static_cast<int>(per_image[k].size()) && i + seq <= n,
                    "visionzip: unexpected image-token run at position ", i);
      for (size_t q = i; q < i + static_cast<size_t>(seq); ++q)
        TRIMKV_ASSERT(seg.infos[q].modality == Modality::Image && seg.infos[q].image_id == head.image_id &&
                          seg.infos[q].tile == head.tile,
                      "visionzip: the image-token run at ", i, " is not ", seq, " tokens of one tile");
      const TileResult& tr = per_image[k][head.tile];
      const int32_t image_token = seg.ids[i];
      if (!tr.reduced) {
        ids.insert(ids.end(), seg.ids.begin() + i, seg.ids.begin() + i + seq);
        infos.insert(infos.end(), seg.infos.begin() + i, seg.infos.begin() + i + seq);
      } else {
        TokenMerge tm;
        tm.image_id = head.image_id;
        tm.first_token = static_cast<int32_t>(ids.size());
        tm.n_in = seq;
        tm.n_out = static_cast<int32_t>(tr.r.embeddings.size(0));
        tm.dominant = tr.r.dominant;
        tm.assignment = tr.r.assignment;
        for (int32_t d : tr.r.dominant) {
          ids.push_back(image_token);
          infos.push_back(seg.infos[i + static_cast<size_t>(d)]);
        }
        for (int32_t c = static_cast<int32_t>(tr.r.dominant.size()); c < tm.n_out; ++c) {
          TokenInfo ti = head;
          ti.patch_row = -1;
          ti.patch_col = -1;
          ids.push_back(image_token);
          infos.push_back(ti);
        }
        seg.token_merges.push_back(std::move(tm));
      }
      rows.push_back(tr.embeddings);
      records[static_cast<size_t>(k)].n_image_tokens += tr.embeddings.size(0);
      i += static_cast<size_t>(seq);
    }
    seg.ids = std::move(ids);
    seg.infos = std::move(infos);
    if (!rows.empty()) seg.image_embeddings = at::cat(rows, 0);
  }

  std::shared_ptr<Idefics3Vision> m_vision;
  Idefics3ProcessorConfig m_proc;
  Idefics3TokenIds m_ids;
};

std::shared_ptr<VlmModel> load_idefics3(const std::string& dir, const std::vector<TemplateVar>& vars,
                                        const ModelLoadOptions& options) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  auto m = std::make_shared<VlmModel>();
  ModelLoadOptions text_options = options;
  text_options.text_of_vlm = true;  // the tower is loaded below
  m->text = load_text_model(dir, text_options);
  TRIMKV_CHECK(m->text.tokenizer, Config, "vision-language checkpoint '", dir,
               "' has no tokenizer.json (its image tokens are needed)");
  Idefics3Config cfg = Idefics3Config::from_file(config_path);
  cfg.text_hidden_size = m->text.config.hidden_size;
  TRIMKV_CHECK(cfg.image_token_id >= 0 && cfg.image_token_id < m->text.config.vocab_size, Config, "'",
               config_path, "': image_token_id ", cfg.image_token_id, " is outside the vocabulary [0, ",
               m->text.config.vocab_size, ")");
  WeightStore ws = WeightStore::open_folder(dir);
  ws.set_cancel(options.cancel);
  auto vision = Idefics3Vision::load(cfg, ws, m->text.weight_format);  // the tower in the decoder's precision too
  if (m->text.device != ComputeDevice::Cpu) vision = vision->on_device(torch_device(m->text.device));  // and place
  Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(dir);
  if (options.image_size > 0) {  // --image-size: the longest edge, so fewer (or more) tiles
    const int side = (std::min(options.image_size, 4096) + proc.tile_size - 1) / proc.tile_size;
    TRIMKV_CHECK(!proc.do_image_splitting || side <= 6, Input, "--image-size ", options.image_size, " would cut ", side,
                 " tiles per side; '", dir, "' has tile markers for 6 (at most ", 6 * proc.tile_size, " pixels)");
    proc.longest_edge = options.image_size;
  }
  TRIMKV_CHECK(proc.tile_size == cfg.vision.image_size, Config, "checkpoint '", dir,
               "': the processor's max_image_size.longest_edge (", proc.tile_size,
               ") differs from vision_config.image_size (", cfg.vision.image_size, ")");
  // The processor's image_seq_len (processor_config.json) must be what the tower produces.
  const std::string pc = (fs::path(dir) / "processor_config.json").string();
  if (fs::exists(pc)) {
    std::ifstream in(pc);
    const json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("image_seq_len") && j["image_seq_len"].is_number_integer())
      TRIMKV_CHECK(j["image_seq_len"].get<int64_t>() == cfg.image_seq_len(), Config, "'", pc,
                   "': image_seq_len ", j["image_seq_len"].get<int64_t>(),
                   " contradicts the vision config, which gives (", cfg.vision.image_size, "/",
                   cfg.vision.patch_size, ")^2 / ", cfg.scale_factor, "^2 = ", cfg.image_seq_len());
  }
  const Tokenizer& tok = *m->text.tokenizer;
  Idefics3TokenIds ids;
  ids.image = tok.token_to_id("<image>");
  ids.fake = tok.token_to_id(kIdefics3FakeImageToken);
  ids.global = tok.token_to_id(kIdefics3GlobalImageToken);
  TRIMKV_CHECK(ids.image == cfg.image_token_id, Config, "tokenizer '", tok.path(), "': '<image>' is id ",
               ids.image, " but config.json says image_token_id = ", cfg.image_token_id);
  TRIMKV_CHECK(ids.fake >= 0 && ids.global >= 0, Config, "tokenizer '", tok.path(),
               "' lacks <fake_token_around_image> or <global-img>");
  ids.row_col.assign(6, std::vector<int32_t>(6, -1));
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c)
      ids.row_col[r][c] = tok.token_to_id("<row_" + std::to_string(r + 1) + "_col_" + std::to_string(c + 1) + ">");
  // Tiles per side the processor can produce: every marker they need must be a single token.
  const int max_tiles = (std::min(proc.longest_edge, 4096) + proc.tile_size - 1) / proc.tile_size;
  TRIMKV_CHECK(!proc.do_image_splitting || max_tiles <= 6, Unsupported, "checkpoint '", dir,
               "': up to ", max_tiles, " tiles per side, but tile markers exist up to 6");
  for (int r = 0; proc.do_image_splitting && r < max_tiles; ++r)
    for (int c = 0; c < max_tiles; ++c)
      TRIMKV_CHECK(ids.row_col[r][c] >= 0, Config, "tokenizer '", tok.path(), "' lacks <row_", r + 1,
                   "_col_", c + 1, ">");

  VisionInfo& vi = m->info;
  vi.family = "idefics3";
  vi.model_type = checkpoint_model_type(dir);
  vi.description = idefics3_family().description;
  vi.vision_parameters = vision->parameter_count();
  vi.hidden_size = cfg.vision.hidden_size;
  vi.n_layer = cfg.vision.n_layer;
  vi.n_head = cfg.vision.n_head;
  vi.intermediate_size = cfg.vision.intermediate_size;
  vi.image_size = cfg.vision.image_size;
  vi.patch_size = cfg.vision.patch_size;
  vi.scale_factor = cfg.scale_factor;
  vi.image_seq_len = cfg.image_seq_len();
  vi.image_token_id = cfg.image_token_id;
  vi.longest_edge = proc.longest_edge;
  vi.tile_size = proc.tile_size;
  vi.image_splitting = proc.do_image_splitting;
  vi.resample = resample_filter_name(proc.resample);
  m->encoder = std::make_shared<Idefics3Encoder>(
      dir, m->text.tokenizer, load_chat_format(dir, tok, ContentStyle::Parts), vars, vision, proc, std::move(ids));
  return m;
}

}  // namespace

Idefics3Config Idefics3Config::from_file(const std::string& path) {
  const json top = read_json_object(path);
  Idefics3Config c;
  try {
    const json& v = json_section(top, "vision_config");
    const char* vs = "vision_config.";
    c.vision.hidden_size = read_positive_int(v, "hidden_size", 1152, path, vs);
    c.vision.intermediate_size = read_positive_int(v, "intermediate_size", 3072, path, vs);
    c.vision.n_layer = read_positive_int(v, "num_hidden_layers", 12, path, vs);
    c.vision.n_head = read_positive_int(v, "num_attention_heads", 16, path, vs);
    c.vision.n_channels = read_positive_int(v, "num_channels", 3, path, vs);
    c.vision.image_size = read_positive_int(v, "image_size", 224, path, vs);
    c.vision.patch_size = read_positive_int(v, "patch_size", 32, path, vs);
    if (v.contains("layer_norm_eps")) c.vision.layer_norm_eps = v["layer_norm_eps"].get<double>();
    if (v.contains("hidden_act")) c.vision.hidden_act = v["hidden_act"].get<std::string>();
    c.scale_factor = read_positive_int(top, "scale_factor", 2, path, "");
    TRIMKV_CHECK(top.contains("image_token_id") && top["image_token_id"].is_number_integer(), Config, "'",
                 path, "' lacks an integer 'image_token_id'");
    c.image_token_id = top["image_token_id"].get<int32_t>();
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Config, "'", path, "': a field has the wrong type: ", e.what());
  }
  const VitConfig& vc = c.vision;
  TRIMKV_CHECK(vc.n_channels == 3, Unsupported, "'", path, "': vision_config.num_channels = ",
               vc.n_channels, " (RGB only)");
  TRIMKV_CHECK(vc.hidden_size % vc.n_head == 0, Config, "'", path, "': vision_config.hidden_size ",
               vc.hidden_size, " is not a multiple of num_attention_heads ", vc.n_head);
  TRIMKV_CHECK(vc.image_size % vc.patch_size == 0, Config, "'", path, "': vision_config.image_size ",
               vc.image_size, " is not a multiple of patch_size ", vc.patch_size);
  TRIMKV_CHECK(vc.patches_per_side() % c.scale_factor == 0, Config, "'", path, "': ",
               vc.patches_per_side(), " patches per side cannot be pixel-shuffled by scale_factor ",
               c.scale_factor);
  check_vit_activation(vc.hidden_act, "'" + path + "'");
  return c;
}

std::shared_ptr<Idefics3Vision> Idefics3Vision::load(const Idefics3Config& cfg, const WeightStore& ws,
                                                     kernels::WeightFormat format) {
  std::string root;
  for (const auto& r : kVisionRoots)
    if (ws.contains(r + kPatchW)) root = r;
  TRIMKV_CHECK(!root.empty(), Config, "checkpoint '", ws.source(), "' has no vision tower (looked for '",
               kVisionRoots[0], kPatchW, "' and '", kVisionRoots[1], kPatchW, "')");
  const VitConfig& v = cfg.vision;
  const int64_t d = v.hidden_size, p = v.patch_size, s2 = cfg.scale_factor * cfg.scale_factor;
  Weights w;
  w.patch_w = ws.load({root + kPatchW}, {d, v.n_channels, p, p}).reshape({d, v.n_channels * p * p}).contiguous();
  w.patch_b = ws.load({root + kPatchB}, {d});
  w.pos_embed = ws.load({root + kPosEmbed}, {v.patches_per_side() * v.patches_per_side(), d});
  w.patch_w = hold_tower_matrix(w.patch_w, format);
  w.layers = load_vit_layers(ws, root + kLayers, kLayerTable, v, format);
  w.post_ln_w = ws.load({root + kPostLnW}, {d});
  w.post_ln_b = ws.load({root + kPostLnB}, {d});
  const TensorInfo* proj = ws.find_any(kConnector);
  TRIMKV_CHECK(proj, Config, "checkpoint '", ws.source(), "' has no connector ('", kConnector[0], "')");
  const std::vector<int64_t> want = {cfg.text_hidden_size, d * s2};
  TRIMKV_CHECK(proj->shape == want, Shape, "checkpoint '", ws.source(), "': connector '", proj->name,
               "' is ", shape_to_string(proj->shape), " but the config implies ", shape_to_string(want),
               " (text hidden_size ", cfg.text_hidden_size, " x vision hidden_size ", d,
               " * scale_factor^2 ", s2, "): the vision config contradicts the connector");
  w.proj = ws.load(kConnector, want);
  w.proj = hold_tower_matrix(w.proj, format);
  return std::make_shared<Idefics3Vision>(cfg, std::move(w));
}

Idefics3Vision::Idefics3Vision(Idefics3Config cfg, Weights w) : m_cfg(std::move(cfg)), m_w(std::move(w)) {}

std::shared_ptr<Idefics3Vision> Idefics3Vision::on_device(const at::Device& device, bool* converted) const {
  auto on = [&](const at::Tensor& t) { return kernels::weight_on_device(t, device, converted); };
  Weights w{on(m_w.patch_w), on(m_w.patch_b), on(m_w.pos_embed), {}, on(m_w.post_ln_w), on(m_w.post_ln_b), on(m_w.proj)};
  for (const VitLayerWeights& l : m_w.layers) w.layers.push_back(vit_layer_on_device(l, device, converted));
  return std::make_shared<Idefics3Vision>(m_cfg, std::move(w));
}

at::Device Idefics3Vision::device() const { return m_w.patch_w.device(); }

int64_t Idefics3Vision::parameter_count() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&m_w.patch_w, &m_w.patch_b, &m_w.pos_embed, &m_w.post_ln_w, &m_w.post_ln_b, &m_w.proj})
    n += kernels::value_count(*t);
  for (const auto& l : m_w.layers)
    for (const at::Tensor* t : {&l.ln1_w, &l.ln1_b, &l.w_qkv, &l.b_qkv, &l.w_o, &l.b_o, &l.ln2_w, &l.ln2_b,
                                &l.w_fc1, &l.b_fc1, &l.w_fc2, &l.b_fc2})
      n += kernels::value_count(*t);
  return n;
}

at::Tensor Idefics3Vision::position_embeddings(const at::Tensor& pixels) const {
  const VitConfig& v = m_cfg.vision;
  TRIMKV_CHECK(pixels.dim() == 4 && pixels.size(1) == v.n_channels && pixels.size(2) == v.image_size &&
                   pixels.size(3) == v.image_size,
               Input, "vision tower input must be [N, ", v.n_channels, ", ", v.image_size, ", ",
               v.image_size, "]");
  // Every tile is a full image here (no padding), so the bucketed ids are those of a full grid.
  const int64_t g = v.patches_per_side();
  return at::embedding(m_w.pos_embed, bucketed_position_ids(g, g, g, g, g).to(device()));
}

at::Tensor Idefics3Vision::tower(const at::Tensor& pixels_in, const std::atomic<bool>* cancel,
                                 std::vector<VitAttentionStats>* last_layer) const {
  const VitConfig& v = m_cfg.vision;
  const at::Tensor pixels = pixels_in.to(device());
  const at::Tensor pos = position_embeddings(pixels);  // [g*g, D]
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < pixels.size(0); ++i) {
    if (cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "image encoding cancelled");
    at::Tensor x = patch_embed(pixels[i].contiguous(), m_w.patch_w, m_w.patch_b, v.patch_size) + pos;
    for (size_t il = 0; il < m_w.layers.size(); ++il) {
      VitAttentionStats stats;
      const bool last = last_layer && il + 1 == m_w.layers.size();
      x = vit_block(x, m_w.layers[il], v, last ? &stats : nullptr);
      if (last) last_layer->push_back(std::move(stats));
    }
    out.push_back(at::layer_norm(x, {v.hidden_size}, m_w.post_ln_w, m_w.post_ln_b, v.layer_norm_eps));
  }
  return at::stack(out);
}

at::Tensor Idefics3Vision::tower_batched(const at::Tensor& pixels) const {
  const VitConfig& v = m_cfg.vision;
  const at::Tensor pos = position_embeddings(pixels);  // [g*g, D]
  at::Tensor x = patch_embed_batched(pixels, m_w.patch_w, m_w.patch_b, v.patch_size) + pos;
  for (const auto& layer : m_w.layers) x = vit_block_batched(x, layer, v);
  return at::layer_norm(x, {v.hidden_size}, m_w.post_ln_w, m_w.post_ln_b, v.layer_norm_eps);
}

at::Tensor Idefics3Vision::connector(const at::Tensor& hidden) const {
  const int64_t n = hidden.size(0);
  at::Tensor shuffled = vision::pixel_shuffle(hidden, m_cfg.scale_factor);  // [N, seq, D*s^2]
  const int64_t seq = shuffled.size(1);
  return tower_linear(shuffled.reshape({n * seq, shuffled.size(2)}).contiguous(), m_w.proj)
      .view({n, seq, m_cfg.text_hidden_size});
}

Idefics3Vision::Encoded Idefics3Vision::encode_with_attention(const at::Tensor& pixels,
                                                              const std::atomic<bool>* cancel) const {
  std::vector<VitAttentionStats> stats;
  Encoded e;
  e.embeddings = connector(tower(pixels, cancel, &stats));
  const int64_t s = m_cfg.scale_factor, s2 = s * s, seq = e.embeddings.size(1);
  std::vector<at::Tensor> att, keys;
  for (const VitAttentionStats& st : stats) {
    // The connector's shuffle groups: [1, G*G, c] -> [1, seq, s*s*c] -> [seq, s*s, c], mean.
    att.push_back(vision::pixel_shuffle(st.received.reshape({1, -1, 1}), s).reshape({seq, s2}).mean(1));
    const int64_t hd = st.keys.size(1);
    keys.push_back(vision::pixel_shuffle(st.keys.unsqueeze(0), s).reshape({seq, s2, hd}).mean(1));
  }
  e.attention = at::stack(att);
  e.keys = at::stack(keys);
  return e;
}

const char* const kSmolVlmChatTemplate =
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if "
    "message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in "
    "message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' "
    "%}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt "
    "%}{{ 'Assistant:' }}{% endif %}";

const char* const kDemoChatTemplate =
    "<|im_start|>{% set ns = namespace(images=0) %}{% for message in messages %}{{ message['role'] | capitalize "
    "}}: {% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}{% elif "
    "line['type'] == 'image' %}{% set ns.images = ns.images + 1 %}{{ 'Image ' ~ ns.images ~ ':<image>' }}{% "
    "endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% "
    "endif %}";

namespace {
ChatFormat parts_format(const char* source, const char* origin) {
  return ChatFormat(ChatTemplate::from_source(source, origin), ContentStyle::Parts);
}
}  // namespace

const ChatFormat& smolvlm_chat_format() {
  static const ChatFormat kFormat = parts_format(kSmolVlmChatTemplate, "the SmolVLM chat template");
  return kFormat;
}

const ChatFormat& demo_chat_format() {
  static const ChatFormat kFormat = parts_format(kDemoChatTemplate, "the demo model's chat template");
  return kFormat;
}

bool is_demo_world_model(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "chat_template.jinja", std::ios::binary);
  if (!in) return false;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text == kDemoChatTemplate;
}

const VlmFamily& idefics3_family() {
  static const VlmFamily kFamily{
      "idefics3",
      {"idefics3", "smolvlm"},
      "Idefics3 / SmolVLM: SigLIP tower, pixel-shuffle connector, a core text decoder (Llama in SmolVLM, Qwen3 in the demo model), image tiling",
      &load_idefics3};
  return kFamily;
}

}  // namespace trimkv::vision
