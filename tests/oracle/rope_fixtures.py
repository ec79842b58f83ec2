"""Rotary scaling as transformers applies it: the llama_gqa test model's weights under linear and
llama3 rope scaling, each written the transformers-5 way ("rope_parameters") and the
transformers-4 way ("rope_scaling" with "type" and a top-level "rope_theta"), and the logits at
every 4th position of an 80-token prompt (longer than the llama3 settings' original 64 positions).
Writes tests/data/models/rope.json ({"prompt", "variants": {name: the config fields that replace
llama_gqa's rope settings}}) and tests/data/models/rope.safetensors ("logits.<name>" [20, vocab]: positions 0, 4, ..., 76,
float32, eager attention). test_core "[decoder][rope]" loads llama_gqa with each variant's fields
and must give the same logits.
Run through tests/oracle/make_fixtures.py rope (after "models")."""
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
VARIANTS = {
    "linear_v5": {"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}},
    "linear_v4": {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0}},
    "llama3_v5": {"rope_parameters": dict(LLAMA3, rope_type="llama3", rope_theta=500000.0)},
    "llama3_v4": {"rope_theta": 500000.0, "rope_scaling": dict(LLAMA3, rope_type="llama3")},
}
PROMPT = [(7 * i + 3) % 380 + 1 for i in range(80)]


def main(data: Path):
    src = data / "models" / "llama_gqa"
    base = json.loads((src / "config.json").read_text())
    weights = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32).state_dict()
    out = {}
    for name, fields in VARIANTS.items():
        cfg = {k: v for k, v in base.items() if k not in ("rope_parameters", "rope_scaling", "rope_theta")}
        cfg.update(fields)
        model = LlamaForCausalLM(LlamaConfig.from_dict(cfg)).eval()
        model.config._attn_implementation = "eager"
        model.load_state_dict(weights)
        with torch.no_grad():
            out["logits." + name] = model(torch.tensor([PROMPT])).logits[0, ::4].float().contiguous()
    for a, b in (("linear_v5", "linear_v4"), ("llama3_v5", "llama3_v4")):  # the spellings agree
        assert torch.equal(out["logits." + a], out["logits." + b]), (a, b)
    save_file(out, str(data / "models" / "rope.safetensors"))
    (data / "models" / "rope.json").write_text(json.dumps({"prompt": PROMPT, "variants": VARIANTS}, indent=1) + "\n")
    print("rope fixtures:", data / "models" / "rope.json")


if __name__ == "__main__":
    main(Path(__file__).resolve().parent.parent / "data")
