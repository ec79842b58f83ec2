#!/usr/bin/env python3
"""Independent shapes test set for the demo vision-language model, drawn with Pillow.

What it is
    A generator of a held-out test set in the JSONL format that `trimkv eval` reads (one
    conversation per line: "id", "images", "turns" with "text"/"answer"/"type"/"about", and
    "scenes" with each image's objects). It uses the same scene vocabulary and question grammar
    as the project's synthetic world (issue 6) -- four shapes, six colour names, the seven
    single-image question types, their "In image k, ..." forms, and the two multi-image types --
    but the pictures come from a different program: this one.

Independence
    It shares NO code and NO constants with the C++ world generator (vision/src/world/): it was
    written from a prose spec of the vocabulary and the question grammar only, without reading
    the C++ scene, renderer, question or conversation sources. Every colour, size range,
    background and rendering choice below is this script's own. The point is to check that the
    demo model generalises to pictures it was not trained on.

Its own distributions
    Image: square, side uniform in [48, 400] px. Format per image: PNG (optimised) or JPEG
        (quality uniform in [85, 95], 4:2:0 or 4:4:4 chroma), about 50/50 overall (PNG 12% of
        noise backgrounds, which do not compress in PNG, and 63% of the others).
    Objects: 1-6 per image (uniform), shapes and colour names uniform and independent. Each
        object's "width" is its exact horizontal extent in px, uniform in
        [max(8, 0.10*side), 0.40*side], shrunk by x0.85 steps when it does not fit (not below
        max(8, 0.08*side); a scene that still does not fit is redrawn, with one object fewer
        after every 80 failed draws -- only in crowded small images);
        "center" is the centre of its bounding box. Objects never overlap: bounding boxes keep a
        gap of max(3, 1% of side) px, and every box stays >= 1 px inside the image.
    Shapes: circle (a disc); square (rotated by U[-20, 20] deg in 60% of cases, else upright);
        triangle (isosceles pointing up, height/width in [0.80, 1.00], equilateral is 0.866;
        same rotation rule); star (5 points, one up, inner/outer radius in [0.38, 0.50], same
        rotation rule).
    Colours: each object draws its own RGB from an HSV box per name (hue in degrees, s, v in
        [0, 1]); the boxes are centred on CSS-like colours and kept clearly within their name:
            red     hue [-8, 4]    s [0.80, 1.00]  v [0.78, 1.00]   (~ red #ff0000, #e03030)
            orange  hue [24, 34]   s [0.85, 1.00]  v [0.92, 1.00]   (~ darkorange #ff8c00)
            yellow  hue [49, 57]   s [0.80, 1.00]  v [0.94, 1.00]   (~ gold #ffd700, #ffe81a)
            green   hue [105, 140] s [0.65, 1.00]  v [0.55, 0.85]   (~ limegreen #32cd32, #1f9b2a)
            blue    hue [212, 232] s [0.70, 1.00]  v [0.72, 1.00]   (~ royalblue #4169e1, #0050e0)
            purple  hue [274, 292] s [0.60, 0.85]  v [0.52, 0.80]   (~ darkorchid, #7a1fa8)
    Backgrounds (base colours saturation <= 0.15, lightness from dark to light), 1/4 each:
        plain     -- a grey (v U[0.04, 0.96]) or, half the time, a tinted colour (any hue,
                     s U[0.03, 0.15]);
        gradient  -- linear, at any angle, between two such colours whose v differ by >= 0.15;
        noise     -- a base colour like plain's (v in [0.08, 0.92]) plus Gaussian noise per
                     pixel or per 2x2 block (50/50; luma sigma 2-8, chroma sigma 0-1.5);
        texture   -- a base colour (v in [0.08, 0.92]) plus bicubic-upsampled coarse noise
                     (a cell every 6-24 px), Gaussian-blurred (amplitude 8-35 levels): soft blotches.
    Rendering: per image, anti-aliased (60%: all objects drawn at 4x on a transparent layer,
        downscaled with LANCZOS, alpha-composited) or hard-edged (40%: drawn straight on the
        background). 30% of objects at least 14 px wide get an outline drawn inside the shape
        (1 px; up to 2 px from 30 px wide, up to 3 px from 60 px): black, white, or a darker
        shade of the fill (x0.55, x0.7 for yellow/orange), 1/3 each.

Questions
    Single: color_of_shape, shape_of_color, count_shape, count_color, exists, position,
    left_of (the exact grammar is in the QUESTION FORMS below); multi: more_shape, total_shape;
    in_image_<type> for "In image k, ..." Quadrants use the bounding-box centre against the
    midlines; position skips objects whose centre is within 6% of the side of a midline, and
    left_of needs the two centres >= 6% of the side apart horizontally. The type of each
    question is chosen to keep the types balanced (least asked first among those a scene
    allows); count questions ask about a present shape/colour 75% of the time; exists and
    left_of are yes/no 50/50.

Conversations
    --single N1: one image in turn 1, then 1-3 turns, each one single-image question about it.
    --multi N2: 2-4 images over 1-3 turns (turn 1 shows >= 1); each turn asks "In image k, ..."
    about an image shown so far, more_shape/total_shape over all images shown so far, or, when
    the turn shows exactly one new image, a plain question about that image.

Rerun
    ~/.cache/trimkv/venv-oracle/bin/python tests/independent/make_shapes_pillow.py \\
        --out tests/data/independent-shapes --seed 7 --single 120 --multi 50
    ~/.cache/trimkv/venv-oracle/bin/python tests/independent/make_shapes_pillow.py \\
        --out tests/data/independent-shapes --check
    The JSONL and scenes depend only on the seed; image bytes may differ across Pillow/libjpeg
    versions (resampling and JPEG encoders). Only Pillow, numpy and the standard library.
"""

