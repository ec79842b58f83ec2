"""transformers' decode speed on the shape bench_cuda_e2e measures (tests/device/run.sh): a random
Qwen3 text decoder of Qwen3-VL-8B's size in bf16 on the GPU (SDPA attention), 64 greedy steps
after a 32K-token context of random K/V in its own cache (DynamicCache). Prints one markdown table
row, or why there is none (no transformers on the machine)."""
import time

import torch

CONTEXT, STEPS = 32768, 64


def main():
    try:
        import transformers
        from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM
    except Exception as e:  # not installed, or too old for Qwen3
        print(f"| transformers full cache | - | not run: {type(e).__name__}: {e} | - |")
        return
    if not torch.cuda.is_available():
        print("| transformers full cache | - | not run: no CUDA device | - |")
        return
    cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                      rope_theta=5e6, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    cache = DynamicCache()
    for layer in range(cfg.num_hidden_layers):
        k = torch.randn(1, 8, CONTEXT, 128, device="cuda", dtype=torch.bfloat16)
        cache.update(k, torch.randn_like(k), layer)
    tok = torch.tensor([[1]], device="cuda")
    pos = CONTEXT

    def step(t):
        nonlocal pos
        out = model(input_ids=t, past_key_values=cache, use_cache=True,
                    position_ids=torch.tensor([[pos]], device="cuda"),
                    cache_position=torch.tensor([pos], device="cuda"))
        pos += 1
        return out.logits[:, -1].argmax(-1, keepdim=True)

    with torch.no_grad():
        for _ in range(4):
            tok = step(tok)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            tok = step(tok)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / STEPS
    print(f"| transformers {transformers.__version__} full cache (sdpa, DynamicCache) | {CONTEXT} | {1 / dt:.1f} | - |")


if __name__ == "__main__":
    main()
