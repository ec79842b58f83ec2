// Training retention gates on a frozen model (METHOD.md §3).
//
//   student: the dense decoder path with retention-gated attention (logit_{t,i} += (t-i)·log β_i,
//            t, i sequential indices), autograd through the gates only;
//   teacher: the same decoder, plain attention, under no-grad;
//   loss   = ½·(NLL of the label tokens + KL(p_teacher ‖ q_student) averaged over label tokens)
//            + λ·L_cap,
//   L_cap  : per-head (TrimKV) r_{l,h,t} = max(0, (S_{l,h,t} - M) / max(t - M, 1)), or global
//            (DBTrimKV) r_t = max(0, (S^g_t - M·L·H) / max(t·L·H - M·L·H, 1)), with
//            S_{l,h,t} = Σ_{i<=t} β_{l,h,i}^(t-i) and t the 0-based position (as the reference,
//            which divides by position_ids - M); L_cap = mean of r over the terms with r > 0
//            (0 when there are none).
// The optimiser is AdamW (β1 0.9, β2 0.999, ε 1e-8, decoupled weight decay, as torch.optim.AdamW)
// with linear warm-up then cosine decay to a floor, and global grad-norm clipping; its state is
// plain float32 tensors, saved in checkpoints so --resume continues bit for bit.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/kv_types.h"
#include "trimkv/core/retention_gates.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/train_gates.h"

namespace trimkv {

class DataParallelGroup;

// ---------------------------------------------------------------------------------------------
// The loss, as functions (tested against a Python implementation and by finite differences).

// S_{l,h,t} from each layer's log β [n, n_kv] -> [L, n_kv, n]. Differentiable.
at::Tensor retention_capacity(const std::vector<at::Tensor>& log_beta);

// L_cap of `capacity` [L, n_kv, n] for budget M per head (scalar tensor).
at::Tensor capacity_loss(const at::Tensor& capacity, double budget, CapacityMode mode);

struct QualityTerms {
  at::Tensor nll;  // mean over label tokens of -log q_student(label)
  at::Tensor kl;   // mean over label tokens of KL(p_teacher ‖ q_student) (or the reverse)
};
// student_logits, teacher_logits: [n, vocab]; targets: [n] int64 (the token each position
// predicts); mask: [n] bool (positions whose target is a label). At least one mask entry set.
QualityTerms quality_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                          const at::Tensor& targets, const at::Tensor& mask, bool reverse_kl = false);

struct GateLossOptions {
  double budget = 32;  // M per head
  CapacityMode capacity = CapacityMode::Global;
  double lambda = 1.0;
  bool reverse_kl = false;
};

struct GateLoss {
  at::Tensor total, nll, kl, cap;  // scalars; `total` carries the graph
  at::Tensor capacity;             // [L, n_kv, n] detached S
  int64_t n_label = 0;
};

// One sequence. x: [n, d] input embeddings (text embeddings and/or media features), targets/mask
// as in quality_loss. The teacher pass runs inside (no-grad); logits are computed for the masked
// positions only. `positions`: the rotary positions ([n], or [3, n] for a multimodal rope;
// undefined = 0..n-1); `inject`: features added after the first layers (Qwen3-VL's deepstack),
// in both passes. The retention terms use sequential indices whatever the rotary positions are.
GateLoss gate_loss(const TextDecoder& decoder, const RetentionGates& gates, const at::Tensor& x,
                   const at::Tensor& targets, const at::Tensor& mask, const GateLossOptions& options,
                   const at::Tensor& positions = {}, const LayerInjection& inject = {});

// ---------------------------------------------------------------------------------------------
// Data.

// One turn of a conversation line given as text (what a media encoder lays out with the model's
// chat template).
struct TrainingTurn {
  std::string text;    // the user message, with <image> placeholders
  std::string answer;  // the assistant's answer
};

// One training sequence: token ids and, per position, whether that token is a label (an answer
// token the model must predict from what precedes it).
struct TrainingSample {
  int64_t line = 0;                 // 1-based line of the dataset file
  std::vector<int32_t> ids;         // [n]
  std::vector<uint8_t> is_label;    // [n]; is_label[0] is always 0
  std::vector<std::string> images;  // image paths (resolved against the dataset's folder)
  std::vector<TrainingTurn> turns;  // conversation lines whose turns are all text (else empty)
  std::vector<uint8_t> is_media;    // [n] or empty: positions whose input row is in `media`
  at::Tensor media;                 // [count of is_media, d] frozen media features (no grad)
  std::vector<RopeOffset> rope;     // [n] or empty: absolute multimodal rotary positions (t, h, w)
                                    // as the Session gives them (M-RoPE families); empty: 0..n-1
  std::vector<at::Tensor> deepstack;  // [j] [count of is_media, d]: added to the media positions
                                      // after decoder layer j (Qwen3-VL), or empty
  bool truncated = false;
  // Read and checked, not yet laid out: the media encoder's prepare(), truncation and the label
  // checks wait for prepare_deferred_sample() (DatasetOptions::defer_media).
  bool deferred = false;

  // Drops the first k positions (their media rows, deepstack rows and rotary positions with
  // them; the positions left keep theirs: rotary attention depends on differences only).
  void drop_front(int64_t k);
  // The decoder inputs besides the embeddings: rotary positions ([n] 0..n-1, or [3, n] from
  // `rope`) and the deepstack injection on the media positions.
  at::Tensor rotary_positions() const;
  LayerInjection injection() const;
};

