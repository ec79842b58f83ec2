"""Tiny random Qwen2-VL and Qwen2.5-VL checkpoints and their transformers outputs (the oracle of
vision/src/families/qwen2_vl.cpp, the M-RoPE decoder and the Session on the Qwen-VL line).

Writes under tests/data/vlm/:
  images/qwen_*.png   test images whose sizes exercise smart_resize (half-to-even rounding, the
                      upscale of an image smaller than one 28x28 block, several windows)
  qwen2_vl/, qwen2_5_vl/   checkpoints saved by transformers (nested v5 config; qwen2_vl with the
                      names save_pretrained writes, visual.* / model.layers.*; qwen2_5_vl renamed
                      to the in-memory scheme model.visual.* / model.language_model.*, which
                      transformers reads back to the same weights),
                      the real Qwen2.5-VL chat template, a tiny ChatML tokenizer with the Qwen
                      special tokens; expected.json / expected.safetensors
  qwen2_5_vl_legacy/  the same Qwen2.5-VL weights as the Hub held them before transformers v5:
                      flat config (text fields top-level, rope_scaling {"type": "mrope"}), the
                      legacy names (visual.*, model.layers.*) and the processor's legacy
                      min_pixels / max_pixels keys; transformers loads it to the same logits
                      (checked here)
  qwen3_vl/           Qwen3-VL (with random DBTrimKV gates in the authors' trimkv_weights.pth
                      layout and the log beta their gate gives the conversation): 3 text layers with q/k norm, interleaved sections [3, 3, 2]; tower
                      depth 3 with patch 16, a 4x4 learned position table (every grid is
                      interpolated) and deepstack from blocks 0 and 1; the Qwen3-VL template
                      (no default system message); processor factor 32, mean = std = 0.5
Text: vocab 448, hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 16, mrope_section [2, 3, 3].
Vision: Qwen2 depth 2, width 32; Qwen2.5 depth 4, width 32, window 56 px (2x2 merged units per
window: a 112x112 image has 4 windows), full attention in blocks 1 and 3. Processor: patch 14,
merge 2, min 56*56, max 28*28*64 pixels. Oracles pass mm_token_type_ids (without it Qwen2.5-VL
silently falls back to 1-D positions). Deterministic: fixed seeds, float32, eager attention, the
slow PIL image processor.
Run through tests/oracle/make_fixtures.py qwen2vl (needs packaging/setup.sh --oracle).
"""
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                          Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vlm_fixtures import pattern

VOCAB = 448
N_GREEDY = 32
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 64
QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
# (file, width, height): 150x120 -> 140x112 (4x5 merged, 2x3 windows); 126x98 -> 112x112 (98/28 =
# 3.5 and 126/28 = 4.5 round to even: 4x4); 70x130 -> 56x140 (70/28 = 2.5 -> 2: 5x2); 10x10 -> the
# min-pixels upscale to 56x56 (2x2); 300x40 -> 308x28 is below min: upscale to 868x84 -> capped.
IMAGES = {"qwen_a.png": (150, 120, 11), "qwen_b.png": (126, 98, 12), "qwen_tall.png": (70, 130, 13),
          "qwen_tiny.png": (10, 10, 14), "qwen_wide.png": (300, 40, 15)}


def write_images(root: Path):
    for name, (w, h, seed) in IMAGES.items():
        pattern(w, h, seed).save(root / name)
    # Aspect ratio above 200: the reference refuses it.
    pattern(403, 2, 16).save(root / "qwen_aspect.png")


def write_tokenizer(data: Path, out: Path):
    tok = json.loads((data / "tokenizers" / "smollm2" / "tokenizer.json").read_text())
    next_id = max(t["id"] for t in tok["added_tokens"]) + 1
    for content in QWEN_TOKENS:
        tok["added_tokens"].append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        next_id += 1
    assert next_id <= VOCAB
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    t = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"), eos_token="<|im_end|>",
                                pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    return t, {c: t.convert_tokens_to_ids(c) for c in QWEN_TOKENS}


