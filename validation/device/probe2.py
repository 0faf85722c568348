#!/usr/bin/env python3
"""Second pass: which SDPA backend torch picks on this GPU and what each runs at; what torch.autocast
over fp32 parameters costs a training step (weight casts every micro-batch, fp32 gradient
accumulation) against the same model held in bf16. Writes JSON to --out."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, ".")
from measure_gpu import SmallLM  # noqa: E402

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


def sdpa(res):
    dev, dt = "cuda", torch.bfloat16
    res["sdpa_flags"] = dict(flash=torch.backends.cuda.flash_sdp_enabled(), cudnn=torch.backends.cuda.cudnn_sdp_enabled(),
                             mem_efficient=torch.backends.cuda.mem_efficient_sdp_enabled(),
                             math=torch.backends.cuda.math_sdp_enabled())
    out = []
    for b, h, s, d in ((2, 32, 8192, 128), (8, 32, 2048, 128), (8, 16, 2048, 64)):
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
        g = torch.randn(b, h, s, d, device=dev, dtype=dt)
        fl = 4 * b * h * s * s * d * 0.5
        for name, be in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                def f():
                    if be is None:
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    with sdpa_kernel([be]):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                tf = timed(f)
                tfb = timed(lambda: f().backward(g))
                out.append(dict(backend=name, batch=b, heads=h, seq=s, head_dim=d, causal=True, fwd_seconds=tf,
                                fwd_flop_per_s=fl / tf, fwd_bwd_seconds=tfb, fwd_bwd_flop_per_s=3.5 * fl / tfb))
                log(f"sdpa {name} b{b} h{h} s{s} d{d}: fwd {fl / tf / 1e12:.0f}, fwd+bwd {3.5 * fl / tfb / 1e12:.0f} TFLOP/s")
            except Exception as e:  # noqa: BLE001
                out.append(dict(backend=name, batch=b, heads=h, seq=s, head_dim=d, error=f"{type(e).__name__}: {e}"[:200]))
        del q, k, v, g
    # which backend the default picks: the profiler's kernel names
    q, k, v = (torch.randn(2, 32, 8192, 128, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize()
    res["sdpa_default_kernels"] = sorted({e.name[:120] for e in prof.events() if "attn" in e.name.lower()
                                          or "flash" in e.name.lower() or "fmha" in e.name.lower() or "sdpa" in e.name.lower()})
    res["sdpa"] = out


def autocast_cost(res):
    """llama3-8b-4layers of measure_gpu (vocab 128256, 4 layers, 4096 tokens, 4 micro-batches):
    fp32 parameters under autocast vs bf16 parameters without; forward, forward+backward of the
    micro-batches, and the optimizer step, timed apart."""
    out = []
    vocab, nl, h, ffn, heads, kv, s, acc = 128256, 4, 4096, 14336, 32, 8, 4096, 4
    for mode in ("fp32+autocast", "bf16"):
        torch.manual_seed(0)
        m = SmallLM(vocab, nl, h, ffn, heads, kv, True, s).cuda()
        if mode == "bf16":
            m = m.to(torch.bfloat16)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
        idx = torch.randint(0, vocab, (1, s + 1), device="cuda")
        ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if mode != "bf16" else _Null

        def fwd():
            with ctx():
                logits = m(idx[:, :-1])
                return F.cross_entropy(logits.float().view(-1, vocab), idx[:, 1:].reshape(-1))

        def fwd_only():
            with torch.no_grad():
                fwd()

        def micro_batches():
            for _ in range(acc):
                (fwd() / acc).backward()

        def step():
            micro_batches()
            opt.step(); opt.zero_grad(set_to_none=True)

        t_step = timed(step, reps=5)
        t_fwd = timed(fwd_only, reps=5)
        t_mb = timed(lambda: (micro_batches(), opt.zero_grad(set_to_none=True)), reps=5)
        micro_batches()
        t_opt = timed(opt.step, reps=5)
        out.append(dict(mode=mode, step_seconds=t_step, fwd_no_grad_seconds=t_fwd, micro_batches_seconds=t_mb,
                        optimizer_seconds=t_opt, params=sum(p.numel() for p in m.parameters()), accumulation=acc))
        log(f"{mode}: step {t_step * 1e3:.1f} ms, fwd(no grad) {t_fwd * 1e3:.1f}, {acc} micro fwd+bwd {t_mb * 1e3:.1f}, opt {t_opt * 1e3:.1f}")
        del m, opt
        torch.cuda.empty_cache()
    res["autocast"] = out


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"script": "probe2.py", "torch": torch.__version__, "device": torch.cuda.get_device_name()}
    for fn in (sdpa, autocast_cost):
        try:
            fn(res)
        except Exception as e:  # noqa: BLE001
            res[fn.__name__ + "_error"] = f"{type(e).__name__}: {e}"[:500]
            log(f"{fn.__name__} failed: {e}")
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
