"""Tiny random Idefics3 / SmolVLM checkpoints, test images and their transformers outputs (the
oracle for vision/ and the Session).

Writes under tests/data/vlm/:
  images/      small deterministic test images (PNG, JPEG, BMP, GIF; RGBA, grayscale, palette,
               EXIF-rotated JPEG) and broken files for the bad-input tests
  tokenizer.json source: the tiny SmolLM2-style tokenizer of tokenizer_fixtures.py with the
               Idefics3 image tokens (<fake_token_around_image>, <image>, <end_of_utterance>,
               <global-img>, <row_r_col_c>) as special added tokens
  smolvlm/, idefics3/   checkpoints saved by transformers (config.json, model.safetensors,
               processor files, tokenizer) + expected.json / expected.safetensors
  preprocess.safetensors + preprocess.json: slow (PIL) processor output per image
Vision image 32, patch 4, scale factor 2 -> 16 tokens per tile; processor longest edge 64 with
32-pixel tiles -> up to 2x2 tiles plus the global image. Deterministic: fixed seeds, float32,
eager attention, slow processors (use_fast=False).
Run through tests/oracle/make_fixtures.py vlm (needs Pillow: packaging/setup.sh --oracle).
"""
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors.torch import save_file
from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor,
                          PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMForConditionalGeneration)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

VOCAB = 448          # model vocabulary: tokenizer ids (< 421) + room
IMAGE_SIZE = 32      # vision tile side
PATCH = 4
SCALE = 2
SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE ** 2  # 16 <image> tokens per tile
LONGEST_EDGE = 64    # processor "size": 2x2 tiles at most
N_GREEDY = 12

# The SmolVLM chat template (SmolVLM-256M/500M-Instruct), applied by the processor.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{r + 1}_col_{c + 1}>" for r in range(6) for c in range(6)]


# ---------------------------------------------------------------------------------------------
# Images


def pattern(w, h, seed, mode="RGB"):
    """Gradients, stripes, a disc and noise: content on which resampling filters differ."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127 + 120 * np.sin(x / (2.5 + seed % 3)) * np.cos(y / 4.0)
    g = 255 * x / max(w - 1, 1)
    b = np.where((x - w / 2) ** 2 + (y - h / 2) ** 2 < (min(w, h) / 3) ** 2, 230, 20) + 0 * y
    rgb = np.stack([r, g, b], -1) + rng.normal(0, 18, (h, w, 3))
    rgb = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    img = Image.fromarray(rgb, "RGB")
    return img if mode == "RGB" else img.convert(mode)


def exif_with_orientation(orientation):
    """A minimal little-endian TIFF/EXIF block holding only the Orientation tag."""
    ifd = struct.pack("<H", 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack("<I", 0)
    return b"Exif\x00\x00" + b"II*\x00" + struct.pack("<I", 8) + ifd


def write_images(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    pattern(60, 45, 1).save(root / "a.png")                      # landscape -> 2x2 tiles
    pattern(100, 30, 2).save(root / "wide.png")                  # 1 row x 2 cols
    pattern(50, 70, 3).save(root / "b.jpg", quality=92)          # portrait JPEG
    rgba = pattern(40, 40, 4).convert("RGBA")
    a = np.array(rgba)
    yy, xx = np.mgrid[0:40, 0:40]
    a[..., 3] = np.clip(xx * 7 + yy * 2, 0, 255).astype(np.uint8)  # alpha ramp incl. 0 and 255
    Image.fromarray(a, "RGBA").save(root / "alpha.png")
    pattern(36, 52, 5, "L").save(root / "gray.png")
    pattern(48, 33, 6).quantize(colors=32, method=Image.Quantize.MEDIANCUT).save(root / "palette.gif")
    pattern(44, 28, 7).save(root / "c.bmp")
    # EXIF orientation 6: the stored pixels are rotated; viewers (and load_image) turn them back.
    pattern(30, 54, 8).save(root / "rotated.jpg", quality=92, exif=exif_with_orientation(6))
    # Bad inputs.
    (root / "not_an_image.png").write_text("this is plain text, not a PNG\n")
    (root / "empty.png").write_bytes(b"")
    png = (root / "a.png").read_bytes()
    (root / "truncated.png").write_bytes(png[: len(png) // 2])
    jpg = (root / "b.jpg").read_bytes()
    (root / "truncated.jpg").write_bytes(jpg[:300])
    # A PNG whose header declares 100000 x 100000 pixels (a decompression bomb's header).
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    (root / "bomb.png").write_bytes(bomb)


def load(path):
    """What a user's image becomes before the processor: EXIF orientation applied (PIL), mode kept
    so the processor's convert_to_rgb composites transparency over white."""
    img = Image.open(path)
    img.load()
    return ImageOps.exif_transpose(img)


