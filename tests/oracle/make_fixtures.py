"""Regenerates every oracle fixture under tests/data (needs Python with transformers, tokenizers,
torch: `packaging/setup.sh --oracle` makes that environment). CI never runs this; the outputs are
committed. Usage: <venv>/bin/python tests/oracle/make_fixtures.py [tokenizers|normalizers|models|rope|gates|vlm|templates|chat|qwen2vl|quant|gguf|bpe|demo ...]"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# TRIMKV_FIXTURE_DATA: write somewhere else (tests/oracle/check_fixtures.sh regenerates into a copy
# and compares it with the committed files).
DATA = Path(os.environ.get("TRIMKV_FIXTURE_DATA", HERE.parent / "data"))


def main(argv):
    parts = argv or ["tokenizers", "normalizers", "models", "rope", "gates", "vlm", "templates", "chat", "qwen2vl", "quant", "gguf"]
    if "tokenizers" in parts:
        import tokenizer_fixtures
        tokenizer_fixtures.main(DATA)
    if "normalizers" in parts:  # after "tokenizers": the smollm2 tokenizer with other normalizers
        import normalizer_fixtures
        normalizer_fixtures.main(DATA)
    if "models" in parts:
        import model_fixtures
        model_fixtures.main(DATA)
    if "rope" in parts:  # after "models": llama_gqa under linear / llama3 rope scaling
        import rope_fixtures
        rope_fixtures.main(DATA)
    if "gates" in parts:
        import gate_fixtures
        gate_fixtures.main(DATA)
    if "vlm" in parts:  # after "tokenizers": it derives its tokenizer from the smollm2 one
        import vlm_fixtures
        vlm_fixtures.main(DATA)
    if "templates" in parts:  # reads tests/data/chat_templates/*.jinja, writes cases.json there
        import chat_template_fixtures
        chat_template_fixtures.main(DATA)
    if "chat" in parts:  # after "models" (it adds chat templates to their folders) and "templates"
        import text_chat_fixtures
        text_chat_fixtures.main(DATA)
    if "qwen2vl" in parts:  # the Qwen2-VL image processor, M-RoPE positions, tiny Qwen2-VL / 2.5-VL models
        import qwen2_vl_processor_fixtures
        qwen2_vl_processor_fixtures.main(DATA)
        import mrope_fixtures
        mrope_fixtures.main(DATA)
        import qwen2_vl_fixtures  # after "tokenizers" (its tokenizer extends the smollm2 one)
        qwen2_vl_fixtures.main(DATA)
    if "quant" in parts:  # q8_0 / q4_0 blocks by the PyPI gguf package, bf16 / f16 roundings by torch
        import quant_fixtures
        quant_fixtures.main(DATA)
    if "gguf" in parts:  # after "models" and "chat": GGUF files of the tiny text models (gguf, llama-cpp-python)
        import gguf_fixtures
        gguf_fixtures.main(DATA)
    if "bpe" in parts:  # needs the built trimkv ($TRIMKV_BIN, else build/app/trimkv): our trainer's file, HF's merges
        import bpe_trainer_fixtures
        bpe_trainer_fixtures.main(DATA, os.environ.get("TRIMKV_BIN", HERE.parent.parent / "build" / "app" / "trimkv"))
    if "demo" in parts:  # needs resources/demo-model (trimkv train-demo) and tests/data/demo/world
        import demo_fixtures
        demo_fixtures.main(DATA)


if __name__ == "__main__":
    main(sys.argv[1:])
