"""Qwen-VL benchmarks: trimkv vs Hugging Face transformers (eager, float32), side by side in one
run on the same checkpoint, image, raw prompt and thread count.

Shapes (random weights with the real sizes, bfloat16 shards in transformers' v5 names, written
once and reused; the tiny Qwen ChatML tokenizer of the test fixtures: the prompt's ids are what
matter, checked equal on both sides):
  - qwen2.5-vl-3b (issue 16): text hidden 2048, 36 layers, 16 heads, 2 KV heads, MLP 11008,
    vocab 151936, tied, M-RoPE [16, 24, 24]; vision 32 blocks of 1280, window 112 px, full
    attention in blocks 7/15/23/31 (~7.5 GB). Also the peak RSS of loading (`trimkv info`, every
    weight in float32) against the issue's bound 1.2 x f32 + 200 MB.
  - qwen3-vl-4b (issue 17): text hidden 2560, 36 layers, 32 heads, 8 KV heads (head_dim 128), MLP
    9728, vocab 151936, tied, interleaved M-RoPE [24, 20, 20], theta 5e6; vision 24 blocks of 1024,
    patch 16, 2304 learned positions, deepstack from blocks 5/11/17 (~8.9 GB), and random DBTrimKV
    gates in the authors' released layout (trimkv_weights.pth, torch.save'd here with the authors'
    init: N(0, 0.02) weights, zero linear biases, output bias 10, linear3/bias tied).
    trimkv runs the full cache and dbtrimkv at 25% of the final context per KV head.
Measured on one 1024x768 image: time to first token (preprocessing + tower + merger + prefill;
loading excluded), greedy decode tokens/s, the KV bytes held at the end (trimkv: its cache;
transformers: the tensors of its DynamicCache) and each runtime's peak RSS.
Needs the oracle environment (packaging/setup.sh --oracle), a built trimkv (packaging/build.sh),
~9 GB of disk and ~20 GB of free memory (one runtime at a time).

Usage: <venv>/bin/python tests/bench/bench_qwen_vl.py [--shape qwen2.5-vl-3b|qwen3-vl-4b] [--new N]
       [--threads 2] [--weights f32,bf16] [--skip-hf]
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vlm import make_image  # noqa: E402  (the same picture at another size)
PROMPT_TEXT = "Describe this image in detail."


def config_qwen2_5_vl_3b(ids):
    from transformers import Qwen2_5_VLConfig
    text = dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
                bos_token_id=0, eos_token_id=2, tie_word_embeddings=True)
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                  window_size=112, fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu")
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


def config_qwen3_vl_4b(ids):
    from transformers import Qwen3VLConfig
    text = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                    "mrope_section": [24, 20, 20], "mrope_interleaved": True},
                bos_token_id=0, eos_token_id=2, tie_word_embeddings=True)
    vision = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560,
                  patch_size=16, num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17],
                  hidden_act="gelu_pytorch_tanh")
    return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


SHAPES = {
    "qwen2.5-vl-3b": dict(title="Qwen2.5-VL-3B", fixture="qwen2_5_vl", config=config_qwen2_5_vl_3b,
                          model="Qwen2_5_VLForConditionalGeneration", gates=False,
                          size={"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384},
                          checkpoint="qwen2.5-vl-3b-shaped"),
    "qwen3-vl-4b": dict(title="Qwen3-VL-4B", fixture="qwen3_vl", config=config_qwen3_vl_4b,
                        model="Qwen3VLForConditionalGeneration", gates=True,
                        size={"shortest_edge": 65536, "longest_edge": 16777216},
                        checkpoint="qwen3-vl-4b-shaped"),
}


def make_checkpoint(path: Path, shape):
    import torch
    import transformers
    from safetensors.torch import save_file
    tiny = ROOT / "tests" / "data" / "vlm" / shape["fixture"]  # tokenizer + template with the Qwen tokens
    path.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json"):
        shutil.copy(tiny / f, path / f)
    proc = json.loads((tiny / "preprocessor_config.json").read_text())
    proc["size"] = shape["size"]  # the Hub's bounds
    (path / "preprocessor_config.json").write_text(json.dumps(proc, indent=1))
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    ids = {k: tiny_cfg[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    cfg = shape["config"](ids)
    cfg.save_pretrained(path)
    with torch.device("meta"):
        model = getattr(transformers, shape["model"])(cfg)
    g = torch.Generator().manual_seed(0)
    shard, shard_bytes, index, n = {}, 0, {}, 0

    def flush():
        nonlocal shard, shard_bytes, n
        if not shard:
            return
        n += 1
        name = f"model-{n:05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        for k in shard:
            index[k] = name
        shard, shard_bytes = {}, 0

    for name, p in model.state_dict().items():
        if name == "lm_head.weight":  # tied
            continue
        if name.endswith("norm.weight") or ".norm1." in name or ".norm2." in name or "ln_q" in name:
            t = torch.ones(p.shape, dtype=torch.bfloat16)
        elif name.endswith(".bias"):
            t = torch.zeros(p.shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(p.shape, generator=g) * 0.02).to(torch.bfloat16)
        shard[name] = t
        shard_bytes += t.numel() * 2
        if shard_bytes > 2 << 30:
            flush()
    flush()
    total = sum((path / f).stat().st_size for f in set(index.values()))
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))


def make_released_gates(path: Path):
    """trimkv_weights.pth as the authors' code saves it: the state dict's retention-gate entries,
    linear3/bias of layer 0 repeated under every layer (tie_retention_gate_layers)."""
    import torch
    cfg = json.loads((path / "config.json").read_text())["text_config"]
    d, layers, heads, width = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"], 512
    g = torch.Generator().manual_seed(1)
    w3, bias = torch.randn(heads, width, generator=g) * 0.02, torch.full((heads,), 10.0)
    state = {}
    for l in range(layers):
        p = f"model.language_model.layers.{l}.self_attn.retention_gate."
        state[p + "linear1.weight"] = torch.randn(width, d, generator=g) * 0.02
        state[p + "linear1.bias"] = torch.zeros(width)
        state[p + "linear2.weight"] = torch.randn(width, width, generator=g) * 0.02
        state[p + "linear2.bias"] = torch.zeros(width)
        state[p + "linear3.weight"] = w3
        state[p + "bias"] = bias
    torch.save(state, path / "trimkv_weights.pth")


def run_measured(argv):
    """Runs a child; returns (stdout, its peak RSS in MB, read with wait4 so it is that child alone)."""
    with open(os.devnull, "wb") as devnull:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=devnull)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0, f"{argv[:2]} failed ({p.returncode})"
    return out.decode(), usage.ru_maxrss / 1024


def bench_trimkv(path: Path, image: Path, n_new, threads, binary, extra):
    out, rss = run_measured([binary, "generate", "--model", str(path), "--prompt", "<image>" + PROMPT_TEXT,
                             "--image", str(image), "--max-new-tokens", str(n_new), "--ignore-eos",
                             "--threads", str(threads), "--json"] + extra)
    j = json.loads(out)
    return dict(ttft=j["prefill_ms"] / 1000, decode=(n_new - 1) / (j["decode_ms"] / 1000),
                prompt=j["prompt_tokens"], kv_bytes=j["kv_bytes"], rss=rss, events=j.get("eviction_events", 0))


def bench_hf(path: Path, image: Path, n_new, threads, shape):
    import torch
    import transformers
    from PIL import Image
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    torch.set_num_threads(threads)
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    proc = json.loads((path / "preprocessor_config.json").read_text())
    ip = Qwen2VLImageProcessorPil(min_pixels=proc["size"]["shortest_edge"], max_pixels=proc["size"]["longest_edge"],
                                  patch_size=proc["patch_size"], merge_size=proc["merge_size"],
                                  image_mean=proc["image_mean"], image_std=proc["image_std"])
    model = getattr(transformers, shape["model"]).from_pretrained(str(path), attn_implementation="eager",
                                                                 dtype=torch.float32).eval()
    image_id = model.config.image_token_id
    merge = proc["merge_size"] ** 2

    def inputs():
        r = ip(images=[Image.open(image)], return_tensors="pt")
        n = int(r["image_grid_thw"].prod()) // merge
        text = "<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>" + PROMPT_TEXT
        enc = tok([text], return_tensors="pt", add_special_tokens=False)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "mm_token_type_ids": (enc["input_ids"] == image_id).long(), **r}

    class Clock:
        """A streamer that only notes when generate hands it tokens (first: the prompt)."""
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    with torch.no_grad():
        clock = Clock()
        t0 = time.perf_counter()
        x = inputs()
        out = model.generate(**x, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, eos_token_id=None,
                             pad_token_id=0, streamer=clock, return_dict_in_generate=True)
    # times[0]: the prompt; times[1]: the first new token; times[-1]: the last one (one generate
    # call: the first token's time and the decode rate come from the same run, as trimkv's do).
    assert len(clock.times) == n_new + 1, len(clock.times)
    ttft = clock.times[1] - t0
    total = clock.times[-1] - t0
    cache = out.past_key_values
    kv = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    return dict(ttft=ttft, decode=(n_new - 1) / max(total - ttft, 1e-9), prompt=x["input_ids"].shape[1],
                kv_bytes=kv, rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-vl-3b")
    ap.add_argument("--new", type=int, default=None, help="tokens to decode (default 16 for 3B, 256 for 4B)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-hf", action="store_true", help="trimkv only")
    ap.add_argument("--weights", default="f32", help="trimkv weight precisions, comma-separated (f32 = what transformers computes in)")
    ap.add_argument("--checkpoint", default=None, help="folder of the random checkpoint (default ~/.cache/trimkv/bench/...)")
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    n_new = args.new or (256 if shape["gates"] else 16)
    path = Path(args.checkpoint or Path.home() / ".cache/trimkv/bench" / shape["checkpoint"])
    if not (path / "model.safetensors.index.json").exists():
        shutil.rmtree(path, ignore_errors=True)
        make_checkpoint(path, shape)
    if shape["gates"] and not (path / "trimkv_weights.pth").exists():
        make_released_gates(path)
    image = path / "bench_1024x768.png"
    if not image.exists():
        make_image(image, 1024, 768)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    bf16_bytes = index["metadata"]["total_size"]
    f32_mb = bf16_bytes * 2 / 2**20
    print(f"{shape['title']}-shaped random checkpoint, bf16 on disk ({bf16_bytes / 2**30:.2f} GiB)\n")
    if not shape["gates"]:
        _, load_rss = run_measured([args.binary, "info", "--model", str(path)])
        print("| loading | MB |\n|---|---:|")
        print(f"| float32 size of the weights | {f32_mb:,.0f} |")
        print(f"| trimkv peak RSS while loading (`trimkv info`) | {load_rss:,.0f} |")
        print(f"| bound 1.2 x f32 + 200 MB | {1.2 * f32_mb + 200:,.0f} |\n")
    rows = []
    for w in args.weights.split(","):
        tag = f" ({w} weights)"
        rows.append((f"trimkv{tag}, full cache", f"trimkv {w} full",
                     bench_trimkv(path, image, n_new, args.threads, args.binary,
                                  ["--weights", w] + (["--gates", "none"] if shape["gates"] else []))))
        if shape["gates"]:
            budget = round(0.25 * (rows[0][2]["prompt"] + n_new))
            rows.append((f"trimkv{tag}, dbtrimkv at 25% (budget {budget} per KV head, released-layout gates)",
                         f"trimkv {w} dbtrimkv 25%",
                         bench_trimkv(path, image, n_new, args.threads, args.binary,
                                      ["--weights", w, "--gates", str(path / "trimkv_weights.pth"), "--policy",
                                       "dbtrimkv", "--budget", str(budget)])))
    if not args.skip_hf:
        import torch
        import transformers
        hf = bench_hf(path, image, n_new, args.threads, shape)
        assert hf["prompt"] == rows[0][2]["prompt"], f"prompt lengths differ: transformers {hf['prompt']}, trimkv {rows[0][2]['prompt']}"
        rows.insert(0, (f"transformers {transformers.__version__} eager, full cache (torch {torch.__version__})",
                        "transformers", hf))
    print(f"One 1024x768 image ({rows[0][2]['prompt']} prompt tokens), float32 compute, {n_new} new tokens, "
          f"{args.threads} threads\n")
    print("| runtime | time to first token (s) | decode tok/s | KV held at the end (MB) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|")
    for label, _, r in rows:
        print(f"| {label} | {r['ttft']:.1f} | {r['decode']:.2f} | {r['kv_bytes'] / 2**20:,.1f} | {r['rss']:,.0f} |")
    if not args.skip_hf:
        ref = rows[0][2]
        for _, short, r in rows[1:]:
            print(f"| ratio {short} / transformers | {r['ttft'] / ref['ttft']:.2f}x | "
                  f"{r['decode'] / ref['decode']:.2f}x | {r['kv_bytes'] / ref['kv_bytes']:.2f}x | "
                  f"{r['rss'] / ref['rss']:.2f}x |")


if __name__ == "__main__":
    main()
