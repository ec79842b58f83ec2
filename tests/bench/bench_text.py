"""Text-runtime benchmark: trimkv vs Hugging Face transformers (eager, float32), side by side.

Builds a random checkpoint shaped like SmolLM2-135M (30 layers, hidden 576, 9 heads, 3 KV heads,
vocab 49152, tied embeddings), then times, on the same prompt ids and thread count:
  - prefill: one forward over the prompt (tokens/s)
  - decode: greedy steps with the KV cache (tokens/s)
and prints a Markdown table. Needs the oracle environment (packaging/setup.sh --oracle) and a
built trimkv (packaging/build.sh).

Usage: <venv>/bin/python tests/bench/bench_text.py [--prompt 128] [--new 64] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_checkpoint(path: Path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                      num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                      max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).float().save_pretrained(path, safe_serialization=True)


def bench_hf(path: Path, ids, n_new, threads, repeats):
    import torch
    from transformers import LlamaForCausalLM
    torch.set_num_threads(threads)
    model = LlamaForCausalLM.from_pretrained(path, attn_implementation="eager",
                                             dtype=torch.float32).eval()
    x = torch.tensor([ids])
    best_prefill, best_decode = float("inf"), float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = model(x, use_cache=True)
            t1 = time.perf_counter()
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t2 = time.perf_counter()
            for _ in range(n_new - 1):
                out = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t3 = time.perf_counter()
            best_prefill = min(best_prefill, t1 - t0)
            best_decode = min(best_decode, t3 - t2)
    return len(ids) / best_prefill, (n_new - 1) / best_decode


def bench_trimkv(path: Path, ids, n_new, threads, repeats, binary):
    best_prefill, best_decode = float("inf"), float("inf")
    for _ in range(repeats):
        out = subprocess.run([binary, "generate", "--model", str(path), "--prompt-ids",
                              ",".join(map(str, ids)), "--max-new-tokens", str(n_new),
                              "--ignore-eos", "--threads", str(threads), "--json"],
                             check=True, capture_output=True, text=True)
        j = json.loads(out.stdout)
        best_prefill = min(best_prefill, j["prefill_ms"] / 1000)
        best_decode = min(best_decode, j["decode_ms"] / 1000)
    return len(ids) / best_prefill, (n_new - 1) / best_decode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--checkpoint", default=str(Path.home() / ".cache/trimkv/bench/smollm2-135m-shaped"),
                    help="where the random checkpoint is written (reused when present)")
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    import torch
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 49152, (args.prompt,), generator=g).tolist()
    path = Path(args.checkpoint)
    if not (path / "model.safetensors").exists():
        make_checkpoint(path)
    hf = bench_hf(path, ids, args.new, args.threads, args.repeats)
    tk = bench_trimkv(path, ids, args.new, args.threads, args.repeats, args.binary)
    print(f"SmolLM2-135M-shaped random checkpoint, float32, prompt {args.prompt} tokens, "
          f"{args.new} new tokens, {args.threads} threads, best of {args.repeats}\n")
    print("| runtime | prefill tok/s | decode tok/s |")
    print("|---|---:|---:|")
    print(f"| transformers {__import__('transformers').__version__} eager (torch {torch.__version__}) "
          f"| {hf[0]:.1f} | {hf[1]:.1f} |")
    print(f"| trimkv | {tk[0]:.1f} | {tk[1]:.1f} |")
    print(f"| ratio trimkv / transformers | {tk[0] / hf[0]:.2f}x | {tk[1] / hf[1]:.2f}x |")


if __name__ == "__main__":
    main()
