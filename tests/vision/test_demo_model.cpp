// The shipped demo model (resources/demo-model, made by `trimkv train-demo`): within the size
// limit, complete, and transformers' logits reproduced (tests/oracle/demo_fixtures.py wrote the
// expected values with Idefics3ForConditionalGeneration on the same folder).
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "test_util.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/session.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/vlm.h"
#include "trimkv/vision/world_eval.h"
#include "vision_test_util.h"

using namespace trimkv;
using namespace trimkv::vision;
namespace fs = std::filesystem;

TEST_CASE("the shipped demo model is complete and at most 30 MB", "[demo][model]") {
  const std::string dir = default_model_dir();
  int64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) bytes += static_cast<int64_t>(e.file_size());
  CHECK(bytes <= 30 * 1024 * 1024);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "chat_template.jinja", "processor_config.json", "generation_config.json",
                        "retention_gates.safetensors"})
    CHECK(fs::is_regular_file(fs::path(dir) / f));
  CHECK_FALSE(fs::exists(fs::path(dir) / "train"));
}

TEST_CASE("the shipped demo model gives transformers' logits on a two-image, two-turn conversation",
          "[demo][model][oracle]") {
  const std::shared_ptr<const VlmModel> vlm = load_vlm(default_model_dir());
  const std::string fixtures = test::data_dir() + "/demo";
  const nlohmann::json meta = test::read_json(fixtures + "/expected.json");
  const WeightStore expected = WeightStore::open_file(fixtures + "/expected.safetensors");
  std::vector<world::WorldRecord> records = world::read_world_jsonl(fixtures + "/world/test.jsonl");
  const world::WorldRecord* rec = nullptr;
  for (const auto& r : records)
    if (r.id == meta.at("id").get<std::string>()) rec = &r;
  REQUIRE(rec);
  REQUIRE(rec->turns.size() >= 2);

  Session session(vlm->text, vlm->encoder);
  for (int k = 0; k < 2; ++k) {
    const world::WorldTurn& t = rec->turns[static_cast<size_t>(k)];
    session.add_user_turn(content_from_prompt(t.text, t.images));
    const at::Tensor want = tensor_to_float(*expected.find("turn" + std::to_string(k + 1) + "_last_logits"));
    INFO("turn " << k + 1);
    CHECK(test::max_abs_diff(session.pending_logits(), want) < 1e-4);
    // Greedy agrees with transformers' argmax at the generation prompt.
    CHECK(session.pending_logits().argmax().item<int64_t>() == want.argmax().item<int64_t>());
    if (k == 0) session.add_assistant_text(t.answer);
  }
  const TensorInfo* ids = expected.find("input_ids");
  REQUIRE(ids);
  REQUIRE(ids->dtype == DType::I64);
  std::vector<int64_t> want_ids(ids->n_bytes / sizeof(int64_t));
  std::memcpy(want_ids.data(), ids->data, ids->n_bytes);
  CHECK(std::vector<int64_t>(session.ids().begin(), session.ids().end()) == want_ids);
}
