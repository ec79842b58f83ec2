"""Retention-gate fixtures written by the TrimKV authors' own code (issue 21, "self-made oracles").

tests/oracle/gate_fixtures.py writes trimkv_weights.pth from a dict laid out by us. This script
uses the authors' package instead (PyPI trimkv 0.1.5): their TrimKVLlamaForCausalLM with
'rg10' gates (RetentionGate10: d -> h -> h -> H_kv, linear3 and bias tied across layers by their
_tie_retention_gate_layers = our DBTrimKV) on tests/data/models/llama_gqa, and their
TrimKVQwen3ForCausalLM with 'rg' gates (RetentionGate: d -> h -> H_kv = our TrimKV) on
tests/data/models/qwen3. For each: their class built from the checkpoint's config, the
checkpoint's weights loaded with load_state_dict, the gates given seeded values in place, the
file their from_pretrained expects saved with torch.save, that file loaded back through their
from_pretrained, and what their model computes with it recorded.

Run with the authors' environment (packaging/setup.sh --authors; CPU only, no GPU needed):
    ~/.cache/trimkv/venv-authors/bin/python tests/oracle/authors_gates_fixtures.py
TRIMKV_FIXTURE_DATA=DIR writes under DIR instead of tests/data (as make_fixtures.py). About a
minute (the first run compiles their flex attention for the CPU with torch.compile: needs gcc).
Deterministic: running it again rewrites the same bytes.

Writes under tests/data/gates/authors/:
  - <case>/trimkv_weights.pth: torch.save of exactly the state-dict entries their loader expects
    (the keys of model.state_dict() containing any of config.trainable_params.split("|")), as
    their model holds them: rg10's shared linear3 / bias listed under every layer, one storage;
  - <case>/config.json: their TrimKV config (retention_gate, trainable_params, ..., base_model
    relative to tests/data), i.e. a folder their from_pretrained(<case>) loads (from tests/data);
  - expected.json: per case the token ids (the model fixture's prompt 1) and what was checked;
  - expected.safetensors, per case:
    <case>.log_beta.<l> [n, H_kv]: their gate module's output (logsigmoid of the gate logits =
      our log_beta) on the post-input_layernorm hidden state their decoder layer feeds its
      attention, in their model's eval-mode forward without a cache (plain causal attention: the
      gates only score, as at prefill);
    <case>.gated.log_beta.<l>, <case>.gated.logits [n, V]: the same through their training form
      (train mode, attn_impl "rg_attn_flex": their flex attention adding (t - i)·log β_i to the
      logits), where layer l's gate input depends on the gated attention of the layers before.

Notes on running their code on CPU:
  - trimkv.attn.db_flash_attn (the dynamic-budget cache's CUDA attention) imports flash_attn at
    import time, which the wheel does not require and which is CUDA only: where flash_attn is
    missing, a stand-in module with the two imported names (raising if called) is registered
    before the import. Nothing here calls them. trimkv.triton needs the triton package (the PyPI
    torch wheel brings it) to import; its kernels are compiled only when called (CUDA), never here.
  - Eval-mode attention is their own plain eager attention ("attn_eager", ATTENTION below),
    given a ready 4D additive causal mask (transformers builds none for an implementation it
    does not know); transformers' "sdpa" fails inside their attention wrapper ("Explicit
    attn_mask should not be set when is_causal=True") and 4.57.1 registers no "eager" function
    for it (KeyError).
  - Train mode reads config.rg_dropout, which their Llama / Qwen3 configs do not define; it is
    set to 0.0, the only value their flex attention accepts.
"""
import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _stand_in_for_flash_attn():
    """See the module docstring: only where the real flash_attn cannot be imported."""
    try:
        import flash_attn.flash_attn_interface  # noqa: F401
        return
    except ImportError:
        pass
    import importlib.machinery
    import types

    def unavailable(*args, **kwargs):
        raise RuntimeError("flash_attn is not installed (CUDA only); tests/oracle/authors_gates_fixtures.py "
                           "stands in for it at import time and never calls it")

    pkg, iface = types.ModuleType("flash_attn"), types.ModuleType("flash_attn.flash_attn_interface")
    iface.flash_attn_varlen_func = iface.flash_attn_with_kvcache = unavailable
    pkg.flash_attn_interface = iface
    # With a spec but no installed distribution, transformers' availability checks (find_spec,
    # then the package version) still report flash_attn as absent.
    pkg.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None, is_package=True)
    iface.__spec__ = importlib.machinery.ModuleSpec("flash_attn.flash_attn_interface", None)
    sys.modules.update({"flash_attn": pkg, "flash_attn.flash_attn_interface": iface})