import argparse
import colorsys
import json
import math
import os
import random
import re
import shutil
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

SHAPES = ["circle", "square", "triangle", "star"]
PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "star": "stars"}
SINGULAR = {v: k for k, v in PLURAL.items()}
COLORS = ["red", "green", "blue", "yellow", "purple", "orange"]

# name -> (hue range in degrees, saturation range, value range)
COLOR_HSV = {
    "red": ((-8.0, 4.0), (0.80, 1.00), (0.78, 1.00)),
    "orange": ((24.0, 34.0), (0.85, 1.00), (0.92, 1.00)),
    "yellow": ((49.0, 57.0), (0.80, 1.00), (0.94, 1.00)),
    "green": ((105.0, 140.0), (0.65, 1.00), (0.55, 0.85)),
    "blue": ((212.0, 232.0), (0.70, 1.00), (0.72, 1.00)),
    "purple": ((274.0, 292.0), (0.60, 0.85), (0.52, 0.80)),
}

SINGLE_TYPES = ["color_of_shape", "shape_of_color", "count_shape", "count_color", "exists", "position", "left_of"]
MULTI_TYPES = ["more_shape", "total_shape"]
QUADRANTS = ["top left", "top right", "bottom left", "bottom right"]

MIN_SIDE, MAX_SIDE = 48, 400
MIN_WIDTH_PX = 8
MIDLINE_MARGIN = 0.06  # of the side
AA_SCALE = 4


# ----------------------------------------------------------------------------------------------
# Colours and backgrounds


def hsv_to_rgb(h_deg, s, v):
    r, g, b = colorsys.hsv_to_rgb((h_deg % 360.0) / 360.0, min(max(s, 0.0), 1.0), min(max(v, 0.0), 1.0))
    return (round(r * 255), round(g * 255), round(b * 255))


def object_rgb(rng, name):
    (h0, h1), (s0, s1), (v0, v1) = COLOR_HSV[name]
    return hsv_to_rgb(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1))


def muted_rgb(rng, v=None):
    """A low-saturation colour: grey half the time, else a faint tint of any hue."""
    if v is None:
        v = rng.uniform(0.04, 0.96)
    s = 0.0 if rng.random() < 0.5 else rng.uniform(0.03, 0.15)
    return np.array(hsv_to_rgb(rng.uniform(0, 360), s, v), dtype=np.float32)


