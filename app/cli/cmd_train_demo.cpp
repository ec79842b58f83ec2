// `trimkv train-demo`: trains the embedded demo VLM from scratch on the synthetic world, then its
// DBTrimKV gates (vision/demo_training.h has the recipe).
#include <cstring>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "args.h"
#include "commands.h"
#include "interrupts.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/vision/demo_training.h"
#include "trimkv/vision/world.h"

namespace trimkv::cli {

namespace {

// A validation fraction, or "none" where the validation had no such conversation (-1).
std::string fraction_or_none(double v) {
  if (v < 0) return "none";
  char text[16];
  std::snprintf(text, sizeof text, "%.3f", v);
  return text;
}

}  // namespace

int cmd_train_demo(int argc, char** argv, int first) {
  const vision::DemoTrainOptions d;
  const std::vector<OptionSpec> specs = {
      {"out", "DIR", "model folder to write (training state goes to DIR/train/)"},
      ranged_int("seed", "S", "seed of the weights and the data (default 1)", 0, 2147483647),
      ranged_int("vision-steps", "N", "steps of the vision stage (default " + std::to_string(d.vision.steps) + ")", 0, 10000000),
      ranged_int("short-steps", "N", "steps of the 1-3 image chat stage (default " + std::to_string(d.chat_short.steps) + ")", 0, 10000000),
      ranged_int("chat-steps", "N", "steps of the full chat stage (default " + std::to_string(d.chat.steps) + ")", 0, 10000000),
      ranged_int("polish-steps", "N", "steps of the low-rate pass after the chat stage (default " + std::to_string(d.polish.steps) + "; 400: the recipe before it; 0: without the stage)", 0, 10000000),
      ranged_int("average-last", "N", "the exported weights are the average of the last stage's final N steps' (default " + std::to_string(d.average_last) + ": the last step's)", 0, 10000000),
      ranged_int("image-size", "PX", "side of the model's input images, the processor's resize target (default " + std::to_string(d.size.image_size) + ")", vision::world::kMinImageSize, vision::world::kMaxImageSize),
      ranged_int("patch-size", "PX", "side of the tower's patches (default " + std::to_string(d.size.patch_size) + "; image-size / patch-size must be even: 2x2 patches make a visual token)", 1, vision::world::kMaxImageSize),
      ranged_real("vision-lr", "LR", "peak learning rate of the vision stage", 1e-10, 10),
      ranged_real("chat-lr", "LR", "peak learning rate of the chat-short stage; the chat and polish stages' rates scale with it (default " + number_text(d.chat_short.lr) + ": chat " + number_text(d.chat.lr) + ", polish " + number_text(d.polish.lr) + ")", 1e-10, 10),
      ranged_int("gate-steps", "N", "steps of gate training (default " + std::to_string(d.gate_steps) + ")", 0, 10000000),
      {"no-gates", "", "skip gate training"},
      ranged_int("val", "N", "validation conversations (default " + std::to_string(d.val_conversations) + ")", 0, 1000000),
      ranged_int("val-every", "N", "validate every N chat steps (default " + std::to_string(d.val_every) + ")", 0, 10000000),
      ranged_int("checkpoint-every", "N", "checkpoint every N steps (default " + std::to_string(d.checkpoint_every) + ")", 0, 10000000),
      {"resume", "", "continue from DIR/train/checkpoint.safetensors (same options)"},
      {"export-checkpoint", "", "write the checkpoint's weights to DIR/model.safetensors (to evaluate a run in progress) and stop"},
      ranged_real("describe", "P", "probability that an extra turn is a caption", 0, 1),
      ranged_real("attn-weight", "W", "weight of the attention targets (0: off)", 0, 1e6),
      ranged_real("image-probe-weight", "W", "weight of the image probe: visual tokens and 'In image k' words must say their image (default 0: none)", 0, 1e6),
      {"no-number-hops", "", "the labels hop averages the whole label and question instead of looking at the image number (the earlier recipe)"},
      {"count-second-kv-head", "", "counts are also taught on query head 2 (the objects hop layer's other KV head): a second reading of the counted word's share"},
      ranged_real("cell-readout-weight", "W", "weight of the cell readout: each visual token's normalised state at the objects hop must say its object's colour and shape as 0/1 indicators (default 0: none)", 0, 1e6),
      ranged_real("count-weight", "W", "weight of the counts' even spread in the objects hop, relative to the other attention targets (default 1)", 0, 1e6),
      ranged_real("shape-weight", "W", "weight of the dense targets' shape terms (visual tokens and patches), relative to their colour, size and cell terms (default " + number_text(d.shape_weight) + "; 1: the recipe before it)", 0, 1e6),
      ranged_int("vision-min-objects", "K", "at least K objects per image in the vision stage (default " + std::to_string(d.vision.min_objects) + "; 1: the recipe before it)", 1, vision::world::kMaxObjectsLimit),
      {"no-qk-norm", "", "a Llama decoder, without the per-head RMSNorm of queries and keys (the recipe before the Qwen3 decoder)"},
      {"train-tower", "", "the chat stages also train the vision tower (default: frozen after the vision stage)"},
      ranged_real("tower-lr-scale", "F", "with --train-tower: the tower's rate in the chat stages, times the stage's (default 1)", 1e-6, 1e3),
      {"init-from", "PATH", "start from these weights: a train-demo checkpoint, or a model folder (its tokenizer too; probes start fresh)"},
      ranged_int("short-images", "K", "max images per conversation in the chat-short stage", 1,
                 vision::world::kMaxImagesLimit),
      ranged_int("short-objects", "K", "max objects per image in the chat-short stage", 1,
                 vision::world::kMaxObjectsLimit),
      ranged_int("short-batch", "N", "conversations per step in the chat-short stage", 1, 4096),
      ranged_int("short-ramp", "N", "chat-short steps over which objects per image grow from 1 to the maximum", 0, 10000000),
      ranged_int("shards", "N", "split each step's batch into N parts, one compute thread each, their gradients summed (default " + std::to_string(d.shards) + "; the weights depend on it, not on --threads)", 1, 64),
      threads_option("CPU threads (default: all cores)"),
      {"help", "", "show this help"},
  };
  Args args("train-demo", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("train-demo",
                             "Train the demo Idefics3 model from scratch on the synthetic world (tokenizer, vision "
                             "stage, chat stages, export, DBTrimKV gates).",
                             specs);
    return 0;
  }
  vision::DemoTrainOptions o;
  o.out_dir = args.require("out");
  o.seed = static_cast<uint64_t>(args.get_int("seed", 1));
  o.size.image_size = args.get_int("image-size", d.size.image_size);
  o.size.patch_size = args.get_int("patch-size", d.size.patch_size);
  o.vision.steps = args.get_int("vision-steps", static_cast<int>(d.vision.steps));
  o.chat_short.steps = args.get_int("short-steps", static_cast<int>(d.chat_short.steps));
  o.chat.steps = args.get_int("chat-steps", static_cast<int>(d.chat.steps));
  o.polish.steps = args.get_int("polish-steps", static_cast<int>(d.polish.steps));
  o.average_last = args.get_int("average-last", static_cast<int>(d.average_last));
  o.gate_steps = args.get_int("gate-steps", static_cast<int>(d.gate_steps));
  o.vision.lr = args.get_double("vision-lr", d.vision.lr);
  o.chat_short.lr = args.get_double("chat-lr", d.chat_short.lr);
  o.chat.lr = o.chat_short.lr * d.chat.lr / d.chat_short.lr;
  o.polish.lr = o.chat_short.lr * d.polish.lr / d.chat_short.lr;
  o.skip_gates = args.flag("no-gates");
  o.val_conversations = args.get_int("val", static_cast<int>(d.val_conversations));
  o.val_every = args.get_int("val-every", static_cast<int>(d.val_every));
  o.checkpoint_every = args.get_int("checkpoint-every", static_cast<int>(d.checkpoint_every));
  o.resume = args.flag("resume");
  o.export_only = args.flag("export-checkpoint");
  o.init_from = args.get("init-from");
  o.describe_probability = args.get_double("describe", d.describe_probability);
  o.attn_weight = args.get_double("attn-weight", d.attn_weight);
  o.image_probe_weight = args.get_double("image-probe-weight", d.image_probe_weight);
  o.number_hops = !args.flag("no-number-hops");
  o.count_second_kv_head = args.flag("count-second-kv-head");
  o.count_weight = args.get_double("count-weight", d.count_weight);
  o.shape_weight = args.get_double("shape-weight", d.shape_weight);
  o.vision.min_objects = args.get_int("vision-min-objects", d.vision.min_objects);
  o.cell_readout_weight = args.get_double("cell-readout-weight", d.cell_readout_weight);
  o.size.qk_norm = !args.flag("no-qk-norm");
  o.freeze_tower = !args.flag("train-tower");
  o.tower_lr_scale = args.get_double("tower-lr-scale", d.tower_lr_scale);
  if (o.freeze_tower && args.has("tower-lr-scale"))
    throw UsageError("--tower-lr-scale sets the tower's rate in the chat stages: it needs --train-tower");
  o.chat_short.max_images = args.get_int("short-images", d.chat_short.max_images);
  o.chat_short.max_objects = args.get_int("short-objects", d.chat_short.max_objects);
  o.chat_short.batch = args.get_int("short-batch", static_cast<int>(d.chat_short.batch));
  o.chat_short.objects_ramp = args.get_int("short-ramp", static_cast<int>(d.chat_short.objects_ramp));
  o.shards = args.get_int("shards", d.shards);
  o.threads = threads_arg(args);
  keep_freed_memory();
  const bool tty = isatty(fileno(stderr));

  std::atomic<bool> stop{false};
  std::optional<InterruptAction> ctrl_c(std::in_place, stop);
  auto on_message = [&](const std::string& m) {
    std::cerr << (tty ? "\r\033[K" : "") << "train-demo: " << m << "\n" << std::flush;
  };
  auto on_progress = [&](const vision::DemoProgress& p) {
    constexpr int kWidth = 20;
    const int filled = static_cast<int>(kWidth * p.step / std::max<int64_t>(1, p.total));
    char line[512];
    std::snprintf(line, sizeof line, "%-10s [%s%s] %lld/%lld  loss %.4f (answers %.4f, tokens %.4f, found %.3f, looking %.2f/%.2f/%.2f [shape %.2f colour %.2f count %.2f image %.2f]/%.2f)  lr %.2e  %s  ETA %s%s",
                  p.stage.c_str(), std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                  static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss, p.answer_loss, p.aux_loss, p.found_loss,
                  p.attn_hops[0], p.attn_hops[1], p.attn_hops[2], p.lookups[0], p.lookups[1], p.lookups[2], p.lookups[3], p.attn_hops[3], p.lr, format_duration(p.elapsed_s).c_str(), format_duration(p.eta_s).c_str(),
                  p.checkpointed ? "  [checkpoint]" : "");
    if (p.cell_loss >= 0) {
      const size_t used = std::strlen(line);
      std::snprintf(line + used, sizeof line - used, "  cell %.3f", p.cell_loss);
    }
    const bool val = p.val_probe_objects >= 0;
    std::cerr << (tty ? "\r" : "") << line << (tty && !val ? "\033[K" : "\n");
    if (p.val_accuracy >= 0)
      std::fprintf(stderr, "train-demo: validation exact match %.3f (single-image %s, multi-image %s)\n",
                   p.val_accuracy, fraction_or_none(p.val_single).c_str(), fraction_or_none(p.val_multi).c_str());
    if (val)
      std::fprintf(stderr,
                   "train-demo: visual-token probe: object cells %.3f (colour %.3f, shape %.3f, size %.3f), empty "
                   "cells %.3f\n",
                   p.val_probe_objects, p.val_probe_attrs[0], p.val_probe_attrs[1], p.val_probe_attrs[2],
                   p.val_probe_empty);
    if (p.val_found >= 0)
      std::fprintf(stderr, "train-demo: lookup probe (question words after the objects hop): all targets right %.3f\n",
                   p.val_found);
    if (p.val_image >= 0)
      std::fprintf(stderr, "train-demo: image probe (visual tokens and 'In image k' words): right %.3f\n", p.val_image);
    std::cerr << std::flush;
  };
  const vision::DemoResult r = vision::train_demo(o, on_message, on_progress, &stop);
  ctrl_c.reset();
  if (tty) std::cerr << "\n";
  if (r.interrupted) {
    std::cerr << "train-demo: interrupted; checkpoint '" << r.checkpoint_path
              << "' (continue with the same options and --resume)\n";
    return 130;
  }
  std::fprintf(stderr, "train-demo: done in %s; model in '%s' (validation %s, single-image %s, multi-image %s)\n",
               format_duration(r.seconds).c_str(), r.model_dir.c_str(), fraction_or_none(r.val_accuracy).c_str(),
               fraction_or_none(r.val_single).c_str(), fraction_or_none(r.val_multi).c_str());
  return 0;
}

}  // namespace trimkv::cli
