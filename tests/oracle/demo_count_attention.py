"""Where the demo model's objects hop looks when it counts (README, "Where counting goes wrong").

For every counting turn of a world file (count_*, in_image_count_*, total_shape), lays out the
conversation up to that turn with transformers (the demo model's own chat template, gold answers
before it), and reads layer 1's attention (the objects hop, query heads 0 and 1) from the counted
word: the share on the word itself (taught: 1 / (n + 1) for n matching objects), on the matching
objects' cells, on the other cells of the images asked about, and on other images' tokens.
Grouped by n and by whether `trimkv eval --records` found the answer right. Then, by n, how
precisely the share tells n: its spread, how often the count nearest to it (n' with 1 / (n' + 1)
closest) is n, against how often the model answered n, and the model's probability of the right
digit where it chooses it (the step after the answer's leading space). With the run's training
checkpoint (DIR/train/checkpoint.safetensors, which holds the vision stage's probe), also: for counts
of two or more, each matching object's share relative to an even split against the probe's margin
for the counted colour or shape at its cell (its logit less the best other class's, "no object"
included): whether the objects the hop under-weights are those the tower sees weakly. Last, from the
word's query (head 0) the raw logits on the word and on the matching cells, and the same logits had
every key's residual-stream RMS been its kind's median (a key scales with 1 / RMS through the
layer's RMSNorm): whether the spread comes from the norms of the states or their directions. And
the wrong answers by how far they miss (answered less expected).

Also: the separation of neighbouring counts by the cells' summed weight relative to the word, to the
first token, or to nothing; and how much of a matching cell's departure the object's size, cell, shape
and colour explain. `--mask-layer0-visual HEADS` (e.g. 0,1,2,3) reads everything with layer 0's
visual tokens unable to attend to other visual tokens in those query heads: whether their mixing
there makes the cells uneven (the "argmax" column is then the answers of the masked model).

Usage (oracle environment): demo_count_attention.py [--mask-layer0-visual HEADS] MODEL_DIR WORLD.jsonl RECORDS.jsonl [OUT.json [CHECKPOINT]]
"""
import collections
import json
import statistics
import sys
from pathlib import Path

import torch
from transformers import AutoProcessor, Idefics3ForConditionalGeneration
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from demo_fixtures import messages

SHAPES = ["circle", "square", "triangle", "star"]
COLORS = ["red", "green", "blue", "yellow", "purple", "orange"]
SIDE = 6  # visual tokens per image side (36 per image)
# One count's raw layer-1 logits from the counted word's query (head 0): n matching objects; logits
# on the word, then on each matching cell; their states' RMS in the same order; the logit on the
# first token; per matching cell, (2r / side, (row, col), (shape, colour)) of its object.
RawCount = collections.namedtuple("RawCount", "n logits rms first objects")


