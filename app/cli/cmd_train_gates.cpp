// `trimkv train-gates`: fits retention gates to a frozen model (METHOD.md §3).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.h"
#include "commands.h"
#include "interrupts.h"
#include "rank_launcher.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/train_gates.h"
#include "trimkv/vision/train_gates_vlm.h"

namespace trimkv::cli {

int cmd_train_gates(int argc, char** argv, int first) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder of the frozen model"},
      {"data", "FILE.jsonl", "training data: {\"text\": ...} or {\"images\": [...], \"turns\": [{\"text\", \"answer\"}]} per line"},
      {"out", "FILE", "gates file to write: .safetensors ours (e.g. DIR/retention_gates.safetensors) or .pth in the authors' trimkv_weights.pth layout"},
      {"kind", "K", "dbtrimkv (default: tied output, global capacity) or trimkv (per-head)"},
      {"untied", "", "DBTrimKV ablation: per-layer output projection and bias"},
      ranged_int("gate-hidden", "N", "gate MLP width (default 512)", 1, 65536),
      ranged_real("budget", "M", "training budget per KV head (default 32)", 1e-3, 1e9),
      {"capacity", "MODE", "global | per-head (default: global for dbtrimkv, per-head for trimkv)"},
      ranged_real("lambda", "L", "weight of the capacity loss (default 1)", 0, 1e6),
      {"reverse-kl", "", "use KL(student || teacher) instead of KL(teacher || student)"},
      ranged_int("steps", "N", "optimiser steps (default 1000)", 1, 100000000),
      ranged_int("batch", "N", "sequences per step (default 1)", 1, 4096),
      ranged_real("lr", "LR", "peak learning rate (default 2e-4)", 1e-12, 10),
      ranged_real("min-lr", "LR", "floor of the cosine decay (default 1e-6)", 0, 10),
      ranged_int("warmup", "N", "warm-up steps (default 5% of --steps)", 0, 100000000),
      ranged_real("weight-decay", "W", "AdamW weight decay (default 1e-6)", 0, 10),
      ranged_real("clip", "C", "gradient-norm clip (default 1)", 1e-6, 1e6),
      ranged_real("bias-init", "B", "initial output bias (default 18: nothing forgotten at the start)", -1e3, 1e3),
      ranged_int("max-len", "N", "longest sequence; longer ones are truncated from the left (default 1024)", 2, 10000000),
      ranged_int("seed", "S", "seed for the gate init and the data order (default 0)", 0, 2147483647),
      {"checkpoint", "FILE", "checkpoint file (default: OUT.ckpt)"},
      ranged_int("checkpoint-every", "N", "write a checkpoint every N steps (default 100; 0 = only at the end)", 0, 100000000),
      {"resume", "", "continue from the checkpoint (same options, model and data required)"},
      {"device", "D", "where the teacher, the student and the gates run: cpu, cuda, or auto = the GPU when one can be used (default auto; data-parallel ranks: cpu)"},
      threads_option("CPU threads (default: LibTorch's own; train-demo's gates use every hardware thread, pass that to reproduce them; keep it fixed across --resume)"),
      ranged_int("nproc", "N", "data parallel: start N local ranks of this command over Gloo, the batch split between them (default 1); --threads is per rank (default: the cores / N). Across machines start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set", 1, 1024),
      ranged_real("dist-timeout", "S", "data parallel: seconds a rank waits for the others (joining, and at each step) before failing (default 1800)", 1, 1e7),
      {"json", "", "print progress as one JSON object per step"},
      {"help", "", "show this help"},
  };
  Args args("train-gates", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("train-gates", "Train retention gates (TrimKV / DBTrimKV) on a frozen model.", specs);
    return 0;
  }
  const int nproc = args.get_int("nproc", 1);
  DataParallelOptions parallel = data_parallel_from_environment();
  parallel.timeout_s = args.get_double("dist-timeout", parallel.timeout_s);
  if (nproc > 1) {
    if (parallel.world_size > 1)
      throw UsageError("--nproc starts its own ranks: drop it, or unset WORLD_SIZE and RANK");
    for (const char* required : {"model", "data", "out"}) args.require(required);  // before any rank starts
    // The ranks get this command line without --nproc, and a share of the cores each.
    std::vector<std::string> rank_args = {argv[first - 1]};
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--nproc") ++i;
      else if (a.rfind("--nproc=", 0) != 0) rank_args.push_back(a);
    }
    if (!args.has("threads")) {
      rank_args.insert(rank_args.end(), {"--threads", std::to_string(std::max(1, hardware_threads() / nproc))});
    }
    return launch_local_ranks(nproc, rank_args, std::cerr);
  }
  // Ranks other than 0 train silently (rank 0 reports the summed figures) and report only errors.
  const bool reporting = parallel.rank == 0;

  TrainOptions o;
  o.parallel = parallel;
  o.model_dir = args.require("model");
  o.data_path = args.require("data");
  o.out_path = args.require("out");
  o.kind = parse_gate_kind(args.get("kind", "dbtrimkv"));
  o.untied = args.flag("untied");
  o.gate_hidden = args.get_int("gate-hidden", 512);
  o.budget = args.get_double("budget", 32);
  o.capacity = args.has("capacity") ? parse_capacity_mode(args.get("capacity")) : default_capacity_mode(o.kind);
  o.lambda = args.get_double("lambda", 1.0);
  o.reverse_kl = args.flag("reverse-kl");
  o.steps = args.get_int("steps", 1000);
  o.batch = args.get_int("batch", 1);
  o.lr = args.get_double("lr", 2e-4);
  o.min_lr = args.get_double("min-lr", 1e-6);
  o.warmup = args.get_int("warmup", -1);
  o.weight_decay = args.get_double("weight-decay", 1e-6);
  o.clip = args.get_double("clip", 1.0);
  o.bias_init = args.get_double("bias-init", 18.0);
  o.max_len = args.get_int("max-len", 1024);
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  o.checkpoint_path = args.get("checkpoint");
  o.checkpoint_every = args.get_int("checkpoint-every", 100);
  o.resume = args.flag("resume");
  o.threads = threads_arg(args);
  o.device = device_arg(args);
  if (o.parallel.world_size > 1 && !args.has("device")) o.device = "cpu";  // Gloo ranks are CPU ranks
  if (o.untied && o.kind != GateKind::DBTrimKV) throw UsageError("--untied applies to --kind dbtrimkv only");
  const bool json = args.flag("json");
  const bool tty = isatty(fileno(stderr));

  std::atomic<bool> stop{false};
  std::optional<InterruptAction> ctrl_c(std::in_place, stop);
  // The dataset's warnings come before the setup, the same on every rank (rank 0 reports them);
  // after it, those of conversations a rank finds unusable when it draws them (each rank its own).
  bool training = false;
  auto on_warning = [&](const std::string& w) {
    if (!training && reporting) std::cerr << "warning: " << w << "\n";
    else if (training)
      std::cerr << "warning" << (parallel.world_size > 1 ? " (rank " + std::to_string(parallel.rank) + ")" : "")
                << ": " << w << "\n";
  };
  int64_t n_samples = 0;
  auto on_setup = [&](const TrainSetup& s) {
    n_samples = s.n_samples;
    training = true;
    if (!reporting) return;
    std::cerr << "train-gates: " << s.n_samples << " sequences from " << s.n_lines << " lines ("
              << s.n_warnings << " skipped or altered), " << gate_kind_name(o.kind) << " gates with "
              << s.gate_parameters << " parameters, budget " << o.budget << " per head ("
              << capacity_mode_name(o.capacity) << "), " << o.steps << " steps"
              << (o.resume ? ", resuming" : "")
              << (parallel.world_size > 1 ? ", data parallel over " + std::to_string(parallel.world_size) +
                                                " ranks (batch " + std::to_string(o.batch) + " in all)"
                                          : std::string())
              << (s.chat_template ? "; conversations laid out with the model's chat template" : "")
              << (s.deferred > 0 ? " by the rank that draws them" : "") << "\n";
  };
  auto on_progress = [&](const TrainProgress& p) {
    if (!reporting) return;
    if (json) {
      nlohmann::json j = {{"step", p.step},       {"steps", p.total_steps}, {"loss", p.loss},
                          {"nll", p.nll},         {"kl", p.kl},             {"cap", p.cap},
                          {"lr", p.lr},           {"grad_norm", p.grad_norm},
                          {"capacity_ratio", p.capacity_ratio},
                          {"tokens_per_s", p.tokens_per_s}, {"eta_s", p.eta_s},
                          {"checkpointed", p.checkpointed}};
      std::cout << j.dump() << "\n" << std::flush;
      return;
    }
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * p.step / std::max<int64_t>(1, p.total_steps));
    char line[320];
    std::snprintf(line, sizeof line,
                  "[%s%s] %lld/%lld  loss %.4f (nll %.4f kl %.4f cap %.4f)  S/M %.2f  lr %.2e  %.0f tok/s  ETA %s%s",
                  std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                  static_cast<long long>(p.step), static_cast<long long>(p.total_steps), p.loss, p.nll, p.kl,
                  p.cap, p.capacity_ratio, p.lr, p.tokens_per_s, format_duration(p.eta_s).c_str(),
                  p.checkpointed ? "  [checkpoint]" : "");
    std::cerr << (tty ? "\r" : "") << line << (tty ? "\033[K" : "\n") << std::flush;
  };
  const TrainResult r = vision::train_gates_vlm(o, on_warning, on_setup, on_progress, &stop);
  ctrl_c.reset();
  if (tty && !json && reporting) std::cerr << "\n";
  if (!reporting) return r.interrupted ? 130 : 0;
  if (r.interrupted) {
    std::cerr << "train-gates: interrupted at step " << r.steps_done << "; checkpoint written to '"
              << r.checkpoint_path << "' (continue with the same options and --resume)\n";
    return 130;
  }
  if (parallel.world_size > 1 && r.laid_out > 0)
    std::cerr << "train-gates: rank 0 laid out and encoded " << r.laid_out << " of the " << n_samples
              << " conversations (those it drew)\n";
  std::cerr << "train-gates: " << r.steps_done << " steps done; gates written to '" << r.out_path
            << "', checkpoint '" << r.checkpoint_path << "'\n";
  return 0;
}

}  // namespace trimkv::cli