def make_background(rng, nrng, side):
    kind = rng.choice(["plain", "gradient", "noise", "texture"])
    if kind == "plain":
        arr = np.broadcast_to(muted_rgb(rng), (side, side, 3)).astype(np.float32)
    elif kind == "gradient":
        v1 = rng.uniform(0.04, 0.96)
        v2 = rng.uniform(0.04, 0.96)
        while abs(v1 - v2) < 0.15:
            v2 = rng.uniform(0.04, 0.96)
        c1, c2 = muted_rgb(rng, v1), muted_rgb(rng, v2)
        ang = rng.uniform(0, 2 * math.pi)
        ys, xs = np.mgrid[0:side, 0:side].astype(np.float32)
        proj = (xs - side / 2) * math.cos(ang) + (ys - side / 2) * math.sin(ang)
        t = (proj - proj.min()) / max(float(proj.max() - proj.min()), 1e-6)
        arr = c1[None, None, :] * (1 - t[..., None]) + c2[None, None, :] * t[..., None]
    elif kind == "noise":
        base = muted_rgb(rng, rng.uniform(0.08, 0.92))
        grain = rng.choice([1, 2])  # noise per pixel, or per 2x2 block
        n = (side + grain - 1) // grain
        luma = nrng.normal(0.0, rng.uniform(2, 8), (n, n, 1))
        chroma = nrng.normal(0.0, rng.uniform(0, 1.5), (n, n, 3))
        noise = np.repeat(np.repeat(luma + chroma, grain, axis=0), grain, axis=1)[:side, :side]
        arr = base[None, None, :] + noise
    else:  # texture
        base = muted_rgb(rng, rng.uniform(0.08, 0.92))
        cells = max(2, side // rng.randint(6, 24))
        coarse = nrng.normal(0.0, 1.0, (cells, cells)).astype(np.float32)
        coarse = (coarse - coarse.min()) / max(float(coarse.max() - coarse.min()), 1e-6)
        up = Image.fromarray((coarse * 255).astype(np.uint8), "L").resize((side, side), Image.BICUBIC)
        up = up.filter(ImageFilter.GaussianBlur(radius=max(1.0, side / cells / 2.5)))
        field = (np.asarray(up, dtype=np.float32) / 255.0 - 0.5) * 2 * rng.uniform(8, 35)
        tint = np.ones(3, dtype=np.float32) + nrng.normal(0, 0.04, 3).astype(np.float32)
        arr = base[None, None, :] + field[..., None] * tint[None, None, :]
    img = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "RGB")
    return img, kind


# ----------------------------------------------------------------------------------------------
# Shapes: unit polygons, then scaled so the bounding-box width is the object's width


def unit_polygon(shape, params):
    rot = math.radians(params["rotation"])
    if shape == "square":
        pts = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
    elif shape == "triangle":
        a = params["aspect"]
        pts = [(0.0, -a / 2), (0.5, a / 2), (-0.5, a / 2)]
    elif shape == "star":
        r_in = params["inner"]
        pts = []
        for i in range(10):
            ang = math.radians(-90 + 36 * i)
            r = 1.0 if i % 2 == 0 else r_in
            pts.append((r * math.cos(ang), r * math.sin(ang)))
    else:
        raise ValueError(shape)
    c, s = math.cos(rot), math.sin(rot)
    return [(x * c - y * s, x * s + y * c) for x, y in pts]


def bbox_of(pts):
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    return min(xs), min(ys), max(xs), max(ys)


def height_over_width(shape, params):
    if shape == "circle":
        return 1.0
    x0, y0, x1, y1 = bbox_of(unit_polygon(shape, params))
    return (y1 - y0) / (x1 - x0)


def placed_polygon(obj, scale=1.0):
    """Vertices in image px (times `scale`) with bbox width obj width and bbox centre obj center."""
    pts = unit_polygon(obj["shape"], obj["_params"])
    x0, y0, x1, y1 = bbox_of(pts)
    k = obj["width"] / (x1 - x0)
    cx, cy = obj["center"]
    mx, my = (x0 + x1) / 2, (y0 + y1) / 2
    return [(((x - mx) * k + cx) * scale, ((y - my) * k + cy) * scale) for x, y in pts]


def draw_object(draw, obj, scale):
    st = obj["_style"]
    fill = st["fill"]
    outline = st["outline"]
    width = max(1, round(st["outline_w"] * scale)) if outline else 1
    if obj["shape"] == "circle":
        cx, cy = obj["center"]
        r = obj["width"] / 2
        box = [(cx - r) * scale, (cy - r) * scale, (cx + r) * scale, (cy + r) * scale]
        draw.ellipse(box, fill=fill, outline=outline, width=width)
    else:
        draw.polygon(placed_polygon(obj, scale), fill=fill, outline=outline, width=width)


# ----------------------------------------------------------------------------------------------
# Scenes


def r1(x):
    return round(x, 1)


