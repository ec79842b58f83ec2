"""Vision-language benchmark: trimkv vs Hugging Face transformers (eager, float32), side by side.

Builds a random checkpoint with the real sizes of SmolVLM-256M (MODELS.md: text 576 wide, 30
layers, 9 heads, 3 KV heads, vocab 49280; SigLIP 768 wide, 12 layers, image 512, patch 16, pixel
shuffle 4 -> 64 tokens per tile; processor longest edge 2048, 512-pixel tiles), one 512x512 test
image, and times on the same prompt, image and thread count:
  - time to first token: preprocessing + vision tower + connector + prefill (processor included
    on both sides; model loading excluded)
  - decode: greedy steps with the KV cache (tokens/s)
then prints a Markdown table. Needs the oracle environment (packaging/setup.sh --oracle) and a
built trimkv (packaging/build.sh). A 512x512 image becomes 4x4 tiles + the global image (17 tiles,
1088 visual tokens): one run takes about a minute on 2 cores.

Usage: <venv>/bin/python tests/bench/bench_vlm.py [--new 32] [--threads 2] [--repeats 1]
"""
import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests" / "data" / "vlm" / "smolvlm"  # tiny tokenizer holding the image tokens
PROMPT = "<image>Can you describe this image?"


def make_checkpoint(path: Path):
    import torch
    from PIL import Image
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor,
                              PreTrainedTokenizerFast)
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    tok = PreTrainedTokenizerFast.from_pretrained(str(TOKENIZER))
    image_token_id = tok.convert_tokens_to_ids("<image>")
    text = dict(model_type="llama", vocab_size=49280, hidden_size=576, intermediate_size=1536,
                num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=383, pad_token_id=2)
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                  image_size=512, patch_size=16, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")
    cfg = Idefics3Config(text_config=text, vision_config=vision, scale_factor=4,
                         image_token_id=image_token_id, tie_word_embeddings=False, pad_token_id=2)
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(cfg).float().save_pretrained(path, safe_serialization=True)
    ip = Idefics3ImageProcessorPil(size={"longest_edge": 2048}, max_image_size={"longest_edge": 512},
                                   do_image_splitting=True, resample=Image.Resampling.LANCZOS,
                                   image_mean=[0.5] * 3, image_std=[0.5] * 3)
    Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=64).save_pretrained(path)


def make_image(path: Path, width: int = 512, height: int = 512):
    """A deterministic test picture: stripes, two gradients and noise (shared by the VLM benchmarks)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([127 + 100 * np.sin(x / 9.0), 255 * x / (width - 1), 255 * y / (height - 1)], -1) + \
        rng.normal(0, 10, (height, width, 3))
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(path)


def bench_hf(path: Path, image: Path, n_new, threads, repeats):
    import torch
    from PIL import Image
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration
    torch.set_num_threads(threads)
    processor = AutoProcessor.from_pretrained(path, use_fast=False)
    model = Idefics3ForConditionalGeneration.from_pretrained(path, attn_implementation="eager",
                                                             dtype=torch.float32).eval()
    best_ttft, best_decode, n_prompt = float("inf"), float("inf"), 0
    with torch.no_grad():
        for _ in range(repeats):
            t0 = time.perf_counter()
            inputs = processor(text=[PROMPT], images=[[Image.open(image)]], return_tensors="pt")
            out = model(**inputs, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            t1 = time.perf_counter()
            past = out.past_key_values
            n_prompt = inputs["input_ids"].shape[1]
            mask = torch.ones(1, n_prompt, dtype=torch.long)
            t2 = time.perf_counter()
            for _ in range(n_new - 1):
                mask = torch.cat([mask, torch.ones(1, 1, dtype=torch.long)], 1)
                out = model(input_ids=nxt, past_key_values=past, attention_mask=mask, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t3 = time.perf_counter()
            best_ttft = min(best_ttft, t1 - t0)
            best_decode = min(best_decode, t3 - t2)
    return best_ttft, (n_new - 1) / best_decode, n_prompt


def bench_trimkv(path: Path, image: Path, n_new, threads, repeats, binary, weights=None):
    best_ttft, best_decode, j = float("inf"), float("inf"), {}
    extra = ["--weights", weights, "--kv-dtype", "f16"] if weights else []
    for _ in range(repeats):
        out = subprocess.run([binary, "generate", "--model", str(path), "--prompt", PROMPT, "--image",
                              str(image), "--max-new-tokens", str(n_new), "--ignore-eos",
                              "--threads", str(threads), "--json", *extra],
                             check=True, capture_output=True, text=True)
        j = json.loads(out.stdout)
        best_ttft = min(best_ttft, j["prefill_ms"] / 1000)
        best_decode = min(best_decode, j["decode_ms"] / 1000)
    return best_ttft, (n_new - 1) / best_decode, j["prompt_tokens"], j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--checkpoint", default=str(Path.home() / ".cache/trimkv/bench/smolvlm-256m-shaped"),
                    help="where the random checkpoint is written (reused when present)")
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    import torch
    import transformers
    path = Path(args.checkpoint)
    if not (path / "model.safetensors").exists():
        shutil.rmtree(path, ignore_errors=True)
        make_checkpoint(path)
    image = path / "bench_512.png"
    if not image.exists():
        make_image(image)
    hf = bench_hf(path, image, args.new, args.threads, args.repeats)
    tk = bench_trimkv(path, image, args.new, args.threads, args.repeats, args.binary)
    # The real SmolVLM-256M ships in bf16, so its default precision is bf16 weights and an f16
    # KV cache: the same run with those on this float32 checkpoint.
    tk16 = bench_trimkv(path, image, args.new, args.threads, args.repeats, args.binary, "bf16")
    assert hf[2] == tk[2], f"prompt lengths differ: transformers {hf[2]}, trimkv {tk[2]}"
    print(f"SmolVLM-256M-shaped random checkpoint, float32, one 512x512 image (17 tiles, "
          f"{tk[2]} prompt tokens), {args.new} new tokens, {args.threads} threads, best of {args.repeats}\n")
    print("| runtime | time to first token (s) | decode tok/s |")
    print("|---|---:|---:|")
    print(f"| transformers {transformers.__version__} eager, slow processor (torch {torch.__version__}) "
          f"| {hf[0]:.2f} | {hf[1]:.1f} |")
    print(f"| trimkv (f32 weights and KV) | {tk[0]:.2f} | {tk[1]:.1f} |")
    print(f"| trimkv (bf16 weights, f16 KV: a bf16 checkpoint's default) | {tk16[0]:.2f} | {tk16[1]:.1f} |")
    print(f"| ratio trimkv f32 / transformers | {tk[0] / hf[0]:.2f}x | {tk[1] / hf[1]:.2f}x |")
    print(f"| ratio trimkv bf16 / transformers | {tk16[0] / hf[0]:.2f}x | {tk16[1] / hf[1]:.2f}x |")


if __name__ == "__main__":
    main()
