// `trimkv train-gates` as plain values (no LibTorch: app/ includes this): options, progress,
// result, and train_gates() which loads the model and data and runs a GateTrainer
// (gate_training.h has the loss, the data format and the trainer).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trimkv/core/gate_types.h"

namespace trimkv {

// Data-parallel training (data_parallel.h): this process is rank `rank` of `world_size`, meeting
// the others at master_addr:master_port (rank 0 serves the rendezvous there). Each rank computes
// its share of every step's batch; the gate gradients are summed over the ranks before the step.
struct DataParallelOptions {
  int rank = 0;
  int world_size = 1;  // 1: one process, no group
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 1800;  // the rendezvous, or one collective, waiting longer fails
};

struct TrainOptions {
  std::string model_dir;
  std::string data_path;
  std::string out_path;         // final gates file
  std::string checkpoint_path;  // default: out_path + ".ckpt"
  GateKind kind = GateKind::DBTrimKV;
  int64_t gate_hidden = 512;
  bool untied = false;          // DBTrimKV ablation: per-layer output projection / bias
  double bias_init = 18.0;
  double budget = 32;           // M per head
  CapacityMode capacity = CapacityMode::Global;
  double lambda = 1.0;
  bool reverse_kl = false;
  int64_t steps = 1000;
  int64_t batch = 1;            // sequences per step (gradients averaged)
  double lr = 2e-4;
  double min_lr = 1e-6;
  int64_t warmup = -1;          // steps; -1 = 5% of steps
  double weight_decay = 1e-6;
  double clip = 1.0;
  int64_t max_len = 1024;
  uint64_t seed = 0;
  int64_t checkpoint_every = 100;  // 0 = only at the end / on interrupt
  bool resume = false;
  int threads = 0;              // CPU threads (0 = library default); keep it fixed across a resume
  DataParallelOptions parallel; // world_size > 1: `batch` is the global batch, split over the ranks
  // Where the frozen teacher, the gated student and the gates run (compute_device.h: cpu, cuda,
  // auto). Data-parallel ranks run on the CPU (Gloo; no NCCL here).
  std::string device = "cpu";
};

struct TrainProgress {
  int64_t step = 0, total_steps = 0;
  double loss = 0, nll = 0, kl = 0, cap = 0;  // of this step (batch mean)
  double lr = 0;
  double grad_norm = 0;        // before clipping
  double capacity_ratio = 0;   // S^g at the last position / (M·L·H), batch mean
  double tokens_per_s = 0;     // training tokens (sequence positions) per second in this run
  double eta_s = 0;
  int64_t tokens = 0;          // this run
  bool checkpointed = false;   // a checkpoint was written after this step
};

struct TrainResult {
  int64_t steps_done = 0;
  bool interrupted = false;
  std::string checkpoint_path;  // last checkpoint written ("" if none)
  std::string out_path;         // gates file written ("" when interrupted)
  std::vector<double> losses;   // per step of this run
  // Deferred conversations (data-parallel ranks: DatasetOptions::defer_media) this process laid
  // out and encoded: only those it drew.
  int64_t laid_out = 0;
};

// What train_gates() found before training (for the CLI's header lines).
struct TrainSetup {
  int64_t n_samples = 0, n_lines = 0, n_warnings = 0;
  int64_t gate_parameters = 0;
  std::string model_dir;
  // Conversation lines laid out by the model's chat template (VLMs, text instruct models) rather
  // than as text "\n" answer <eos>.
  bool chat_template = false;
  // Of n_samples, the conversations each rank lays out and encodes only when it draws them.
  int64_t deferred = 0;
};

// Loads options.model_dir and options.data_path, reports every dataset warning through
// `on_warning` (one call per line), `on_setup` once, then trains (GateTrainer::run). Errors:
// Error{Io/Config/Format} for the model and files, Error{Input} for options, an unusable
// dataset or a --resume checkpoint from another configuration.
TrainResult train_gates(const TrainOptions& options,
                        const std::function<void(const std::string&)>& on_warning = {},
                        const std::function<void(const TrainSetup&)>& on_setup = {},
                        const std::function<void(const TrainProgress&)>& on_progress = {},
                        const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv
