"""Block-quantisation fixtures: a float32 matrix quantised to q8_0 and q4_0 by the PyPI `gguf`
package (llama.cpp's reference quantisers, written independently of ours), with their
dequantisation, and the same matrix rounded to bfloat16 / float16 by torch.

Writes tests/data/quant/quant.safetensors:
  x            float32 [6, 96]: normal values, one all-zero row, a row with one large outlier,
               a row of exact ties (x.5 steps after scaling), a row of tiny values (f16 subnormal scales)
  q8_0, q4_0   uint8 [6, 3 * block bytes]: gguf.quants.quantize
  q8_0_deq, q4_0_deq  float32 [6, 96]: gguf.quants.dequantize
  bf16, f16    the torch roundings (as int16 bit patterns)
and tests/data/quant/logits.safetensors (model_logits below).
"""
from pathlib import Path


def main(data: Path):
    import gguf
    import numpy as np
    import torch
    from gguf import quants
    from safetensors.torch import save_file
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 96)).astype(np.float32)
    x[1] = 0.0
    x[2, 17] = 40.0
    x[3] = (np.arange(96) % 16 - 7.5).astype(np.float32) * 0.25  # halves after scaling
    x[4] *= 1e-6  # scales below float16's normal range
    x[5, ::7] = -x[5, ::7] * 3
    out = {"x": torch.from_numpy(x)}
    for name, t in (("q8_0", gguf.GGMLQuantizationType.Q8_0), ("q4_0", gguf.GGMLQuantizationType.Q4_0)):
        q = quants.quantize(x, t)
        out[name] = torch.from_numpy(np.ascontiguousarray(q))
        out[name + "_deq"] = torch.from_numpy(quants.dequantize(q, t).astype(np.float32))
    xt = torch.from_numpy(x)
    out["bf16"] = xt.to(torch.bfloat16).view(torch.int16)
    out["f16"] = xt.to(torch.float16).view(torch.int16)
    d = data / "quant"
    d.mkdir(parents=True, exist_ok=True)
    save_file(out, str(d / "quant.safetensors"), metadata={"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "?"})
    print(f"  quant: {d / 'quant.safetensors'}")
    model_logits(data)


TOKENS = [1, 17, 42, 99, 3, 250, 8, 64, 11, 5, 77, 200, 5, 9, 100, 31, 7, 64]  # 12 prompt + 6 decoded


def model_logits(data: Path):
    """The tiny text fixtures' logits at positions 11..17 of TOKENS, computed by transformers in
    float32 with every weight matrix first rounded to bf16 / f16, or replaced by its q8_0 / q4_0
    dequantisation (gguf.quants): what trimkv's kernels compute up to summation order (and, for
    q8 / q4, the activations' own q8 rounding)."""
    import gguf
    import numpy as np
    import torch
    from gguf import quants
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    qtypes = {"q8": gguf.GGMLQuantizationType.Q8_0, "q4": gguf.GGMLQuantizationType.Q4_0}
    out = {}
    ids = torch.tensor([TOKENS])
    for name in ("llama_gqa", "llama_tied", "qwen2", "qwen3"):
        for fmt in ("f32", "bf16", "f16", "q8", "q4"):
            m = AutoModelForCausalLM.from_pretrained(str(data / "models" / name), dtype=torch.float32).eval()
            with torch.no_grad():
                for p in m.parameters():
                    if p.dim() != 2:
                        continue
                    if fmt in ("bf16", "f16"):
                        p.data = p.data.to(torch.bfloat16 if fmt == "bf16" else torch.float16).float()
                    elif fmt in qtypes:
                        if p.shape[1] % 32:  # trimkv holds such matrices in bf16 (and says so)
                            p.data = p.data.to(torch.bfloat16).float()
                        else:
                            q = quants.quantize(p.data.numpy(), qtypes[fmt])
                            p.data = torch.from_numpy(quants.dequantize(q, qtypes[fmt]).astype(np.float32))
                out[f"{name}.{fmt}"] = m(ids).logits[0, 11:].contiguous()  # the 7 positions decode returns
    save_file(out, str(data / "quant" / "logits.safetensors"), metadata={"tokens": ",".join(map(str, TOKENS))})
    print(f"  quant: {data / 'quant' / 'logits.safetensors'}")
