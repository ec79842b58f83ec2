// The Qwen-VL line (shared/QWEN-VL.md): Qwen2-VL, Qwen2.5-VL and Qwen3-VL. The vision tower
// (patch embedding as a matmul, 2D rotary, attention within each image; Qwen2.5's window
// attention; Qwen3's learned position embeddings interpolated to the grid and its deepstack
// mergers), the 2x2 patch merger, and the prompt side the line shares (image-pad expansion,
// per-token tags and M-RoPE offsets). The family files (src/families/qwen2_vl.cpp, qwen3_vl.cpp)
// register the model types; this header is what tests and the encoder use.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trimkv/core/kv_types.h"
#include "trimkv/vision/vit.h"

namespace trimkv {
class WeightStore;
}

namespace trimkv::vision {

enum class QwenVisionKind {
  Qwen2,    // LayerNorm blocks, fc1/fc2 MLP (quick_gelu), LayerNorm merger, full attention
  Qwen2_5,  // RMSNorm blocks, SiLU-gated MLP, RMSNorm merger, window attention + full blocks
  Qwen3,    // patch bias, learned position embeddings, LayerNorm blocks, fc1/fc2 MLP (tanh GELU),
            // deepstack mergers after some blocks
};

struct QwenVisionConfig {
  QwenVisionKind kind = QwenVisionKind::Qwen2;
  int64_t depth = 0;
  int64_t width = 0;       // the blocks' width (Qwen2: embed_dim; Qwen2.5: hidden_size)
  int64_t n_head = 0;
  int64_t mlp_hidden = 0;  // Qwen2: embed_dim * mlp_ratio; Qwen2.5: intermediate_size
  int64_t out_hidden = 0;  // the merger's output (Qwen2: hidden_size; Qwen2.5: out_hidden_size)
  int64_t in_channels = 3, patch_size = 14, temporal_patch_size = 2, merge_size = 2;
  std::string hidden_act = "quick_gelu";
  int64_t window_size = 112;                   // Qwen2.5: pixels per window side
  std::vector<int64_t> fullatt_block_indexes;  // Qwen2.5: blocks with whole-image attention
  int64_t num_position_embeddings = 0;         // Qwen3: a square table of learned positions
  std::vector<int64_t> deepstack_visual_indexes;  // Qwen3: blocks whose output feeds a deepstack merger
  double rope_theta = 10000.0;

  int64_t head_dim() const { return width / n_head; }
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  bool full_attention(int64_t block) const;  // Qwen2: every block
};

// The checkpoint's config.json: vision_config, the special token ids, the text hidden size.
struct Qwen2VlConfig {
  QwenVisionConfig vision;
  int32_t image_token_id = 151655, video_token_id = 151656;
  int32_t vision_start_token_id = 151652, vision_end_token_id = 151653;
  // model_type qwen2_vl -> Qwen2, qwen2_5_vl -> Qwen2_5, qwen3_vl -> Qwen3. Errors name the file
  // and the field (a head width the 2D rotary cannot split, an unknown activation, block indexes
  // beyond the tower's depth, a position table that is not square).
  static Qwen2VlConfig from_file(const std::string& config_path);
};

// Qwen2.5-VL's windows over one image of grid_h x grid_w patches (get_vision_window_index):
// `order` lists the merged units (row-major numbering) window by window, row-major inside each
// (a window is window_size / merge / patch units per side; edge windows are smaller); `bounds`
// are the cumulative patch counts at each window's end, starting with 0.
struct VisionWindows {
  std::vector<int64_t> order;   // [(grid_h / merge) * (grid_w / merge)]
  std::vector<int64_t> bounds;  // [n_windows + 1], in patches
};
VisionWindows qwen2_5_vl_windows(int64_t grid_h, int64_t grid_w, int64_t merge, int64_t window_size,
                                 int64_t patch_size);

class QwenVisionTower {
 public:
  struct Block {
    at::Tensor norm1_w, norm1_b, norm2_w, norm2_b;  // b undefined for RMSNorm (Qwen2.5)
    at::Tensor w_qkv, b_qkv;                        // [3E, E], [3E]
    at::Tensor w_proj, b_proj;                      // [E, E], [E]
    at::Tensor w_fc1, b_fc1;                        // Qwen2: [F, E]; Qwen2.5: gate and up fused [2F, E]
    at::Tensor w_fc2, b_fc2;                        // [E, F]
  };
  // A patch merger: norm, the merge block's m^2 rows side by side, Linear, GELU (erf), Linear.
  struct Merger {
    at::Tensor norm_w, norm_b;  // [E] (before the shuffle) or [4E] (after it); b undefined: RMSNorm
    bool norm_after_shuffle = false;
    at::Tensor fc1_w, fc1_b;    // [4E, 4E]
    at::Tensor fc2_w, fc2_b;    // [H, 4E]
  };
  struct Weights {
    at::Tensor patch_w;  // [E, C * T * p * p] (the Conv3d kernel flattened)
    at::Tensor patch_b;  // [E] (Qwen3) or undefined
    at::Tensor pos_embed;  // [S^2, E] (Qwen3) or undefined
    std::vector<Block> blocks;
    Merger merger;
    std::vector<Merger> deepstack;  // Qwen3: one per deepstack_visual_indexes entry
  };

