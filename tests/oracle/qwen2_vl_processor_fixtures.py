"""The Qwen2-VL / Qwen2.5-VL image processor's outputs (the oracle of
vision/src/processors/qwen2_vl_processor.cpp): transformers' Qwen2VLImageProcessorPil (the slow
PIL path) on the test images under three size settings, and smart_resize on a table of sizes.
Writes tests/data/vlm/qwen2_vl_processor/{expected.safetensors, expected.json}.
Run through tests/oracle/make_fixtures.py (part "qwen2vl").
"""
import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize

SETTINGS = {
    # name: (processor kwargs, images); class defaults: size shortest 3136, longest 28*28*1280
    "default": ({}, ["a.png", "c.bmp", "palette.gif", "wide.png", "gray.png"]),
    # the max branch (downscale), through the legacy keys
    "max_small": ({"min_pixels": 28 * 28, "max_pixels": 28 * 28 * 2}, ["a.png", "wide.png", "alpha.png"]),
    # the min branch (upscale)
    "min_large": ({"size": {"shortest_edge": 28 * 28 * 9, "longest_edge": 28 * 28 * 16}}, ["c.bmp"]),
}
SIZES = [(42, 70), (98, 126), (1080, 1920), (14, 14), (15, 29), (43, 43), (70, 42), (3, 500), (1, 150),
         (27, 2000), (333, 777), (2048, 4096), (56, 56), (99, 141)]


def main(data_dir: Path):
    images_dir = data_dir / "vlm" / "images"
    out = data_dir / "vlm" / "qwen2_vl_processor"
    out.mkdir(parents=True, exist_ok=True)
    tensors, cases = {}, []
    for setting, (kwargs, names) in SETTINGS.items():
        proc = Qwen2VLImageProcessorPil(**kwargs)
        for name in names:
            img = Image.open(images_dir / name)
            r = proc(images=[img], return_tensors="np")
            key = f"{setting}/{name}"
            tensors[key] = torch.from_numpy(np.ascontiguousarray(r["pixel_values"], dtype=np.float32))
            cases.append({"setting": setting, "image": name, "kwargs": kwargs,
                          "grid_thw": [int(x) for x in r["image_grid_thw"][0]]})
    resize_table = []
    for h, w in SIZES:
        try:
            resize_table.append({"h": h, "w": w, "out": list(smart_resize(h, w, 28, 56 * 56, 28 * 28 * 1280))})
        except ValueError as e:
            resize_table.append({"h": h, "w": w, "error": str(e)})
    save_file(tensors, out / "expected.safetensors")
    (out / "expected.json").write_text(json.dumps({"cases": cases, "smart_resize": resize_table}, indent=1) + "\n")
    print(f"qwen2-vl processor: {len(cases)} images, {len(resize_table)} smart_resize sizes")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
