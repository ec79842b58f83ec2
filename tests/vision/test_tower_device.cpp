// The towers move to the device the decoder runs on (on_device; --device cuda puts them on the
// GPU, where tests/cuda/test_cuda_runtime runs them against the CPU). Here: every weight follows
// (LibTorch's meta device stands in for a GPU: it holds shapes only, and C++ LibTorch has no meta
// kernels for the towers' operators to run a forward there), block-quantised matrices become
// bfloat16, and on the CPU the moved tower is the same tower.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/qwen2_vl.h"
#include "trimkv/vision/qwen2_vl_processor.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;

namespace {
const at::Device kMeta(at::kMeta);

void check_on(const at::Tensor& t, const at::Tensor& from) {
  if (!from.defined()) {
    CHECK_FALSE(t.defined());
    return;
  }
  CHECK(t.device() == kMeta);
  CHECK(t.sizes() == from.sizes());
}
}  // namespace

TEST_CASE("the Idefics3 tower moves whole to another device, q8 as bf16", "[vision][device]") {
  Idefics3Config cfg = Idefics3Config::from_file(test::vlm_model("idefics3") + "/config.json");
  cfg.text_hidden_size = 64;
  const auto cpu =
      Idefics3Vision::load(cfg, WeightStore::open_folder(test::vlm_model("idefics3")), kernels::WeightFormat::Q8_0);
  bool dequantised = false;
  const auto meta = cpu->on_device(kMeta, &dequantised);
  CHECK(dequantised);
  CHECK(meta->device() == kMeta);
  const auto& a = meta->weights();
  const auto& b = cpu->weights();
  for (auto [t, from] : {std::pair{&a.patch_b, &b.patch_b}, {&a.pos_embed, &b.pos_embed}, {&a.post_ln_w, &b.post_ln_w},
                         {&a.post_ln_b, &b.post_ln_b}})
    check_on(*t, *from);
  CHECK(a.proj.device() == kMeta);
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    CHECK(a.layers[i].w_qkv.scalar_type() == at::kBFloat16);  // unpacked from q8 blocks
    CHECK(a.layers[i].w_qkv.sizes() == at::IntArrayRef{kernels::weight_rows(b.layers[i].w_qkv),
                                                       kernels::weight_cols(b.layers[i].w_qkv)});
    check_on(a.layers[i].ln1_w, b.layers[i].ln1_w);
    check_on(a.layers[i].b_fc2, b.layers[i].b_fc2);
  }
  // On the CPU, on_device is the same tower.
  const at::Tensor px = at::rand({1, 3, cfg.vision.image_size, cfg.vision.image_size});
  CHECK(at::equal(cpu->on_device(at::Device(at::kCPU))->encode(px), cpu->encode(px)));
}

TEST_CASE("the Qwen-VL towers move whole to another device", "[vision][device][qwen2vl]") {
  for (const char* name : {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"}) {
    CAPTURE(name);
    const Qwen2VlConfig cfg = Qwen2VlConfig::from_file(test::vlm_model(name) + "/config.json");
    const auto cpu = QwenVisionTower::load(cfg.vision, 64, WeightStore::open_folder(test::vlm_model(name)));
    const auto meta = cpu->on_device(kMeta);
    CHECK(meta->device() == kMeta);
    const auto& a = meta->weights();
    const auto& b = cpu->weights();
    check_on(a.patch_w, b.patch_w);
    check_on(a.patch_b, b.patch_b);
    check_on(a.pos_embed, b.pos_embed);
    REQUIRE(a.blocks.size() == b.blocks.size());
    for (size_t i = 0; i < a.blocks.size(); ++i) {
      check_on(a.blocks[i].norm1_w, b.blocks[i].norm1_w);
      check_on(a.blocks[i].norm1_b, b.blocks[i].norm1_b);
      check_on(a.blocks[i].w_qkv, b.blocks[i].w_qkv);
      check_on(a.blocks[i].w_fc2, b.blocks[i].w_fc2);
      check_on(a.blocks[i].b_fc2, b.blocks[i].b_fc2);
    }
    check_on(a.merger.fc1_w, b.merger.fc1_w);
    check_on(a.merger.norm_b, b.merger.norm_b);
    CHECK(a.merger.norm_after_shuffle == b.merger.norm_after_shuffle);
    REQUIRE(a.deepstack.size() == b.deepstack.size());
    for (size_t j = 0; j < a.deepstack.size(); ++j) check_on(a.deepstack[j].fc2_w, b.deepstack[j].fc2_w);
    const Qwen2VlPatches p = qwen2_vl_preprocess(decode_image_file(test::vlm_image("qwen_a.png")),
                                                 Qwen2VlProcessorConfig::from_folder(test::vlm_model(name)));
    const QwenVisionTower::Encoded want = cpu->encode(p.pixels, p.grid_h, p.grid_w);
    const QwenVisionTower::Encoded same = cpu->on_device(at::Device(at::kCPU))->encode(p.pixels, p.grid_h, p.grid_w);
    CHECK(at::equal(same.embeddings, want.embeddings));
    REQUIRE(same.deepstack.size() == want.deepstack.size());
  }
}