def sample_scene(rng):
    side = rng.randint(MIN_SIDE, MAX_SIDE)
    n = rng.randint(1, 6)
    gap = max(3.0, 0.01 * side)
    for attempt in range(400):
        if attempt and attempt % 80 == 0 and n > 1:
            n -= 1  # a very crowded small image: rarely needed
        objs = []
        boxes = []
        ok = True
        for _ in range(n):
            shape = rng.choice(SHAPES)
            color = rng.choice(COLORS)
            params = {
                "rotation": rng.uniform(-20, 20) if shape != "circle" and rng.random() < 0.6 else 0.0,
                "aspect": rng.uniform(0.80, 1.00),
                "inner": rng.uniform(0.38, 0.50),
            }
            hw = height_over_width(shape, params)
            lo = max(MIN_WIDTH_PX, 0.10 * side)
            hi = 0.40 * side
            w = rng.uniform(lo, hi)
            placed = None
            while placed is None:
                w = r1(w)
                h = w * hw
                for _ in range(60):
                    cx = r1(rng.uniform(w / 2 + 1, side - w / 2 - 1))
                    cy = r1(rng.uniform(h / 2 + 1, side - h / 2 - 1))
                    box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                    if box[0] < 1 or box[1] < 1 or box[2] > side - 1 or box[3] > side - 1:
                        continue
                    if all(box[2] + gap <= b[0] or b[2] + gap <= box[0] or box[3] + gap <= b[1] or b[3] + gap <= box[1]
                           for b in boxes):
                        placed = (cx, cy, box)
                        break
                if placed is None:
                    if w * 0.85 < max(MIN_WIDTH_PX, 0.08 * side):
                        break
                    w *= 0.85
            if placed is None:
                ok = False
                break
            cx, cy, box = placed
            boxes.append(box)
            style = {"fill": object_rgb(rng, color), "outline": None, "outline_w": 0}
            if w >= 14 and rng.random() < 0.30:  # an outline would eat a tiny star's fill
                kind = rng.choice(["black", "white", "darker"])
                if kind == "black":
                    style["outline"] = (0, 0, 0)
                elif kind == "white":
                    style["outline"] = (255, 255, 255)
                else:
                    f = 0.7 if color in ("yellow", "orange") else 0.55
                    style["outline"] = tuple(int(c * f) for c in style["fill"])
                style["outline_w"] = rng.randint(1, 1 if w < 30 else (2 if w < 60 else 3))
            objs.append({"shape": shape, "color": color, "center": [cx, cy], "width": w,
                         "_params": params, "_style": style, "_height": r1(h)})
        if ok:
            return {"size": side, "objects": objs}
    raise RuntimeError("could not place a scene")


def render_scene(rng, nrng, scene):
    side = scene["size"]
    bg, bg_kind = make_background(rng, nrng, side)
    aa = rng.random() < 0.6
    if aa:
        layer = Image.new("RGBA", (side * AA_SCALE, side * AA_SCALE), (0, 0, 0, 0))
        d = ImageDraw.Draw(layer)
        for o in scene["objects"]:
            draw_object(d, o, AA_SCALE)
        layer = layer.resize((side, side), Image.LANCZOS)
        img = Image.alpha_composite(bg.convert("RGBA"), layer).convert("RGB")
    else:
        img = bg
        d = ImageDraw.Draw(img)
        for o in scene["objects"]:
            draw_object(d, o, 1)
    return img, bg_kind, aa


def public_scene(scene):
    return {"size": scene["size"],
            "objects": [{"shape": o["shape"], "color": o["color"], "center": list(o["center"]), "width": o["width"]}
                        for o in scene["objects"]]}


# ----------------------------------------------------------------------------------------------
# Answers from a (public) scene: used both to make questions and by --check


def count_shape(scene, shape):
    return sum(o["shape"] == shape for o in scene["objects"])


def count_color(scene, color):
    return sum(o["color"] == color for o in scene["objects"])


def combo_objects(scene, color, shape):
    return [o for o in scene["objects"] if o["color"] == color and o["shape"] == shape]


def clear_of_midlines(scene, o):
    half = scene["size"] / 2
    m = MIDLINE_MARGIN * scene["size"]
    return abs(o["center"][0] - half) >= m and abs(o["center"][1] - half) >= m


def quadrant(scene, o):
    half = scene["size"] / 2
    return ("top" if o["center"][1] < half else "bottom") + " " + ("left" if o["center"][0] < half else "right")


