// Image resolution control (--image-size, ModelLoadOptions::image_size): SmolVLM / Idefics3 resize
// the longest edge to it (fewer tiles), Qwen-VL cap the pixels at its square; the token count a
// user is shown before sending (ChatEngine::image_token_count) is exactly what the turn then
// holds, for images of every shape; impossible sizes are refused by name.
#include <catch2/catch.hpp>
#include <filesystem>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/image.h"

using namespace trimkv;
using trimkv::vision::ChatEngine;

namespace {

// Image positions the last user turn added (entries of modality Image over one layer and head).
int64_t image_positions_after_turn(ChatEngine& engine, const std::string& image) {
  engine.reset();
  engine.add_user_turn("What is this?", {image});
  const auto st = engine.state();
  const ModelInfo i = engine.info();
  return st.kv_image_entries / (i.n_layer * i.n_kv_head);
}

}  // namespace

TEST_CASE("The image tokens shown before sending are those the turn holds, at every --image-size", "[vision][image-size]") {
  const std::string images = test::data_dir() + "/vlm/images";
  struct Case {
    const char* model;
    std::vector<int> sizes;  // 0: the processor's own
  };
  for (const Case& c : {Case{"idefics3", {0, 32, 48, 96, 192}}, Case{"qwen2_5_vl", {0, 56, 100, 300}},
                        Case{"qwen3_vl", {0, 64, 200}}}) {
    int64_t previous_biggest = -1;
    for (int size : c.sizes) {
      CAPTURE(c.model, size);
      EngineOptions o;
      o.image_size = size;
      auto engine = ChatEngine::load(test::data_dir() + "/vlm/" + c.model, o);
      int64_t biggest = 0;
      for (const char* name : {"a.png", "b.jpg", "wide.png", "qwen_tall.png", "qwen_tiny.png", "qwen_wide.png"}) {
        const std::string path = images + "/" + name;
        CAPTURE(name);
        const int64_t shown = engine->image_token_count(path);
        CHECK(shown > 0);
        CHECK(image_positions_after_turn(*engine, path) == shown);
        const vision::RgbImage img = vision::decode_image_file(path);
        CHECK(engine->image_token_count(img.width, img.height) == shown);
        biggest = std::max(biggest, shown);
      }
      if (size > 0 && previous_biggest >= 0) CHECK(biggest >= previous_biggest);  // larger sides, no fewer tokens
      if (size > 0) previous_biggest = biggest;
    }
  }
}

TEST_CASE("Image sizes a checkpoint cannot take are refused by name", "[vision][image-size][errors]") {
  EngineOptions o;
  o.image_size = 4000;  // SmolVLM fixture: tiles of 32, markers for 6 per side
  CHECK_THROWS_WITH(ChatEngine::load(test::data_dir() + "/vlm/idefics3", o),
                    Catch::Contains("--image-size 4000") && Catch::Contains("tile markers for 6"));
  o.image_size = 2;  // below Qwen's min_pixels
  CHECK_THROWS_WITH(ChatEngine::load(test::data_dir() + "/vlm/qwen2_5_vl", o),
                    Catch::Contains("--image-size 2") && Catch::Contains("min_pixels"));
  o.image_size = -5;
  CHECK_THROWS_WITH(ChatEngine::load(test::data_dir() + "/vlm/qwen2_5_vl", o), Catch::Contains("--image-size"));
  // A text model takes no images: 0 tokens, whatever the size.
  EngineOptions t;
  auto text = ChatEngine::load(test::model_dir("qwen2"), t);
  CHECK(text->image_token_count(512, 512) == 0);
}
