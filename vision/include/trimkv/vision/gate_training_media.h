// Gate training on vision-language models (gate_training.h's SampleMediaEncoder for the VLM
// families of vision/). A conversation line is laid out exactly as a Session would see it: each
// user turn through the family's TurnEncoder (chat template, image decoding, preprocessing, tower
// and connector: the code Session and ChatEngine use), each answer through its assistant_turn.
// Labels: the answer tokens and the end-of-turn token that closes them (not what follows it).
// Images: a turn's text holds <image> placeholders filled by the line's "images" in order; with
// no placeholder anywhere, all images open the first turn. Features are computed once per sample
// under no-grad (tower and connector frozen) and merged into the token embeddings by embed().
#pragma once
#include <memory>

#include "trimkv/core/gate_training.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

class VlmSampleEncoder final : public SampleMediaEncoder {
 public:
  explicit VlmSampleEncoder(std::shared_ptr<const VlmModel> model);
  // Rewrites ids / is_label with the chat template and fills is_media / media. Error{Input} (the
  // line is skipped by load_dataset) for an unreadable image, a placeholder count that differs
  // from the number of images, or images on a line whose turns are given as token ids.
  void prepare(TrainingSample& sample) const override;
  // [n, d]: the token embeddings with the media rows put in place (no grad).
  at::Tensor embed(TrainingSample& sample) const override;

 private:
  std::shared_ptr<const VlmModel> m_model;
};

}  // namespace trimkv::vision
