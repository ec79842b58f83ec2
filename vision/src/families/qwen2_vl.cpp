// Qwen2-VL / Qwen2.5-VL family (model_type qwen2_vl, qwen2_5_vl; shared/QWEN-VL.md): the vision
// tower of both generations (they differ in norms, MLP and window attention, switched by
// QwenVisionKind), the patch merger, the Qwen2 text decoder with M-RoPE (core), the checkpoint's
// ChatML template. Weight names in one table per generation; the prompt side is the Qwen-VL
// line's encoder (qwen_vl_encoder.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "families/qwen_vl_encoder.h"
#include "processors/processor_settings.h"
#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"
#include "trimkv/core/layers.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/kernels/linear.h"
#include "trimkv/vision/qwen2_vl.h"
#include "trimkv/vision/qwen2_vl_processor.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// --- tensor table ---------------------------------------------------------------------------
// The tower's root: transformers v5 ("model.visual.") and the legacy Hub layout ("visual.").
const std::vector<std::string> kRoots = {"model.visual.", "visual."};
constexpr const char* kPatch = "patch_embed.proj.weight";  // [E, C, T, p, p]
struct BlockNames {
  const char* norm1_b;  // nullptr: RMSNorm (weight only)
  const char* norm2_b;
  const char* fc1;      // Qwen2: mlp.fc1; Qwen2.5: mlp.gate_proj (+ up_proj fused after it)
  const char* up;       // Qwen2.5 only
  const char* fc2;
};
const BlockNames kQwen2Block = {"norm1.bias", "norm2.bias", "mlp.fc1", nullptr, "mlp.fc2"};
const BlockNames kQwen25Block = {nullptr, nullptr, "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
const BlockNames kQwen3Block = {"norm1.bias", "norm2.bias", "mlp.linear_fc1", nullptr, "mlp.linear_fc2"};
// Mergers: Qwen2/2.5 "merger.{ln_q, mlp.0, mlp.2}"; Qwen3 "merger.{norm, linear_fc1, linear_fc2}"
// and "deepstack_merger_list.{j}.{norm, linear_fc1, linear_fc2}".
struct MergerNames {
  const char* norm;
  const char* fc1;
  const char* fc2;
};
const MergerNames kQwen2Merger = {"ln_q", "mlp.0", "mlp.2"};
const MergerNames kQwen3Merger = {"norm", "linear_fc1", "linear_fc2"};

// The first of `keys` (a field and its aliases) present under vision_config, as a positive int.
int64_t vision_int(const json& j, std::initializer_list<const char*> keys, int64_t fallback, const std::string& path) {
  for (const char* key : keys)
    if (j.contains(key) && !j[key].is_null()) return read_positive_int(j, key, fallback, path, "vision_config.");
  return fallback;
}

int32_t token_field(const json& top, const char* key, int32_t fallback, const std::string& path) {
  if (!top.contains(key) || top[key].is_null()) return fallback;
  TRIMKV_CHECK(top[key].is_number_integer(), Config, "'", path, "': field '", key, "' must be an integer, got ",
               top[key].dump());
  return top[key].get<int32_t>();
}

// A list of block indexes under vision_config (each < depth), or `fallback` when absent.
std::vector<int64_t> block_list(const json& j, const char* key, std::vector<int64_t> fallback, int64_t depth,
                                const std::string& path) {
  if (!j.contains(key)) return fallback;
  TRIMKV_CHECK(j[key].is_array(), Config, "'", path, "': vision_config.", key, " must be a list, got ", j[key].dump());
  std::vector<int64_t> out;
  for (const auto& x : j[key]) {
    TRIMKV_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < depth, Config, "'", path,
                 "': vision_config.", key, " ", j[key].dump(), " must name blocks of the tower, 0..", depth - 1);
    out.push_back(x.get<int64_t>());
  }
  return out;
}

at::Tensor layer_norm_or_rms(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (b.defined()) return at::layer_norm(x, {x.size(-1)}, w, b, 1e-6);
  return rms_norm(x, w, 1e-6);
}

