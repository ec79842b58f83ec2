"""Retention-gate fixtures and the oracle for the gate-training loss (METHOD.md §2-§3).

Writes under tests/data/gates/:
  - llama_gqa_dbtrimkv.safetensors / llama_gqa_trimkv.safetensors: gates in our format (reference
    tensor names, hyper-parameters in __metadata__), for tests/data/models/llama_gqa;
  - trimkv_weights.pth: the DBTrimKV gates as torch.save'd state dict, keys under the
    "model.language_model." prefix (as a VLM state dict has them), tied tensors shared;
  - expected.safetensors / expected.json: for one sequence through llama_gqa with each gate
    file: log β per layer, capacity S [L, H, n], L_cap (per-head and global) for several
    budgets, NLL, KL(teacher || student), student logits at the label positions.

The loss is written directly from METHOD.md's formulas in plain torch (a small Llama forward of
our own, checked first against transformers' logits), so the C++ side is compared with an
independent implementation. Deterministic: fixed seeds, float32.
Run through tests/oracle/make_fixtures.py (after the model fixtures).
"""
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

MODEL = "llama_gqa"
GATE_HIDDEN = 32
INIT_STD = 0.3    # larger than the method's 0.02 so that β varies and every term is exercised
BIAS_INIT = 2.0   # β = σ(2) ≈ 0.88: capacities below the sequence length, L_cap non-zero
N_TOKENS = 24
BUDGETS = [2.0, 5.0, 100.0]


# ----------------------------------------------------------------------------------------------
# A small Llama forward with optional retention gates (dense, causal).

