#!/usr/bin/env python3
"""What un-fused element-wise ops cost inside a Llama-3-8B layer at 8k tokens, eager vs compiled.

Per op (RMSNorm as Hugging Face writes it, with the fp32 upcast; SwiGLU's silu(gate)*up; RoPE with
rotate_half), fwd and fwd+bwd medians, eager and torch.compile'd (the fused baseline). Then a whole
Hugging Face LlamaDecoderLayer (transformers, sdpa), eager, fwd+bwd. Writes JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

T0 = time.monotonic()


def log(m: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {m}", flush=True)


def timed(fn, dev, reps=20, warm=3) -> float:
    for _ in range(warm):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def rmsnorm(x, w):
    dt = x.dtype
    x = x.to(torch.float32)
    var = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + 1e-5)
    return w * x.to(dt)


def swiglu(gate, up):
    return F.silu(gate) * up


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dt = torch.bfloat16
    s, h, ffn, nh, nkv, hd = (8192, 4096, 14336, 32, 8, 128) if not a.quick else (64, 128, 256, 4, 2, 32)
    res: dict = {"script": "eager_ops.py", "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
                 "torch": torch.__version__, "tokens": s, "hidden": h, "ffn": ffn, "heads": nh, "kv_heads": nkv,
                 "head_dim": hd, "dtype": "bfloat16", "ops": []}

    def save():
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)

    x = torch.randn(1, s, h, device=dev, dtype=dt, requires_grad=True)
    w = torch.ones(h, device=dev, dtype=dt, requires_grad=True)
    gu = torch.randn(1, s, 2 * ffn, device=dev, dtype=dt)
    gate = gu[..., :ffn].detach().requires_grad_(True)
    up = gu[..., ffn:].detach().requires_grad_(True)
    qkv = torch.randn(1, s, (nh + 2 * nkv) * hd, device=dev, dtype=dt)
    q = qkv[..., : nh * hd].view(1, s, nh, hd).transpose(1, 2).detach().requires_grad_(True)
    k = qkv[..., nh * hd: (nh + nkv) * hd].view(1, s, nkv, hd).transpose(1, 2).detach().requires_grad_(True)
    ang = torch.randn(1, s, hd, device=dev)
    cos, sin = ang.cos().to(dt), ang.sin().to(dt)
    gx = torch.randn(1, s, h, device=dev, dtype=dt)
    gf = torch.randn(1, s, ffn, device=dev, dtype=dt)
    gq, gk = torch.randn_like(q), torch.randn_like(k)

    cases = {
        "rmsnorm": (rmsnorm, lambda f: f(x, w), lambda o: o.backward(gx), s * h),
        "swiglu": (swiglu, lambda f: f(gate, up), lambda o: o.backward(gf), s * ffn),
        "rope": (rope, lambda f: f(q, k, cos, sin), lambda o: torch.autograd.backward(o, (gq, gk)), s * (nh + nkv) * hd),
    }
    modes = ["eager"] + ([] if a.no_compile else ["compiled"])
    for mode in modes:
        for name, (fn, call, back, elems) in cases.items():
            try:
                f = fn if mode == "eager" else torch.compile(fn)
                t_f = timed(lambda: call(f), dev)
                t_fb = timed(lambda: back(call(f)), dev)
                res["ops"].append(dict(op=name, mode=mode, elements=elems, fwd_seconds=t_f, fwd_bwd_seconds=t_fb))
                log(f"{mode} {name}: fwd {t_f * 1e3:.3f} ms, fwd+bwd {t_fb * 1e3:.3f} ms")
            except Exception as e:  # noqa: BLE001
                res["ops"].append(dict(op=name, mode=mode, error=f"{type(e).__name__}: {e}"[:300]))
                log(f"{mode} {name} failed: {e}")
            save()
    del x, gu, qkv, gate, up, q, k
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
        import transformers
        cfg = LlamaConfig(hidden_size=h, intermediate_size=ffn, num_attention_heads=nh, num_key_value_heads=nkv,
                          head_dim=hd, num_hidden_layers=1, max_position_embeddings=max(s, 8192), rope_theta=500000.0)
        cfg._attn_implementation = "sdpa"
        layer = LlamaDecoderLayer(cfg, 0).to(dev, dt)
        rot = LlamaRotaryEmbedding(cfg).to(dev)
        xin = torch.randn(1, s, h, device=dev, dtype=dt, requires_grad=True)
        pos = torch.arange(s, device=dev)[None]
        pe = rot(xin, pos)
        g = torch.randn(1, s, h, device=dev, dtype=dt)

        def fwd():
            o = layer(xin, attention_mask=None, position_ids=pos, position_embeddings=pe)
            return o[0] if isinstance(o, tuple) else o
        t_f = timed(fwd, dev, reps=10)
        t_fb = timed(lambda: fwd().backward(g), dev, reps=10)
        weights = sum(p.numel() for p in layer.parameters() if p.dim() == 2)
        flop = 2 * s * weights + 2 * s * s * h
        res["hf_layer"] = dict(transformers=transformers.__version__, attn="sdpa", tokens=s, fwd_seconds=t_f,
                               fwd_bwd_seconds=t_fb, fwd_flop=flop, fwd_bwd_flop_per_s=3 * flop / t_fb)
        log(f"hf layer: fwd {t_f * 1e3:.3f} ms, fwd+bwd {t_fb * 1e3:.3f} ms, {3 * flop / t_fb / 1e12:.0f} TFLOP/s")
    except Exception as e:  # noqa: BLE001
        res["hf_layer"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        log(f"hf layer failed: {e}")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
