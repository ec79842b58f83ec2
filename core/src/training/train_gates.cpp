#include "trimkv/core/train_gates.h"

#include <ATen/Parallel.h>

#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/data_parallel.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/text_model.h"

namespace trimkv {

TrainResult train_gates(const TrainOptions& options, const std::function<void(const std::string&)>& on_warning,
                        const std::function<void(const TrainSetup&)>& on_setup,
                        const std::function<void(const TrainProgress&)>& on_progress,
                        const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(!options.out_path.empty(), Input, "--out is required");
  TRIMKV_CHECK(options.threads >= 0, Input, "--threads must be >= 0, got ", options.threads);
  if (options.threads > 0) set_compute_threads(options.threads);
  // Float32 whatever the files hold: the training forward runs under autograd, in float32.
  const TextModel model = load_text_model(options.model_dir, training_load_options(options));
  // Text decoders; VLM folders go through vision::train_gates_vlm (which passes its encoder).
  return train_gates_on(model, nullptr, options, on_warning, on_setup, on_progress, cancel);
}

ModelLoadOptions training_load_options(const TrainOptions& options) {
  ModelLoadOptions o("f32");
  o.device = options.device;
  return o;
}

TrainResult train_gates_on(const TextModel& model, const SampleMediaEncoder* media, const TrainOptions& options,
                           const std::function<void(const std::string&)>& on_warning,
                           const std::function<void(const TrainSetup&)>& on_setup,
                           const std::function<void(const TrainProgress&)>& on_progress,
                           const std::atomic<bool>* cancel) {
  TRIMKV_CHECK(!options.out_path.empty(), Input, "--out is required");
  TRIMKV_CHECK(options.parallel.world_size <= 1 || model.device == ComputeDevice::Cpu, Unsupported,
               "data-parallel gate training runs its ranks on the CPU (Gloo): this build has no NCCL for ranks "
               "on the GPU; train on one GPU (--device cuda without --nproc / WORLD_SIZE) or with --device cpu");
  // The ranks meet before the data is read, so that one failing to read it stops the others.
  std::unique_ptr<DataParallelGroup> group;
  if (options.parallel.world_size > 1) group = std::make_unique<DataParallelGroup>(options.parallel);
  DatasetOptions dopt;
  dopt.max_len = options.max_len;
  dopt.has_vision = media != nullptr;
  dopt.media = media;
  dopt.defer_media = group != nullptr;  // each rank lays out and encodes only what it draws
  const Dataset data = load_dataset(options.data_path, model, dopt);
  if (on_warning)
    for (const auto& w : data.warnings) on_warning(w);
  GateTrainer trainer(model, data, options, media, group.get());
  trainer.set_warning_sink(on_warning);
  if (on_setup) {
    TrainSetup s;
    s.n_samples = static_cast<int64_t>(data.samples.size());
    s.n_lines = data.n_lines;
    s.n_warnings = static_cast<int64_t>(data.warnings.size());
    s.gate_parameters = trainer.gates().parameter_count();
    s.model_dir = model.dir;
    s.chat_template = media != nullptr;
    for (const TrainingSample& sample : data.samples) s.deferred += sample.deferred ? 1 : 0;
    on_setup(s);
  }
  return trainer.run(on_progress, cancel);
}

}  // namespace trimkv