// The patch-grid (row, column) of each of the processor's rows: merge blocks row-major, the
// merge x merge patches of a block row-major inside it.
struct PatchCoordinates {
  std::vector<int64_t> row, col;
};
PatchCoordinates merge_block_coordinates(int64_t grid_h, int64_t grid_w, int64_t merge) {
  const int64_t s = grid_h * grid_w, bcols = grid_w / merge, m2 = merge * merge;
  PatchCoordinates c;
  c.row.resize(static_cast<size_t>(s));
  c.col.resize(static_cast<size_t>(s));
  for (int64_t p = 0; p < s; ++p) {
    const int64_t unit = p / m2, in = p % m2;
    c.row[static_cast<size_t>(p)] = (unit / bcols) * merge + in / merge;
    c.col[static_cast<size_t>(p)] = (unit % bcols) * merge + in % merge;
  }
  return c;
}

// A merger over a block's output x [S, E]: its norm before or after the merge blocks' m^2 rows
// are put side by side, then Linear, GELU (erf), Linear -> [units, H].
at::Tensor merge(const QwenVisionTower::Merger& m, const at::Tensor& x, int64_t units) {
  const at::Tensor side_by_side = m.norm_after_shuffle
                                      ? layer_norm_or_rms(x.reshape({units, -1}), m.norm_w, m.norm_b)
                                      : layer_norm_or_rms(x, m.norm_w, m.norm_b).reshape({units, -1});
  const at::Tensor mid = at::gelu(tower_linear(side_by_side.contiguous(), m.fc1_w, m.fc1_b));
  return tower_linear(mid, m.fc2_w, m.fc2_b);
}

}  // namespace

bool QwenVisionConfig::full_attention(int64_t block) const {
  if (kind != QwenVisionKind::Qwen2_5) return true;
  return std::find(fullatt_block_indexes.begin(), fullatt_block_indexes.end(), block) != fullatt_block_indexes.end();
}

Qwen2VlConfig Qwen2VlConfig::from_file(const std::string& path) {
  const json top = read_json_object(path);
  Qwen2VlConfig c;
  QwenVisionConfig& v = c.vision;
  const std::string type = string_field(top, "model_type", "", "'" + path + "'");
  v.kind = type == "qwen2_5_vl" ? QwenVisionKind::Qwen2_5 : type == "qwen3_vl" ? QwenVisionKind::Qwen3 : QwenVisionKind::Qwen2;
  const json& j = json_section(top, "vision_config");
  try {
    v.depth = vision_int(j, {"depth", "num_hidden_layers"}, v.kind == QwenVisionKind::Qwen3 ? 27 : 32, path);
    v.n_head = vision_int(j, {"num_heads", "num_attention_heads"}, 16, path);
    v.in_channels = vision_int(j, {"in_channels"}, 3, path);
    v.patch_size = vision_int(j, {"patch_size"}, v.kind == QwenVisionKind::Qwen3 ? 16 : 14, path);
    v.temporal_patch_size = vision_int(j, {"temporal_patch_size"}, 2, path);
    v.merge_size = vision_int(j, {"spatial_merge_size"}, 2, path);
    if (v.kind == QwenVisionKind::Qwen2) {
      v.width = vision_int(j, {"embed_dim"}, 1280, path);
      v.mlp_hidden = v.width * vision_int(j, {"mlp_ratio"}, 4, path);
      v.out_hidden = vision_int(j, {"hidden_size"}, 3584, path);
      v.hidden_act = j.value("hidden_act", std::string("quick_gelu"));
    } else if (v.kind == QwenVisionKind::Qwen2_5) {
      v.width = vision_int(j, {"hidden_size"}, 3584, path);
      v.mlp_hidden = vision_int(j, {"intermediate_size"}, 3420, path);
      v.out_hidden = vision_int(j, {"out_hidden_size"}, 3584, path);
      v.hidden_act = j.value("hidden_act", std::string("silu"));
      v.window_size = vision_int(j, {"window_size"}, 112, path);
      v.fullatt_block_indexes = block_list(j, "fullatt_block_indexes", {7, 15, 23, 31}, v.depth, path);
    } else {
      v.width = vision_int(j, {"hidden_size"}, 1152, path);
      v.mlp_hidden = vision_int(j, {"intermediate_size"}, 4304, path);
      v.out_hidden = vision_int(j, {"out_hidden_size"}, 3584, path);
      v.hidden_act = j.value("hidden_act", std::string("gelu_pytorch_tanh"));
      v.num_position_embeddings = vision_int(j, {"num_position_embeddings"}, 2304, path);
      v.deepstack_visual_indexes = block_list(j, "deepstack_visual_indexes", {8, 16, 24}, v.depth, path);
      const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(v.num_position_embeddings))));
      TRIMKV_CHECK(side * side == v.num_position_embeddings, Config, "'", path,
                   "': vision_config.num_position_embeddings ", v.num_position_embeddings, " is not a square");
    }
    const json& rope = json_section(j, "rope_parameters");
    if (rope.contains("rope_theta")) v.rope_theta = rope["rope_theta"].get<double>();
    c.image_token_id = token_field(top, "image_token_id", c.image_token_id, path);
    c.video_token_id = token_field(top, "video_token_id", c.video_token_id, path);
    c.vision_start_token_id = token_field(top, "vision_start_token_id", c.vision_start_token_id, path);
    c.vision_end_token_id = token_field(top, "vision_end_token_id", c.vision_end_token_id, path);
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Config, "'", path, "': a field has the wrong type: ", e.what());
  }
  TRIMKV_CHECK(v.in_channels == 3, Unsupported, "'", path, "': vision_config.in_channels = ", v.in_channels,
               " (RGB only)");
  TRIMKV_CHECK(v.width % v.n_head == 0 && v.head_dim() % 4 == 0, Config, "'", path, "': the vision width ", v.width,
               " over ", v.n_head, " heads must give a head width divisible by 4 (the 2D rotary splits it by rows "
               "and columns)");
  TRIMKV_CHECK(v.kind != QwenVisionKind::Qwen2_5 || v.window_size % (v.patch_size * v.merge_size) == 0, Config, "'",
               path, "': vision_config.window_size ", v.window_size, " is not a multiple of patch_size * "
               "spatial_merge_size = ", v.patch_size * v.merge_size);
  check_vit_activation(v.hidden_act, "'" + path + "'");
  return c;
}

