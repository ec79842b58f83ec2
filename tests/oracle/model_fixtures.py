"""Tiny random text-decoder checkpoints and their transformers outputs (the oracle).

Writes under tests/data/models/<name>/: the checkpoint (config.json, safetensors, tokenizer.json)
and expected.safetensors (float32 logits per prompt) + expected.json (prompts, greedy
continuations). Deterministic: fixed seeds, float32, eager attention.
Run through tests/oracle/make_fixtures.py (tokenizers are written first; models reuse them).
"""
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

VOCAB = 384  # matches the tiny tokenizers written by tokenizer_fixtures.py
N_GREEDY = 32


def common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-6, initializer_range=0.25, bos_token_id=0, eos_token_id=0,
                pad_token_id=None)
    base.update(kw)
    return base


MODELS = {
    # name: (config class, model class, kwargs, tokenizer folder, save kwargs)
    "llama_gqa": (LlamaConfig, LlamaForCausalLM,
                  common(tie_word_embeddings=False, rope_theta=10000.0), "smollm2", {}),
    "llama_tied": (LlamaConfig, LlamaForCausalLM,
                   common(tie_word_embeddings=True, rope_theta=100000.0, num_hidden_layers=3),
                   "smollm2", {"max_shard_size": "60KB"}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM,
              common(tie_word_embeddings=False, rope_theta=1000000.0), "qwen2", {}),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM,
              common(tie_word_embeddings=True, hidden_size=48, head_dim=16, rope_theta=1000000.0),
              "qwen2", {}),
}


def prompts(seed):
    g = torch.Generator().manual_seed(seed)
    lens = [6, 23, 70]  # 70 is longer than the prefill chunk the C++ tests use
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in lens]


def greedy(model, ids):
    out = model.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False,
                         eos_token_id=None, pad_token_id=0, min_new_tokens=N_GREEDY)
    new = out[0, len(ids):].tolist()
    # Smallest top-1 / top-2 logit gap along the greedy path: the margin the C++ side has.
    with torch.no_grad():
        logits = model(out[:, :-1]).logits[0, len(ids) - 1:]
    top2 = logits.topk(2, dim=-1).values
    return new, float((top2[:, 0] - top2[:, 1]).min())


def write_model(root: Path, tok_root: Path, name, spec, seed):
    cfg_cls, model_cls, kw, tok_name, save_kw = spec
    torch.manual_seed(seed)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).eval().float()
    out = root / name
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True, **save_kw)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        src = tok_root / tok_name / f
        if src.exists():
            shutil.copy(src, out / f)
    expected = {"name": name, "prompts": [], "greedy": [], "min_greedy_margin": None}
    tensors = {}
    margins = []
    with torch.no_grad():
        for i, ids in enumerate(prompts(seed + 1)):
            logits = model(torch.tensor([ids])).logits[0].contiguous().float()
            tensors[f"logits.{i}"] = logits
            cont, margin = greedy(model, ids)
            margins.append(margin)
            expected["prompts"].append(ids)
            expected["greedy"].append(cont)
    expected["min_greedy_margin"] = min(margins)
    save_file(tensors, str(out / "expected.safetensors"))
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    print(f"  {name}: min greedy margin {min(margins):.4f}")


def main(data_dir: Path):
    root = data_dir / "models"
    root.mkdir(parents=True, exist_ok=True)
    for i, (name, spec) in enumerate(MODELS.items()):
        write_model(root, data_dir / "tokenizers", name, spec, seed=1000 + 17 * i)


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
