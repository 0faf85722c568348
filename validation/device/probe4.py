#!/usr/bin/env python3
"""Host-bound regime: a Hugging Face Llama-3.2-1B (random weights, bf16, sdpa) at batch 1 x 512
tokens, eager: forward (no grad), forward+backward, and forward+backward with gradient
checkpointing, wall-clock medians; then one profiled forward+backward: the number of CUDA kernels
and the sum of their durations (GPU busy time), to set against the wall time. The same for a GPT-2
350M-shaped model at 8 x 1024. Writes JSON to --out."""
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


def wall(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def profiled(fn):
    fn(); torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as p:
        fn(); torch.cuda.synchronize()
    out = {}
    try:
        kern = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        out["cuda_kernels"] = len(kern)
        out["kernel_seconds_sum"] = sum(getattr(e, "device_time_total", 0.0) or getattr(e, "cuda_time_total", 0.0)
                                        for e in kern) / 1e6
    except Exception as e:  # noqa: BLE001
        out["events_error"] = f"{type(e).__name__}: {e}"[:200]
    try:
        out["self_device_seconds_sum"] = sum(getattr(k, "self_device_time_total", 0.0) for k in p.key_averages()) / 1e6
        out["cpu_ops"] = sum(k.count for k in p.key_averages() if getattr(k, "device_type", None) == torch.autograd.DeviceType.CPU)
    except Exception as e:  # noqa: BLE001
        out["averages_error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def case(name, model, idx, res):
    out = dict(model=name, params=sum(p.numel() for p in model.parameters()), batch=idx.shape[0], seq=idx.shape[1])

    def fwd():
        with torch.no_grad():
            model(idx)

    def fwd_bwd():
        model(idx, labels=idx).loss.backward()

    out["fwd_wall_s"] = wall(fwd)
    out["fwd_bwd_wall_s"] = wall(fwd_bwd)
    out["fwd_profile"] = profiled(fwd)
    out["fwd_bwd_profile"] = profiled(fwd_bwd)
    try:
        model.gradient_checkpointing_enable()
        model.train()
        out["fwd_bwd_ckpt_wall_s"] = wall(fwd_bwd)
        out["fwd_bwd_ckpt_profile"] = profiled(fwd_bwd)
        model.gradient_checkpointing_disable()
    except Exception as e:  # noqa: BLE001
        out["ckpt_error"] = f"{type(e).__name__}: {e}"[:200]
    log(f"{name}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in out.items() if k.endswith("_s")))
    log(f"   profiles: fwd {out['fwd_profile']}, fwd+bwd {out['fwd_bwd_profile']}")
    res["cases"].append(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    res = {"script": "probe4.py", "torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(), "cases": []}
    torch.manual_seed(0)
    cfgs = [
        ("llama3.2-1b", lambda: LlamaForCausalLM(LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
            num_key_value_heads=8, head_dim=64, tie_word_embeddings=True, max_position_embeddings=8192,
            attn_implementation="sdpa")), 1, 512),
        ("gpt2-350m", lambda: GPT2LMHeadModel(GPT2Config(
            vocab_size=50304, n_positions=1024, n_embd=1024, n_layer=24, n_head=16, attn_implementation="sdpa")), 8, 1024),
    ]
    for name, make, b, s in cfgs:
        try:
            m = make().to("cuda", torch.bfloat16)
            idx = torch.randint(0, m.config.vocab_size, (b, s), device="cuda")
            case(name, m, idx, res)
            del m
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            res["cases"].append(dict(model=name, error=f"{type(e).__name__}: {e}"[:300]))
            log(f"{name} failed: {e}")
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