VisionWindows qwen2_5_vl_windows(int64_t grid_h, int64_t grid_w, int64_t merge, int64_t window_size,
                                 int64_t patch_size) {
  const int64_t side = window_size / merge / patch_size;  // merged units per window side
  TRIMKV_CHECK(side > 0 && grid_h % merge == 0 && grid_w % merge == 0, Input, "a ", grid_h, "x", grid_w,
               " patch grid cannot be split into windows of ", window_size, " pixels");
  const int64_t rows = grid_h / merge, cols = grid_w / merge;
  // The reference pads each side by side - size % side (a whole empty window when it divides);
  // empty windows add no bound (unique_consecutive), so only the windows that hold units count.
  const int64_t win_rows = (rows + side - rows % side) / side, win_cols = (cols + side - cols % side) / side;
  VisionWindows w;
  w.bounds.push_back(0);
  for (int64_t wr = 0; wr < win_rows; ++wr)
    for (int64_t wc = 0; wc < win_cols; ++wc) {
      int64_t n = 0;
      for (int64_t r = wr * side; r < std::min(rows, (wr + 1) * side); ++r)
        for (int64_t c = wc * side; c < std::min(cols, (wc + 1) * side); ++c) {
          w.order.push_back(r * cols + c);
          ++n;
        }
      if (n > 0) w.bounds.push_back(w.bounds.back() + n * merge * merge);
    }
  return w;
}