def load_model(model_dir: Path):
    cfg = json.loads((model_dir / "config.json").read_text())
    w = load_file(str(model_dir / "model.safetensors"))
    return cfg, w


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(cfg, n):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)
    f = torch.arange(n).float()[:, None] * inv[None]
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rot(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat([-x[..., h:], x[..., :h]], -1) * sin[:, None]


def gate_log_beta(gates, kind, il, x):
    g = gates[il]
    a = F.silu(x @ g["linear1.weight"].T + g["linear1.bias"])
    if kind == "trimkv":
        f = a @ g["linear2.weight"].T + g["bias"]
    else:
        a = F.silu(a @ g["linear2.weight"].T + g["linear2.bias"])
        f = a @ g["linear3.weight"].T + g["bias"]
    return F.logsigmoid(f)  # [n, H]


def forward(cfg, w, ids, gates=None, kind=None):
    """Returns (logits [n, V], list of log β [n, H] per layer)."""
    n = len(ids)
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // nh
    eps = cfg["rms_norm_eps"]
    cos, sin = rope(cfg, n)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    idx = torch.arange(n)
    dist = (idx[:, None] - idx[None, :]).float()           # t - i
    causal = idx[None, :] <= idx[:, None]
    lbs = []
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
        q, k = rot(q, cos, sin), rot(k, cos, sin)
        grp = nh // nkv
        kh = k.permute(1, 0, 2).repeat_interleave(grp, 0)
        vh = v.permute(1, 0, 2).repeat_interleave(grp, 0)
        logits = q.permute(1, 0, 2) @ kh.transpose(1, 2) / math.sqrt(hd)   # [nh, n, n]
        if gates is not None:
            lb = gate_log_beta(gates, kind, il, h)                          # [n, nkv]
            lbs.append(lb)
            bias = dist[None] * lb.T[:, None, :]                            # [nkv, n, n]
            logits = logits + bias.repeat_interleave(grp, 0)
        logits = logits.masked_fill(~causal[None], float("-inf"))
        a = (logits.softmax(-1) @ vh).permute(1, 0, 2).reshape(n, nh * hd)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + (F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T, lbs


# ----------------------------------------------------------------------------------------------
# METHOD.md §3, written out term by term.

def capacity(lbs):
    """S[l, h, t] = sum_{i <= t} beta_{l,h,i}^(t - i)."""
    L, n, H = len(lbs), lbs[0].shape[0], lbs[0].shape[1]
    S = torch.zeros(L, H, n, dtype=torch.float64)
    for l in range(L):
        beta = lbs[l].double().exp()
        for h in range(H):
            for t in range(n):
                S[l, h, t] = sum(beta[i, h] ** (t - i) for i in range(t + 1))
    return S


def cap_loss_per_head(S, M):
    L, H, n = S.shape
    terms = []
    for l in range(L):
        for h in range(H):
            for t in range(n):
                r = max(0.0, (S[l, h, t].item() - M) / max(t - M, 1.0))
                if r > 0:
                    terms.append(r)
    return sum(terms) / len(terms) if terms else 0.0


def cap_loss_global(S, M):
    L, H, n = S.shape
    Mg = M * L * H
    terms = []
    for t in range(n):
        sg = S[:, :, t].sum().item()
        r = max(0.0, (sg - Mg) / max(t * L * H - Mg, 1.0))
        if r > 0:
            terms.append(r)
    return sum(terms) / len(terms) if terms else 0.0


def quality(student, teacher, targets, mask):
    ls = student[mask].double().log_softmax(-1)
    lt = teacher[mask].double().log_softmax(-1)
    nll = -ls.gather(1, targets[mask][:, None]).mean().item()
    kl = (lt.exp() * (lt - ls)).sum(-1).mean().item()
    return nll, kl


# ----------------------------------------------------------------------------------------------

def make_gates(kind, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    d, H, L = cfg["hidden_size"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hid = GATE_HIDDEN

    def normal(*shape):
        return torch.randn(*shape, generator=g) * INIT_STD

    layers = []
    shared = {}
    for _ in range(L):
        t = {"linear1.weight": normal(hid, d), "linear1.bias": normal(hid) * 0.1}
        if kind == "trimkv":
            t["linear2.weight"] = normal(H, hid)
            t["bias"] = torch.full((H,), BIAS_INIT) + normal(H)
        else:
            t["linear2.weight"] = normal(hid, hid)
            t["linear2.bias"] = normal(hid) * 0.1
            if not shared:
                shared["linear3.weight"] = normal(H, hid)
                shared["bias"] = torch.full((H,), BIAS_INIT) + normal(H)
            t.update(shared)  # the same tensor objects in every layer: tied
        layers.append(t)
    return layers


def state_dict(layers, prefix):
    return {f"{prefix}layers.{l}.self_attn.retention_gate.{k}": v
            for l, t in enumerate(layers) for k, v in t.items()}


def main(data_dir: Path):
    model_dir = data_dir / "models" / MODEL
    out = data_dir / "gates"
    out.mkdir(parents=True, exist_ok=True)
    cfg, w = load_model(model_dir)

    # Our forward must reproduce transformers' logits (the model fixture's oracle).
    exp = json.loads((model_dir / "expected.json").read_text())
    ref = load_file(str(model_dir / "expected.safetensors"))
    with torch.no_grad():
        mine, _ = forward(cfg, w, exp["prompts"][1])
    err = (mine - ref["logits.1"]).abs().max().item()
    assert err < 1e-4, f"our Llama forward differs from transformers by {err}"

    g = torch.Generator().manual_seed(5150)
    ids = torch.randint(3, cfg["vocab_size"], (N_TOKENS,), generator=g).tolist()
    n_label = 10
    targets = torch.tensor(ids[1:] + [0])
    mask = torch.zeros(N_TOKENS, dtype=torch.bool)
    mask[N_TOKENS - 1 - n_label:N_TOKENS - 1] = True  # positions whose next token is a label
    expected = {"model": MODEL, "ids": ids, "label_positions": mask.nonzero().view(-1).tolist(),
                "budgets": BUDGETS, "gate_hidden": GATE_HIDDEN, "cases": {}}
    tensors = {}
    with torch.no_grad():
        teacher, _ = forward(cfg, w, ids)
        for kind, seed in (("dbtrimkv", 71), ("trimkv", 72)):
            layers = make_gates(kind, cfg, seed)
            meta = {"format": "trimkv-gates", "format_version": "1", "kind": kind,
                    "tied": "true" if kind == "dbtrimkv" else "false",
                    "n_layer": str(cfg["num_hidden_layers"]), "n_kv_head": str(cfg["num_key_value_heads"]),
                    "hidden_size": str(cfg["hidden_size"]), "gate_hidden": str(GATE_HIDDEN),
                    "bias_init": str(BIAS_INIT), "init_std": str(INIT_STD), "train_budget": "0"}
            sd = state_dict(layers, "model.")
            save_file({k: v.contiguous().clone() for k, v in sd.items()},
                      str(out / f"{MODEL}_{kind}.safetensors"), metadata=meta)
            if kind == "dbtrimkv":
                torch.save(state_dict(layers, "model.language_model."), str(out / "trimkv_weights.pth"))
            student, lbs = forward(cfg, w, ids, layers, kind)
            S = capacity(lbs)
            nll, kl = quality(student, teacher, targets, mask)
            case = {"nll": nll, "kl": kl, "cap_per_head": {}, "cap_global": {}, "total": {}}
            for M in BUDGETS:
                ph, gl = cap_loss_per_head(S, M), cap_loss_global(S, M)
                case["cap_per_head"][str(M)] = ph
                case["cap_global"][str(M)] = gl
                cap = gl if kind == "dbtrimkv" else ph
                case["total"][str(M)] = 0.5 * (nll + kl) + 1.0 * cap
            expected["cases"][kind] = case
            tensors[f"{kind}.capacity"] = S.float().contiguous()
            tensors[f"{kind}.student_logits"] = student[mask].contiguous()
            for l, lb in enumerate(lbs):
                tensors[f"{kind}.log_beta.{l}"] = lb.contiguous()
    save_file(tensors, str(out / "expected.safetensors"))
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    print(f"  gates: {MODEL} forward matches transformers (max |diff| {err:.2e}); "
          f"cases {list(expected['cases'])}")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
