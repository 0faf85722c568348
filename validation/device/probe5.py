#!/usr/bin/env python3
"""A Hugging Face transformers LlamaDecoderLayer (Llama-3-8B shapes, bf16, sdpa) at 8192 tokens,
forward+backward: eager, then torch.compile'd (default mode), medians of 10 after 3 warm-ups.
The difference is what fusing the layer's element-wise ops (norms, SwiGLU, RoPE, residual adds)
saves. Writes JSON to --out."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

T0 = time.monotonic()


def log(m):
    print(f"[{time.monotonic() - T0:6.1f}s] {m}", flush=True)


def timed(fn, reps=10, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import transformers
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    s, h = 8192, 4096
    cfg = LlamaConfig(hidden_size=h, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, num_hidden_layers=1, max_position_embeddings=8192, rope_theta=500000.0)
    cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(cfg, 0).to("cuda", torch.bfloat16)
    rot = LlamaRotaryEmbedding(cfg).to("cuda")
    x = torch.randn(1, s, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(s, device="cuda")[None]
    pe = rot(x, pos)
    g = torch.randn(1, s, h, device="cuda", dtype=torch.bfloat16)
    res = {"script": "probe5.py", "torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(), "tokens": s}

    def run(mod):
        def f():
            o = mod(x, attention_mask=None, position_ids=pos, position_embeddings=pe)
            (o[0] if isinstance(o, tuple) else o).backward(g)
        return f

    res["eager_fwd_bwd_s"] = timed(run(layer))
    log(f"eager {res['eager_fwd_bwd_s'] * 1e3:.2f} ms")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    try:
        t = time.monotonic()
        comp = torch.compile(layer)
        run(comp)(); torch.cuda.synchronize()
        res["compile_s"] = time.monotonic() - t
        res["compiled_fwd_bwd_s"] = timed(run(comp))
        log(f"compiled {res['compiled_fwd_bwd_s'] * 1e3:.2f} ms (compile {res['compile_s']:.0f} s)")
    except Exception as e:  # noqa: BLE001
        res["compile_error"] = f"{type(e).__name__}: {e}"[:400]
        log(f"compile failed: {e}")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