# Question forms (the issue-6 grammar)
def q_color_of_shape(shape):
    return f"What color is the {shape}?"


def q_shape_of_color(color):
    return f"What shape is the {color} object?"


def q_count_shape(shape):
    return f"How many {PLURAL[shape]} are there?"


def q_count_color(color):
    return f"How many {color} objects are there?"


def q_exists(color, shape):
    return f"Is there a {color} {shape}?"


def q_position(color, shape):
    return f"Where is the {color} {shape}?"


def q_left_of(c1, s1, c2, s2):
    return f"Is the {c1} {s1} left of the {c2} {s2}?"


def q_more_shape(shape):
    return f"Which image has more {PLURAL[shape]}?"


def q_total_shape(shape):
    return f"How many {PLURAL[shape]} are there in all images?"


def in_image(k, question):
    return f"In image {k}, " + question[0].lower() + question[1:]


def make_single(rng, scene, qtype):
    """(question, answer) of type qtype about the scene, or None when the scene does not allow it."""
    objs = scene["objects"]
    if qtype == "color_of_shape":
        cands = [s for s in SHAPES if count_shape(scene, s) == 1]
        if not cands:
            return None
        s = rng.choice(cands)
        return q_color_of_shape(s), next(o["color"] for o in objs if o["shape"] == s)
    if qtype == "shape_of_color":
        cands = [c for c in COLORS if count_color(scene, c) == 1]
        if not cands:
            return None
        c = rng.choice(cands)
        return q_shape_of_color(c), next(o["shape"] for o in objs if o["color"] == c)
    if qtype in ("count_shape", "count_color"):
        values = SHAPES if qtype == "count_shape" else COLORS
        counter = count_shape if qtype == "count_shape" else count_color
        present = [v for v in values if counter(scene, v) > 0]
        absent = [v for v in values if counter(scene, v) == 0]
        v = rng.choice(present if (rng.random() < 0.75 or not absent) else absent)
        q = q_count_shape(v) if qtype == "count_shape" else q_count_color(v)
        return q, str(counter(scene, v))
    if qtype == "exists":
        present = sorted({(o["color"], o["shape"]) for o in objs})
        absent = [(c, s) for c in COLORS for s in SHAPES if (c, s) not in present]
        if rng.random() < 0.5:
            c, s = rng.choice(present)
            return q_exists(c, s), "yes"
        # near misses (colour or shape present) two times in three
        near = [(c, s) for c, s in absent if count_color(scene, c) or count_shape(scene, s)]
        c, s = rng.choice(near if near and rng.random() < 2 / 3 else absent)
        return q_exists(c, s), "no"
    unique = [o for o in objs if len(combo_objects(scene, o["color"], o["shape"])) == 1]
    if qtype == "position":
        cands = [o for o in unique if clear_of_midlines(scene, o)]
        if not cands:
            return None
        o = rng.choice(cands)
        return q_position(o["color"], o["shape"]), quadrant(scene, o)
    if qtype == "left_of":
        m = MIDLINE_MARGIN * scene["size"]
        pairs = [(a, b) for a in unique for b in unique
                 if a is not b and abs(a["center"][0] - b["center"][0]) >= m]
        if not pairs:
            return None
        a, b = rng.choice(pairs)
        return q_left_of(a["color"], a["shape"], b["color"], b["shape"]), "yes" if a["center"][0] < b["center"][0] else "no"
    raise ValueError(qtype)


def make_multi(rng, scenes, qtype):
    """more_shape / total_shape over `scenes` (the images shown so far)."""
    if qtype == "more_shape":
        cands = []
        for s in SHAPES:
            counts = [count_shape(sc, s) for sc in scenes]
            top = max(counts)
            if top > 0 and counts.count(top) == 1:
                cands.append((s, counts.index(top) + 1))
        if not cands:
            return None
        s, k = rng.choice(cands)
        return q_more_shape(s), f"image {k}"
    if qtype == "total_shape":
        totals = {s: sum(count_shape(sc, s) for sc in scenes) for s in SHAPES}
        ok = [s for s in SHAPES if totals[s] <= 9]
        if not ok:
            return None
        present = [s for s in ok if totals[s] > 0]
        absent = [s for s in ok if totals[s] == 0]
        s = rng.choice(present if (present and (rng.random() < 0.75 or not absent)) else absent)
        return q_total_shape(s), str(totals[s])
    raise ValueError(qtype)


# ----------------------------------------------------------------------------------------------
# Conversations