std::shared_ptr<QwenVisionTower> QwenVisionTower::load(const QwenVisionConfig& cfg, int64_t text_hidden,
                                                       const WeightStore& ws, kernels::WeightFormat format) {
  // Each matrix is packed as it is loaded: the float32 copy of one matrix at most.
  auto held = [format](const at::Tensor& w) { return hold_tower_matrix(w, format); };

  std::string root;
  for (const auto& r : kRoots)
    if (ws.contains(r + kPatch)) root = r;
  TRIMKV_CHECK(!root.empty(), Config, "checkpoint '", ws.source(), "' has no vision tower (looked for '", kRoots[0],
               kPatch, "' and '", kRoots[1], kPatch, "')");
  const int64_t e = cfg.width, f = cfg.mlp_hidden, m2 = cfg.merge_size * cfg.merge_size;
  const bool qwen3 = cfg.kind == QwenVisionKind::Qwen3;
  const BlockNames& names = cfg.kind == QwenVisionKind::Qwen2 ? kQwen2Block : qwen3 ? kQwen3Block : kQwen25Block;
  Weights w;
  w.patch_w = held(ws.load({root + kPatch}, {e, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size})
                       .reshape({e, cfg.patch_dim()})
                       .contiguous());
  if (qwen3) {
    w.patch_b = ws.load({root + "patch_embed.proj.bias"}, {e});
    w.pos_embed = ws.load({root + "pos_embed.weight"}, {cfg.num_position_embeddings, e});
  }
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = root + "blocks." + std::to_string(i) + ".";
    Block b;
    b.norm1_w = ws.load({p + "norm1.weight"}, {e});
    b.norm2_w = ws.load({p + "norm2.weight"}, {e});
    if (names.norm1_b) b.norm1_b = ws.load({p + names.norm1_b}, {e});
    if (names.norm2_b) b.norm2_b = ws.load({p + names.norm2_b}, {e});
    b.w_qkv = held(ws.load({p + "attn.qkv.weight"}, {3 * e, e}));
    b.b_qkv = ws.load({p + "attn.qkv.bias"}, {3 * e});
    b.w_proj = held(ws.load({p + "attn.proj.weight"}, {e, e}));
    b.b_proj = ws.load({p + "attn.proj.bias"}, {e});
    const std::string fc1 = p + names.fc1, fc2 = p + names.fc2;
    b.w_fc1 = ws.load({fc1 + ".weight"}, {f, e});
    b.b_fc1 = ws.load({fc1 + ".bias"}, {f});
    if (names.up) {  // gate and up fused: one product, split after
      const std::string up = p + names.up;
      b.w_fc1 = at::cat({b.w_fc1, ws.load({up + ".weight"}, {f, e})}, 0).contiguous();  // packed below
      b.b_fc1 = at::cat({b.b_fc1, ws.load({up + ".bias"}, {f})}, 0).contiguous();
    }
    b.w_fc1 = held(b.w_fc1);
    b.w_fc2 = held(ws.load({fc2 + ".weight"}, {e, f}));
    b.b_fc2 = ws.load({fc2 + ".bias"}, {e});
    w.blocks.push_back(std::move(b));
  }
  TRIMKV_CHECK(cfg.out_hidden == text_hidden, Config, "checkpoint '", ws.source(), "': the vision config's merger "
               "output ", cfg.out_hidden, " differs from the text hidden_size ", text_hidden);
  const MergerNames& mn = qwen3 ? kQwen3Merger : kQwen2Merger;
  // Norm with bias: LayerNorm (Qwen2, Qwen3); without: RMSNorm (Qwen2.5).
  auto merger = [&](const std::string& mp, bool after_shuffle) {
    Merger m;
    const int64_t nw = after_shuffle ? e * m2 : e;
    m.norm_after_shuffle = after_shuffle;
    m.norm_w = ws.load({mp + mn.norm + ".weight"}, {nw});
    if (cfg.kind != QwenVisionKind::Qwen2_5) m.norm_b = ws.load({mp + mn.norm + ".bias"}, {nw});
    m.fc1_w = held(ws.load({mp + mn.fc1 + ".weight"}, {e * m2, e * m2}));
    m.fc1_b = ws.load({mp + mn.fc1 + ".bias"}, {e * m2});
    const std::string out = mp + mn.fc2 + ".weight";
    const TensorInfo* info = ws.find(out);
    TRIMKV_CHECK(info, Config, "checkpoint '", ws.source(), "' lacks the merger's output '", out, "'");
    const std::vector<int64_t> want = {text_hidden, e * m2};
    TRIMKV_CHECK(info->shape == want, Shape, "checkpoint '", ws.source(), "': merger '", out, "' is ",
                 shape_to_string(info->shape), " but the text decoder's hidden_size ", text_hidden,
                 " and the vision width ", e, " x ", m2, " merged patches need ", shape_to_string(want),
                 ": the merger contradicts the text model");
    m.fc2_w = held(ws.load({out}, want));
    m.fc2_b = ws.load({mp + mn.fc2 + ".bias"}, {text_hidden});
    return m;
  };
  w.merger = merger(root + "merger.", false);
  for (size_t j = 0; j < cfg.deepstack_visual_indexes.size(); ++j)
    w.deepstack.push_back(merger(root + "deepstack_merger_list." + std::to_string(j) + ".", true));
  return std::make_shared<QwenVisionTower>(cfg, std::move(w));
}