def model_config(kind, ids):
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
                initializer_range=0.25, bos_token_id=0, eos_token_id=2)
    common = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    if kind == "qwen3_vl":
        text.update(num_hidden_layers=3, head_dim=16,
                    rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [3, 3, 2]})
        vision = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64, patch_size=16,
                      num_position_embeddings=16, deepstack_visual_indexes=[0, 1], initializer_range=0.25)
        return Qwen3VLConfig(text_config=text, vision_config=vision, **common)
    if kind == "qwen2_vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, initializer_range=0.25)
        return Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    vision = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64, window_size=56,
                  fullatt_block_indexes=[1, 3], initializer_range=0.25)
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)


def mm_token_type_ids(input_ids, image_id):
    return (input_ids == image_id).long()


def greedy(model, inputs):
    out = model.generate(**inputs, max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    n = inputs["input_ids"].shape[1]
    return out[0, n:].tolist()


GATE_WIDTH = 24  # the release uses 512 (retention_gate_intermediate_size)


def write_reference_gates(model, inputs, out: Path, tensors):
    """Random DBTrimKV gates in the authors' released layout (trimkv_weights.pth: torch.save of
    the state dict; keys model.language_model.layers.{l}.self_attn.retention_gate.*; linear3 and
    bias tied: the same tensor repeated under every layer) and the log beta the authors' gate
    (RetentionGate10) gives every position of the conversation: logsigmoid(linear3(silu(linear2(
    silu(linear1(x))))) + bias), x = the layer's input_layernorm output (deepstack included)."""
    torch.manual_seed(5)
    text = model.config.text_config
    d, h_kv, n_layer = text.hidden_size, text.num_key_value_heads, text.num_hidden_layers
    w3 = torch.randn(h_kv, GATE_WIDTH) * 0.3
    bias = torch.randn(h_kv) * 0.5 + 2.0
    sd, layers = {}, []
    for l in range(n_layer):
        g = {"linear1.weight": torch.randn(GATE_WIDTH, d) * 0.3, "linear1.bias": torch.randn(GATE_WIDTH) * 0.1,
             "linear2.weight": torch.randn(GATE_WIDTH, GATE_WIDTH) * 0.3, "linear2.bias": torch.randn(GATE_WIDTH) * 0.1,
             "linear3.weight": w3, "bias": bias}
        layers.append(g)
        for k, v in g.items():
            sd[f"model.language_model.layers.{l}.self_attn.retention_gate.{k}"] = v
    torch.save(sd, out / "trimkv_weights.pth")
    captured = {}
    hooks = [layer.input_layernorm.register_forward_hook(
        lambda mod, args, output, l=l: captured.__setitem__(l, output[0].detach()))
        for l, layer in enumerate(model.model.language_model.layers)]
    with torch.no_grad():
        model(**inputs)
    for hk in hooks:
        hk.remove()
    silu = torch.nn.functional.silu
    log_beta = []
    for l, g in enumerate(layers):
        x = captured[l]
        z = silu(x @ g["linear1.weight"].T + g["linear1.bias"])
        z = silu(z @ g["linear2.weight"].T + g["linear2.bias"])
        log_beta.append(torch.nn.functional.logsigmoid(z @ g["linear3.weight"].T + g["bias"]))
    tensors["conversation.log_beta"] = torch.stack(log_beta).contiguous()  # [layers, n, H_kv]
    return {"width": GATE_WIDTH, "layers": n_layer, "kv_heads": h_kv}


def legacy_copy(src: Path, dst: Path):
    """The checkpoint as the Hub stored it before transformers v5: flat config, legacy names."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("expected.*"))
    cfg = json.loads((src / "config.json").read_text())
    text = cfg.pop("text_config")
    rope = text.pop("rope_parameters")
    for k in ("model_type", "dtype", "architectures"):
        text.pop(k, None)
    flat = {**cfg, **text, "rope_theta": rope["rope_theta"],
            "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]}}
    flat.pop("dtype", None)
    flat["torch_dtype"] = "float32"
    (dst / "config.json").write_text(json.dumps(flat, indent=1))
    rename_tensors(dst, new_names=False)
    # The processor's legacy keys in place of `size`.
    proc = json.loads((src / "preprocessor_config.json").read_text())
    size = proc.pop("size")
    proc["min_pixels"], proc["max_pixels"] = size["shortest_edge"], size["longest_edge"]
    (dst / "preprocessor_config.json").write_text(json.dumps(proc, indent=1))
    assert Qwen2VLImageProcessorPil(**{k: v for k, v in proc.items() if k != "image_processor_type"}).size == size


def rename_tensors(folder: Path, new_names: bool):
    """Tensor names in the in-memory scheme of transformers v5 (model.visual.*,
    model.language_model.*; Qwen3-VL's Hub files) or the legacy one (visual.*, model.layers.*),
    which save_pretrained writes for this family."""
    tensors = load_file(str(folder / "model.safetensors"))
    renamed = {}
    for k, v in tensors.items():
        if new_names and k.startswith("visual."):
            k = "model." + k
        elif new_names and k.startswith("model.") and not k.startswith(("model.visual.", "model.language_model.")):
            k = "model.language_model." + k[len("model."):]
        elif not new_names and k.startswith("model.visual."):
            k = k[len("model."):]
        elif not new_names and k.startswith("model.language_model."):
            k = "model." + k[len("model.language_model."):]
        renamed[k] = v
    save_file(renamed, str(folder / "model.safetensors"), metadata={"format": "pt"})


def build(data: Path, kind, model_cls, seed, new_names=False):
    vlm = data / "vlm"
    images = vlm / "images"
    out = vlm / kind
    if out.exists():
        shutil.rmtree(out)
    tok, ids = write_tokenizer(data, out)
    qwen3 = kind == "qwen3_vl"
    template = (data / "chat_templates" / ("qwen3_vl_instruct.jinja" if qwen3 else "qwen2_5_vl_instruct.jinja")).read_text()
    # Qwen3-VL: patch 16 (factor 32), mean = std = 0.5.
    ip = (Qwen2VLImageProcessorPil(min_pixels=64 * 64, max_pixels=32 * 32 * 64, patch_size=16, image_mean=[0.5] * 3,
                                   image_std=[0.5] * 3) if qwen3 else
          Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS))
    torch.manual_seed(seed)
    cfg = model_config(kind, ids)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = "eager"
    model = model_cls(cfg).eval().float()
    model.save_pretrained(out, safe_serialization=True)
    if new_names:
        rename_tensors(out, new_names=True)
        reread = model_cls.from_pretrained(str(out), attn_implementation="eager").eval()
        assert all(torch.equal(a, b) for a, b in zip(reread.state_dict().values(), model.state_dict().values()))
    ip.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(template)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": [2, 0],
                                                            "pad_token_id": 0}, indent=1))
    saved = {t["content"]: t["id"] for t in json.loads((out / "tokenizer.json").read_text())["added_tokens"]}
    assert all(saved[c] == ids[c] for c in QWEN_TOKENS), saved
    image_id = ids["<|image_pad|>"]
    expected = {"name": kind, "ids": ids, "cases": {}}
    tensors = {}

    def run(case, messages, files, logits=False, vision=False, generate=False):
        text = tok.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=False)
        pil = [Image.open(images / f) for f in files]
        inputs = expand(text, pil)
        inputs["mm_token_type_ids"] = mm_token_type_ids(inputs["input_ids"], image_id)
        e = {"text": text, "images": files, "input_ids": inputs["input_ids"][0].tolist()}
        with torch.no_grad():
            pos, delta = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                                    image_grid_thw=inputs.get("image_grid_thw"))
            e["positions"] = pos[:, 0].tolist()
            e["rope_delta"] = int(delta.reshape(-1)[0])
            if pil:
                e["grid_thw"] = inputs["image_grid_thw"].tolist()
            if vision:
                pv = inputs["pixel_values"].float()
                tensors[f"{case}.pixel_values"] = pv.contiguous()
                vo = model.model.visual(pv, grid_thw=inputs["image_grid_thw"])
                tensors[f"{case}.vision_hidden"] = vo.last_hidden_state.contiguous()
                tensors[f"{case}.merger"] = vo.pooler_output.contiguous()
                for j, d in enumerate(getattr(vo, "deepstack_features", None) or []):
                    tensors[f"{case}.deepstack{j}"] = d.contiguous()
            if logits:
                tensors[f"{case}.logits"] = model(**inputs).logits[0].contiguous().float()
        if generate:
            e["greedy"] = greedy(model, inputs)
        expected["cases"][case] = e
        return inputs

    def expand(text, pil):
        """Qwen2VLProcessor's work (its class needs torchvision for videos): the image processor,
        then each <|image_pad|> repeated grid_t * grid_h * grid_w / merge^2 times, then the tokenizer."""
        extra = {}
        if pil:
            r = ip(images=pil, return_tensors="pt")
            extra = {"pixel_values": r["pixel_values"], "image_grid_thw": r["image_grid_thw"]}
            parts = text.split("<|image_pad|>")
            assert len(parts) == len(pil) + 1
            text = parts[0]
            for g, rest in zip(r["image_grid_thw"].tolist(), parts[1:]):  # merge 2: 4 patches a token
                text += "<|image_pad|>" * (g[0] * g[1] * g[2] // 4) + rest
        enc = tok([text], return_tensors="pt", add_special_tokens=False)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], **extra}

    img = lambda: {"type": "image"}
    txt = lambda t: {"type": "text", "text": t}
    run("single", [{"role": "user", "content": [img(), txt("Describe it.")]}], ["qwen_a.png"], logits=True,
        vision=True)
    run("two_images", [{"role": "user", "content": [txt("Compare "), img(), txt(" and "), img()]}],
        ["qwen_tall.png", "qwen_b.png"], logits=True, vision=True)
    run("system", [{"role": "system", "content": [txt("You are terse.")]},
                   {"role": "user", "content": [txt("What is here?"), img()]}], ["qwen_tiny.png"], logits=True,
        vision=True)
    run("wide", [{"role": "user", "content": [img()]}], ["qwen_wide.png"], vision=True)
    turn1 = [{"role": "user", "content": [img(), txt("What is this?")]}]
    conversation = turn1 + [
        {"role": "assistant", "content": [txt("A small test picture.")]},
        {"role": "user", "content": [txt("And this one: "), img(), txt(" Which is brighter?")]}]
    run("conversation_turn1", turn1, ["qwen_a.png"])
    inputs = run("conversation", conversation, ["qwen_a.png", "qwen_tall.png"], logits=True, generate=True)
    if qwen3:
        expected["gates"] = write_reference_gates(model, inputs, out, tensors)
    save_file(tensors, str(out / "expected.safetensors"))
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    print(f"  {kind}: {len(expected['cases'])} cases, conversation of {inputs['input_ids'].shape[1]} tokens")
    return model, inputs


def main(data: Path):
    write_images(data / "vlm" / "images")
    build(data, "qwen2_vl", Qwen2VLForConditionalGeneration, 21)
    build(data, "qwen3_vl", Qwen3VLForConditionalGeneration, 23, new_names=True)
    model, inputs = build(data, "qwen2_5_vl", Qwen2_5_VLForConditionalGeneration, 22, new_names=True)
    legacy = data / "vlm" / "qwen2_5_vl_legacy"
    legacy_copy(data / "vlm" / "qwen2_5_vl", legacy)
    old = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(legacy), attn_implementation="eager").eval()
    with torch.no_grad():
        diff = (old(**inputs).logits - model(**inputs).logits).abs().max().item()
    assert diff == 0.0, f"transformers reads the legacy copy differently: {diff}"
    print("  qwen2_5_vl_legacy: flat config and legacy names, transformers logits identical")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
