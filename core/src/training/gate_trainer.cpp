// GateTrainer: AdamW over the gate parameters, schedule, checkpoints and resume.
//
// Bit-exact resume: everything a step depends on is either derived from the configuration
// (the data order: a Fisher-Yates permutation per epoch from mt19937_64(seed, epoch)) or stored
// in the checkpoint as exact float32 / integer values (gate weights, AdamW moments, step,
// samples consumed). Same build and thread count => the resumed run repeats the uninterrupted
// one bit for bit.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "trimkv/core/adamw.h"
#include "fnv1a.h"
#include "trimkv/core/data_parallel.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/tensor_buffer_cache.h"
#include "trimkv/core/weight_store.h"

namespace fs = std::filesystem;

namespace trimkv {

namespace {

constexpr const char* kCheckpointFormat = "trimkv-gate-checkpoint";

}  // namespace

struct GateTrainer::Impl {
  const TextModel* model = nullptr;
  const Dataset* data = nullptr;
  const SampleMediaEncoder* media = nullptr;
  DataParallelGroup* group = nullptr;  // null: one process
  TrainOptions opt;
  std::unique_ptr<RetentionGates> gates;
  std::vector<GateParameter> params;
  std::unique_ptr<AdamW> adam;
  int64_t step = 0;              // optimiser steps done
  int64_t cursor = 0;            // samples consumed
  nlohmann::json config;         // what a checkpoint must match
  std::vector<int64_t> order;    // permutation of the current epoch
  int64_t order_epoch = -1;
  // Deferred samples (DatasetOptions::defer_media) this process has laid out, by index, and
  // those that turned out unusable.
  std::unordered_map<int64_t, TrainingSample> prepared;
  std::unordered_set<int64_t> unusable;
  DatasetOptions deferred_options;  // how they are finished (the model's media encoder, --max-len)
  std::function<void(const std::string&)> on_warning;

  const TrainingSample& sample_at(int64_t k) {
    const int64_t n = static_cast<int64_t>(data->samples.size());
    const int64_t epoch = k / n;
    if (epoch != order_epoch) {
      order.resize(n);
      for (int64_t i = 0; i < n; ++i) order[i] = i;
      std::mt19937_64 rng(opt.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
      for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
      order_epoch = epoch;
    }
    // A deferred sample is laid out when first drawn; one that cannot be is skipped for the next
    // in the epoch's order (every rank finds the same one).
    for (int64_t tries = 0; tries < n; ++tries) {
      const int64_t index = order[(k + tries) % n];
      const TrainingSample& s = data->samples[static_cast<size_t>(index)];
      if (!s.deferred) return s;
      if (unusable.count(index)) continue;
      if (auto it = prepared.find(index); it != prepared.end()) return it->second;
      TrainingSample copy = s;
      std::vector<std::string> warnings;
      bool usable = true;
      try {
        prepare_deferred_sample(copy, *model, deferred_options, warnings);
      } catch (const Error& e) {
        usable = false;
        unusable.insert(index);
        warnings.push_back(std::string(e.what()) + "; skipped for the next line in the order");
      }
      if (on_warning)
        for (const auto& w : warnings) on_warning(w);
      if (usable) return prepared.emplace(index, std::move(copy)).first->second;
    }
    TRIMKV_FAIL(Input, "no line of the dataset could be laid out (", unusable.size(), " tried)");
  }

  void check_only_gates_have_grad() const {
    for (const auto& lw : model->decoder->weights().layers)
      for (const at::Tensor* t : {&lw.attn_norm, &lw.w_qkv, &lw.b_qkv, &lw.w_o, &lw.b_o, &lw.q_norm,
                                  &lw.k_norm, &lw.mlp_norm, &lw.w_gate_up, &lw.w_down})
        TRIMKV_ASSERT(!t->defined() || (!t->requires_grad() && !t->grad().defined()),
                      "a base-model weight received a gradient");
    const auto& w = model->decoder->weights();
    for (const at::Tensor* t : {&w.embed, &w.final_norm, &w.lm_head})
      TRIMKV_ASSERT(!t->requires_grad() && !t->grad().defined(), "a base-model weight received a gradient");
    for (const auto& p : params)
      TRIMKV_ASSERT(p.tensor.grad().defined(), "gate parameter '", p.name, "' received no gradient");
  }
};

GateTrainer::GateTrainer(const TextModel& model, const Dataset& data, TrainOptions options,
                         const SampleMediaEncoder* media, DataParallelGroup* group)
    : m_impl(std::make_unique<Impl>()) {
  Impl& I = *m_impl;
  I.model = &model;
  I.data = &data;
  I.media = media;
  I.group = group;
  I.opt = std::move(options);
  TrainOptions& o = I.opt;
  I.deferred_options.max_len = o.max_len;
  I.deferred_options.has_vision = media != nullptr;
  I.deferred_options.media = media;
  TRIMKV_CHECK(o.steps > 0, Input, "--steps must be > 0, got ", o.steps);
  TRIMKV_CHECK(o.batch > 0, Input, "--batch must be > 0, got ", o.batch);
  TRIMKV_CHECK(o.budget > 0, Input, "--budget must be > 0, got ", o.budget);
  TRIMKV_CHECK(o.lambda >= 0, Input, "--lambda must be >= 0, got ", o.lambda);
  TRIMKV_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr, Input,
               "learning rates must satisfy 0 <= min-lr <= lr, lr > 0 (lr ", o.lr, ", min-lr ", o.min_lr, ")");
  TRIMKV_CHECK(o.clip > 0, Input, "--clip must be > 0, got ", o.clip);
  TRIMKV_CHECK(o.gate_hidden > 0, Input, "--gate-hidden must be > 0, got ", o.gate_hidden);
  TRIMKV_CHECK(!data.samples.empty(), Input, "the dataset has no usable sample");
  TRIMKV_CHECK(!group || o.batch >= group->size(), Input, "--batch ", o.batch, " is smaller than the ",
               group ? group->size() : 1, " data-parallel ranks: every rank needs a sequence per step");
  if (o.warmup < 0) o.warmup = o.steps / 20;
  if (o.checkpoint_path.empty()) o.checkpoint_path = o.out_path + ".ckpt";