class Balancer:
    """Picks, among the types a situation allows, one of the least asked so far."""

    def __init__(self):
        self.counts = {}

    def order(self, rng, types):
        keyed = [(self.counts.get(t, 0), rng.random(), t) for t in types]
        return [t for _, _, t in sorted(keyed)]

    def add(self, t):
        self.counts[t] = self.counts.get(t, 0) + 1


def save_image(rng, img, out_dir, stem, bg_kind):
    # Per-pixel noise is incompressible in PNG (~100 KB an image): mostly JPEG for those, and a
    # little more PNG for the rest, so that about half of all images are PNG.
    if rng.random() < (0.12 if bg_kind == "noise" else 0.63):
        name = f"images/{stem}.png"
        img.save(os.path.join(out_dir, name), format="PNG", optimize=True)
    else:
        name = f"images/{stem}.jpg"
        img.save(os.path.join(out_dir, name), format="JPEG", quality=rng.randint(85, 95),
                 subsampling=rng.choice([0, 2]))
    return name


def new_image(rng, out_dir, stem, stats):
    scene = sample_scene(rng)
    nrng = np.random.default_rng(rng.getrandbits(64))
    img, bg_kind, aa = render_scene(rng, nrng, scene)
    name = save_image(rng, img, out_dir, stem, bg_kind)
    stats.setdefault("backgrounds", {}).setdefault(bg_kind, 0)
    stats["backgrounds"][bg_kind] += 1
    stats["aa"] = stats.get("aa", 0) + int(aa)
    return name, public_scene(scene)


def single_conversation(rng, cid, out_dir, bal, stats):
    name, scene = new_image(rng, out_dir, f"{cid}_1", stats)
    turns = []
    asked = set()
    for t in range(rng.randint(1, 3)):
        for qtype in bal.order(rng, SINGLE_TYPES):
            qa = None
            for _ in range(6):
                qa = make_single(rng, scene, qtype)
                if qa is None or qa[0] not in asked:
                    break
            if qa is not None and qa[0] not in asked:
                break
        else:
            break
        asked.add(qa[0])
        bal.add(qtype)
        text = ("<image>" if t == 0 else "") + qa[0]
        turns.append({"text": text, "answer": qa[1], "type": qtype, "about": [1]})
    return {"id": cid, "images": [name], "turns": turns, "scenes": [scene]}


def multi_conversation(rng, cid, out_dir, bal, stats):
    n_images = rng.randint(2, 4)
    n_turns = rng.randint(1, 3)
    # images per turn: the first turn >= 1, the rest any split
    per_turn = [1] + [0] * (n_turns - 1)
    for _ in range(n_images - 1):
        per_turn[rng.randrange(n_turns)] += 1
    images, scenes, turns, asked = [], [], [], set()
    for t, n_new in enumerate(per_turn):
        for _ in range(n_new):
            k = len(images) + 1
            name, scene = new_image(rng, out_dir, f"{cid}_{k}", stats)
            images.append(name)
            scenes.append(scene)
        shown = len(images)
        options = ["in_image_" + q for q in SINGLE_TYPES]
        if shown >= 2:
            options += MULTI_TYPES
        if n_new == 1:
            options += SINGLE_TYPES
        chosen = None
        for qtype in bal.order(rng, options):
            for _ in range(6):
                if qtype in MULTI_TYPES:
                    qa, about = make_multi(rng, scenes, qtype), list(range(1, shown + 1))
                elif qtype.startswith("in_image_"):
                    k = rng.randint(1, shown)
                    qa = make_single(rng, scenes[k - 1], qtype[len("in_image_"):])
                    qa, about = (None if qa is None else (in_image(k, qa[0]), qa[1])), [k]
                else:
                    qa, about = make_single(rng, scenes[-1], qtype), [shown]
                if qa is not None and qa[0] not in asked:
                    chosen = (qtype, qa, about)
                    break
            if chosen:
                break
        if chosen is None:
            raise RuntimeError(f"{cid}: no question for turn {t + 1}")
        qtype, (q, a), about = chosen
        asked.add(q)
        bal.add(qtype)
        turns.append({"text": "<image>" * n_new + q, "answer": a, "type": qtype, "about": about})
    return {"id": cid, "images": images, "turns": turns, "scenes": scenes}