# ---------------------------------------------------------------------------------------------
# Tokenizer and processors


def write_tokenizer(data: Path, out: Path):
    tok = json.loads((data / "tokenizers" / "smollm2" / "tokenizer.json").read_text())
    by_content = {t["content"]: t for t in tok["added_tokens"]}
    next_id = max(t["id"] for t in tok["added_tokens"]) + 1
    for content in IMAGE_TOKENS:
        entry = by_content.get(content)
        if entry is None:
            entry = {"id": next_id, "content": content}
            next_id += 1
            tok["added_tokens"].append(entry)
        # The flags the Idefics3 processor gives them (AddedToken(normalized=False, special=True)).
        entry.update(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    assert next_id <= VOCAB
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    return PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"), bos_token="<|im_start|>",
                                   eos_token="<end_of_utterance>", unk_token="<|endoftext|>",
                                   pad_token="<|im_end|>")


def image_processor(cls, splitting=True):
    return cls(do_resize=True, size={"longest_edge": LONGEST_EDGE},
               max_image_size={"longest_edge": IMAGE_SIZE}, do_image_splitting=splitting,
               resample=Image.Resampling.LANCZOS, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


# ---------------------------------------------------------------------------------------------
# Models


def model_config(cfg_cls, tied, image_token_id):
    text = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=100000.0,
                initializer_range=0.25, bos_token_id=1, eos_token_id=383, pad_token_id=2,
                tie_word_embeddings=tied)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=PATCH, layer_norm_eps=1e-6,
                  hidden_act="gelu_pytorch_tanh", initializer_range=0.25)
    cfg = cfg_cls(text_config=text, vision_config=vision, scale_factor=SCALE, image_token_id=image_token_id,
                  tie_word_embeddings=tied, pad_token_id=2)
    return cfg


def greedy(model, inputs):
    out = model.generate(**inputs, max_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                         pad_token_id=2, min_new_tokens=N_GREEDY)
    n = inputs["input_ids"].shape[1]
    new = out[0, n:].tolist()
    with torch.no_grad():
        full = dict(inputs)
        full["input_ids"] = out[:, :-1]
        full["attention_mask"] = torch.ones_like(out[:, :-1])
        logits = model(**full).logits[0, n - 1:]
    # Plain argmax at every step: no logits processor (e.g. min_new_tokens masking EOS) chose.
    assert logits.argmax(-1).tolist() == new, (logits.argmax(-1).tolist(), new)
    top2 = logits.topk(2, dim=-1).values
    return new, float((top2[:, 0] - top2[:, 1]).min())


