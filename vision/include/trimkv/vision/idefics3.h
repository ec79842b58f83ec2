// Idefics3 / SmolVLM (MODELS.md "SmolVLM (Idefics3)"): the image processor (slow, PIL path),
// the SigLIP tower + pixel-shuffle connector, the prompt expansion of <image> and the tagging of
// every position with its image, tile and patch. The family file (src/families/idefics3.cpp)
// binds the weights and registers the family; this header is what tests and the registry use.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/kv_types.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/pixel_scaling.h"
#include "trimkv/vision/resample.h"
#include "trimkv/vision/vit.h"

namespace trimkv {
class WeightStore;
}

namespace trimkv::vision {

// Idefics3ImageProcessor(Pil) settings; defaults are the class defaults.
struct Idefics3ProcessorConfig {
  bool do_resize = true;
  int longest_edge = 4 * 364;   // "size": {"longest_edge"}
  int tile_size = 364;          // "max_image_size": {"longest_edge"}
  bool do_image_splitting = true;
  ResampleFilter resample = ResampleFilter::Lanczos;
  PixelScaling scaling;  // rescale 1/255, mean = std = 0.5

  // Reads <dir>/preprocessor_config.json, else the "image_processor" section of
  // <dir>/processor_config.json (transformers v5), else the defaults. Errors name file and field.
  static Idefics3ProcessorConfig from_folder(const std::string& dir);
};

// One preprocessed image.
struct Idefics3Tiles {
  at::Tensor pixels;  // [n_tiles, 3, tile_size, tile_size]: tiles row-major, global image last
  int rows = 0, cols = 0;                     // 0, 0: not split (pixels holds one image)
  int width = 0, height = 0;                  // input size
  int resized_width = 0, resized_height = 0;  // the image the tiles were cut from
};

// The sizes and tile grid the processor gives an image of width x height (no pixels touched): the
// longest-edge resize, the tile-multiple resize, rows x cols tiles (0 x 0: not split) and the
// number of tower passes (tiles + the global image, or 1). What idefics3_preprocess cuts.
struct Idefics3Grid {
  int scaled_width = 0, scaled_height = 0;    // after the longest-edge resize
  int resized_width = 0, resized_height = 0;  // the image the tiles are cut from
  int rows = 0, cols = 0;
  int n_tiles = 1;
};
Idefics3Grid idefics3_grid(int width, int height, const Idefics3ProcessorConfig& cfg);

// The slow processor's _preprocess for one image: longest-edge resize (even-adjusted, capped at
// 4096), resize to multiples of the tile size and split (or one square resize when not
// splitting), then rescale and normalise in float32 as numpy does.
Idefics3Tiles idefics3_preprocess(const RgbImage& image, const Idefics3ProcessorConfig& cfg);

// The text an <image> placeholder expands to (Idefics3Processor.replace_image_token).
std::string idefics3_image_prompt(int rows, int cols, int image_seq_len);

// The SmolVLM-Instruct chat template (the family's reference template, which the demo model
// ships): "<|im_start|>" once, then per message "Role:" (": " unless the content starts with an
// image) + contents ("<image>" per image) + "<end_of_utterance>\n"; generation prompt
// "Assistant:". Checkpoints are rendered with their own template; this one lays out data the
// project makes itself (the demo model's training conversations, its tokenizer's text).
extern const char* const kSmolVlmChatTemplate;
// kSmolVlmChatTemplate as a ChatFormat (content as parts), parsed once.
const ChatFormat& smolvlm_chat_format();

// The demo model's chat template: SmolVLM's layout ("Role: " + contents + "<end_of_utterance>\n")
// with each image numbered as it comes, "Image k:<image>" (k counts over the whole
// conversation), so that a user attaches pictures without labelling them and still asks about
// "image 2". What the demo model is trained on and ships.
extern const char* const kDemoChatTemplate;
const ChatFormat& demo_chat_format();
// Whether the folder holds a model of the demo world: its chat_template.jinja is
// kDemoChatTemplate, as the built-in model's and every `trimkv train-demo` folder's is.
bool is_demo_world_model(const std::string& dir);

// The marker around each image's tokens, and the one before a global (whole-image) tile.
inline constexpr const char* kIdefics3FakeImageToken = "<fake_token_around_image>";
inline constexpr const char* kIdefics3GlobalImageToken = "<global-img>";

// Ids of the structural tokens, looked up in the tokenizer.
struct Idefics3TokenIds {
  int32_t image = -1, fake = -1, global = -1;
  std::vector<std::vector<int32_t>> row_col;  // [6][6]: <row_{r+1}_col_{c+1}>, -1 if absent
};

// Tags the positions of a tokenized, expanded prompt: <image> tokens get modality Image with
// their image id (first_image_id + k for the k-th image), tile (row-major, global last) and patch
// row/column in the tile's grid_side x grid_side token grid; the markers around them
// (<fake_token_around_image>, <row_r_col_c>, <global-img>, the newlines between tile rows) get
// modality Special with the image id and tile; everything else is Text. grids: (rows, cols) per
// image in order. Error{Internal} when the ids do not have the expected structure.
std::vector<TokenInfo> idefics3_tag_tokens(const std::vector<int32_t>& ids, const Idefics3TokenIds& tok,
                                           const std::vector<std::pair<int, int>>& grids,
                                           int grid_side, int first_image_id);

struct Idefics3Config {
  VitConfig vision;
  int64_t scale_factor = 2;
  int32_t image_token_id = -1;
  int64_t text_hidden_size = 0;
  int64_t image_seq_len() const {
    const int64_t g = vision.patches_per_side() / scale_factor;
    return g * g;
  }
  // Reads config.json (vision_config, scale_factor, image_token_id, text_config.hidden_size) and
  // checks the geometry is consistent. Errors name the file and field.
  static Idefics3Config from_file(const std::string& config_path);
};

// SigLIP tower (patch embedding, bucketed positions, encoder, post-LayerNorm) and connector
// (pixel shuffle, Linear without bias).
class Idefics3Vision {
 public:
  // Binds the tower and connector tensors (declarative table in the family file).
  // The matrices (patch embedding, blocks, connector) are held in `format` for inference (the
  // text decoder's --weights; bf16 where a width is not whole blocks), packed as they load;
  // float32 keeps them as the batched training path needs them.
  static std::shared_ptr<Idefics3Vision> load(const Idefics3Config& cfg, const WeightStore& ws,
                                              kernels::WeightFormat format = kernels::WeightFormat::F32);
  const Idefics3Config& config() const { return m_cfg; }
  int64_t parameter_count() const;
  // The same tower with its weights on `device` (vit_layer_on_device's rule); tower() and
  // encode() then run there (pixels are taken to it).
  std::shared_ptr<Idefics3Vision> on_device(const at::Device& device, bool* converted = nullptr) const;
  at::Device device() const;