_stand_in_for_flash_attn()
import transformers  # noqa: E402
from trimkv.models.llama import TrimKVLlamaConfig, TrimKVLlamaForCausalLM  # noqa: E402
from trimkv.models.qwen3 import TrimKVQwen3Config, TrimKVQwen3ForCausalLM  # noqa: E402

GATE_HIDDEN = 32          # retention_gate_intermediate_size (the release: 512)
TRAINABLE = "retention_gate"
WEIGHT_STD = 0.3          # the gates get seeded non-trivial values (see fill_gates)
BIAS_MEAN = 2.0           # β = σ(≈2 + noise): log β here within about [-2.2, -1e-4]
# Their own plain (ungated) eager attention, trimkv.attn.TRIMKV_ATTENTION_IMPLEMENTATIONS["attn_eager"].
# transformers' "sdpa" fails inside their attention wrapper on CPU (it passes is_causal=True with an
# explicit mask: "Explicit attn_mask should not be set when is_causal=True"), and transformers
# 4.57.1 registers no "eager" function for their wrapper to find (KeyError).
ATTENTION = "attn_eager"
CASES = [
    # name, model folder, authors' classes, retention_gate, seed
    ("llama_gqa_rg10", "llama_gqa", TrimKVLlamaConfig, TrimKVLlamaForCausalLM, "rg10", 2101),
    ("qwen3_rg", "qwen3", TrimKVQwen3Config, TrimKVQwen3ForCausalLM, "rg", 2102),
]


def authors_config(config_cls, model_dir: Path, retention_gate: str):
    """Their config class over the checkpoint's config.json. Our fixtures were written by
    transformers 5 ("rope_parameters"); transformers 4.57.1 (which trimkv pins) reads rope_theta."""
    cfg = json.loads((model_dir / "config.json").read_text())
    rope = cfg.pop("rope_parameters", None) or {}
    assert rope.get("rope_type", "default") == "default"
    cfg["rope_theta"] = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    for k in ("transformers_version", "architectures", "model_type", "dtype"):
        cfg.pop(k, None)
    return config_cls(**cfg, retention_gate=retention_gate, retention_gate_intermediate_size=GATE_HIDDEN,
                      retention_gate_bias_init=BIAS_MEAN, trainable_params=TRAINABLE,
                      tie_retention_gate_layers=True, torch_dtype="float32")


def fill_gates(model, seed):
    """Seeded values for every gate parameter, written in place into the authors' modules (their
    own reset_parameters leaves the inner biases 0 and every head's output bias equal, which
    would leave those terms unexercised). named_parameters() lists a tied (shared) parameter once."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if TRAINABLE not in name:
                continue
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("retention_gate.bias"):
                p.copy_(BIAS_MEAN + 0.5 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def gate_state_dict(model, config):
    """What the authors' from_pretrained expects in trimkv_weights.pth: the model's state-dict
    entries whose key contains any of config.trainable_params.split('|')."""
    wanted = config.trainable_params.split("|")
    return {k: v for k, v in model.state_dict().items() if any(w in k for w in wanted)}


def gates_and_logits(model, ids):
    """Their model's forward on `ids` with a hook on each layer's retention gate: the gate
    module's own output (log β, [n, H_kv]) per layer, and the logits."""
    outs, ins = {}, {}

    def hook(il):
        def record(module, inputs, output):
            ins[il] = inputs[0].detach()[0].clone()
            outs[il] = output.detach()[0].clone()
        return record

    hooks = [layer.self_attn.retention_gate.register_forward_hook(hook(il))
             for il, layer in enumerate(model.model.layers)]
    # transformers builds no mask for an attention implementation it does not know (theirs): the
    # additive causal mask their eager attention adds, given ready-made (a 4D mask is used as is).
    n = len(ids)
    mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), attention_mask=mask, use_cache=False).logits[0]
    for h in hooks:
        h.remove()
    n_layer = len(model.model.layers)
    return [outs[il] for il in range(n_layer)], [ins[il] for il in range(n_layer)], logits