def mask_layer0_visual(heads, visual):
    """Layer 0's eager attention with visual[k] queries kept from other visual keys in `heads`
    (visual: a bool tensor over the sequence, set per forward pass through its list)."""
    import transformers.models.llama.modeling_llama as llama
    eager = llama.eager_attention_forward

    def masked(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        if module.layer_idx == 0:
            v = visual[0]
            block = v[:, None] & v[None, :] & ~torch.eye(len(v), dtype=torch.bool)
            extra = torch.zeros(query.shape[1], len(v), len(v))
            for h in heads:
                extra[h][block] = float("-inf")
            attention_mask = (attention_mask if attention_mask is not None else 0) + extra[None]
        return eager(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    llama.eager_attention_forward = masked


def main(model_dir, world_jsonl, records, out_path=None, checkpoint=None, mask_heads=None):
    world = Path(world_jsonl).parent
    visual = [None]
    if mask_heads is not None:
        mask_layer0_visual(mask_heads, visual)
    probe = None
    if checkpoint:
        from safetensors.torch import load_file
        state = load_file(checkpoint)
        probe = (state["param.probe.w"], state["param.probe.b"])  # [1 + colours + 1 + shapes + 1 + sizes, hidden]
    seen = []  # (relative share, probe margin, attribute) per matching object of counts >= 2
    proc = AutoProcessor.from_pretrained(model_dir, use_fast=False)
    model = Idefics3ForConditionalGeneration.from_pretrained(model_dir, attn_implementation="eager",
                                                             dtype=torch.float32).eval()
    # The connector's output (the visual tokens) of the forward pass, kept for the probe.
    connector_out = []
    model.model.connector.register_forward_hook(lambda module, args, output: connector_out.append(output))
    # Layer 1's residual stream (the RMSNorm's input) and the attention's normed input and rotary
    # tables, for the raw logits.
    layer = model.model.text_model.layers[1]
    captured = {}
    layer.input_layernorm.register_forward_pre_hook(lambda module, args: captured.__setitem__("h", args[0][0]))

    def keep_attention_input(module, args, kwargs):
        captured["x"] = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])[0]
        captured["rope"] = kwargs["position_embeddings"]
    layer.self_attn.register_forward_pre_hook(keep_attention_input, with_kwargs=True)
    # A Qwen3 decoder norms each head's queries and keys before the rotation; a Llama one does not.
    qk_normed = hasattr(layer.self_attn, "q_norm")
    q_norm = layer.self_attn.q_norm if qk_normed else torch.nn.Identity()
    k_norm = layer.self_attn.k_norm if qk_normed else torch.nn.Identity()
    raw = []  # a RawCount per count
    tok = proc.tokenizer
    image_id = tok.convert_tokens_to_ids("<image>")
    digits = {d: tok.encode(str(d), add_special_tokens=False) for d in range(10)}

    def word_ids(names, plural):
        out = {}
        for i, name in enumerate(names):
            for w in ([name, name + "s"] if plural else [name]):
                t = tok.encode(" " + w, add_special_tokens=False)
                if len(t) == 1:
                    out[t[0]] = i
        return out

    shape_ids, color_ids = word_ids(SHAPES, True), word_ids(COLORS, False)
    correct = {(r["id"], r["turn"]): r for r in map(json.loads, open(records))}
    rows = []
    for line in open(world_jsonl):
        conv = json.loads(line)
        for k, turn in enumerate(conv["turns"]):
            kind = turn["type"]
            if "count" not in kind and kind != "total_shape":
                continue
            msgs, images = messages(conv, world, k + 1)
            text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            # With the answer's leading space: the last position is where the digit is chosen (the
            # rows before it are the same without it).
            inputs = proc(text=[text + " "], images=[images], return_tensors="pt")
            visual[0] = inputs["input_ids"][0] == image_id
            with torch.no_grad():
                out = model(**inputs, output_attentions=True)
            att = out.attentions[1][0]  # [heads, q, k]
            digit = digits.get(int(turn["answer"]), [])
            p_right = float(torch.softmax(out.logits[0, -1], -1)[digit[0]]) if len(digit) == 1 else None
            argmax_right = len(digit) == 1 and int(out.logits[0, -1].argmax()) == digit[0]
            ids = inputs["input_ids"][0].tolist()
            image_pos = [p for p, x in enumerate(ids) if x == image_id]
            # The counted word: the question's last colour (count_color) or shape word.
            table, attr = (color_ids, "color") if "count_color" in kind else (shape_ids, "shape")
            anchor = max((p for p, x in enumerate(ids) if x in table and p > image_pos[-1]), default=None)
            if anchor is None:
                continue
            names = COLORS if attr == "color" else SHAPES
            about = [a - 1 for a in turn["about"]]
            cells, n, margins, objects = set(), 0, [], {}
            if probe is not None:
                logits = connector_out[-1] @ probe[0].T + probe[1]  # [images, cells, classes]
            connector_out.clear()
            for a in about:
                scene = conv["scenes"][a]
                cell = scene["size"] / SIDE
                for o in scene["objects"]:
                    if names.index(o[attr]) != table[ids[anchor]]:
                        continue
                    n += 1
                    col = min(SIDE - 1, max(0, int((o["center"][0] + 0.5) // cell)))
                    row = min(SIDE - 1, max(0, int((o["center"][1] + 0.5) // cell)))
                    position = image_pos[a * SIDE * SIDE + row * SIDE + col]
                    cells.add(position)
                    objects[position] = (2 * o["radius"] / scene["size"], (row, col), (o["shape"], o["color"]))
                    if probe is not None:
                        lo = logits[a, row * SIDE + col]
                        lo = lo[:1 + len(COLORS)] if attr == "color" else lo[1 + len(COLORS):2 + len(COLORS) + len(SHAPES)]
                        t = 1 + names.index(o[attr])
                        margins.append((position, float(lo[t] - torch.cat([lo[:t], lo[t + 1:]]).max())))
            if cells:
                attn, x = layer.self_attn, captured["x"]
                cos, sin = captured["rope"]
                split = lambda t: t.view(x.shape[0], -1, attn.head_dim).transpose(0, 1).unsqueeze(0)
                with torch.no_grad():
                    q, kk = apply_rotary_pos_emb(q_norm(split(attn.q_proj(x))), k_norm(split(attn.k_proj(x))), cos, sin)
                pos = [anchor] + sorted(cells)
                raw.append(RawCount(n, [float(q[0, 0, anchor] @ kk[0, 0, p]) / attn.head_dim ** 0.5 for p in pos],
                                    [float(captured["h"][p].pow(2).mean().sqrt()) for p in pos],
                                    float(q[0, 0, anchor] @ kk[0, 0, 0]) / attn.head_dim ** 0.5,
                                    [objects[p] for p in pos[1:]]))
            asked = {image_pos[a * SIDE * SIDE + j] for a in about for j in range(SIDE * SIDE)}
            record = correct.get((conv["id"], k), {})
            if n >= 2 and len(cells) == n and margins:
                a = att[0, anchor]
                total = float(sum(a[p] for p in cells))
                seen += [(float(a[p]) * n / total, m, attr) for p, m in margins]
            for head in (0, 1):
                a = att[head, anchor]
                rows.append({"id": conv["id"], "turn": k, "type": kind, "head": head, "n": n,
                             "correct": record.get("correct"), "p_right": p_right, "argmax_right": argmax_right,
                             "answered": int(record["generated"]) if record.get("generated", "").strip().isdigit() else None,
                             "self": float(a[anchor]), "match": float(sum(a[p] for p in cells)),
                             "other_cells": float(sum(a[p] for p in asked - cells)),
                             "other_images": float(sum(a[p] for p in image_pos if p not in asked))})
    if out_path:
        Path(out_path).write_text(json.dumps(rows))
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["n"], r["correct"])].append(r)
    print("n  right  turns  self   match  other cells  other images  (means over heads 0 and 1; taught self 1/(n+1))")
    for key in sorted(groups, key=str):
        g = groups[key]
        mean = lambda f: sum(r[f] for r in g) / len(g)
        print(f"{key[0]}  {str(key[1]):5}  {len(g) // 2:5}  {mean('self'):.3f}  {mean('match'):.3f}  "
              f"{mean('other_cells'):.3f}        {mean('other_images'):.3f}")
    print("n  turns  self share: median  10-90%      right: model  nearest 1/(n'+1)  mean p(right digit)  argmax")
    by_n = collections.defaultdict(list)
    for r in rows:
        if r["head"] == 0 and r["n"] > 0 and r["correct"] is not None:
            by_n[min(r["n"], 4)].append(r)
    for n in sorted(by_n):
        g = by_n[n]
        share = sorted(r["self"] for r in g)
        nearest = sum(min(range(1, 10), key=lambda k: abs(1 / (k + 1) - r["self"])) == r["n"] for r in g)
        ps = [r["p_right"] for r in g if r["p_right"] is not None]
        print(f"{n}{'+' if n == 4 else ' '} {len(g):6}  {share[len(share) // 2]:.2f}  "
              f"{share[len(share) // 10]:.2f}-{share[(9 * len(share)) // 10]:.2f}   "
              f"{sum(bool(r['correct']) for r in g):5} {nearest:8}       {sum(ps) / max(1, len(ps)):.2f}"
              f"                {sum(r['argmax_right'] for r in g):5}")
    if seen:
        print("counts of two or more: a matching object's share relative to an even split, by the vision probe's margin at its cell")
        for attr in ("color", "shape"):
            g = [(x, m) for x, m, a in seen if a == attr]
            if len(g) < 2:
                continue
            xs, ms = torch.tensor([x for x, _ in g]), torch.tensor([m for _, m in g])
            corr = float(torch.corrcoef(torch.stack([xs, ms]))[0, 1])
            buckets = [(-1e9, 0), (0, 3), (3, 6), (6, 1e9)]
            text = "; ".join(f"margin {'<' + str(hi) if lo < -1e8 else ('>=' + str(lo) if hi > 1e8 else f'{lo}-{hi}')}: "
                             f"{float(xs[(ms >= lo) & (ms < hi)].mean()):.2f} of {int(((ms >= lo) & (ms < hi)).sum())}"
                             for lo, hi in buckets if ((ms >= lo) & (ms < hi)).any())
            print(f"  {attr}: {len(g)} objects, correlation {corr:.2f}; {text}")
    if raw:
        word_rms = statistics.median(r.rms[0] for r in raw)
        cell_rms = statistics.median(v for r in raw for v in r.rms[1:])
        print(f"raw logits of the word's query (head 0); median RMS of the states: word {word_rms:.2f}, matching cells {cell_rms:.2f}")
        # With per-head q/k norms a key no longer scales with its state's RMS: no second reading.
        readings = [("as they are", False)] + ([] if qk_normed else [("every RMS at its median", True)])
        for label, even in readings:
            offset, within = collections.defaultdict(list), []
            for n, logits, rms in ((r.n, r.logits, r.rms) for r in raw):
                if even:
                    logits = [logits[0] * rms[0] / word_rms] + [v * r / cell_rms for v, r in zip(logits[1:], rms[1:])]
                cells_mean = sum(logits[1:]) / len(logits[1:])
                offset[min(n, 3)].append(logits[0] - cells_mean)
                if len(logits) > 2:
                    within += [v - cells_mean for v in logits[1:]]
            print(f"  {label}: word less the cells' mean, sd " +
                  ", ".join(f"n={n}{'+' if n == 3 else ''} {statistics.pstdev(v):.2f}" for n, v in sorted(offset.items()) if len(v) > 1) +
                  (f"; a cell less its count's mean (n >= 2), sd {statistics.pstdev(within):.2f} of {len(within)}" if len(within) > 1 else ""))
        report_references(raw)
        report_cell_sources(raw)
    misses = collections.Counter()
    for r in rows:
        if r["head"] == 0 and r["correct"] is False and r["answered"] is not None:
            misses[(min(r["n"], 4), r["answered"] - r["n"])] += 1
    if misses:
        print("wrong counts by answered less expected: " +
              "; ".join(f"n={n}{'+' if n == 4 else ''}: " + ", ".join(f"{d:+d} x{misses[(n, d)]}" for m, d in sorted(misses) if m == n)
                        for n in sorted({n for n, _ in misses})))
    for in_image in (True, False):
        g = [r for r in rows if r["type"].startswith("in_image") == in_image]
        for right in (True, False):
            h = [r for r in g if r["correct"] == right]
            if h:
                print(("in-image" if in_image else "other   "), "right" if right else "wrong",
                      f"other-image attention {sum(r['other_images'] for r in h) / len(h):.3f}")


def report_references(raw):
    """How well neighbouring counts are told apart by the log of the cells' summed attention weight
    relative to a reference: the word itself (the recipe's), the first token (whose key is the same
    in every sequence), or none (the raw logits): d' = gap of the means / pooled standard deviation."""
    print("  neighbouring counts told apart by logsumexp(cells' logits) less a reference (d'; an even spread "
          "puts the gaps at ln 2 = 0.69 and ln 1.5 = 0.41)")
    for label, ref in (("the word", lambda logits, bos: logits[0]), ("the first token", lambda logits, bos: bos),
                       ("none", lambda logits, bos: 0.0)):
        by_n = collections.defaultdict(list)
        for r in raw:
            by_n[min(r.n, 3)].append(float(torch.tensor(r.logits[1:]).logsumexp(0)) - ref(r.logits, r.first))
        parts = []
        for a, b in ((1, 2), (2, 3)):
            if len(by_n[a]) > 1 and len(by_n[b]) > 1:
                gap = statistics.mean(by_n[b]) - statistics.mean(by_n[a])
                sd = ((statistics.pvariance(by_n[a]) + statistics.pvariance(by_n[b])) / 2) ** 0.5
                parts.append(f"{a} v {b}: d' {gap / sd:.2f} (gap {gap:.2f}, sd {sd:.2f})")
        print(f"    {label:15}: " + "; ".join(parts))


def report_cell_sources(raw):
    """Whether what the scene says of a matching object explains its cell's departure from its count's
    mean logit: the standard deviation left after subtracting the mean per group, beside the same for
    random groups as many (what grouping alone removes)."""
    devs = []  # (departure, (relative size, cell, (shape, colour)))
    for r in raw:
        if r.n >= 2 and len(r.objects) == r.n:
            mean = sum(r.logits[1:]) / r.n
            devs += [(v - mean, o) for v, o in zip(r.logits[1:], r.objects)]
    if len(devs) < 10:
        return
    def left(keys):
        groups = collections.defaultdict(list)
        for (d, _), k in zip(devs, keys):
            groups[k].append(d)
        means = {k: statistics.mean(v) for k, v in groups.items()}
        return statistics.pstdev([d - means[k] for (d, _), k in zip(devs, keys)]), len(groups)
    generator = torch.Generator().manual_seed(0)
    print(f"  a matching cell less its count's mean logit (n >= 2): sd {statistics.pstdev(d for d, _ in devs):.2f} "
          f"of {len(devs)}; left after each grouping (random groups as many in brackets)")
    size = lambda o: min(0.4, round(o[0], 1))
    for label, key in (("object size (2r / side, 0.1 steps)", size), ("cell", lambda o: o[1]),
                       ("shape x colour", lambda o: o[2])):
        sd, groups = left([key(o) for _, o in devs])
        random_sd, _ = left(torch.randint(groups, (len(devs),), generator=generator).tolist())
        print(f"    {label:36}: {sd:.2f} ({random_sd:.2f}), {groups} groups")
    sizes = collections.defaultdict(list)
    for d, o in devs:
        sizes[size(o)].append(d)
    print("    mean by object size: " + ", ".join(f"{s:.1f}: {statistics.mean(v):+.2f} ({len(v)})" for s, v in sorted(sizes.items())))
    # Counts of two: how far apart the two cells' logits are when the objects are alike (same shape
    # and colour, sizes within 5% of the side) and when not.
    pairs = collections.defaultdict(list)
    for r in raw:
        if r.n == 2 and len(r.objects) == 2:
            a, b = r.objects
            alike = a[2] == b[2] and abs(a[0] - b[0]) <= 0.05
            pairs[alike].append(abs(r.logits[1] - r.logits[2]))
    print("    counts of two, |difference| of the two cells' logits: " + "; ".join(
        f"{'alike' if k else 'unlike'} objects median {statistics.median(v):.2f} of {len(v)}" for k, v in sorted(pairs.items()) if v))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    args, heads = sys.argv[1:], None
    if args[:1] == ["--mask-layer0-visual"]:
        heads, args = [int(h) for h in args[1].split(",")], args[2:]
    main(*args, mask_heads=heads)
