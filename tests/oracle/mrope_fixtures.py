"""Qwen-VL M-RoPE positions (the oracle of vision/src/mrope.cpp): transformers' own
Qwen2VLModel.get_rope_index on token-type sequences of text runs and images (vision_start and
vision_end are text), on a tiny Qwen2-VL model. Writes tests/data/vlm/mrope.json.
Run through tests/oracle/make_fixtures.py (part "qwen2vl").
"""
import json
from pathlib import Path

import torch
from transformers import Qwen2VLConfig, Qwen2VLModel

# Each case: a list of ("text", n) / ("image", t, h, w) runs (grid in patches, merge 2).
CASES = {
    "two_images": [("text", 3), ("image", 1, 4, 6), ("text", 2), ("image", 1, 4, 4), ("text", 3)],
    "tall_wide_multi_turn": [("text", 7), ("image", 1, 10, 4), ("text", 12), ("image", 1, 2, 14), ("text", 9),
                             ("image", 1, 6, 6), ("text", 1)],
    "image_first": [("image", 1, 2, 2), ("text", 5)],
}


def main(data_dir: Path):
    cfg = Qwen2VLConfig(vision_config={"depth": 1, "embed_dim": 16, "num_heads": 2, "hidden_size": 16},
                        text_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                     "num_key_value_heads": 1, "intermediate_size": 32, "vocab_size": 160000,
                                     "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}})
    model = Qwen2VLModel(cfg).eval()
    merge = cfg.vision_config.spatial_merge_size
    out = {"merge": merge, "cases": {}}
    for name, runs in CASES.items():
        types, grids = [], []
        for r in runs:
            if r[0] == "text":
                types += [0] * r[1]
            else:
                _, t, h, w = r
                types += [1] * (t * h * w // merge // merge)
                grids.append([t, h, w])
        ids = torch.zeros(1, len(types), dtype=torch.long)
        pos, delta = model.get_rope_index(ids, torch.tensor([types]), image_grid_thw=torch.tensor(grids))
        out["cases"][name] = {"runs": [list(r) for r in runs], "positions": pos[:, 0].tolist(),
                              "delta": int(delta[0, 0])}
    (data_dir / "vlm" / "mrope.json").write_text(json.dumps(out) + "\n")
    print(f"mrope: {len(CASES)} cases")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