  // pixels [N, 3, S, S] -> last hidden state after post_layernorm [N, (S/p)^2, D]. `cancel` is
  // polled between tiles (Error{Cancelled}). `last_layer` (optional) receives, per tile, the last
  // encoder layer's attention statistics over its (S/p)^2 patches.
  at::Tensor tower(const at::Tensor& pixels, const std::atomic<bool>* cancel = nullptr,
                   std::vector<VitAttentionStats>* last_layer = nullptr) const;
  // tower() for all N tiles at once in plain differentiable ATen ops (training), no cancel/stats.
  at::Tensor tower_batched(const at::Tensor& pixels) const;
  // [N, (S/p)^2, D] -> [N, image_seq_len, text_hidden]
  at::Tensor connector(const at::Tensor& hidden) const;
  at::Tensor encode(const at::Tensor& pixels, const std::atomic<bool>* cancel = nullptr) const {
    return connector(tower(pixels, cancel));
  }
  // encode() plus, per connector output token, the last layer's statistics pooled over the
  // token's pixel-shuffle group of scale_factor^2 patches (VisionZip after the connector, which
  // needs the full patch grid): attention received (mean over the group) and keys (mean).
  struct Encoded {
    at::Tensor embeddings;  // [N, image_seq_len, text_hidden]
    at::Tensor attention;   // [N, image_seq_len]
    at::Tensor keys;        // [N, image_seq_len, head_dim]
  };
  Encoded encode_with_attention(const at::Tensor& pixels, const std::atomic<bool>* cancel = nullptr) const;

  struct Weights {
    at::Tensor patch_w;    // [D, 3 * p * p] (conv weight flattened)
    at::Tensor patch_b;    // [D]
    at::Tensor pos_embed;  // [(S/p)^2, D]
    std::vector<VitLayerWeights> layers;
    at::Tensor post_ln_w, post_ln_b;  // [D]
    at::Tensor proj;       // [text_hidden, D * s^2]
  };
  Idefics3Vision(Idefics3Config cfg, Weights w);
  const Weights& weights() const { return m_w; }

 private:
  // Checks pixels is [N, C, S, S] (Error{Input}) and returns the patch grid's position
  // embeddings [(S/p)^2, D].
  at::Tensor position_embeddings(const at::Tensor& pixels) const;

  Idefics3Config m_cfg;
  Weights m_w;
};

}  // namespace trimkv::vision
