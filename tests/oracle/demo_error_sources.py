"""Where the demo model's wrong answers come from: seeing or counting (README, "Where counting goes wrong").

1. What the visual tokens hold. The model's tower and connector (frozen, through transformers and
   the model's own processor) encode every image of a world file; at the visual token whose cell
   holds an object's centre, linear probes (trained on the first 70% of the objects, scored on the
   rest) read the object's shape, its colour, and how many objects of its shape / its colour the
   image holds. The shape is reported by the object's drawn width (its bbox) as a fraction of the
   image side: small objects are few pixels at the model's 96; and by whether another object's
   centre lies in a neighbouring cell (or the same one).
2. The counting answers of `trimkv eval --records` on the same file: accuracy by whether an object
   the question counts is narrower than 12% of the side, by whether two counted objects lie in
   neighbouring cells, and the answers given per expected count.

Usage (oracle environment): demo_error_sources.py MODEL_DIR WORLD.jsonl RECORDS.jsonl
"""
import collections
import json
import re
import sys
from pathlib import Path

import torch
from PIL import Image
from transformers import AutoProcessor, Idefics3ForConditionalGeneration

SHAPES = ["circle", "square", "triangle", "star"]
COLORS = ["red", "green", "blue", "yellow", "purple", "orange"]
PLURALS = {s + "s": s for s in SHAPES}
WIDTHS = [(0.0, 0.12), (0.12, 0.16), (0.16, 0.20), (0.20, 0.30), (0.30, 1.0)]
SMALL = 0.12


def width(obj, scene):
    x0, _, x1, _ = obj["bbox"]
    return (x1 - x0 + 1) / scene["size"]


def token_side(model_dir):
    config = json.loads((Path(model_dir) / "config.json").read_text())
    v = config["vision_config"]
    return v["image_size"] // v["patch_size"] // config.get("scale_factor", 2)  # visual tokens per image side