def log_beta_by_hand(sd, il, x):
    """logsigmoid of the gate logits from the saved tensors (any key prefix), in float64: a check
    that the hooked module output is log β as METHOD.md and our log_beta define it."""
    t = {k.split("retention_gate.")[1]: v.double() for k, v in sd.items() if f"layers.{il}.self_attn." in k}
    a = torch.nn.functional.silu(x.double() @ t["linear1.weight"].T + t["linear1.bias"])
    if "linear3.weight" in t:
        a = torch.nn.functional.silu(a @ t["linear2.weight"].T + t["linear2.bias"])
        f = a @ t["linear3.weight"].T
    else:
        f = a @ t["linear2.weight"].T
    return torch.nn.functional.logsigmoid(f + t["bias"])


def training_form(model, ids):
    """Their model in train mode (attention = config.attn_impl, "rg_attn_flex"; the mask a flex
    BlockMask): the decoder's per-layer log β ([n, H_kv] each; their retention_weights output)
    and the logits of its final hidden states. No gradients, no loss (that needs their Triton
    kernels)."""
    model.config._attn_implementation = "flex_attention"
    model.config.rg_dropout = 0.0
    assert model.config.attn_impl == "rg_attn_flex"
    model.train()
    try:
        with torch.no_grad():
            out = model.model(input_ids=torch.tensor([ids]), use_cache=False)
            logits = model.lm_head(out.last_hidden_state)[0]
    finally:
        model.eval()
        model.config._attn_implementation = ATTENTION
    rw = out.retention_weights[0]  # [L, H_kv, n]
    return [rw[il].T.contiguous() for il in range(rw.shape[0])], logits


