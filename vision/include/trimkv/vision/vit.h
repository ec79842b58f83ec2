// Shared building blocks of the vision towers (STYLE.md §3), written once and composed by the
// family files: the pre-LayerNorm ViT encoder block (SigLIP, CLIP), the conv patch embedding as a
// matmul, NaViT-style bucketed position ids, and the pixel-shuffle connector. float32; the
// batched variants are differentiable (the demo model's training).
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <string>
#include <vector>

#include "trimkv/kernels/weight_format.h"

namespace trimkv {
class WeightStore;
}

namespace trimkv::vision {

struct VitConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_channels = 3;
  int64_t image_size = 0;  // pixels per tile side
  int64_t patch_size = 0;
  double layer_norm_eps = 1e-6;
  std::string hidden_act = "gelu_pytorch_tanh";

  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t head_dim() const { return hidden_size / n_head; }
};

// Roles of the per-layer tensors of a ViT block; families name them in a table.
enum class VitTensor {
  ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b
};
struct VitTensorSpec {
  VitTensor role;
  const char* name;  // relative to "<layers prefix>{il}."
};

struct VitLayerWeights {
  at::Tensor ln1_w, ln1_b;  // [D]
  at::Tensor w_qkv;         // [3D, D]  (q, k, v fused)
  at::Tensor b_qkv;         // [3D]
  at::Tensor w_o, b_o;      // [D, D], [D]
  at::Tensor ln2_w, ln2_b;  // [D]
  at::Tensor w_fc1, b_fc1;  // [F, D], [F]
  at::Tensor w_fc2, b_fc2;  // [D, F], [D]
};

// Binds cfg.n_layer blocks named `<layers_prefix><il>.<spec.name>`, checking shapes against cfg
// (Error{Shape} / Error{Config} naming the tensor); each block's matrices held in `format`
// (hold_tower_matrix) as it loads.
std::vector<VitLayerWeights> load_vit_layers(const WeightStore& ws, const std::string& layers_prefix,
                                             const std::vector<VitTensorSpec>& table, const VitConfig& cfg,
                                             kernels::WeightFormat format = kernels::WeightFormat::F32);

// The block's tensors on `device` (kernels::weight_on_device: q8/q4 and f16 matrices as bf16 off
// the CPU, *converted set then).
VitLayerWeights vit_layer_on_device(const VitLayerWeights& w, const at::Device& device, bool* converted = nullptr);

// A tower matrix held in `format` (kernels/weight_format.h) for the inference path, or in bf16
// where the format cannot hold its width; float32 returns it as it is (what training needs).
at::Tensor hold_tower_matrix(at::Tensor w, kernels::WeightFormat format);

// y = x wᵀ (+ b) for a tower's own matrices (patch embedding, blocks, connectors): like the text
// decoder's products, except that a bf16 matrix may multiply bf16-rounded activations where the
// CPU has AMX (kernels::Activations::Bf16: as transformers' bf16 towers compute, ~2.5x the sgemm
// at tile sizes). float32, f16 and quantised matrices behave as in the decoder.
at::Tensor tower_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

// Error{Unsupported} naming `where` for an activation the blocks do not implement.
void check_vit_activation(const std::string& act, const std::string& where);

// What a block's attention says about its tokens (VisionZip, METHOD.md §6), filled only when
// asked (no extra work otherwise).
struct VitAttentionStats {
  at::Tensor received;  // [n]: attention each token receives, mean over heads and over all
                        //     querying tokens (the CLS-less VisionZip score; sums to 1 over n)
  at::Tensor keys;      // [n, head_dim]: keys, mean over heads (VisionZip's similarity space)
};

// One pre-LN block with full (bidirectional) attention: x + attn(ln1 x), then + mlp(ln2 x).
// x: [n, D] (one image / tile) -> [n, D]. `stats` (optional) receives the block's attention
// statistics.
at::Tensor vit_block(const at::Tensor& x, const VitLayerWeights& w, const VitConfig& cfg,
                     VitAttentionStats* stats = nullptr);

// Full (unmasked) multi-head attention within one segment of tokens: q, k, v [n, n_head, hd]
// -> [n, n_head * hd], softmax in float32. `stats` (optional) receives what the attention says
// about the segment's tokens. Queries go through in blocks of kAttentionRowBlock rows (a big
// image's thousands of patches never need an n x n matrix); `cancel` (optional) is polled before
// each block of each head: Error{Cancelled}.
constexpr int64_t kAttentionRowBlock = 1024;
at::Tensor bidirectional_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                   VitAttentionStats* stats = nullptr, const std::atomic<bool>* cancel = nullptr);

// The MLP activations of the towers: gelu_pytorch_tanh / gelu_new, gelu (erf), quick_gelu, silu
// (check_vit_activation names the supported ones).
at::Tensor vit_activation(const at::Tensor& x, const std::string& act);

// The same block over a batch x [B, n, D] in plain differentiable ATen ops (training; no stats).
at::Tensor vit_block_batched(const at::Tensor& x, const VitLayerWeights& w, const VitConfig& cfg);

// Conv2d with kernel = stride = patch as a matmul. pixels: [C, S, S], weight [D, C, p, p] given
// flattened as [D, C*p*p], bias [D] -> [(S/p)^2, D], patches row-major.
at::Tensor patch_embed(const at::Tensor& pixels, const at::Tensor& w_flat, const at::Tensor& b,
                       int64_t patch_size);

// patch_embed over a batch: pixels [N, C, S, S] -> [N, (S/p)^2, D], differentiable.
at::Tensor patch_embed_batched(const at::Tensor& pixels, const at::Tensor& w_flat, const at::Tensor& b,
                               int64_t patch_size);

// Position ids of a patch grid whose valid region is n_h x n_w patches inside max_h x max_w
// (NaViT-style fractional coordinates bucketed onto a side x side table, as Idefics3's
// embeddings). Invalid patches get 0. A full grid (n = max = side) gives the identity. -> [max_h * max_w]
at::Tensor bucketed_position_ids(int64_t n_h, int64_t n_w, int64_t max_h, int64_t max_w, int64_t side);

// Pixel shuffle (space-to-depth) with scale s: x [N, G*G, D] -> [N, (G/s)^2, D*s*s] with
// y[n, r*(G/s)+c, (dh*s+dw)*D + e] = x[n, (r*s+dh)*G + (c*s+dw), e]  (MODELS.md, Idefics3).
at::Tensor pixel_shuffle(const at::Tensor& x, int64_t scale);

}  // namespace trimkv::vision
