// `trimkv train-gates` for any model folder, as plain values (no LibTorch: app/ includes this).
#pragma once
#include "trimkv/core/train_gates.h"

namespace trimkv::vision {

// As trimkv::train_gates (core/train_gates.h); when options.model_dir is a VLM checkpoint the
// model is loaded with its vision side and conversation lines go through VlmSampleEncoder
// (gate_training_media.h): chat template, images encoded once by the frozen tower/connector.
TrainResult train_gates_vlm(const TrainOptions& options,
                            const std::function<void(const std::string&)>& on_warning = {},
                            const std::function<void(const TrainSetup&)>& on_setup = {},
                            const std::function<void(const TrainProgress&)>& on_progress = {},
                            const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv::vision