def config_json(config, model_dir: Path, data_dir: Path):
    """The config.json their from_pretrained reads: what differs from the defaults, every TrimKV
    field, and base_model (the base checkpoint their loader loads first)."""
    d = config.to_diff_dict()
    for k in ("retention_gate", "retention_gate_intermediate_size", "retention_gate_bias_init",
              "tie_retention_gate_layers", "trainable_params", "attn_impl"):
        d[k] = getattr(config, k)
    d["base_model"] = os.path.relpath(model_dir, data_dir)  # relative to tests/data
    d.pop("transformers_version", None)
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def main(data_dir: Path):
    out = data_dir / "gates" / "authors"
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one summation order: the same float32 values on every run
    expected = {"source": f"trimkv {version('trimkv')} (PyPI), transformers {transformers.__version__}, "
                          f"torch {torch.__version__.split('+')[0]}",
                "cases": {}}
    tensors = {}
    cwd = os.getcwd()
    for name, model_name, config_cls, model_cls, rg, seed in CASES:
        model_dir = data_dir / "models" / model_name
        ref = json.loads((model_dir / "expected.json").read_text())
        ids = ref["prompts"][1]  # the model fixture's own prompt: its transformers logits check the base model
        config = authors_config(config_cls, model_dir, rg)

        # 1. Their class, built from the config (their __init__ ties the rg10 gates' linear3 and
        #    bias across layers: _tie_retention_gate_layers), with the checkpoint's weights.
        torch.manual_seed(seed)
        model = model_cls(config).eval()
        missing, unexpected = model.load_state_dict(load_file(str(model_dir / "model.safetensors")), strict=False)
        tied_head = config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
        assert not unexpected and all(TRAINABLE in k or (k == "lm_head.weight" and tied_head) for k in missing), \
            (missing, unexpected)
        assert type(model.model.layers[0].self_attn.retention_gate).__name__ == \
            {"rg": "RetentionGate", "rg10": "RetentionGate10"}[rg]
        fill_gates(model, seed)
        layers = model.model.layers
        if rg == "rg10":  # one module / parameter for all layers
            assert all(l.self_attn.retention_gate.linear3 is layers[0].self_attn.retention_gate.linear3 and
                       l.self_attn.retention_gate.bias is layers[0].self_attn.retention_gate.bias for l in layers)

        # 2. The file, as their loader expects it.
        case_dir = out / name
        case_dir.mkdir(exist_ok=True)
        sd = gate_state_dict(model, config)
        torch.save(sd, case_dir / "trimkv_weights.pth")
        (case_dir / "config.json").write_text(config_json(config, model_dir, data_dir))

        # 3. Proof: their from_pretrained(case_dir) (run from tests/data so that base_model
        #    resolves) loads the base model, torch.loads the file (weights_only, torch's default),
        #    checks its keys against the state dict's trainable ones (raises on any mismatch) and
        #    loads it.
        os.chdir(data_dir)
        try:
            loaded = model_cls.from_pretrained(os.path.relpath(case_dir, data_dir)).eval()
        finally:
            os.chdir(cwd)
        loaded.config._attn_implementation = ATTENTION
        if rg == "rg10":
            # Observed (trimkv 0.1.5, transformers 4.57.1): their from_pretrained keeps linear3 tied
            # (a shared module) but not `bias` (a parameter shared by assignment; transformers'
            # loading re-creates it per layer); the values loaded are equal, so inference is
            # unaffected. Reported, not relied on.
            gl = [l.self_attn.retention_gate for l in loaded.model.layers]
            print(f"  authors' gates: {name}: after their from_pretrained, linear3 shared: "
                  f"{all(g.linear3 is gl[0].linear3 for g in gl)}, bias shared: {all(g.bias is gl[0].bias for g in gl)}")
        lsd = loaded.state_dict()
        for k, v in sd.items():
            assert torch.equal(lsd[k], v), k
        for k, v in model.state_dict().items():
            assert torch.equal(lsd[k], v), k  # base weights from the checkpoint too

        # 4. Their gate modules' outputs on their model's own hidden states.
        lbs, xs, logits = gates_and_logits(loaded, ids)
        want = load_file(str(model_dir / "expected.safetensors"))["logits.1"]
        err = (logits - want).abs().max().item()
        assert err < 1e-4, f"{name}: the authors' class differs from the fixture's transformers logits by {err}"
        for il, lb in enumerate(lbs):
            assert lb.shape == (len(ids), config.num_key_value_heads) and lb.dtype == torch.float32
            assert lb.max() < 0
            tensors[f"{name}.log_beta.{il}"] = lb.contiguous()
        hand = max((log_beta_by_hand(sd, il, x) - lb.double()).abs().max().item()
                   for il, (x, lb) in enumerate(zip(xs, lbs)))
        assert hand < 1e-5, f"{name}: hooked gate output vs logsigmoid by hand: {hand}"

        # 5. Their training form on the same tokens: gated attention, so from layer 1 on the gate
        #    inputs (and the logits) differ from the plain forward's.
        glbs, glogits = training_form(loaded, ids)
        for il, lb in enumerate(glbs):
            tensors[f"{name}.gated.log_beta.{il}"] = lb
        tensors[f"{name}.gated.logits"] = glogits.contiguous()
        assert torch.equal(glbs[0], lbs[0])  # layer 0 sees the embeddings either way
        moved = (glogits - logits).abs().max().item()
        assert moved > 1e-2, f"{name}: the gates do not change the logits ({moved})"

        expected["cases"][name] = {
            "model": model_name, "ids": ids, "authors_class": model_cls.__name__, "retention_gate": rg,
            "kind": {"rg": "trimkv", "rg10": "dbtrimkv"}[rg], "tied": rg == "rg10",
            "gate_hidden": GATE_HIDDEN, "trainable_params": TRAINABLE, "n_keys": len(sd),
            "n_layer": config.num_hidden_layers, "n_kv_head": config.num_key_value_heads,
            "log_beta_range": [round(min(l.min().item() for l in lbs), 4), round(max(l.max().item() for l in lbs), 4)],
            "logits_vs_transformers_max_abs_diff": float(f"{err:.3g}"),
            "gated_vs_plain_logits_max_abs_diff": round(moved, 4),
        }
        print(f"  authors' gates: {name}: {model_cls.__name__} ({rg}), {len(sd)} keys accepted by their "
              f"from_pretrained; logits vs transformers {err:.2e}; log β in {expected['cases'][name]['log_beta_range']}; "
              f"gated logits move by {moved:.3g}")
    save_file(tensors, str(out / "expected.safetensors"))
    os.chmod(out / "expected.safetensors", 0o644)
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    main(Path(os.environ.get("TRIMKV_FIXTURE_DATA", here.parent / "data")).resolve())
    sys.exit(0)