// Turns the images of a sample into input embeddings (vision tower + projector, frozen; computed
// once per sample). Implemented by vision/ for VLM families; text models have none.
class SampleMediaEncoder {
 public:
  virtual ~SampleMediaEncoder() = default;
  // Called once per conversation line by load_dataset (with DatasetOptions::defer_media, by
  // prepare_deferred_sample when a rank first draws it), before truncation: may rewrite ids and
  // is_label (chat template, image expansion) and fill is_media / media (the features, computed
  // here once, without grad). Throws Error for a bad line (load_dataset skips it with a warning
  // naming the line). Default: nothing.
  virtual void prepare(TrainingSample& sample) const { (void)sample; }
  // ids/labels of `sample` may be rewritten (image placeholders expanded); returns [n, d] input
  // embeddings for the rewritten ids.
  virtual at::Tensor embed(TrainingSample& sample) const = 0;
};

struct DatasetOptions {
  int64_t max_len = 1024;  // longer sequences are truncated from the left (warning)
  bool has_vision = false; // whether a SampleMediaEncoder is available
  const SampleMediaEncoder* media = nullptr;  // prepares conversation lines (implies has_vision)
  // With `media`: conversation lines are read and checked now, laid out and encoded (images
  // through the tower) only when prepare_deferred_sample() is called on them. Data-parallel ranks
  // load this way, so that each encodes only the samples it draws.
  bool defer_media = false;
};

struct Dataset {
  std::vector<TrainingSample> samples;
  std::vector<std::string> warnings;  // one per skipped or altered line, naming the line
  int64_t n_lines = 0;
  std::string fingerprint;            // FNV-1a of the file's bytes (hex), for resume checks
};

// Reads a JSONL file. Each line is one of
//   {"text": "..."}                                   plain text, every token after the first is a label
//   {"images": [...], "turns": [{"text": "...", "answer": "..."}, ...]}   conversation
// and, for tokenizer-free use, per turn "text_ids" / "answer_ids" (arrays of token ids) instead
// of "text" / "answer", or {"ids": [...]} instead of "text". A conversation is laid out as
// text_1 "\n" answer_1 <eos> text_2 "\n" answer_2 <eos> ...; labels are the answer tokens and the
// <eos> after them. With options.media (VLMs) its prepare() lays conversations out instead (the
// family's chat template and image expansion: vision/gate_training_media.h).
// Bad lines (not JSON, no usable field, empty answer, missing image, images without a vision
// tower, ids outside the vocabulary, no label left after truncation) are skipped with a warning
// naming the line; Error{Io} only when the file cannot be read, Error{Input} when no line is usable.
Dataset load_dataset(const std::string& path, const TextModel& model, const DatasetOptions& options);
// Finishes a sample load_dataset deferred (options as given to it): lays it out with
// options.media, truncates it (a warning appended to `warnings`) and checks it as load_dataset
// would have. Error{Input} naming the line when it is unusable (load_dataset would have skipped it).
void prepare_deferred_sample(TrainingSample& sample, const TextModel& model, const DatasetOptions& options,
                             std::vector<std::string>& warnings);

// ---------------------------------------------------------------------------------------------
// The trainer.

class GateTrainer {
 public:
  // Loads nothing itself: `model`, `data` and `media` (null for text models) are borrowed and
  // must outlive the trainer. Samples with images need `media`.
  // With `group` (data_parallel.h; borrowed) this process is one rank of a data-parallel run:
  // options.batch is the global batch, each rank computes its share, and only rank 0 writes
  // checkpoints and the gates file; --resume reads the checkpoint on every rank (a shared
  // folder), whatever the world size that wrote it.
  GateTrainer(const TextModel& model, const Dataset& data, TrainOptions options,
              const SampleMediaEncoder* media = nullptr, DataParallelGroup* group = nullptr);
  ~GateTrainer();

  // Starts fresh, or continues from options.checkpoint_path when options.resume (refused with
  // Error{Input} listing the differences when the checkpoint was made with another
  // configuration, model or dataset). `cancel` is polled between steps: when set, a checkpoint
  // is written and run() returns with interrupted = true.
  TrainResult run(const std::function<void(const TrainProgress&)>& on_progress = {},
                  const std::atomic<bool>* cancel = nullptr);

  const RetentionGates& gates() const;
  int64_t step() const;
  // Where the warnings of deferred samples go (a line found unusable when first drawn).
  void set_warning_sink(std::function<void(const std::string&)> sink);
  // The learning rate used at step s (1-based).
  double lr_at(int64_t s) const;

  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// How gate training loads its model: float32 matrices (the forward runs under autograd), on
// options.device.
ModelLoadOptions training_load_options(const TrainOptions& options);

// train_gates() (train_gates.h) on a model already loaded: loads options.data_path with `media`
// (null for text models), reports the warnings and the setup, then trains. vision/ calls this
// for VLM folders (vision/train_gates_vlm.h).
TrainResult train_gates_on(const TextModel& model, const SampleMediaEncoder* media, const TrainOptions& options,
                           const std::function<void(const std::string&)>& on_warning = {},
                           const std::function<void(const TrainSetup&)>& on_setup = {},
                           const std::function<void(const TrainProgress&)>& on_progress = {},
                           const std::atomic<bool>* cancel = nullptr);

}  // namespace trimkv
