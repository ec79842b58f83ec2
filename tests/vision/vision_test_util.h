// Helpers of the vision suite: the committed VLM fixtures (tests/oracle/vlm_fixtures.py).
#pragma once
#include <ATen/ATen.h>

#include "test_util.h"
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

}  // namespace trimkv::test