  GateConfig gc = GateConfig::for_model(model.config, o.kind);
  gc.gate_hidden = o.gate_hidden;
  gc.tied = !o.untied;
  gc.bias_init = o.bias_init;
  gc.train_budget = static_cast<int64_t>(std::llround(o.budget));
  if (is_pth_path(o.out_path)) check_pth_writable(gc, o.out_path);  // before any step, not after the last
  // Initialised on the CPU (the portable generator: the same gates on every device), then placed
  // beside the model.
  I.gates = std::make_unique<RetentionGates>(
      RetentionGates::init(gc, o.seed).to(at::TensorOptions().device(model.decoder->device())));
  I.gates->set_requires_grad(true);
  I.params = I.gates->parameters();
  std::vector<NamedParameter> named;
  for (const auto& p : I.params) named.push_back({p.name, p.tensor, true});
  AdamWOptions ao;
  ao.weight_decay = o.weight_decay;
  ao.clip = o.clip;
  I.adam = std::make_unique<AdamW>(std::move(named), ao);

  // The model is identified by its sizes and a checksum of its embedding (cheap, and any other
  // checkpoint of the same shape differs there).
  double embed_sum = 0;
  {
    at::NoGradGuard no_grad;
    // On the CPU whatever the device: a checkpoint resumes on another one.
    embed_sum = model.decoder->weights().embed.to(at::kCPU, at::kDouble).abs().sum().item<double>();
  }
  nlohmann::json c;
  c["model"] = {{"n_layer", model.config.n_layer}, {"hidden_size", model.config.hidden_size},
                {"n_kv_head", model.config.n_kv_head}, {"vocab_size", model.config.vocab_size},
                {"parameters", model.decoder->parameter_count()}, {"embed_checksum", embed_sum}};
  c["data"] = data.fingerprint;
  c["kind"] = gate_kind_name(o.kind);
  c["gate_hidden"] = o.gate_hidden;
  c["untied"] = o.untied;
  c["bias_init"] = o.bias_init;
  c["budget"] = o.budget;
  c["capacity"] = capacity_mode_name(o.capacity);
  c["lambda"] = o.lambda;
  c["reverse_kl"] = o.reverse_kl;
  c["steps"] = o.steps;
  c["batch"] = o.batch;
  c["lr"] = o.lr;
  c["min_lr"] = o.min_lr;
  c["warmup"] = o.warmup;
  c["weight_decay"] = o.weight_decay;
  c["clip"] = o.clip;
  c["max_len"] = o.max_len;
  c["seed"] = o.seed;
  I.config = c;
}

GateTrainer::~GateTrainer() = default;

const RetentionGates& GateTrainer::gates() const { return *m_impl->gates; }
int64_t GateTrainer::step() const { return m_impl->step; }
void GateTrainer::set_warning_sink(std::function<void(const std::string&)> sink) { m_impl->on_warning = std::move(sink); }

double GateTrainer::lr_at(int64_t s) const {
  const TrainOptions& o = m_impl->opt;
  return warmup_cosine_lr(s, o.warmup, o.steps, o.lr, o.min_lr);
}

void GateTrainer::save_checkpoint(const std::string& path) const {
  const Impl& I = *m_impl;
  std::vector<TensorToWrite> out;
  for (const auto& p : I.params) out.push_back(float_tensor_to_write("gate." + p.name, p.tensor));
  const std::string cfg = I.config.dump();
  std::map<std::string, std::string> meta = {{"format", kCheckpointFormat},
                                             {"step", std::to_string(I.step)},
                                             {"cursor", std::to_string(I.cursor)},
                                             {"config", cfg},
                                             {"config_hash", hex64(fnv1a(cfg))}};
  I.adam->save_state("adam.", out, meta);
  write_safetensors(path, out, meta);
}

void GateTrainer::load_checkpoint(const std::string& path) {
  Impl& I = *m_impl;
  TRIMKV_CHECK(fs::is_regular_file(path), Input, "--resume: no checkpoint at '", path, "'");
  SafetensorsFile file(path);
  const auto& meta = file.metadata();
  TRIMKV_CHECK(meta.count("format") && meta.at("format") == kCheckpointFormat && meta.count("config") &&
                   meta.count("step") && meta.count("cursor"),
               Format, "'", path, "' is not a gate-training checkpoint");
  const nlohmann::json saved = nlohmann::json::parse(meta.at("config"));
  if (saved != I.config) {
    std::string diff;
    for (auto it = I.config.begin(); it != I.config.end(); ++it) {
      const std::string key = it.key();
      const std::string have = saved.contains(key) ? saved[key].dump() : "(absent)";
      if (!saved.contains(key) || saved[key] != it.value())
        diff += (diff.empty() ? "" : ", ") + key + ": checkpoint " + have + ", now " + it.value().dump();
    }
    TRIMKV_FAIL(Input, "--resume: checkpoint '", path, "' was made with another configuration (", diff,
                "); use the same options, model and data, or start without --resume");
  }
  at::NoGradGuard no_grad;
  auto get = [&](const std::string& name, const at::Tensor& like) {
    auto it = file.tensors().find(name);
    TRIMKV_CHECK(it != file.tensors().end(), Format, "checkpoint '", path, "' lacks tensor '", name, "'");
    at::Tensor t = tensor_to_float(it->second);
    TRIMKV_CHECK(t.sizes() == like.sizes(), Format, "checkpoint '", path, "': tensor '", name, "' has shape ",
                 t.sizes(), ", expected ", like.sizes());
    return t;
  };
  for (auto& p : I.params) p.tensor.copy_(get("gate." + p.name, p.tensor));
  I.adam->load_state("adam.", file, path);
  I.step = std::stoll(meta.at("step"));
  I.cursor = std::stoll(meta.at("cursor"));
}

TrainResult GateTrainer::run(const std::function<void(const TrainProgress&)>& on_progress,
                             const std::atomic<bool>* cancel) {
  Impl& I = *m_impl;
  const TrainOptions& o = I.opt;
  if (o.resume) load_checkpoint(o.checkpoint_path);
  const TextDecoder& dec = *I.model->decoder;
  GateLossOptions lo;
  lo.budget = o.budget;
  lo.capacity = o.capacity;
  lo.lambda = o.lambda;
  lo.reverse_kl = o.reverse_kl;
  const double m_global = o.budget * static_cast<double>(I.model->config.n_layer * I.model->config.n_kv_head);

  TrainResult result;
  const TensorBufferCache buffers;  // each step allocates what the previous one freed
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0, steps_this_run = 0;
  auto save = [&] {
    save_checkpoint(o.checkpoint_path);
    result.checkpoint_path = o.checkpoint_path;
  };
  // Data parallel: rank r computes the batch's sequences b with b % ranks == r; the gradients and
  // the step's figures are summed over the ranks, so every rank takes the same step a single
  // process would (up to the order of float additions), and rank 0 writes the files.
  const int ranks = I.group ? I.group->size() : 1;
  const int rank = I.group ? I.group->rank() : 0;
  while (I.step < o.steps) {
    bool stop = cancel && cancel->load();
    if (I.group) stop = I.group->any(stop, "the stop flag before step " + std::to_string(I.step + 1));
    if (stop) {
      if (rank == 0) save();
      result.interrupted = true;
      break;
    }
    const double lr = lr_at(I.step + 1);
    I.adam->zero_grad();
    TrainProgress pr;
    const int64_t first = I.cursor;
    I.cursor += o.batch;
    int64_t step_tokens = 0;
    for (int64_t b = rank; b < o.batch; b += ranks) {
      TrainingSample sample = I.sample_at(first + b);
      at::Tensor x;
      if (!sample.images.empty()) {
        TRIMKV_CHECK(I.media, Input, "dataset line ", sample.line, " has images but the model has no vision tower");
        x = I.media->embed(sample);
      } else {
        x = dec.embed(at::tensor(std::vector<int64_t>(sample.ids.begin(), sample.ids.end()), at::kLong));
      }
      const int64_t n = static_cast<int64_t>(sample.ids.size());
      std::vector<int64_t> tgt(n, 0);
      std::vector<uint8_t> mask(n, 0);
      for (int64_t t = 0; t + 1 < n; ++t) {
        tgt[t] = sample.ids[t + 1];
        mask[t] = sample.is_label[t + 1];
      }
      x = x.to(dec.device());
      at::Tensor targets = at::tensor(tgt, at::kLong).to(x.device());
      at::Tensor mask_t = at::tensor(std::vector<int64_t>(mask.begin(), mask.end()), at::kLong).to(x.device(), at::kBool);
      GateLoss L = gate_loss(dec, *I.gates, x, targets, mask_t, lo, sample.rotary_positions(), sample.injection());
      (L.total / static_cast<double>(o.batch)).backward();
      pr.loss += L.total.item<double>() / o.batch;
      pr.nll += L.nll.item<double>() / o.batch;
      pr.kl += L.kl.item<double>() / o.batch;
      pr.cap += L.cap.item<double>() / o.batch;
      pr.capacity_ratio += L.capacity.select(2, n - 1).sum().item<double>() / m_global / o.batch;
      step_tokens += n;
    }
    if (I.group) {
      const std::string step_name = "step " + std::to_string(I.step + 1) + "'s ";
      std::vector<at::Tensor> grads;
      for (const auto& p : I.params) grads.push_back(p.tensor.grad());
      I.group->all_reduce_sum(grads, step_name + "gate gradients");
      at::Tensor figures = at::tensor(std::vector<double>{pr.loss, pr.nll, pr.kl, pr.cap, pr.capacity_ratio,
                                                          static_cast<double>(step_tokens)}, at::kDouble);
      I.group->all_reduce_sum({figures}, step_name + "loss figures");
      const auto f = figures.accessor<double, 1>();
      pr.loss = f[0], pr.nll = f[1], pr.kl = f[2], pr.cap = f[3], pr.capacity_ratio = f[4];
      step_tokens = static_cast<int64_t>(f[5]);
    }
    tokens += step_tokens;
    I.check_only_gates_have_grad();
    pr.grad_norm = I.adam->step(lr);
    ++I.step;
    ++steps_this_run;
    result.losses.push_back(pr.loss);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pr.step = I.step;
    pr.total_steps = o.steps;
    pr.lr = lr;
    pr.tokens = tokens;
    pr.tokens_per_s = elapsed > 0 ? tokens / elapsed : 0;
    pr.eta_s = elapsed / steps_this_run * static_cast<double>(o.steps - I.step);
    if (o.checkpoint_every > 0 && I.step % o.checkpoint_every == 0 && I.step < o.steps) {
      if (rank == 0) save();
      pr.checkpointed = true;
    }
    if (on_progress) on_progress(pr);
  }
  result.steps_done = I.step;
  result.laid_out = static_cast<int64_t>(I.prepared.size());
  if (!result.interrupted && rank == 0) {
    save();
    std::map<std::string, std::string> meta = {
        {"trained_steps", std::to_string(I.step)},
        {"capacity", capacity_mode_name(o.capacity)},
        {"lambda", std::to_string(o.lambda)},
        {"model", fs::path(I.model->dir).filename().string()},
        {"data_fingerprint", I.data->fingerprint}};
    // A .pth is written in the authors' layout, under the model's own names for its decoder.
    save_gates_file(o.out_path, I.gates->to(at::TensorOptions().device(at::kCPU)),
                    I.model->weight_root.empty() ? "model." : I.model->weight_root, meta);
    result.out_path = o.out_path;
  }
  return result;
}

}  // namespace trimkv