def generate(args):
    out = args.out
    if os.path.isdir(os.path.join(out, "images")):
        shutil.rmtree(os.path.join(out, "images"))
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    rng = random.Random(args.seed)
    bal_single, bal_multi = Balancer(), Balancer()
    stats = {}
    lines = []
    for i in range(args.single + args.multi):
        cid = f"ind-{i + 1:06d}"
        if i < args.single:
            lines.append(single_conversation(rng, cid, out, bal_single, stats))
        else:
            lines.append(multi_conversation(rng, cid, out, bal_multi, stats))
    with open(os.path.join(out, "test.jsonl"), "w", encoding="utf-8") as f:
        for rec in lines:
            f.write(json.dumps(rec, separators=(", ", ": ")) + "\n")
    n_img = sum(len(r["images"]) for r in lines)
    n_png = sum(name.endswith(".png") for r in lines for name in r["images"])
    n_q = sum(len(r["turns"]) for r in lines)
    cmd = (f"~/.cache/trimkv/venv-oracle/bin/python tests/independent/make_shapes_pillow.py "
           f"--out {out} --seed {args.seed} --single {args.single} --multi {args.multi}")
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("# Independent shapes test set\n\n"
                "Made by `tests/independent/make_shapes_pillow.py` (Pillow; shares no code or constants with the "
                "C++ world generator) to check that the demo VLM generalises to pictures from another program.\n"
                f"{len(lines)} conversations ({args.single} single-image, {args.multi} multi-image), {n_q} questions, "
                f"{n_img} images ({n_png} PNG, {n_img - n_png} JPEG); `test.jsonl` is `trimkv eval --data` input.\n\n"
                f"Regenerate: `{cmd}`  \nSelf-check: add `--check` (verifies every answer against `scenes`).\n")
    print(json.dumps({"conversations": len(lines), "questions": n_q, "images": n_img, "png": n_png,
                      "jpeg": n_img - n_png, "backgrounds": stats["backgrounds"], "anti_aliased": stats["aa"],
                      "types": {**bal_single.counts, **{"multi:" + k: v for k, v in bal_multi.counts.items()}}},
                     indent=1))


# ----------------------------------------------------------------------------------------------
# --check: re-read the JSONL, recompute every answer from "scenes", open every image

C = "|".join(COLORS)
S = "|".join(SHAPES)
P = "|".join(PLURAL.values())
FORMS = [
    ("color_of_shape", re.compile(rf"What color is the ({S})\?")),
    ("shape_of_color", re.compile(rf"What shape is the ({C}) object\?")),
    ("count_shape", re.compile(rf"How many ({P}) are there\?")),
    ("count_color", re.compile(rf"How many ({C}) objects are there\?")),
    ("exists", re.compile(rf"Is there a ({C}) ({S})\?")),
    ("position", re.compile(rf"Where is the ({C}) ({S})\?")),
    ("left_of", re.compile(rf"Is the ({C}) ({S}) left of the ({C}) ({S})\?")),
    ("more_shape", re.compile(rf"Which image has more ({P})\?")),
    ("total_shape", re.compile(rf"How many ({P}) are there in all images\?")),
]


def unique_combo(scene, color, shape):
    objs = combo_objects(scene, color, shape)
    assert len(objs) == 1, f"'{color} {shape}' is not unique ({len(objs)})"
    return objs[0]


def answer_single(scene, qtype, g):
    if qtype == "color_of_shape":
        objs = [o for o in scene["objects"] if o["shape"] == g[0]]
        assert len(objs) == 1, "shape not unique"
        return objs[0]["color"]
    if qtype == "shape_of_color":
        objs = [o for o in scene["objects"] if o["color"] == g[0]]
        assert len(objs) == 1, "colour not unique"
        return objs[0]["shape"]
    if qtype == "count_shape":
        return str(count_shape(scene, SINGULAR[g[0]]))
    if qtype == "count_color":
        return str(count_color(scene, g[0]))
    if qtype == "exists":
        return "yes" if combo_objects(scene, g[0], g[1]) else "no"
    if qtype == "position":
        o = unique_combo(scene, g[0], g[1])
        assert clear_of_midlines(scene, o), "centre too close to a midline"
        return quadrant(scene, o)
    if qtype == "left_of":
        a, b = unique_combo(scene, g[0], g[1]), unique_combo(scene, g[2], g[3])
        assert a is not b
        assert abs(a["center"][0] - b["center"][0]) >= MIDLINE_MARGIN * scene["size"], "too close horizontally"
        return "yes" if a["center"][0] < b["center"][0] else "no"
    raise AssertionError(qtype)


