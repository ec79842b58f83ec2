"""transformers on the shipped demo model (resources/demo-model): the oracle that proves the
checkpoint trimkv trains is a real Idefics3 checkpoint.

Loads the folder with Idefics3ForConditionalGeneration and AutoProcessor (slow PIL image
processor), lays out a fixed two-image, two-turn world conversation (tests/data/demo/world, made by
`trimkv make-world --split test --n 4 --seed 11`) with the processor's chat template, and writes
tests/data/demo/expected.safetensors: the input ids of the whole conversation up to the second
generation prompt, the logits at the end of each user turn (the positions a Session exposes), and
logits at every 8th position (float32, eager attention).
Run through tests/oracle/make_fixtures.py demo (after the demo model exists).
"""
import json
import os
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoProcessor, Idefics3ForConditionalGeneration

CONVERSATION = 1  # line of world/test.jsonl: the first with two images over two turns or more


def conversation(world):
    lines = [json.loads(l) for l in (world / "test.jsonl").read_text().splitlines() if l.strip()]
    for line in lines:
        turns = line["turns"]
        if len(line["images"]) >= 2 and len(turns) >= 2 and "<image>" in turns[1]["text"]:
            return line
    raise SystemExit("no two-image, two-turn conversation in " + str(world))


def messages(line, world, n_turns):
    msgs, images, next_image = [], [], 0
    for k, turn in enumerate(line["turns"][:n_turns]):
        content, text = [], turn["text"]
        parts = text.split("<image>")
        for i, part in enumerate(parts):
            if part:
                content.append({"type": "text", "text": part})
            if i + 1 < len(parts):
                content.append({"type": "image"})
                images.append(Image.open(world / line["images"][next_image]).convert("RGB"))
                next_image += 1
        msgs.append({"role": "user", "content": content})
        if k + 1 < n_turns:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": turn["answer"]}]})
    return msgs, images


def main(data):
    root = data.parent.parent
    model_dir = Path(os.environ.get("DEMO_MODEL_DIR", root / "resources" / "demo-model"))
    out = data / "demo"
    world = out / "world"
    processor = AutoProcessor.from_pretrained(str(model_dir), use_fast=False)
    model = Idefics3ForConditionalGeneration.from_pretrained(str(model_dir), attn_implementation="eager",
                                                             dtype=torch.float32).eval()
    line = conversation(world)
    tensors, meta = {}, {"id": line["id"]}
    ends = []
    for n_turns in (1, 2):
        msgs, images = messages(line, world, n_turns)
        text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=[images], return_tensors="pt")
        with torch.no_grad():
            logits = model(**inputs).logits[0].float()
        ids = inputs["input_ids"][0]
        ends.append(int(ids.shape[0]) - 1)
        if n_turns == 2:
            tensors["input_ids"] = ids.to(torch.int64)
            positions = torch.arange(0, ids.shape[0], 8)
            tensors["sampled_positions"] = positions
            tensors["sampled_logits"] = logits[positions].contiguous()
        tensors[f"turn{n_turns}_last_logits"] = logits[-1].contiguous()
    meta["turn_ends"] = ends
    save_file(tensors, str(out / "expected.safetensors"))
    (out / "expected.json").write_text(json.dumps(meta, indent=2) + "\n")
    print("demo fixtures:", out, meta)
