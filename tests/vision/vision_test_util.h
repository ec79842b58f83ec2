// Helpers of the vision suite: the committed VLM fixtures (tests/oracle/vlm_fixtures.py).
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <memory>

#include "test_util.h"
#include "trimkv/core/session.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/image.h"

namespace trimkv::test {

inline std::string vlm_dir() { return data_dir() + "/vlm"; }
inline std::string vlm_model(const std::string& name) { return vlm_dir() + "/" + name; }
inline std::string vlm_image(const std::string& name) { return vlm_dir() + "/images/" + name; }

inline const WeightStore& preprocess_expected() {
  static const WeightStore ws = WeightStore::open_file(vlm_dir() + "/preprocess.safetensors");
  return ws;
}

// [H, W, 3] uint8 as the fixture stores it (loaded as float by WeightStore).
inline at::Tensor as_tensor(const vision::RgbImage& img) {
  return at::from_blob(const_cast<uint8_t*>(img.data.data()), {img.height, img.width, 3}, at::kByte)
      .to(at::kFloat);
}

// A uint8 fixture tensor (the WeightStore converts only float dtypes), as float.
inline at::Tensor load_u8(const std::string& name) {
  const TensorInfo* info = preprocess_expected().find(name);
  if (!info) throw std::runtime_error("fixture tensor '" + name + "' is missing");
  return at::from_blob(const_cast<uint8_t*>(info->data), info->shape, at::kByte).to(at::kFloat);
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}
inline double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().mean().item<double>();
}

// Delegates to the real encoder and raises `flag` once the turn is encoded: the cancel then lands
// between prefill chunks (the runner polls after each chunk).
class CancelAfterEncoding : public trimkv::TurnEncoder {
 public:
  CancelAfterEncoding(std::shared_ptr<const TurnEncoder> inner, std::atomic<bool>* flag)
      : m_inner(std::move(inner)), m_flag(flag) {}
  trimkv::StreamSegment user_turn(const std::vector<trimkv::Message>& history,
                                  const std::vector<trimkv::ContentPart>& content, int first_image_id,
                                  std::vector<trimkv::ImageRecord>& images, const std::atomic<bool>* cancel,
                                  const trimkv::ImageTokenReducer& reduce) const override {
    trimkv::StreamSegment s = m_inner->user_turn(history, content, first_image_id, images, cancel, reduce);
    if (m_armed) m_flag->store(true);
    return s;
  }
  trimkv::StreamSegment raw_prompt(const std::vector<trimkv::ContentPart>& content, int first_image_id,
                           std::vector<trimkv::ImageRecord>& images, const std::atomic<bool>* cancel,
                           const trimkv::ImageTokenReducer& reduce) const override {
    return m_inner->raw_prompt(content, first_image_id, images, cancel, reduce);
  }
  std::vector<int32_t> system_turn(const std::string& text) const override { return m_inner->system_turn(text); }
  std::vector<int32_t> assistant_turn(const std::vector<trimkv::Message>& history,
                                      const std::string& text) const override {
    return m_inner->assistant_turn(history, text);
  }
  std::vector<int32_t> close_assistant_turn(const std::vector<trimkv::Message>& history) const override {
    return m_inner->close_assistant_turn(history);
  }
  std::vector<int32_t> end_of_turn_ids() const override { return m_inner->end_of_turn_ids(); }
  std::shared_ptr<const TurnEncoder> with_template_variables(
      const std::vector<trimkv::TemplateVar>& vars) const override {
    return m_inner->with_template_variables(vars);
  }
  bool m_armed = false;

 private:
  std::shared_ptr<const TurnEncoder> m_inner;
  std::atomic<bool>* m_flag;
};

}  // namespace trimkv::test
