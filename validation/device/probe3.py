#!/usr/bin/env python3
"""Sustained load: does the GPU hold its burst rate? A bf16 8192^3 matmul back to back for 75 s, then
measure_gpu.py's four-layer Llama-3-8B training step back to back for 60 s, with nvidia-smi read
every second (SM clock, power, temperature, throttle reasons). Writes JSON to --out."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
from measure_gpu import SmallLM  # noqa: E402

T0 = time.monotonic()
SMI = ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
       "--format=csv,noheader,nounits"]


def log(m):
    print(f"[{time.monotonic() - T0:6.1f}s] {m}", flush=True)


class Poll(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.rows, self.stop = [], False

    def run(self):
        while not self.stop:
            try:
                out = subprocess.run(SMI, capture_output=True, text=True, timeout=5).stdout.strip()
                self.rows.append([round(time.monotonic() - T0, 2), *[v.strip() for v in out.split(",")]])
            except Exception as e:  # noqa: BLE001
                self.rows.append([round(time.monotonic() - T0, 2), f"error {e}"])
            time.sleep(1.0)


def gemm_phase(seconds: float):
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flop = 2 * n ** 3
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        torch.cuda.synchronize()
        t = time.perf_counter()
        reps = 200
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        out.append([round(time.monotonic() - T0, 2), reps * flop / dt])
    log(f"gemm: first {out[0][1] / 1e12:.0f}, last {out[-1][1] / 1e12:.0f}, min {min(r[1] for r in out) / 1e12:.0f} TFLOP/s")
    return out


def step_phase(seconds: float):
    vocab, nl, h, ffn, heads, kv, s, acc = 128256, 4, 4096, 14336, 32, 8, 4096, 4
    torch.manual_seed(0)
    m = SmallLM(vocab, nl, h, ffn, heads, kv, True, s).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, vocab, (1, s + 1), device="cuda")

    def step():
        for _ in range(acc):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = m(idx[:, :-1])
                loss = F.cross_entropy(logits.float().view(-1, vocab), idx[:, 1:].reshape(-1))
            (loss / acc).backward()
        opt.step(); opt.zero_grad(set_to_none=True)

    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append([round(time.monotonic() - T0, 2), time.perf_counter() - t])
    log(f"step: first {out[0][1] * 1e3:.1f}, median of last 20 {sorted(r[1] for r in out[-20:])[10] * 1e3:.1f} ms, {len(out)} steps")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gemm-s", type=float, default=75)
    ap.add_argument("--step-s", type=float, default=60)
    a = ap.parse_args()
    poll = Poll(); poll.start()
    res = {"script": "probe3.py", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "smi_fields": ["t_s", "clocks.sm MHz", "clocks.mem MHz", "power.draw W", "temperature C"]}
    time.sleep(2)
    for name, fn, secs in (("gemm", gemm_phase, a.gemm_s), ("step", step_phase, a.step_s)):
        try:
            res[name] = fn(secs)
        except Exception as e:  # noqa: BLE001
            res[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
            log(f"{name} failed: {e}")
        res["smi"] = poll.rows
        with open(a.out, "w") as f:
            json.dump(res, f, indent=0)
    poll.stop = True
    time.sleep(1.5)
    res["smi"] = poll.rows
    with open(a.out, "w") as f:
        json.dump(res, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