def build(data: Path, out_root: Path, name, spec, images_dir: Path, tokenizer_src: Path):
    cfg_cls, model_cls, proc_cls, ip_cls, tied, seed, full = spec
    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_src))
    processor = proc_cls(image_processor=image_processor(ip_cls), tokenizer=tok, image_seq_len=SEQ_LEN,
                         chat_template=CHAT_TEMPLATE)
    image_token_id = tok.convert_tokens_to_ids("<image>")
    torch.manual_seed(seed)
    cfg = model_config(cfg_cls, tied, image_token_id)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = "eager"
    model = model_cls(cfg).eval().float()
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    # The processor may rewrite the tokenizer (it registers its special tokens): what it saved is
    # what it uses; check the ids of the image tokens are unchanged.
    saved = json.loads((out / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in saved["added_tokens"]}
    assert ids["<image>"] == image_token_id, ids

    expected = {"name": name, "image_token_id": image_token_id, "image_seq_len": SEQ_LEN, "cases": {}}
    tensors = {}

    def finish():
        save_file(tensors, str(out / "expected.safetensors"))
        (out / "expected.json").write_text(json.dumps(expected, indent=1))
        margins = [c["greedy_margin"] for c in expected["cases"].values() if "greedy_margin" in c]
        print(f"  {name}: {len(expected['cases'])} cases, min greedy margin {min(margins):.4f}")

    def record(case, text, images, splitting=True, generate=False, logits=0, vision=False):
        """logits: 0 = none, k > 0 = the last k positions, -1 = every position."""
        ip = processor.image_processor
        ip.do_image_splitting = splitting
        pil = [load(images_dir / f) for f in images]
        inputs = processor(text=[text], images=[pil] if pil else None, return_tensors="pt")
        ip.do_image_splitting = True
        e = {"text": text, "images": images, "splitting": splitting,
             "input_ids": inputs["input_ids"][0].tolist()}
        with torch.no_grad():
            if vision:
                pv = inputs["pixel_values"][0].contiguous().float()
                tensors[f"{case}.pixel_values"] = pv
                vis = model.model.vision_model(pixel_values=pv).last_hidden_state
                tensors[f"{case}.vision"] = vis.contiguous()
                tensors[f"{case}.connector"] = model.model.connector(vis).contiguous()
            if logits:
                lg = model(**inputs).logits[0]
                lg = lg if logits < 0 else lg[-logits:]
                tensors[f"{case}.logits"] = lg.contiguous().float()
                e["logits_positions"] = lg.shape[0]
        if generate:
            e["greedy"], e["greedy_margin"] = greedy(model, inputs)
        expected["cases"][case] = e

    record("single", "Describe <image> briefly.", ["a.png"], splitting=False, logits=4)
    record("split", "<image>What do you see?", ["a.png"], logits=4, generate=True, vision=True)
    if name == "idefics3":
        studio_turn(out, expected, images_dir)
    if not full:  # the second family checks loading, tower, connector and logits only
        return finish()
    record("wide", "Look: <image>", ["wide.png"], vision=True)
    record("multi", "First <image> then <image>, compare them.", ["a.png", "gray.png"], logits=4)
    # Two-image, two-turn conversation through the chat template.
    conversation = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A small test picture."}]},
        {"role": "user", "content": [{"type": "text", "text": "And this one: "}, {"type": "image"},
                                     {"type": "text", "text": " Which is brighter?"}]},
    ]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    record("conversation", text, ["a.png", "alpha.png"], logits=-1, generate=True)
    first_turn = processor.apply_chat_template(conversation[:1], add_generation_prompt=True, tokenize=False)
    # Its ids are a prefix of the conversation's: the conversation logits cover it.
    record("conversation_turn1", first_turn, ["a.png"])
    expected["conversation_messages"] = conversation
    finish()


def studio_turn(out: Path, expected, images_dir: Path):
    """The Studio's one-turn question, as test_gui's theGuiAnswersAsChatEngineAndTheCommandLineDo
    sends it (no system prompt, the image before the text: content_from_prompt without a
    placeholder), laid out by the saved processor's own chat template and image settings (splitting
    on), and HF's greedy answer of N_GREEDY tokens that never stops at EOS (the test's
    stop_at_eos = false)."""
    processor = Idefics3Processor.from_pretrained(str(out))  # the folder the Studio opens
    assert isinstance(processor.image_processor, Idefics3ImageProcessorPil), type(processor.image_processor)
    assert processor.image_processor.do_image_splitting
    model = Idefics3ForConditionalGeneration.from_pretrained(str(out), attn_implementation="eager").eval().float()
    images = ["a.png"]
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in the image?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[[load(images_dir / f) for f in images]], return_tensors="pt")
    new, margin = greedy(model, inputs)
    expected["cases"]["studio_turn"] = {
        "messages": messages, "text": text, "images": images, "splitting": True,
        "input_ids": inputs["input_ids"][0].tolist(), "greedy": new, "greedy_margin": margin,
        "greedy_text": processor.tokenizer.decode(new, skip_special_tokens=True)}


