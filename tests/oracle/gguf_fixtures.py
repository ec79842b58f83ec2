"""GGUF fixtures: the tiny llama / qwen2 / qwen3 checkpoints of tests/data/models written as GGUF
files the way llama.cpp's converter writes them (the PyPI `gguf` package's GGUFWriter and
quantisers; llama-architecture q/k rows permuted into interleaved rotary order), with what the
reference libraries make of them.

Writes tests/data/gguf/:
  <model>.<types>.gguf   one file per row of FILES (matrix type, embedding type, norms float32)
  expected.safetensors   per file: "<file>.logits" = transformers' logits for TOKENS after loading
                         the GGUF itself (from_pretrained(gguf_file=...): its own dequantisation and
                         reverse permutation), positions 11..17; "<file>.<tensor>" = gguf.quants'
                         dequantisation of one matrix per quantised type (Hugging Face row order)
  tokens.json            per file: llama.cpp's token ids (llama-cpp-python, vocab_only) for TEXTS,
                         and the same texts through the source checkpoint's tokenizer.json
Needs the oracle environment plus llama-cpp-python (how to build it: tests/bench/bench_weights.py).
qwen3's logits come from the source model with the file's dequantised tensors put in, since
transformers' GGUF config reader ignores qwen3.attention.key_length.
"""
import json
from pathlib import Path

TOKENS = [1, 17, 42, 99, 3, 250, 8, 64, 11, 5, 77, 200, 5, 9, 100, 31, 7, 64]
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "numbers 12345 and 3.14159",
    "  leading spaces\tand\ttabs\n\nnew lines",
    "<|im_start|>user\nhi there<|im_end|>\n",
    "café naïve résumé",
    "it's we're they'll I'd",
    "emoji 🙂 and symbols ∑∫",
]

GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
PRE = {"llama_gqa": "smollm", "qwen2": "qwen2", "qwen3": "qwen2"}

# (model folder, matrix type, embedding type): every tensor type the reader supports appears.
FILES = [
    ("llama_gqa", "Q8_0", "Q8_0"),
    ("llama_gqa", "Q4_1", "Q8_0"),  # as the real SmolLM2-135M-Instruct GGUF
    ("llama_gqa", "F16", "F16"),
    ("qwen2", "Q4_0", "Q8_0"),
    ("qwen2", "BF16", "BF16"),
    ("qwen3", "Q8_0", "F32"),
]


def file_name(model, mtype, etype):
    return f"{model}.{mtype.lower()}-{etype.lower()}.gguf"


def permute(w, n_head, n_head_kv):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (half-split -> interleaved rotary)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module...>.weight|bias
    layer, module, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{layer}.{GGUF_NAMES[module]}.{kind}"


def vocabulary(folder: Path):
    tj = json.loads((folder / "tokenizer.json").read_text())
    vocab = dict(tj["model"]["vocab"])
    special, user = set(), set()
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        (special if a["special"] else user).add(a["id"])
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    for t, i in vocab.items():
        tokens[i] = t
    types = [3 if i in special else 4 if i in user else 1 for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    return tokens, types, merges


def write_gguf(data: Path, model, mtype, etype):
    import gguf
    import numpy as np
    from gguf import quants
    folder = data / "models" / model
    cfg = json.loads((folder / "config.json").read_text())
    gen = json.loads((folder / "generation_config.json").read_text())
    from safetensors.numpy import load_file
    weights = load_file(str(folder / "model.safetensors"))
    arch = GGUF_ARCH[cfg["model_type"]]
    out = data / "gguf" / file_name(model, mtype, etype)
    w = gguf.GGUFWriter(str(out), arch)
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    w.add_name(f"tiny {model}")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_vocab_size(cfg["vocab_size"])
    tokens, types, merges = vocabulary(folder)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE[model])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = gen.get("eos_token_id", cfg.get("eos_token_id"))
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    w.add_bos_token_id(cfg.get("bos_token_id") or 0)
    w.add_add_bos_token(False)
    w.add_chat_template((folder / "chat_template.jinja").read_text())
    qt = {n: getattr(gguf.GGMLQuantizationType, n) for n in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")}
    for name, t in weights.items():
        t = t.astype(np.float32)
        if arch == "llama" and name.endswith("self_attn.q_proj.weight"):
            t = permute(t, n_head, n_head)
        if arch == "llama" and name.endswith("self_attn.k_proj.weight"):
            t = permute(t, n_head, n_kv)
        kind = "F32" if t.ndim == 1 else etype if name in ("model.embed_tokens.weight", "lm_head.weight") else mtype
        if kind.startswith("Q") and t.shape[-1] % 32:  # rows that are not whole blocks: llama.cpp keeps F16
            kind = "F16"
        if kind in ("Q8_0", "Q4_0", "Q4_1"):
            w.add_tensor(gguf_name(name), quants.quantize(t, qt[kind]), raw_dtype=qt[kind])
        elif kind == "F16":
            w.add_tensor(gguf_name(name), t.astype(np.float16))
        elif kind == "BF16":
            w.add_tensor(gguf_name(name), quants.quantize(t, qt["BF16"]), raw_dtype=qt["BF16"])
        else:
            w.add_tensor(gguf_name(name), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def model_from_dequantised(data: Path, model, path: Path):
    """The source checkpoint with every tensor replaced by gguf.quants' dequantisation of the file's."""
    import torch
    from gguf import GGUFReader, quants
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(data / "models" / model), dtype=torch.float32).eval()
    by_gguf = {gguf_name(n): n for n in m.state_dict()}
    state = {}
    for t in GGUFReader(str(path)).tensors:
        deq = quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        state[by_gguf[t.name]] = torch.from_numpy(deq.astype("float32").copy())
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    return m


def main(data: Path):
    import gguf
    import torch
    from gguf import GGUFReader, quants
    from llama_cpp import Llama
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    (data / "gguf").mkdir(parents=True, exist_ok=True)
    expected, tokens = {}, {}
    for model, mtype, etype in FILES:
        path = write_gguf(data, model, mtype, etype)
        if model == "qwen3":  # transformers' GGUF config reader ignores qwen3.attention.key_length
            m = model_from_dequantised(data, model, path)
        else:
            m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
        with torch.no_grad():
            expected[f"{path.name}.logits"] = m(torch.tensor([TOKENS])).logits[0, 11:].contiguous()
        # One quantised matrix per file as gguf.quants dequantises it (ffn_down: no permutation).
        for t in GGUFReader(str(path)).tensors:
            if t.name == "blk.1.ffn_down.weight":
                deq = quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
                expected[f"{path.name}.model.layers.1.mlp.down_proj.weight"] = torch.from_numpy(deq.astype("float32").copy())
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        hf = Tokenizer.from_file(str(data / "models" / model / "tokenizer.json"))
        tokens[path.name] = {
            "llama_cpp": [llm.tokenize(s.encode(), add_bos=False, special=True) for s in TEXTS],
            "hf": [hf.encode(s, add_special_tokens=False).ids for s in TEXTS],
        }
        print(f"  gguf: {path} ({path.stat().st_size} bytes)")
    save_file(expected, str(data / "gguf" / "expected.safetensors"),
              metadata={"tokens": ",".join(map(str, TOKENS)), "gguf": getattr(gguf, "__version__", "?")})
    (data / "gguf" / "tokens.json").write_text(json.dumps({"texts": TEXTS, "files": tokens}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main(Path(__file__).resolve().parent.parent / "data")