  // Binds model.visual.* (v5) or visual.* (legacy) and checks the merger's output against
  // `text_hidden` (Error{Shape} naming the tensor and both widths).
  // The matrices (patch embedding, blocks, mergers) are held in `format` for inference (the
  // text decoder's --weights; bf16 where a width is not whole blocks), packed as they load.
  static std::shared_ptr<QwenVisionTower> load(const QwenVisionConfig& cfg, int64_t text_hidden,
                                               const WeightStore& ws,
                                               kernels::WeightFormat format = kernels::WeightFormat::F32);
  QwenVisionTower(QwenVisionConfig cfg, Weights w);

  const QwenVisionConfig& config() const { return m_cfg; }
  int64_t parameter_count() const;
  // The same tower with its weights on `device` (vit_layer_on_device's rule); encode() then runs
  // there (patches are taken to it; its outputs stay there).
  std::shared_ptr<QwenVisionTower> on_device(const at::Device& device, bool* converted = nullptr) const;
  at::Device device() const;
  const Weights& weights() const { return m_w; }

  struct Encoded {
    at::Tensor embeddings;  // [grid_h * grid_w / merge^2, H], merged units row-major
    std::vector<at::Tensor> deepstack;  // Qwen3: [units, H] per deepstack index, same order
    at::Tensor hidden;      // [grid_h * grid_w, E] the last block's output, processor row order
    at::Tensor attention;   // [units]: the last block's attention received per merged unit (mean
                            //          over its patches), with_stats only
    at::Tensor keys;        // [units, head_dim]: the last block's keys per unit (mean), with_stats only
  };
  // One image's patches [grid_h * grid_w, patch_dim] (the processor's rows, merge-block order)
  // -> its merged embeddings. Error{Input} for a patch count or width that does not fit the grid.
  // `cancel` is polled between blocks (Error{Cancelled}).
  Encoded encode(const at::Tensor& patches, int64_t grid_h, int64_t grid_w, bool with_stats = false,
                 const std::atomic<bool>* cancel = nullptr) const;

 private:
  QwenVisionConfig m_cfg;
  Weights m_w;
};

// Qwen3-VL's learned position embeddings resampled to a grid_h x grid_w patch grid (bilinear,
// align_corners, as vision_utils.get_vision_interpolation_indices_and_weights), rows in the
// processor's merge-block order. table: [S^2, E] -> [grid_h * grid_w, E].
at::Tensor qwen3_vl_position_embeddings(const at::Tensor& table, int64_t grid_h, int64_t grid_w, int64_t merge);

// Prompt side of the Qwen-VL line.
struct QwenVlTokenIds {
  int32_t image_pad = -1, vision_start = -1, vision_end = -1;
};
// One image of a prompt as the tokens see it: its merged grid.
struct QwenVlImageGrid {
  int64_t rows = 0, cols = 0;  // merged units (grid_h / merge, grid_w / merge)
};

// Tags a tokenized prompt whose k-th run of image_pad tokens is image first_image_id + k:
// image-pad positions get modality Image with the image id and their merged-grid row and
// column; vision_start / vision_end get Special with the image id; the rest Text. Returns the
// M-RoPE offsets of every position as well (get_rope_index from the segment's start).
// Error{Internal} when the runs do not match the grids.
std::pair<std::vector<TokenInfo>, std::vector<RopeOffset>> qwen_vl_tag_tokens(
    const std::vector<int32_t>& ids, const QwenVlTokenIds& tok, const std::vector<QwenVlImageGrid>& grids,
    int first_image_id);

}  // namespace trimkv::vision