def centre_cell(obj, scene, side):
    cell = scene["size"] / side
    col = min(side - 1, max(0, int((obj["center"][0] + 0.5) // cell)))
    row = min(side - 1, max(0, int((obj["center"][1] + 0.5) // cell)))
    return row * side + col


def neighbours(a, b, side):
    """Whether cells a and b are the same or touch (sides or corners)."""
    return abs(a // side - b // side) <= 1 and abs(a % side - b % side) <= 1


def visual_tokens(model, proc, path):
    pixels = proc.image_processor(Image.open(path).convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        h = model.model.vision_model(pixel_values=pixels.flatten(0, 1)).last_hidden_state
        return model.model.connector(h)[0]  # [36, hidden]


def linear_probe(x, y, n_train, seed=0):
    torch.manual_seed(seed)
    k = int(y.max()) + 1
    w = torch.zeros(x.shape[1], k, requires_grad=True)
    b = torch.zeros(k, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.01)
    for _ in range(1500):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x[:n_train] @ w + b, y[:n_train]) + 1e-4 * (w * w).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return ((x[n_train:] @ w + b).argmax(1) == y[n_train:]).numpy()


def probes(model_dir, world_jsonl, side):
    proc = AutoProcessor.from_pretrained(model_dir, use_fast=False)
    model = Idefics3ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    root = Path(world_jsonl).parent
    feats, shape, color, same_shape, same_color, widths, crowded = [], [], [], [], [], [], []
    for line in open(world_jsonl):
        conv = json.loads(line)
        for image, scene in zip(conv["images"], conv["scenes"]):
            tokens = visual_tokens(model, proc, root / image)
            objs = scene["objects"]
            taken = set()
            cells = [centre_cell(o, scene, side) for o in objs]
            for i, o in enumerate(objs):
                k = cells[i]
                if k in taken:  # two centres in one cell: the first object keeps it (as in training)
                    continue
                taken.add(k)
                feats.append(tokens[k])
                shape.append(SHAPES.index(o["shape"]))
                color.append(COLORS.index(o["color"]))
                same_shape.append(sum(p["shape"] == o["shape"] for p in objs))
                same_color.append(sum(p["color"] == o["color"] for p in objs))
                widths.append(width(o, scene))
                crowded.append(any(neighbours(k, c, side) for j, c in enumerate(cells) if j != i))
    x = torch.stack(feats)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    n_train = int(0.7 * len(x))
    test_widths = widths[n_train:]
    test_crowded = crowded[n_train:]
    print(f"visual tokens at {len(x)} object centres (probes trained on {n_train}, scored on the rest)")
    for name, y in (("shape", shape), ("colour", color), ("objects of its shape in the image", same_shape),
                    ("objects of its colour in the image", same_color)):
        right = linear_probe(x, torch.tensor(y), n_train)
        held = y[n_train:]
        majority = collections.Counter(held).most_common(1)[0][1] / len(held)
        print(f"  {name}: {right.mean():.3f} (the most frequent class alone: {majority:.3f})")
        if name == "shape":
            for lo, hi in WIDTHS:
                sel = [i for i, w in enumerate(test_widths) if lo <= w < hi]
                print(f"    width {lo:.2f}-{min(hi, 0.5):.2f} of the side: {right[sel].mean():.3f} of {len(sel)}")
        for label, want in (("another object's centre in a neighbouring cell", True), ("none near", False)):
            sel = [i for i, c in enumerate(test_crowded) if c == want]
            print(f"    {label}: {right[sel].mean():.3f} of {len(sel)}")


def counting(world_jsonl, records_jsonl, side):
    records = {}
    for line in open(records_jsonl):
        r = json.loads(line)
        records[(r["id"], r["turn"])] = r
    by_size = collections.defaultdict(lambda: [0, 0])
    by_place = collections.defaultdict(lambda: [0, 0])
    answers = collections.defaultdict(collections.Counter)
    for line in open(world_jsonl):
        conv = json.loads(line)
        for t, turn in enumerate(conv["turns"]):
            r = records.get((conv["id"], t))
            kind = turn["type"]
            if r is None or "count" not in kind and kind != "total_shape":
                continue
            scenes = [conv["scenes"][a - 1] for a in turn["about"]]
            words = re.findall(r"[a-z]+", turn["text"].lower())
            if "color" in kind:
                wanted = [c for c in COLORS if c in words][:1]
                match = lambda o: o["color"] in wanted
            else:
                wanted = [s for p, s in PLURALS.items() if p in words][:1]
                match = lambda o: o["shape"] in wanted
            ws = [width(o, s) for s in scenes for o in s["objects"] if match(o)]
            group = "none match" if not ws else ("one narrower than 12%" if min(ws) < SMALL else "all 12% or wider")
            by_size[(kind, group)][0] += bool(r["correct"])
            by_size[(kind, group)][1] += 1
            for s in scenes:  # two or more counted in one image: are any two of them neighbours?
                cells = [centre_cell(o, s, side) for o in s["objects"] if match(o)]
                if len(cells) >= 2:
                    near = any(neighbours(a, b, side) for i, a in enumerate(cells) for b in cells[i + 1:])
                    tally = by_place[(kind, "two in neighbouring cells" if near else "all apart")]
                    tally[0] += bool(r["correct"])
                    tally[1] += 1
                    break
            if kind != "total_shape":
                answers[kind][(r["expected"], r["generated"].strip())] += 1
    print("counting answers by the width of the objects counted (fraction of the image side)")
    for (kind, group), (right, n) in sorted(by_size.items()):
        print(f"  {kind:22} {group:24} {right / n:.3f} of {n}")
    print("counts of two or more in one image, by where the counted objects lie (cells of the token grid)")
    for (kind, group), (right, n) in sorted(by_place.items()):
        print(f"  {kind:22} {group:27} {right / n:.3f} of {n}")
    print("answers given per expected count (expected: {answer: times})")
    for kind, table in sorted(answers.items()):
        rows = collections.defaultdict(dict)
        for (e, g), n in sorted(table.items()):
            rows[e][g] = n
        print(f"  {kind:22} " + "; ".join(f"{e}: {rows[e]}" for e in sorted(rows)))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    side = token_side(sys.argv[1])
    counting(sys.argv[2], sys.argv[3], side)
    probes(sys.argv[1], sys.argv[2], side)