QwenVisionTower::QwenVisionTower(QwenVisionConfig cfg, Weights w) : m_cfg(std::move(cfg)), m_w(std::move(w)) {}

std::shared_ptr<QwenVisionTower> QwenVisionTower::on_device(const at::Device& device, bool* converted) const {
  auto on = [&](const at::Tensor& t) { return kernels::weight_on_device(t, device, converted); };
  auto merger_on = [&](const Merger& m) {
    return Merger{on(m.norm_w), on(m.norm_b), m.norm_after_shuffle, on(m.fc1_w), on(m.fc1_b), on(m.fc2_w), on(m.fc2_b)};
  };
  Weights w{on(m_w.patch_w), on(m_w.patch_b), on(m_w.pos_embed), {}, merger_on(m_w.merger), {}};
  for (const Block& b : m_w.blocks)
    w.blocks.push_back({on(b.norm1_w), on(b.norm1_b), on(b.norm2_w), on(b.norm2_b), on(b.w_qkv), on(b.b_qkv),
                        on(b.w_proj), on(b.b_proj), on(b.w_fc1), on(b.b_fc1), on(b.w_fc2), on(b.b_fc2)});
  for (const Merger& m : m_w.deepstack) w.deepstack.push_back(merger_on(m));
  return std::make_shared<QwenVisionTower>(m_cfg, std::move(w));
}

at::Device QwenVisionTower::device() const { return m_w.patch_w.device(); }

int64_t QwenVisionTower::parameter_count() const {
  int64_t n = 0;
  auto add = [&n](std::initializer_list<const at::Tensor*> ts) {
    for (const at::Tensor* t : ts)
      if (t->defined()) n += kernels::value_count(*t);
  };
  add({&m_w.patch_w, &m_w.patch_b, &m_w.pos_embed});
  for (const Merger* m : {&m_w.merger})
    add({&m->norm_w, &m->norm_b, &m->fc1_w, &m->fc1_b, &m->fc2_w, &m->fc2_b});
  for (const Merger& m : m_w.deepstack) add({&m.norm_w, &m.norm_b, &m.fc1_w, &m.fc1_b, &m.fc2_w, &m.fc2_b});
  for (const Block& b : m_w.blocks)
    add({&b.norm1_w, &b.norm1_b, &b.norm2_w, &b.norm2_b, &b.w_qkv, &b.b_qkv, &b.w_proj, &b.b_proj, &b.w_fc1, &b.b_fc1,
         &b.w_fc2, &b.b_fc2});
  return n;
}

at::Tensor qwen3_vl_position_embeddings(const at::Tensor& table, int64_t grid_h, int64_t grid_w, int64_t merge) {
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(table.size(0)))));
  TRIMKV_ASSERT(side * side == table.size(0) && grid_h % merge == 0 && grid_w % merge == 0);
  // Per axis: src = i (S - 1) / max(n - 1, 1) in float32; taps floor and floor + 1 clamped to
  // the table; weights max(0, 1 - |src - tap|) (F.interpolate bilinear, align_corners).
  auto taps = [side](int64_t i, int64_t n, int64_t tap[2], float weight[2]) {
    const float src = static_cast<float>(i) * static_cast<float>(side - 1) / static_cast<float>(std::max<int64_t>(n - 1, 1));
    const float lo = std::floor(src);
    for (int k = 0; k < 2; ++k) {
      tap[k] = std::clamp<int64_t>(static_cast<int64_t>(lo) + k, 0, side - 1);
      weight[k] = std::max(0.0f, 1.0f - std::fabs(src - lo - static_cast<float>(k)));
    }
  };
  const int64_t s = grid_h * grid_w;
  const PatchCoordinates cell = merge_block_coordinates(grid_h, grid_w, merge);  // the processor's row order
  std::vector<int64_t> index(static_cast<size_t>(4 * s));
  std::vector<float> weight(static_cast<size_t>(4 * s));
  for (int64_t p = 0; p < s; ++p) {
    int64_t th[2], tw[2];
    float wh[2], ww[2];
    taps(cell.row[static_cast<size_t>(p)], grid_h, th, wh);
    taps(cell.col[static_cast<size_t>(p)], grid_w, tw, ww);
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        index[static_cast<size_t>(4 * p + 2 * a + b)] = th[a] * side + tw[b];
        weight[static_cast<size_t>(4 * p + 2 * a + b)] = wh[a] * ww[b];
      }
  }
  const at::Tensor rows =
      at::embedding(table, at::tensor(index, at::kLong).to(table.device())).view({s, 4, table.size(1)});
  return (rows * at::tensor(weight, at::kFloat).to(table.device()).view({s, 4, 1})).sum(1);
}

