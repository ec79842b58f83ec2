"""Qwen2.5-VL benchmark: trimkv vs Hugging Face transformers (eager, float32), side by side, and
the memory of loading a bf16 checkpoint.

Writes (once, reused) a random checkpoint with the real sizes of Qwen2.5-VL-3B-Instruct (text:
hidden 2048, 36 layers, 16 heads, 2 KV heads, MLP 11008, vocab 151936, tied embeddings, M-RoPE
[16, 24, 24]; vision: 32 blocks of width 1280, 16 heads, MLP 3420, window 112 px, full attention
in blocks 7/15/23/31, merger to 2048) in bfloat16 shards (~7.5 GB; names in transformers' v5
scheme), with the tiny Qwen ChatML tokenizer of the test fixtures (the prompt's ids are what
matter; they are checked equal on both sides). Then, on one 1024x768 image (-> 756x1036 pixels,
3,996 patches, 999 visual tokens) and the same raw prompt and thread count:
  - loading: peak RSS of `trimkv info` (which loads every weight into float32), against the
    float32 size (the issue's bound: <= 1.2 x f32 + 200 MB);
  - time to first token: image preprocessing + vision tower + merger + prefill (model loading
    excluded on both sides);
  - decode: greedy tokens/s with the KV cache.
Prints Markdown tables. Needs the oracle environment (packaging/setup.sh --oracle), a built
trimkv (packaging/build.sh), ~8 GB of disk and ~17 GB of free memory (one runtime at a time).

Usage: <venv>/bin/python tests/bench/bench_qwen_vl.py [--new 16] [--threads 2] [--skip-hf]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vlm import make_image  # noqa: E402  (the same picture at another size)
TINY = ROOT / "tests" / "data" / "vlm" / "qwen2_5_vl"  # tokenizer + template with the Qwen tokens
PROMPT_TEXT = "Describe this image in detail."


def config_3b(ids):
    from transformers import Qwen2_5_VLConfig
    text = dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
                bos_token_id=0, eos_token_id=2, tie_word_embeddings=True)
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                  window_size=112, fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu")
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


def make_checkpoint(path: Path):
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2_5_VLForConditionalGeneration
    path.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json"):
        shutil.copy(TINY / f, path / f)
    proc = json.loads((TINY / "preprocessor_config.json").read_text())
    proc["size"] = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384}  # the Hub's bounds
    (path / "preprocessor_config.json").write_text(json.dumps(proc, indent=1))
    tiny = json.loads((TINY / "config.json").read_text())
    ids = {k: tiny[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    cfg = config_3b(ids)
    cfg.save_pretrained(path)
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(cfg)
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


def bench_trimkv(path: Path, image: Path, n_new, threads, binary):
    # Peak RSS of loading: a child's ru_maxrss, read with wait4 so it is this process alone.
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execv(binary, [binary, "info", "--model", str(path)])
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "trimkv info failed"
    load_rss = usage.ru_maxrss / 1024
    out = subprocess.run([binary, "generate", "--model", str(path), "--prompt", "<image>" + PROMPT_TEXT, "--image",
                          str(image), "--max-new-tokens", str(n_new), "--ignore-eos", "--threads", str(threads),
                          "--json"], check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    return j["prefill_ms"] / 1000, (n_new - 1) / (j["decode_ms"] / 1000), j["prompt_tokens"], load_rss


def bench_hf(path: Path, image: Path, n_new, threads):
    import torch
    from PIL import Image
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    torch.set_num_threads(threads)
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    proc = json.loads((path / "preprocessor_config.json").read_text())
    ip = Qwen2VLImageProcessorPil(min_pixels=proc["size"]["shortest_edge"], max_pixels=proc["size"]["longest_edge"])
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), attn_implementation="eager",
                                                               dtype=torch.float32).eval()
    image_id = model.config.image_token_id

    def inputs():
        r = ip(images=[Image.open(image)], return_tensors="pt")
        n = int(r["image_grid_thw"].prod()) // 4
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
        model.generate(**x, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, eos_token_id=None,
                       pad_token_id=0, streamer=clock)
    # times[0]: the prompt; times[1]: the first new token; times[-1]: the last one (one generate
    # call: the first token's time and the decode rate come from the same run, as trimkv's do).
    assert len(clock.times) == n_new + 1, len(clock.times)
    ttft = clock.times[1] - t0
    total = clock.times[-1] - t0
    return ttft, (n_new - 1) / max(total - ttft, 1e-9), x["input_ids"].shape[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-hf", action="store_true", help="trimkv and the loading memory only")
    ap.add_argument("--checkpoint", default=str(Path.home() / ".cache/trimkv/bench/qwen2.5-vl-3b-shaped"))
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    path = Path(args.checkpoint)
    if not (path / "model.safetensors.index.json").exists():
        shutil.rmtree(path, ignore_errors=True)
        make_checkpoint(path)
    image = path / "bench_1024x768.png"
    if not image.exists():
        make_image(image, 1024, 768)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    bf16_bytes = index["metadata"]["total_size"]
    f32_mb = bf16_bytes * 2 / 2**20
    tk = bench_trimkv(path, image, args.new, args.threads, args.binary)
    print(f"Qwen2.5-VL-3B-shaped random checkpoint, bf16 on disk ({bf16_bytes / 2**30:.2f} GiB)\n")
    print("| loading | MB |\n|---|---:|")
    print(f"| float32 size of the weights | {f32_mb:,.0f} |")
    print(f"| trimkv peak RSS while loading (`trimkv info`) | {tk[3]:,.0f} |")
    print(f"| bound 1.2 x f32 + 200 MB | {1.2 * f32_mb + 200:,.0f} |\n")
    print(f"One 1024x768 image ({tk[2]} prompt tokens), float32 compute, {args.new} new tokens, "
          f"{args.threads} threads\n")
    print("| runtime | time to first token (s) | decode tok/s |\n|---|---:|---:|")
    if not args.skip_hf:
        import torch
        import transformers
        hf = bench_hf(path, image, args.new, args.threads)
        assert hf[2] == tk[2], f"prompt lengths differ: transformers {hf[2]}, trimkv {tk[2]}"
        print(f"| transformers {transformers.__version__} eager, slow processor (torch {torch.__version__}) "
              f"| {hf[0]:.1f} | {hf[1]:.2f} |")
    print(f"| trimkv | {tk[0]:.1f} | {tk[1]:.2f} |")
    if not args.skip_hf:
        print(f"| ratio trimkv / transformers | {tk[0] / hf[0]:.2f}x | {tk[1] / hf[1]:.2f}x |")


if __name__ == "__main__":
    main()
