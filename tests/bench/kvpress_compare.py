"""Our prefill-time baselines against NVIDIA's kvpress, side by side on a real model (issue 20).

For each single-turn conversation of a make-tasks file, on the same prompt ids (the model's chat
template with the generation prompt):
  - kvpress: the press compresses the cache once after the whole prompt (kvpress's own prefill
    hook on transformers' model, float32); the kept positions per (layer, KV head) are the top-k
    of the press's own scores, taken exactly as kvpress's ScorerPress.compress takes them; then
    greedy decoding from that cache (kvpress's pipeline's position handling);
  - trimkv: `trimkv generate --prompt-ids ... --whole-prompt-eviction` on the same ids, with the
    matching policy and options and the budget per head equal to kvpress's kept count; the kept
    positions come from the first eviction event of its trace (every position minus
    evicted_tokens); greedy answer as generate writes it.
Reports, per press: the mean overlap of the kept sets (|ours ∩ theirs| / k per (layer, head)),
the share of heads whose sets are identical, and the answers (contains-match) of both; beside
them trimkv with its default chunked prefill (an eviction after every 256-token chunk), and for
both of its modes the share of (layer, head) that still hold every token of the asked value.

Needs the kvpress environment (packaging/setup.sh --kvpress) and a built trimkv.

Usage: <venv-kvpress>/bin/python tests/bench/kvpress_compare.py --model DIR --data TASKS.jsonl
           [--press snapkv,streamingllm] [--keep 0.25] [--limit 10] [--window 64] [--kernel 5]
           [--threads 2] [--trimkv build/app/trimkv] [--out report.json]
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contains(reply: str, expected: str) -> bool:
    # trimkv eval --match contains: the expected answer as whole words of the normalised reply
    norm = lambda s: " ".join(re.findall(r"[a-z0-9]+", s.lower()))
    return re.search(r"(^| )" + re.escape(norm(expected)) + r"( |$)", norm(reply)) is not None


def value_positions(tok, ids, text, answer):
    """Token positions of the asked value where the prompt states it ("... is 4821.")."""
    pieces = [tok.decode([i]) for i in ids]
    starts, at = [], 0
    for p in pieces:
        starts.append(at)
        at += len(p)
    full = "".join(pieces)
    key = re.search(r"What is the secret number of (the [a-z]+ [a-z]+)\?", text)
    if not key:
        return []
    fact = f"The secret number of {key.group(1)} is {answer}."
    c = full.find(fact)
    if c < 0:
        return []
    c0 = c + len(fact) - len(answer) - 1
    c1 = c0 + len(answer)
    return [i for i, st in enumerate(starts) if st < c1 and st + len(pieces[i]) > c0]


def kept_share(kept, positions):
    """Share of (layer, head) that keep every one of the positions."""
    heads = [set(h) for layer in kept.values() for h in layer]
    return sum(all(p in h for p in positions) for h in heads) / len(heads) if positions else float("nan")


def kvpress_run(model, tok, press, ids, n_new):
    """Kept positions per (layer, KV head) and the greedy answer, with kvpress compressing the prompt."""
    import torch
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache
    kept = {}
    score = press.score

    def recording_score(module, hidden_states, keys, values, attentions, kwargs):
        s = score(module, hidden_states, keys, values, attentions, kwargs)
        if hasattr(press, "get_layer_budget"):  # PyramidKV: its own per-layer budget
            n_kept = press.get_layer_budget(module, keys.shape[2])
        else:
            n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
        idx = s.topk(n_kept, dim=-1).indices[0]  # [kv_heads, n_kept], as ScorerPress.compress
        kept[module.layer_idx] = [sorted(row.tolist()) for row in idx]
        return s

    press.score = recording_score
    x = torch.tensor([ids])
    cache = DynamicCache()
    with torch.no_grad(), press(model):
        out = model(input_ids=x, past_key_values=cache, use_cache=True)
    press.score = score
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    generated = [int(out.logits[0, -1].argmax())]
    pos = len(ids)
    with torch.no_grad():
        while len(generated) < n_new and generated[-1] not in eos:
            out = model(input_ids=torch.tensor([[generated[-1]]]), past_key_values=cache,
                        position_ids=torch.tensor([[pos]]))
            generated.append(int(out.logits[0, -1].argmax()))
            pos += 1
    return kept, tok.decode(generated, skip_special_tokens=True)


def trimkv_run(binary, model_dir, ids, policy, budget, opts, n_new, threads, work: Path, whole=True):
    """Kept positions per layer and head when the prompt is in, and the greedy answer. With
    whole=False the prompt goes in 256-token chunks with an eviction after each (the default of
    trimkv's chat and eval): what is kept is every position no prefill event evicted."""
    trace = work / "trace.json"
    cmd = [binary, "generate", "--model", str(model_dir), "--prompt-ids", ",".join(map(str, ids)),
           "--policy", policy, "--budget", str(budget), "--trace", str(trace),
           "--max-new-tokens", str(n_new), "--threads", str(threads), "--json"]
    if whole:
        cmd.append("--whole-prompt-eviction")
    for k, v in opts.items():
        cmd += ["--policy-opt", f"{k}={v}"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    t = json.loads(trace.read_text())
    prefill = [e for e in t["events"] if e["phase"] == "prefill"]
    n_tok, n_kv = len(ids), t["geometry"]["n_kv_head"]
    if whole:
        n_tok = prefill[0]["n_tokens"]
    kept = {}
    for i in range(len(prefill[0]["heads"])):
        gone = set()
        for e in prefill:
            gone.update(e["heads"][i]["evicted_tokens"])
        kept.setdefault(i // n_kv, []).append([p for p in range(n_tok) if p not in gone])
    return kept, n_tok, out["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--press", default="snapkv,streamingllm")
    ap.add_argument("--keep", type=float, default=0.25, help="fraction of the prompt kept per head")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--kernel", type=int, default=5)
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--beta", type=int, default=20)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trimkv", default=str(ROOT / "build/app/trimkv"))
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from kvpress import PyramidKVPress, SnapKVPress, StreamingLLMPress
    from kvpress.utils import compute_n_kept
    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    ratio = 1.0 - a.keep

    presses = {
        "snapkv": (lambda: SnapKVPress(compression_ratio=ratio, window_size=a.window, kernel_size=a.kernel),
                   {"window": a.window, "kernel": a.kernel, "pooling": "avg"}),
        "pyramidkv": (lambda: PyramidKVPress(compression_ratio=ratio, window_size=a.window, kernel_size=a.kernel,
                                             beta=a.beta),
                      {"window": a.window, "kernel": a.kernel, "pooling": "avg", "beta": a.beta}),
        "streamingllm": (lambda: StreamingLLMPress(compression_ratio=ratio, n_sink=a.sink), {"sinks": a.sink}),
    }
    convs = [json.loads(l) for l in Path(a.data).read_text().splitlines() if l.strip()]
    convs = [c for c in convs if len(c["turns"]) == 1][: a.limit]
    report = {"model": a.model, "data": a.data, "keep": a.keep, "presses": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.press.split(","):
            make, opts = presses[name]
            rows = []
            for conv in convs:
                turn = conv["turns"][0]
                ids = tok.apply_chat_template([{"role": "user", "content": turn["text"]}],
                                              add_generation_prompt=True, tokenize=True, return_dict=False)
                press = make()
                k = compute_n_kept(len(ids), press.compression_ratio)
                theirs, their_answer = kvpress_run(model, tok, press, ids, a.new)
                ours, n_tok, our_answer = trimkv_run(a.trimkv, a.model, ids, name, k, opts, a.new,
                                                     a.threads, Path(tmp))
                if n_tok != len(ids):
                    sys.exit(f"{conv['id']}: trimkv saw {n_tok} prompt tokens, transformers' template {len(ids)}")
                chunked, _, chunked_answer = trimkv_run(a.trimkv, a.model, ids, name, k, opts, a.new,
                                                        a.threads, Path(tmp), whole=False)
                value_at = value_positions(tok, ids, turn["text"], turn["answer"])
                overlaps, nested, same = [], [], 0
                sizes_differ = 0
                for layer, heads in theirs.items():
                    for h, kept in enumerate(heads):
                        o = ours[layer][h]
                        sizes_differ += len(o) != len(kept)
                        inter = len(set(o) & set(kept))
                        overlaps.append(inter / len(kept))
                        # both are top-k of one score list when the scores agree: the smaller set
                        # then lies inside the larger whatever the two sizes are
                        nested.append(inter / min(len(o), len(kept)))
                        same += inter == len(kept) == len(o)
                rows.append({"id": conv["id"], "tokens": len(ids), "kept": k,
                             "overlap": sum(overlaps) / len(overlaps), "min_overlap": min(overlaps),
                             "nested": sum(nested) / len(nested), "min_nested": min(nested),
                             "identical_heads": same / len(overlaps), "heads_sized_differently": sizes_differ,
                             "expected": turn["answer"],
                             "kvpress": their_answer, "kvpress_correct": contains(their_answer, turn["answer"]),
                             "trimkv": our_answer, "trimkv_correct": contains(our_answer, turn["answer"]),
                             "trimkv_chunked": chunked_answer,
                             "trimkv_chunked_correct": contains(chunked_answer, turn["answer"]),
                             "value_tokens": value_at,
                             "value_kept_whole": kept_share(ours, value_at),
                             "value_kept_chunked": kept_share(chunked, value_at)})
                r = rows[-1]
                print(f"{name:12s} {conv['id']:24s} tokens {len(ids):5d} kept {k:4d}/head  overlap "
                      f"{r['overlap']:.4f} (min {r['min_overlap']:.3f}, identical heads {r['identical_heads']:.2f}, "
                      f"sized differently {sizes_differ}, smaller set inside the larger {r['nested']:.4f})  "
                      f"answers kvpress {int(r['kvpress_correct'])} trimkv {int(r['trimkv_correct'])} "
                      f"chunked {int(r['trimkv_chunked_correct'])}; heads keeping the value: whole "
                      f"{r['value_kept_whole']:.2f}, chunked {r['value_kept_chunked']:.2f}", flush=True)
            n = len(rows)
            report["presses"][name] = {
                "options": opts, "rows": rows,
                "mean_overlap": sum(r["overlap"] for r in rows) / n,
                "mean_nested": sum(r["nested"] for r in rows) / n,
                "heads_sized_differently": sum(r["heads_sized_differently"] for r in rows),
                "identical_heads": sum(r["identical_heads"] for r in rows) / n,
                "kvpress_correct": sum(r["kvpress_correct"] for r in rows),
                "trimkv_correct": sum(r["trimkv_correct"] for r in rows),
                "trimkv_chunked_correct": sum(r["trimkv_chunked_correct"] for r in rows),
                "value_kept_whole": sum(r["value_kept_whole"] for r in rows) / n,
                "value_kept_chunked": sum(r["value_kept_chunked"] for r in rows) / n, "n": n}
    print("\n| press | settings | conversations | mean kept-set overlap | identical (layer, head) sets | "
          "heads sized differently | smaller set inside the larger | kvpress correct | trimkv correct | "
          "trimkv correct, chunked prefill | heads keeping the asked value: whole prompt / chunked |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, s in report["presses"].items():
        settings = ", ".join(f"{k}={v}" for k, v in s["options"].items())
        print(f"| {name} | {settings}, keep {a.keep:.0%} | {s['n']} | {s['mean_overlap']:.4f} | "
              f"{s['identical_heads']:.1%} | {s['heads_sized_differently']} | {s['mean_nested']:.4f} | "
              f"{s['kvpress_correct']}/{s['n']} | {s['trimkv_correct']}/{s['n']} | "
              f"{s['trimkv_chunked_correct']}/{s['n']} | {s['value_kept_whole']:.2f} / {s['value_kept_chunked']:.2f} |")
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
