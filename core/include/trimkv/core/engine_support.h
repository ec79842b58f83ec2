// Pieces shared by the plain-value façades (core's Engine, vision's ChatEngine): option checks,
// gate loading, and the ModelInfo of a text decoder. Internal: app/ does not include this.
#pragma once
#include <memory>
#include <string>

#include "trimkv/core/engine.h"
#include "trimkv/core/retention_gates.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

// Validates the numeric options (Error{Input} naming the option) and applies the thread count.
void apply_engine_options(const EngineOptions& options);
// What the load of a model under `options` is given (weights, KV dtype, image size, stop).
ModelLoadOptions model_load_options(const EngineOptions& options);

struct LoadedGates {
  std::shared_ptr<const RetentionGates> gates;  // null when the model runs without gates
  std::string path;                             // the file they came from ("" when none)
};

// The gates `options.gates` asks for: "none" = no gates, "" = the checkpoint folder's own file if
// it has one, else a file path. Refuses gates that do not fit `model` (message names both).
LoadedGates load_engine_gates(const EngineOptions& options, const std::string& checkpoint_dir,
                              const TextModel& model);

// ModelInfo of the text decoder (and of its gates); VLM façades add their vision side.
ModelInfo describe_text_model(const TextModel& model, const LoadedGates& gates);

}  // namespace trimkv