def parse(question):
    for qtype, rx in FORMS:
        m = rx.fullmatch(question)
        if m:
            return qtype, m.groups()
    raise AssertionError(f"question not in the grammar: {question!r}")


def check_scene(scene):
    side = scene["size"]
    assert MIN_SIDE <= side <= MAX_SIDE
    assert 1 <= len(scene["objects"]) <= 6
    for o in scene["objects"]:
        assert o["shape"] in SHAPES and o["color"] in COLORS
        assert o["width"] >= MIN_WIDTH_PX and o["width"] <= 0.40 * side + 0.1
        assert o["center"][0] - o["width"] / 2 >= 0.9 and o["center"][0] + o["width"] / 2 <= side - 0.9


def check(out):
    path = os.path.join(out, "test.jsonl")
    n_lines = n_turns = 0
    by_type = {}
    seen_ids = set()
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            where = f"{path}:{line_no}"
            try:
                rec = json.loads(line)
                assert rec["id"] not in seen_ids, "duplicate id"
                seen_ids.add(rec["id"])
                images, scenes = rec["images"], rec["scenes"]
                assert len(images) == len(scenes) >= 1
                for name, scene in zip(images, scenes):
                    check_scene(scene)
                    with Image.open(os.path.join(out, name)) as im:
                        assert im.size == (scene["size"], scene["size"]), f"{name}: {im.size}"
                        assert im.format in ("PNG", "JPEG") and im.mode == "RGB"
                        im.load()
                shown = 0
                for ti, turn in enumerate(rec["turns"]):
                    text = turn["text"]
                    n_new = 0
                    while text.startswith("<image>"):
                        text = text[len("<image>"):]
                        n_new += 1
                    assert "<image>" not in text and "Image " not in text, "placeholders must come first"
                    assert ti > 0 or n_new >= 1, "the first turn shows no image"
                    shown += n_new
                    assert shown <= len(images), "more placeholders than images"
                    about = turn["about"]
                    assert about and all(1 <= k <= shown for k in about), f"about {about} with {shown} shown"
                    m = re.fullmatch(r"In image (\d+), (.)(.*)", text)
                    if m:
                        k = int(m.group(1))
                        assert m.group(2).islower()
                        qtype, g = parse(m.group(2).upper() + m.group(3))
                        assert qtype in SINGLE_TYPES and turn["type"] == "in_image_" + qtype
                        assert about == [k] and 1 <= k <= shown
                        expect = answer_single(scenes[k - 1], qtype, g)
                    else:
                        qtype, g = parse(text)
                        assert turn["type"] == qtype, f"type {turn['type']} vs {qtype}"
                        if qtype in SINGLE_TYPES:
                            if len(images) > 1:
                                assert n_new == 1 and about == [shown], "plain question not about a new single image"
                            else:
                                assert about == [1]
                            expect = answer_single(scenes[about[0] - 1], qtype, g)
                        else:
                            assert shown >= 2 and about == list(range(1, shown + 1))
                            shape = SINGULAR[g[0]]
                            counts = [count_shape(sc, shape) for sc in scenes[:shown]]
                            if qtype == "more_shape":
                                assert max(counts) > 0 and counts.count(max(counts)) == 1
                                expect = f"image {counts.index(max(counts)) + 1}"
                            else:
                                assert sum(counts) <= 9
                                expect = str(sum(counts))
                    assert turn["answer"] == expect, f"turn {ti + 1}: {turn['answer']!r} != {expect!r}"
                    by_type[turn["type"]] = by_type.get(turn["type"], 0) + 1
                    n_turns += 1
                assert shown == len(images), f"{len(images)} images but {shown} placeholders"
                n_lines += 1
            except (AssertionError, KeyError, ValueError, OSError) as e:
                print(f"{where}: {type(e).__name__}: {e}", file=sys.stderr)
                return 1
    print(json.dumps({"ok": True, "conversations": n_lines, "questions": n_turns,
                      "by_type": dict(sorted(by_type.items()))}, indent=1))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/independent-shapes")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--single", type=int, default=120)
    ap.add_argument("--multi", type=int, default=50)
    ap.add_argument("--check", action="store_true", help="verify an existing output folder instead of generating")
    args = ap.parse_args()
    if args.check:
        return check(args.out)
    generate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
