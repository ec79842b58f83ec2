// VlmSampleEncoder and train_gates_vlm (gate_training_media.h, train_gates_vlm.h).
#include "trimkv/vision/gate_training_media.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"
#include "trimkv/core/layers.h"
#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/vision/train_gates_vlm.h"

namespace trimkv::vision {

VlmSampleEncoder::VlmSampleEncoder(std::shared_ptr<const VlmModel> model) : m_model(std::move(model)) {
  TRIMKV_CHECK(m_model && m_model->encoder, Input, "VlmSampleEncoder needs a loaded VLM");
}

void VlmSampleEncoder::prepare(TrainingSample& sample) const {
  if (sample.turns.empty()) {
    TRIMKV_CHECK(sample.images.empty(), Input,
                 "images need turns given as \"text\" / \"answer\" (token ids cannot be laid out with the "
                 "model's chat template)");
    return;  // plain text or token ids: kept as laid out by load_dataset
  }
  at::NoGradGuard no_grad;  // tower and connector are frozen
  const TurnEncoder& enc = *m_model->encoder;
  // Which images fill which turn.
  std::vector<size_t> per_turn(sample.turns.size(), 0);
  size_t total = 0;
  for (size_t k = 0; k < sample.turns.size(); ++k) total += per_turn[k] = count_image_placeholders(sample.turns[k].text);
  if (total == 0) per_turn[0] = sample.images.size();
  else
    TRIMKV_CHECK(total == sample.images.size(), Input, "the turns hold ", total, " ", kImagePlaceholder,
                 " placeholder(s) but the line has ", sample.images.size(), " image(s)");
  std::vector<Message> history;  // the conversation so far, as the chat template sees it
  std::vector<int32_t> ids;
  std::vector<uint8_t> label, media;
  std::vector<at::Tensor> rows;
  std::vector<std::vector<at::Tensor>> deepstack;  // per turn with images: [j] rows
  // Rotary positions as the Session's runner gives them: a segment's offsets count from the
  // next free position (one past the largest on any axis), text runs continue from there.
  const bool multimodal = m_model->text.config.rope.multimodal();
  std::vector<RopeOffset> rope;
  int64_t next_position = 0;
  auto place = [&](const std::vector<RopeOffset>& offsets, size_t n) {
    std::vector<RopeOffset> placed(n);
    place_rotary_positions(offsets.empty() ? nullptr : offsets.data(), static_cast<int64_t>(n), next_position,
                           placed.data(), next_position);
    if (multimodal) rope.insert(rope.end(), placed.begin(), placed.end());
  };
  std::vector<ImageRecord> records;
  size_t next_image = 0;
  for (size_t k = 0; k < sample.turns.size(); ++k) {
    const TrainingTurn& turn = sample.turns[k];
    const std::vector<std::string> imgs(sample.images.begin() + static_cast<std::ptrdiff_t>(next_image),
                                        sample.images.begin() + static_cast<std::ptrdiff_t>(next_image + per_turn[k]));
    next_image += per_turn[k];
    const std::vector<ContentPart> content = content_from_prompt(turn.text, imgs);
    const StreamSegment seg = enc.user_turn(history, content, static_cast<int>(records.size()), records, nullptr);
    history.push_back({"user", content});
    TRIMKV_ASSERT(seg.infos.size() == seg.ids.size(), "user_turn: ids and infos differ in length");
    int64_t n_image = 0;
    for (size_t i = 0; i < seg.ids.size(); ++i) {
      const bool img = seg.infos[i].modality == Modality::Image;
      ids.push_back(seg.ids[i]);
      label.push_back(0);
      media.push_back(img ? 1 : 0);
      n_image += img ? 1 : 0;
    }
    if (n_image > 0) {
      TRIMKV_ASSERT(seg.image_embeddings.defined() && seg.image_embeddings.size(0) == n_image,
                    "user_turn: ", n_image, " image positions but a different number of embedding rows");
      rows.push_back(seg.image_embeddings.detach().to(at::kCPU, at::kFloat));  // the dataset stays in host memory
      if (!seg.deepstack.empty()) {
        TRIMKV_CHECK(deepstack.size() == rows.size() - 1, Input,
                     "turn ", k + 1, ": deepstack features on some image turns only");
        deepstack.emplace_back();
        for (const at::Tensor& d : seg.deepstack) deepstack.back().push_back(d.detach().to(at::kCPU, at::kFloat));
      }
    }
    TRIMKV_ASSERT(seg.rope.empty() || seg.rope.size() == seg.ids.size(), "user_turn: rotary offsets and ids differ");
    place(seg.rope, seg.ids.size());
    // The answer as Session::add_assistant_text appends it; labels on its tokens and on the
    // end-of-turn token (the first of the closing tokens), which generation produces.
    const std::vector<int32_t> answer = enc.assistant_turn(history, turn.answer);
    const std::vector<int32_t> close = enc.close_assistant_turn(history);
    history.push_back({"assistant", {ContentPart::text_part(turn.answer)}});
    size_t n_label = answer.size();
    if (!close.empty() && answer.size() >= close.size() &&
        std::equal(close.begin(), close.end(), answer.end() - static_cast<std::ptrdiff_t>(close.size())))
      n_label = answer.size() - close.size() + 1;
    TRIMKV_CHECK(n_label > 0, Input, "turn ", k + 1, " has an empty answer");
    for (size_t i = 0; i < answer.size(); ++i) {
      ids.push_back(answer[i]);
      label.push_back(i < n_label ? 1 : 0);
      media.push_back(0);
    }
    place({}, answer.size());
  }
  sample.ids = std::move(ids);
  sample.is_label = std::move(label);
  sample.rope = std::move(rope);
  sample.deepstack.clear();
  if (!rows.empty()) {
    sample.is_media = std::move(media);
    sample.media = at::cat(rows, 0).contiguous();
    TRIMKV_CHECK(deepstack.empty() || deepstack.size() == rows.size(), Input,
                 "deepstack features on some image turns only");
    for (size_t j = 0; !deepstack.empty() && j < deepstack.front().size(); ++j) {
      std::vector<at::Tensor> per_turn;
      for (const auto& turn_rows : deepstack) per_turn.push_back(turn_rows.at(j));
      sample.deepstack.push_back(at::cat(per_turn, 0).contiguous());
    }
  } else {
    sample.is_media.clear();
    sample.media = at::Tensor();
  }
}

at::Tensor VlmSampleEncoder::embed(TrainingSample& sample) const {
  at::NoGradGuard no_grad;
  const TextDecoder& dec = *m_model->text.decoder;
  at::Tensor x = dec.embed(at::tensor(std::vector<int64_t>(sample.ids.begin(), sample.ids.end()), at::kLong))
                     .to(at::kFloat)
                     .contiguous();
  if (sample.media.defined() && sample.media.size(0) > 0) {
    std::vector<int64_t> pos;
    for (size_t i = 0; i < sample.is_media.size(); ++i)
      if (sample.is_media[i]) pos.push_back(static_cast<int64_t>(i));
    TRIMKV_ASSERT(static_cast<int64_t>(pos.size()) == sample.media.size(0) && sample.is_media.size() == sample.ids.size(),
                  "sample of line ", sample.line, ": media rows do not match its positions");
    x.index_copy_(0, at::tensor(pos, at::kLong).to(x.device()), sample.media.to(x.device()));  // as Session merges them
  }
  return x;
}

TrainResult train_gates_vlm(const TrainOptions& options, const std::function<void(const std::string&)>& on_warning,
                            const std::function<void(const TrainSetup&)>& on_setup,
                            const std::function<void(const TrainProgress&)>& on_progress,
                            const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(!options.out_path.empty(), Input, "--out is required");
  TRIMKV_CHECK(options.threads >= 0, Input, "--threads must be >= 0, got ", options.threads);
  if (options.threads > 0) set_compute_threads(options.threads);
  if (!is_vlm_checkpoint(options.model_dir)) {
    // A text model with a chat template (an instruct model): its conversation lines are laid out
    // by the template, as chat and eval present them, so the gates learn on the stream they will
    // see. Without one, core's plain layout (text "\n" answer <eos>), on the model loaded here.
    auto text = std::make_shared<VlmModel>();
    text->text = load_text_model(options.model_dir, training_load_options(options));  // float32, for autograd
    std::shared_ptr<const TextTurnEncoder> encoder;
    if (text->text.tokenizer) encoder = make_text_turn_encoder(text->text, {});
    if (!encoder || !encoder->has_chat_template())
      return train_gates_on(text->text, nullptr, options, on_warning, on_setup, on_progress, cancel);
    text->encoder = encoder;
    const VlmSampleEncoder layout(text);
    return train_gates_on(text->text, &layout, options, on_warning, on_setup, on_progress, cancel);
  }
  const std::shared_ptr<const VlmModel> model =
      load_vlm(options.model_dir, {}, training_load_options(options));  // float32, for autograd
  const VlmSampleEncoder media(model);
  return train_gates_on(model->text, &media, options, on_warning, on_setup, on_progress, cancel);
}

}  // namespace trimkv::vision
