// The vision tower and connector in the decoder's precision (--weights): every matrix of the
// tower, the mergers and the connector is held as bf16 / f16 / q8 / q4 (bf16 where a width is
// not whole blocks) and the image embeddings stay near the float32 tower's (measured, relative to
// the largest embedding value: bf16 0.4-1.0%, f16 0.03-0.09%, q8 1.1-1.9%); float32 is unchanged.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "test_util.h"
#include "trimkv/core/session.h"
#include "trimkv/vision/vlm.h"

using namespace trimkv;

namespace {

at::Tensor image_embeddings(const vision::VlmModel& m) {
  std::vector<ImageRecord> images;
  const std::vector<ContentPart> content = {ContentPart::text_part("What is this?"),
                                            ContentPart::image_part(test::data_dir() + "/vlm/images/a.png")};
  return m.encoder->user_turn({}, content, 0, images, nullptr, {}).image_embeddings;
}

}  // namespace

TEST_CASE("The vision tower runs in the weights' precision and stays near the float32 tower", "[vision][weights]") {
  for (const char* name : {"idefics3", "qwen2_5_vl", "qwen3_vl"}) {
    const std::string dir = test::data_dir() + "/vlm/" + name;
    const auto f32 = vision::load_vlm(dir, {}, {"f32"});
    const at::Tensor want = image_embeddings(*f32);
    const double scale = want.abs().max().item<double>();
    for (const auto& [fmt, bound] : {std::pair{"bf16", 0.05}, std::pair{"f16", 0.01}, std::pair{"q8", 0.1}}) {
      CAPTURE(name, fmt);
      const auto m = vision::load_vlm(dir, {}, {fmt});
      CHECK(m->info.vision_parameters == f32->info.vision_parameters);
      const double rel = (image_embeddings(*m) - want).abs().max().item<double>() / scale;
      INFO(name << " " << fmt << " max |embedding - float32 tower| / max |embedding| " << rel);
      CHECK(rel > 0);  // the tower really changed precision
      CHECK(rel < bound);
    }
  }
}
