"""Gate-training benchmark: `trimkv train-gates` against the same loss written in PyTorch, and the
cost of the retention gate in a decode step.

1. Training tokens/s. A small random Llama checkpoint (default: 6 layers, hidden 256, 8 heads,
   2 KV heads, vocab 8192) and a JSONL file of random token sequences. Both sides train DBTrimKV
   gates (width 512, tied, global capacity, M = 16) for the same steps on the same sequences:
   teacher pass (no grad) + gated student pass + ½(NLL + KL) + λ·L_cap + backward + AdamW.
   The PyTorch side is tests/oracle/gate_fixtures.py's forward (METHOD.md written out in torch)
   with torch.optim.AdamW. Tokens/s = sequence positions trained per second, first step excluded.
2. Gate cost. On a SmolLM2-135M-shaped random checkpoint (tests/bench/bench_text.py), decode
   tokens/s of `trimkv generate` without gates and with random DBTrimKV gates (width 512).

Prints Markdown tables. Needs the oracle environment and a built trimkv; run on a quiet machine.
Usage: <venv>/bin/python tests/bench/bench_train_gates.py [--threads 2] [--steps 6] [--len 256]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))


def make_small(path: Path, layers, hidden, vocab):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden,
                      num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                      max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).float().save_pretrained(path, safe_serialization=True)


def write_data(path: Path, n_lines, length, vocab):
    import random
    rng = random.Random(1)
    with open(path, "w") as f:
        for _ in range(n_lines):
            f.write(json.dumps({"ids": [rng.randrange(3, vocab) for _ in range(length)]}) + "\n")


def bench_cpp(binary, model, data, out, steps, budget, threads, max_len):
    cmd = [binary, "train-gates", "--model", str(model), "--data", str(data), "--out", str(out),
           "--steps", str(steps), "--budget", str(budget), "--threads", str(threads), "--json",
           "--checkpoint-every", "0", "--max-len", str(max_len), "--lr", "1e-3"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    lines = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    # tokens_per_s is cumulative over the run; per-step rate from consecutive ETA-free numbers:
    # use the cumulative rate after the last step minus the first step's share.
    last = lines[-1]
    return last["tokens_per_s"], lines


def bench_torch(model_dir, data, steps, budget, threads, max_len):
    import torch
    import torch.nn.functional as F
    import gate_fixtures as gf
    torch.set_num_threads(threads)
    cfg, w = gf.load_model(model_dir)
    L, H, d = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["hidden_size"]
    hid = 512
    torch.manual_seed(0)
    shared = {"linear3.weight": (torch.randn(H, hid) * 0.02).requires_grad_(),
              "bias": torch.full((H,), 18.0).requires_grad_()}
    gates = []
    for _ in range(L):
        t = {"linear1.weight": (torch.randn(hid, d) * 0.02).requires_grad_(),
             "linear1.bias": torch.zeros(hid, requires_grad=True),
             "linear2.weight": (torch.randn(hid, hid) * 0.02).requires_grad_(),
             "linear2.bias": torch.zeros(hid, requires_grad=True)}
        t.update(shared)
        gates.append(t)
    params = [p for g in gates for k, p in g.items() if k not in shared] + list(shared.values())
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-6)
    seqs = [json.loads(l)["ids"][-max_len:] for l in open(data)]
    times, tokens = [], []
    for step in range(steps):
        ids = seqs[step % len(seqs)]
        n = len(ids)
        t0 = time.perf_counter()
        targets = torch.tensor(ids[1:] + [0])
        mask = torch.zeros(n, dtype=torch.bool)
        mask[:-1] = True
        with torch.no_grad():
            teacher, _ = gf.forward(cfg, w, ids)
        student, lbs = gf.forward(cfg, w, ids, gates, "dbtrimkv")
        ls, lt = student[mask].log_softmax(-1), teacher[mask].log_softmax(-1)
        nll = -ls.gather(1, targets[mask][:, None]).mean()
        kl = (lt.exp() * (lt - ls)).sum(-1).mean()
        idx = torch.arange(n)
        dist = (idx[:, None] - idx[None, :]).float()
        causal = idx[None, :] <= idx[:, None]
        S = torch.stack([(dist[None] * lb.T[:, None, :]).masked_fill(~causal[None], float("-inf")).exp().sum(-1)
                         for lb in lbs])                          # [L, H, n]
        sg = S.sum((0, 1))
        mg = budget * L * H
        r = F.relu((sg - mg) / (idx.float() * L * H - mg).clamp(min=1.0))
        active = int((r > 0).sum())
        cap = r.sum() / active if active else r.sum() * 0
        loss = 0.5 * (nll + kl) + cap
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        tokens.append(n)
    return sum(tokens[1:]) / sum(times[1:])


def write_random_gates(path: Path, cfg):
    import torch
    from safetensors.torch import save_file
    L, H, d, hid = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["hidden_size"], 512
    torch.manual_seed(1)
    w3, b = torch.randn(H, hid) * 0.02, torch.full((H,), 18.0)
    t = {}
    for l in range(L):
        p = f"model.layers.{l}.self_attn.retention_gate."
        t[p + "linear1.weight"] = torch.randn(hid, d) * 0.02
        t[p + "linear1.bias"] = torch.zeros(hid)
        t[p + "linear2.weight"] = torch.randn(hid, hid) * 0.02
        t[p + "linear2.bias"] = torch.zeros(hid)
        t[p + "linear3.weight"] = w3.clone()
        t[p + "bias"] = b.clone()
    save_file(t, str(path), metadata={"format": "trimkv-gates", "kind": "dbtrimkv", "tied": "true"})


def decode_tps(binary, model, gates, threads, prompt, n_new, repeats):
    best = 0.0
    for _ in range(repeats):
        out = subprocess.run([binary, "generate", "--model", str(model), "--prompt-ids",
                              ",".join(str(3 + i % 1000) for i in range(prompt)), "--max-new-tokens",
                              str(n_new), "--ignore-eos", "--json", "--threads", str(threads),
                              "--gates", gates], capture_output=True, text=True, check=True)
        best = max(best, json.loads(out.stdout)["decode_tokens_per_s"])
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    ap.add_argument("--skip-decode", action="store_true")
    args = ap.parse_args()
    cache = Path.home() / ".cache" / "trimkv" / "bench"
    small = cache / f"llama-{args.layers}x{args.hidden}-v{args.vocab}"
    if not (small / "model.safetensors").exists():
        make_small(small, args.layers, args.hidden, args.vocab)
    data = cache / f"gates-data-{args.len}.jsonl"
    write_data(data, 8, args.len, args.vocab)
    budget = 16

    cpp_tps, _ = bench_cpp(args.binary, small, data, cache / "bench-gates.safetensors", args.steps, budget,
                           args.threads, args.len)
    torch_tps = bench_torch(small, data, args.steps, budget, args.threads, args.len)
    print(f"\nGate training, {args.layers} layers x hidden {args.hidden}, vocab {args.vocab}, "
          f"{args.len}-token sequences, DBTrimKV width 512, {args.threads} threads, {args.steps} steps\n")
    print("| implementation | training tokens/s |")
    print("|---|---|")
    print(f"| trimkv train-gates (C++/LibTorch) | {cpp_tps:.0f} |")
    print(f"| PyTorch {__import__('torch').__version__} (same loss, AdamW) | {torch_tps:.0f} |")

    if args.skip_decode:
        return
    import bench_text
    big = cache / "smollm2-135m-shaped"
    if not (big / "model.safetensors").exists():
        bench_text.make_checkpoint(big)
    gates = cache / "smollm2-135m-gates.safetensors"
    cfg = json.loads((big / "config.json").read_text())
    write_random_gates(gates, cfg)
    plain = decode_tps(args.binary, big, "none", args.threads, 128, 64, 3)
    gated = decode_tps(args.binary, big, str(gates), args.threads, 128, 64, 3)
    print(f"\nRetention-gate cost in decode, SmolLM2-135M-shaped, {args.threads} threads, best of 3\n")
    print("| decode | tokens/s | ms/step |")
    print("|---|---|---|")
    print(f"| no gates | {plain:.1f} | {1000 / plain:.2f} |")
    print(f"| DBTrimKV gates (width 512) | {gated:.1f} | {1000 / gated:.2f} |")
    print(f"\nGate share of a decode step: {100 * (1 / gated - 1 / plain) / (1 / gated):.1f}%")


if __name__ == "__main__":
    main()