QwenVisionTower::Encoded QwenVisionTower::encode(const at::Tensor& patches, int64_t grid_h, int64_t grid_w,
                                                 bool with_stats, const std::atomic<bool>* cancel) const {
  const QwenVisionConfig& c = m_cfg;
  const int64_t m = c.merge_size, m2 = m * m, nh = c.n_head, hd = c.head_dim();
  const int64_t s = grid_h * grid_w;
  TRIMKV_CHECK(grid_h > 0 && grid_w > 0 && grid_h % m == 0 && grid_w % m == 0, Input, "a ", grid_h, "x", grid_w,
               " patch grid is not made of ", m, "x", m, " merge blocks");
  TRIMKV_CHECK(patches.dim() == 2 && patches.size(0) == s && patches.size(1) == c.patch_dim(), Input,
               "vision tower input must be [", s, ", ", c.patch_dim(), "] for a ", grid_h, "x", grid_w, " grid, got ",
               shape_to_string(patches.sizes().vec()));
  const int64_t units = s / m2;

  // Row order: the processor's (merge blocks row-major, patches row-major inside); Qwen2.5 runs
  // its blocks window by window, so rows are permuted by whole merge blocks and put back after.
  std::vector<int64_t> unit_order(static_cast<size_t>(units));
  for (int64_t u = 0; u < units; ++u) unit_order[u] = u;
  std::vector<int64_t> window_bounds = {0, s};
  if (c.kind == QwenVisionKind::Qwen2_5) {
    VisionWindows win = qwen2_5_vl_windows(grid_h, grid_w, m, c.window_size, c.patch_size);
    unit_order = std::move(win.order);
    window_bounds = std::move(win.bounds);
  }
  std::vector<int64_t> row_order;
  row_order.reserve(static_cast<size_t>(s));
  for (int64_t u : unit_order)
    for (int64_t k = 0; k < m2; ++k) row_order.push_back(u * m2 + k);
  const at::Tensor perm = at::tensor(row_order, at::kLong);  // the CPU's copy for the rotary tables
  const at::Device dev = device();
  const at::Tensor perm_on = perm.to(dev);

  // 2D rotary: a patch's (row, col) in the patch grid, each over half the head width (the text
  // decoder's default inverse frequencies at dim hd / 2); angles cat(h·inv, w·inv) twice.
  const PatchCoordinates pos = merge_block_coordinates(grid_h, grid_w, m);
  RopeConfig axial;
  axial.theta = c.rope_theta;
  const at::Tensor inv = rope_inverse_frequencies(axial, hd / 2);  // [hd/4]
  const at::Tensor fh = at::tensor(pos.row, at::kLong).to(at::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  const at::Tensor fw = at::tensor(pos.col, at::kLong).to(at::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  const at::Tensor angles = at::cat({fh, fw, fh, fw}, 1).index_select(0, perm);  // [s, hd]
  const RopeTables rope{angles.cos().to(dev), angles.sin().to(dev)};
  const std::vector<int64_t> whole = {0, s};

  at::Tensor x =
      tower_linear(patches.to(dev, at::kFloat).index_select(0, perm_on).contiguous(), m_w.patch_w, m_w.patch_b);
  if (m_w.pos_embed.defined())  // Qwen3: learned positions resampled to this grid
    x = x + qwen3_vl_position_embeddings(m_w.pos_embed, grid_h, grid_w, m).index_select(0, perm_on);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  VitAttentionStats stats;
  std::vector<at::Tensor> deep(c.deepstack_visual_indexes.size());
  for (int64_t ib = 0; ib < c.depth; ++ib) {
    if (cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "image encoding cancelled");
    const Block& b = m_w.blocks[static_cast<size_t>(ib)];
    const at::Tensor h = layer_norm_or_rms(x, b.norm1_w, b.norm1_b);
    const at::Tensor qkv = tower_linear(h, b.w_qkv, b.b_qkv).view({s, 3, nh, hd});
    const at::Tensor q = apply_rope(qkv.select(1, 0), rope), k = apply_rope(qkv.select(1, 1), rope);
    const at::Tensor v = qkv.select(1, 2);
    const std::vector<int64_t>& bounds = c.full_attention(ib) ? whole : window_bounds;
    const bool last = with_stats && ib + 1 == c.depth;
    std::vector<at::Tensor> outs, received, keys;
    for (size_t w = 0; w + 1 < bounds.size(); ++w) {
      const int64_t a = bounds[w], n = bounds[w + 1] - a;
      VitAttentionStats st;
      outs.push_back(bidirectional_attention(q.narrow(0, a, n), k.narrow(0, a, n), v.narrow(0, a, n), scale,
                                             last ? &st : nullptr, cancel));
      if (last) {
        received.push_back(st.received);
        keys.push_back(st.keys);
      }
    }
    if (last) {
      stats.received = at::cat(received, 0);
      stats.keys = at::cat(keys, 0);
    }
    x = x + tower_linear(outs.size() == 1 ? outs[0] : at::cat(outs, 0), b.w_proj, b.b_proj);
    const at::Tensor h2 = layer_norm_or_rms(x, b.norm2_w, b.norm2_b);
    at::Tensor mid = tower_linear(h2, b.w_fc1, b.b_fc1);
    if (c.kind != QwenVisionKind::Qwen2_5) {
      mid = vit_activation(mid, c.hidden_act);
    } else {
      const int64_t f = c.mlp_hidden;
      mid = vit_activation(mid.narrow(1, 0, f), c.hidden_act) * mid.narrow(1, f, f);
    }
    x = x + tower_linear(mid.contiguous(), b.w_fc2, b.b_fc2);
    for (size_t j = 0; j < c.deepstack_visual_indexes.size(); ++j)  // Qwen3: this block feeds deepstack j
      if (c.deepstack_visual_indexes[j] == ib) deep[j] = merge(m_w.deepstack[j], x, units);
  }
  const at::Tensor merged = merge(m_w.merger, x, units);  // [units, H], window order
  const at::Tensor unit_perm = at::tensor(unit_order, at::kLong).to(dev);
  Encoded out;
  out.embeddings = at::empty_like(merged).index_copy_(0, unit_perm, merged);
  for (const at::Tensor& d : deep) out.deepstack.push_back(at::empty_like(d).index_copy_(0, unit_perm, d));
  out.hidden = at::empty_like(x).index_copy_(0, perm_on, x);
  if (with_stats) {
    out.attention = at::empty({units}, x.options())
                        .index_copy_(0, unit_perm, stats.received.view({units, m2}).mean(1));
    out.keys = at::empty({units, hd}, x.options())
                   .index_copy_(0, unit_perm, stats.keys.view({units, m2, hd}).mean(1));
  }
  return out;
}

std::shared_ptr<VlmModel> load_qwen_vl(const std::string& dir, const std::vector<TemplateVar>& vars,
                                       const ModelLoadOptions& options, const VlmFamily& family) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  auto m = std::make_shared<VlmModel>();
  ModelLoadOptions text_options = options;
  text_options.text_of_vlm = true;  // the tower is loaded below
  m->text = load_text_model(dir, text_options);
  TRIMKV_CHECK(m->text.tokenizer, Config, "vision-language checkpoint '", dir,
               "' has no tokenizer.json (its image tokens are needed)");
  TRIMKV_CHECK(m->text.config.rope.multimodal(), Config, "'", config_path, "': the text decoder (model_type '",
               m->text.config.model_type, "') has no multimodal rotary (mrope_section)");
  const Qwen2VlConfig cfg = Qwen2VlConfig::from_file(config_path);
  WeightStore ws = WeightStore::open_folder(dir);
  ws.set_cancel(options.cancel);
  auto tower = QwenVisionTower::load(cfg.vision, m->text.config.hidden_size, ws, m->text.weight_format);
  if (m->text.device != ComputeDevice::Cpu) tower = tower->on_device(torch_device(m->text.device));  // and place
  Qwen2VlProcessorConfig proc = Qwen2VlProcessorConfig::from_folder(dir);
  if (options.image_size > 0) {  // --image-size: at most image_size² pixels per image
    const int64_t max_pixels = static_cast<int64_t>(options.image_size) * options.image_size;
    TRIMKV_CHECK(max_pixels >= proc.min_pixels, Input, "--image-size ", options.image_size, " allows ", max_pixels,
                 " pixels, below '", dir, "''s min_pixels ", proc.min_pixels);
    proc.max_pixels = max_pixels;
  }
  const QwenVisionConfig& v = cfg.vision;
  TRIMKV_CHECK(proc.patch_size == v.patch_size && proc.merge_size == v.merge_size &&
                   proc.temporal_patch_size == v.temporal_patch_size,
               Config, "checkpoint '", dir, "': the image processor's patch_size / merge_size / temporal_patch_size (",
               proc.patch_size, ", ", proc.merge_size, ", ", proc.temporal_patch_size,
               ") differ from the vision config's (", v.patch_size, ", ", v.merge_size, ", ", v.temporal_patch_size,
               ")");
  const Tokenizer& tok = *m->text.tokenizer;
  QwenVlTokenIds ids;
  ids.image_pad = cfg.image_token_id;
  ids.vision_start = cfg.vision_start_token_id;
  ids.vision_end = cfg.vision_end_token_id;
  const std::pair<const char*, int32_t> named[] = {
      {kQwenImagePad, ids.image_pad}, {kQwenVisionStart, ids.vision_start}, {kQwenVisionEnd, ids.vision_end}};
  for (const auto& [text, id] : named) {
    TRIMKV_CHECK(id >= 0 && id < m->text.config.vocab_size, Config, "'", config_path, "': the id of ", text, " (",
                 id, ") is outside the vocabulary [0, ", m->text.config.vocab_size, ")");
    TRIMKV_CHECK(tok.token_to_id(text) == id, Config, "tokenizer '", tok.path(), "': '", text, "' is id ",
                 tok.token_to_id(text), " but config.json says ", id);
  }

  VisionInfo& vi = m->info;
  vi.family = family.name;
  vi.model_type = checkpoint_model_type(dir);
  vi.description = family.description;
  vi.vision_parameters = tower->parameter_count();
  vi.hidden_size = v.width;
  vi.n_layer = v.depth;
  vi.n_head = v.n_head;
  vi.intermediate_size = v.mlp_hidden;
  vi.patch_size = v.patch_size;
  vi.scale_factor = v.merge_size;
  vi.image_token_id = cfg.image_token_id;
  vi.min_pixels = proc.min_pixels;
  vi.max_pixels = proc.max_pixels;
  vi.resample = resample_filter_name(proc.resample);
  m->encoder = make_qwen_vl_encoder(dir, m->text.tokenizer, load_chat_format(dir, tok, ContentStyle::Parts), vars,
                                    std::move(tower), proc, ids);
  return m;
}

namespace {
std::shared_ptr<VlmModel> load_qwen2_vl(const std::string& dir, const std::vector<TemplateVar>& vars,
                                        const ModelLoadOptions& options) {
  return load_qwen_vl(dir, vars, options, qwen2_vl_family());
}
}  // namespace

const VlmFamily& qwen2_vl_family() {
  static const VlmFamily kFamily{
      "qwen2_vl",
      {"qwen2_vl", "qwen2_5_vl"},
      "Qwen2-VL / Qwen2.5-VL: ViT with 2D rotary (Qwen2.5: window attention), 2x2 patch merger, Qwen2 "
      "decoder with M-RoPE, any-resolution images",
      &load_qwen2_vl};
  return kFamily;
}

}  // namespace trimkv::vision