def write_preprocess(images_dir: Path, out: Path):
    """Slow-processor output (pixel tensors and tile grid) for every decodable test image, with
    and without splitting."""
    tensors, meta = {}, {}
    all_images = ["a.png", "wide.png", "b.jpg", "alpha.png", "gray.png", "palette.gif", "c.bmp", "rotated.jpg"]
    for split in (True, False):
        ip = image_processor(Idefics3ImageProcessorPil, splitting=split)
        for f in all_images if split else ["a.png", "wide.png"]:
            img = load(images_dir / f)
            r = ip(images=[[img]], return_tensors="pt", return_row_col_info=True)
            key = f"{f}.{'split' if split else 'nosplit'}"
            tensors[key] = r["pixel_values"][0].contiguous().float()
            meta[key] = {"rows": r["rows"][0][0], "cols": r["cols"][0][0],
                         "decoded_size": [img.height, img.width]}
    # The decoded RGB pixels (after EXIF orientation and alpha compositing), for decoder tests.
    from transformers.image_transforms import convert_to_rgb
    for f in ["a.png", "alpha.png", "gray.png", "palette.gif", "c.bmp", "rotated.jpg", "b.jpg"]:
        rgb = convert_to_rgb(load(images_dir / f), return_numpy=True)
        tensors[f"{f}.rgb"] = torch.from_numpy(np.ascontiguousarray(rgb)).to(torch.uint8)
    # Plain resizes of one image to several sizes (the LANCZOS filter alone), uint8 HWC.
    a = Image.open(images_dir / "a.png").convert("RGB")
    for (w, h) in [(64, 48), (32, 32), (17, 9), (121, 90), (60, 46)]:
        tensors[f"resize.{w}x{h}"] = torch.from_numpy(np.array(a.resize((w, h), Image.Resampling.LANCZOS)))
    for name, filt in [("bicubic", Image.Resampling.BICUBIC), ("bilinear", Image.Resampling.BILINEAR),
                       ("box", Image.Resampling.BOX), ("hamming", Image.Resampling.HAMMING)]:
        tensors[f"resize.{name}.37x29"] = torch.from_numpy(np.array(a.resize((37, 29), filt)))
    save_file(tensors, str(out / "preprocess.safetensors"))
    (out / "preprocess.json").write_text(json.dumps(meta, indent=1))


def main(data_dir: Path):
    root = data_dir / "vlm"
    root.mkdir(parents=True, exist_ok=True)
    images = root / "images"
    write_images(images)
    tok_dir = root / "tokenizer"
    write_tokenizer(data_dir, tok_dir)
    write_preprocess(images, root)
    specs = {
        # name: config, model, processor, image processor, tied embeddings, seed, every case
        # SmolVLMProcessor needs a video processor (torchvision) and num2words; its image
        # expansion (_prompt_split_image / _prompt_single_image) is text-for-text the one of
        # Idefics3Processor, which therefore serves both checkpoints.
        "smolvlm": (SmolVLMConfig, SmolVLMForConditionalGeneration, Idefics3Processor,
                    SmolVLMImageProcessorPil, True, 3004, True),
        "idefics3": (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor,
                     Idefics3ImageProcessorPil, False, 3002, False),
    }
    for name, spec in specs.items():
        build(data_dir, root, name, spec, images, tok_dir)


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
