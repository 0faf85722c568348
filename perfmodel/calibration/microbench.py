"""Microbenchmark THIS host's CPU with torch and write it as the `host-cpu` / `host-node` specs.

`perfmodel calibrate` (or ``python -m perfmodel.calibration.microbench``) measures, with torch on
the CPU (default: a short pass, under a minute; ``--full`` for every shape and size, which waits
for quiet CPUs and takes about 15 minutes):

* GEMM FLOP/s, fp32 and bf16, over a few shapes (``torch.mm`` in a Linear's three training layouts; FLOP = 2·m·n·k each);
* streaming memory bandwidth: copy (2 arrays moved) and triad ``a = b + s·c`` (3 arrays moved),
  arrays 8x larger than the last-level cache;
* host time of one tiny eager op with autograd (``y = x * 2`` with ``requires_grad``), the CPU
  analogue of pytorch/pytorch#41383's 7 us figure on a GPU box;
* a 2-process gloo ``all_reduce`` and ``send``/``recv`` curve over message sizes on localhost
  (``torch.multiprocessing.spawn``, one thread per process).

Mapping of a CPU onto perfmodel's accelerator model (documented again in the YAML): ONE core,
running ONE torch thread, is one "accelerator". A process that trains alone uses one thread;
a 2-process gloo data-parallel or pipeline job on this 2-core machine is 2 "accelerators" of one
node (``host-node``). That keeps each measured per-accelerator rate valid whatever the layout.
Numbers with all cores (one process, ``torch.get_num_threads()`` threads) are kept in notes.

Theoretical peaks are written from CPU facts, not from the measurement: cores x clock x FLOP per
cycle, where FLOP per cycle comes from the vector width and FMA flags in /proc/cpuinfo and the
clock is measured with a dependent integer-add chain (one add per cycle) when a C compiler is
available, else read from /proc/cpuinfo (which under KVM is the TSC rate, not the boost clock).

Calibration never sees the training runs that perfmodel is judged on (validation/cpu/harness.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfmodel.calibration.host import cpu_facts, measure_clock_hz, wait_for_quiet
from perfmodel.calibration.spec_writer import accelerator_yaml, dump_spec, fmt_si, node_yaml
from perfmodel.hardware.host_cpu import user_specs_dir

__all__ = ["default_out_dir", "main", "measure", "run_calibration"]

Progress = Callable[[str], None]


def default_out_dir() -> Path:
    """Where `perfmodel calibrate` writes when no --out is given (hardware/host_cpu.user_specs_dir):
    `host-cpu` reads it there when it was measured on this machine's CPU."""
    return user_specs_dir()


def _stderr_progress(t0: float) -> Progress:
    def say(what: str) -> None:
        print(f"[calibrate {time.monotonic() - t0:5.1f} s] {what}", file=sys.stderr, flush=True)
    return say

# (m, n, k) of a Linear: X[m,k] x W[n,k]^T. The full list includes the shapes of the CPU workloads
# (cpu-mlp: 64 or 256 rows through 2048-wide layers, an 8 MB bf16 weight).
_GEMM_SHAPES_FULL = [
    (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
    (4096, 1024, 1024), (1024, 4096, 1024), (2048, 256, 1024), (2048, 1024, 256), (8192, 256, 256),
    (64, 2048, 2048), (256, 2048, 2048), (256, 2048, 1024),
]
SLOW_CALL_S = 2.0  # a GEMM call this slow is timed once after one warm-up (generic bf16 kernels on AVX2)
_GEMM_SHAPES_QUICK = [(256, 256, 256), (1024, 1024, 1024)]
_AR_SIZES_FULL = [2**p for p in range(10, 27, 2)]  # 1 KiB .. 64 MiB
_AR_SIZES_QUICK = [2**12, 2**18, 2**22]  # 4 KiB, 256 KiB, 4 MiB


def _median_time(fn: Callable[[], object], reps: int, warmup: int = 2, min_time_s: float = 0.0) -> float:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < reps or time.perf_counter() - t_start < min_time_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 10 * reps:
            break
    return statistics.median(times)


def _timed(fn: Callable[[], object], reps: int) -> float:
    """Median of `reps` calls, or, where one warm-up call takes SLOW_CALL_S or more, one more call:
    a 30-second call varies by a few per cent, and seven of them would take the sweep hours."""
    t0 = time.perf_counter()
    fn()
    if time.perf_counter() - t0 >= SLOW_CALL_S:
        return _median_time(fn, 1, warmup=0)
    return _median_time(fn, reps, warmup=1)


def bench_gemm(shapes: Sequence[tuple[int, int, int]], dtype: Any, reps: int) -> list[dict[str, Any]]:
    """Each shape as a training Linear runs it: the forward X[m,k] @ W[n,k]^T, the data gradient
    dY[m,n] @ W and the weight gradient dY^T @ X, each 2·m·n·k FLOP; the point's rate is their
    total FLOP over their total time. The layouts matter where torch has no native kernel for the
    dtype: on an AVX2-only CPU (Zen 3, torch 2.14) a bf16 torch.mm of row-major operands runs at
    1-2 GFLOP/s and the weight-transposed forward at 5-10 (fp32: about 90 either way)."""
    import torch

    out = []
    for m, n, k in shapes:
        x = torch.randn(m, k).to(dtype)
        w = torch.randn(n, k).to(dtype)
        dy = torch.randn(m, n).to(dtype)
        times = {name: _timed(functools.partial(torch.mm, a, b), reps)
                 for name, a, b in (("fwd", x, w.t()), ("dgrad", dy, w), ("wgrad", dy.t(), x))}
        t = sum(times.values())
        out.append({"m": m, "n": n, "k": k, "time_s": t / 3, "flop_per_s": 6.0 * m * n * k / t,
                    **{f"{name}_s": v for name, v in times.items()}})
    return out


def bench_memory(n_elems: int, reps: int) -> dict[str, float]:
    """STREAM-style copy (2 x 4n bytes) and triad (3 x 4n bytes) on fp32 arrays of n elements."""
    import torch

    a, b, c = (torch.rand(n_elems) for _ in range(3))
    t_copy = _median_time(lambda: a.copy_(b), reps)
    t_triad = _median_time(lambda: torch.add(b, c, alpha=3.0, out=a), reps)
    nbytes = 4.0 * n_elems
    return {"copy_Bps": 2 * nbytes / t_copy, "triad_Bps": 3 * nbytes / t_triad, "array_bytes": nbytes}


def bench_op_overhead(n_ops: int) -> dict[str, float]:
    """Seconds per tiny eager op: y = x * 2 on a 1-element tensor, with and without autograd,
    and forward+backward of a chain of such ops (per op)."""
    import torch

    x = torch.ones(1, requires_grad=True)
    x_ng = torch.ones(1)

    def fwd_grad() -> None:
        for _ in range(n_ops):
            x * 2

    def fwd_nograd() -> None:
        for _ in range(n_ops):
            x_ng * 2

    def fwd_bwd() -> None:
        y = x
        for _ in range(n_ops // 10):
            y = y * 1.0001
        y.sum().backward()

    grad = _median_time(fwd_grad, 5) / n_ops
    nograd = _median_time(fwd_nograd, 5) / n_ops
    fb = _median_time(fwd_bwd, 5) / (n_ops // 10)
    return {"autograd_op_s": grad, "nograd_op_s": nograd, "fwd_bwd_per_op_s": fb}


_ATTN_SEQS = (64, 128, 256, 512)
_ATTN_HEAD_DIMS = (32, 64)
_ATTN_MIN_FLOP = 20e6  # executed FLOP per fwd+bwd call at least


def attention_flop(bh: int, s: int, d: int, causal: bool) -> tuple[float, float]:
    """(forward, forward+backward) FLOP of attention over bh = batch x heads, the FlashAttention
    convention: forward 4·bh·s²·d, halved when causal; backward 2.5x forward."""
    fwd = 4.0 * bh * s * s * d * (0.5 if causal else 1.0)
    return fwd, 3.5 * fwd


def bench_attention(reps: int, quick: bool = False) -> list[dict[str, Any]]:
    """F.scaled_dot_product_attention forward+backward on bf16 q, k, v [1, bh, s, d] (the dtype
    autocast hands it), causal and not, with bh chosen so that a call does >= 20 MFLOP."""
    import torch
    import torch.nn.functional as F

    seqs = (128, 512) if quick else _ATTN_SEQS
    dims = (64,) if quick else _ATTN_HEAD_DIMS
    out = []
    for causal in (True, False):
        for d in dims:
            for s in seqs:
                per_bh = attention_flop(1, s, d, causal)[1]
                bh = max(8, -(-int(_ATTN_MIN_FLOP) // int(per_bh)))
                q, k, v = (torch.randn(1, bh, s, d).to(torch.bfloat16).requires_grad_() for _ in range(3))
                g = torch.randn(1, bh, s, d).to(torch.bfloat16)

                def step(q: Any = q, k: Any = k, v: Any = v, g: Any = g, causal: bool = causal) -> None:
                    for t in (q, k, v):
                        t.grad = None
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)

                t = _median_time(step, reps, warmup=2, min_time_s=0.02 if quick else 0.1)
                out.append({"causal": causal, "head_dim": d, "seq_len": s, "bh": bh, "time_s": t,
                            "flop_per_s": attention_flop(bh, s, d, causal)[1] / t})
    return out


def bench_optimizer(reps: int, quick: bool = False) -> dict[str, float]:
    """torch.optim.AdamW (default foreach implementation) step on fp32 parameters with grads:
    seconds per parameter, the way the CPU harness trains."""
    import torch

    n = 2**22 if quick else 2**24
    params = [torch.nn.Parameter(torch.randn(n // 4)) for _ in range(4)]
    for q in params:
        q.grad = torch.randn_like(q)
    opt = torch.optim.AdamW(params, lr=1e-4)
    t = _median_time(opt.step, reps)
    return {"s_per_param": t / n, "params": float(n)}


def bench_elementwise(reps: int, quick: bool = False) -> dict[str, Any]:
    """Memory-bound ops of a bf16-autocast transformer step, each forward+backward, on the CPU
    workloads' sizes (2048 tokens, hidden 256, ffn 1024, vocab 8192). Bytes per op and direction
    = (inputs + outputs) elements x element size, from the dtypes the ops actually produce;
    the aggregate is total bytes / total seconds."""
    import torch
    import torch.nn.functional as F

    tok, hid, ffn, voc = 2048, 256, 1024, 8192
    ac = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    es = lambda t: t.numel() * t.element_size()  # noqa: E731
    ops: dict[str, tuple[Callable[[], None], float]] = {}

    # layer_norm on the fp32 residual stream: fwd x -> y; bwd (dy, x) -> dx
    x_ln = torch.randn(tok, hid, requires_grad=True)
    ln = torch.nn.LayerNorm(hid)
    with ac():
        y_ln = ln(x_ln)
    g_ln = torch.randn_like(y_ln)

    def f_ln() -> None:
        x_ln.grad = None
        ln.zero_grad(set_to_none=True)
        with ac():
            y = ln(x_ln)
        y.backward(g_ln)
    ops["layer_norm"] = (f_ln, es(x_ln) + es(y_ln) + es(g_ln) + es(x_ln) + es(x_ln))

    # gelu on the bf16 fc1 output: fwd x -> y; bwd (dy, x) -> dx
    x_ge = torch.randn(tok, ffn).to(torch.bfloat16).requires_grad_()
    with ac():
        y_ge = F.gelu(x_ge)
    g_ge = torch.randn_like(y_ge)

    def f_ge() -> None:
        x_ge.grad = None
        with ac():
            y = F.gelu(x_ge)
        y.backward(g_ge)
    ops["gelu"] = (f_ge, es(x_ge) + es(y_ge) + es(g_ge) + es(x_ge) + es(x_ge))

    # cross_entropy (log_softmax + nll) on fp32 logits: fwd x -> logp; nll bwd -> dlogp;
    # log_softmax bwd (dlogp, logp) -> dx
    x_ce = torch.randn(tok, voc, requires_grad=True)
    tgt = torch.randint(0, voc, (tok,))

    def f_ce() -> None:
        x_ce.grad = None
        with ac():
            loss = F.cross_entropy(x_ce, tgt)
        loss.backward()
    ops["log_softmax+nll"] = (f_ce, es(x_ce) * 6)

    # autocast casts: fp32 activations -> bf16 (fwd) and the bf16 grad -> fp32 (bwd), at hidden
    # size; and the bf16 logits -> fp32 before the loss (logits.float()) with its backward
    x_c1 = torch.randn(tok, hid, requires_grad=True)
    g_c1 = torch.randn(tok, hid).to(torch.bfloat16)

    def f_c1() -> None:
        x_c1.grad = None
        x_c1.to(torch.bfloat16).backward(g_c1)
    ops["cast fp32->bf16"] = (f_c1, 2 * (es(x_c1) + es(g_c1)))
    x_c2 = torch.randn(tok, voc).to(torch.bfloat16).requires_grad_()
    g_c2 = torch.randn(tok, voc)

    def f_c2() -> None:
        x_c2.grad = None
        x_c2.float().backward(g_c2)
    ops["cast bf16->fp32 (logits)"] = (f_c2, 2 * (es(x_c2) + es(g_c2)))

    # residual add: fp32 stream + bf16 branch -> fp32; bwd: dy passes to the stream, cast to bf16
    # for the branch
    x_a = torch.randn(tok, hid, requires_grad=True)
    b_a = torch.randn(tok, hid).to(torch.bfloat16).requires_grad_()
    g_a = torch.randn(tok, hid)

    def f_add() -> None:
        x_a.grad = b_a.grad = None
        with ac():
            y = x_a + b_a
        y.backward(g_a)
    ops["add"] = (f_add, es(x_a) + es(b_a) + es(x_a) + es(g_a) + es(b_a))

    per_op: dict[str, dict[str, float]] = {}
    for name, (fn, nbytes) in ops.items():
        t = _median_time(fn, reps, warmup=2, min_time_s=0.03 if quick else 0.3)
        per_op[name] = {"time_s": t, "bytes": float(nbytes), "Bps": nbytes / t}
    tot_b = sum(p["bytes"] for p in per_op.values())
    tot_t = sum(p["time_s"] for p in per_op.values())
    return {"per_op": per_op, "Bps": tot_b / tot_t, "sizes": {"tokens": tok, "hidden": hid, "ffn": ffn, "vocab": voc}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gloo_worker(rank: int, world: int, port: int, sizes: list[int], iters: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= world:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})  # one core per rank
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res: dict[str, list[dict[str, float]]] = {"all_reduce": [], "send_recv": []}
    warm = torch.ones(2**16)
    for _ in range(20):  # connection set-up and first-touch costs stay out of the curve
        dist.all_reduce(warm)
    for size in sizes:
        t = torch.ones(size // 4)
        n_it = max(5, min(iters, int(iters * 2**20 / size)))
        for kind in ("all_reduce", "send_recv"):
            times = []
            for i in range(n_it + 2):
                dist.barrier()
                t0 = time.perf_counter()
                if kind == "all_reduce":
                    dist.all_reduce(t)
                elif rank == 0:
                    dist.send(t, 1)
                    dist.recv(t, 1)
                else:
                    dist.recv(t, 0)
                    dist.send(t, 0)
                el = time.perf_counter() - t0
                if i >= 2:
                    times.append(el if kind == "all_reduce" else el / 2.0)  # ping-pong: one-way
            res[kind].append({"size_bytes": float(size), "time_s": statistics.median(times), "min_s": min(times)})
    if rank == 0:
        Path(out_path).write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def bench_gloo(sizes: list[int], iters: int) -> dict[str, list[dict[str, float]]]:
    """2-process gloo all_reduce and ping-pong send/recv on localhost; busbw = bytes/time x
    2(n-1)/n, which is 1 for n = 2 (ring all-reduce) and 1 for send/recv."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp, "gloo.json"))
        mp.spawn(_gloo_worker, args=(2, _free_port(), sizes, iters, out), nprocs=2, join=True)
        res: dict[str, list[dict[str, float]]] = json.loads(Path(out).read_text())
    for _kind, pts in res.items():
        for p in pts:
            p["busbw_Bps"] = p["size_bytes"] / p["time_s"]  # 2(n-1)/n = 1 at n = 2
    return res


# --- the whole calibration --------------------------------------------------------------------
def measure(quick: bool = True, progress: Progress | None = None) -> dict[str, Any]:
    """Run every microbenchmark; return raw numbers in SI units. `progress` hears one line per
    step (the full pass takes minutes)."""
    import torch

    say = progress or (lambda _msg: None)
    say("CPU facts and clock")
    facts = cpu_facts()
    clock_hz, clock_how = measure_clock_hz()
    shapes = _GEMM_SHAPES_QUICK if quick else _GEMM_SHAPES_FULL
    reps = 3 if quick else 7
    llc = max(facts["caches"].values(), default=32 * 2**20)
    n_mem = max(int(8 * llc / 4), 2**22) if not quick else max(int(2 * llc / 4), 2**22)
    threads_all = torch.get_num_threads()
    res: dict[str, Any] = {"facts": {**facts, "flags": sorted(facts["flags"])}, "clock_hz": clock_hz,
                           "clock_how": clock_how, "torch": torch.__version__, "threads_all": threads_all,
                           "quick": quick, "date": dt.date.today().isoformat()}
    res["busy_before"] = {}
    for threads in (1, threads_all):
        torch.set_num_threads(threads)
        key = f"t{threads}"
        say(f"{threads} thread(s): waiting for quiet CPUs")
        res["busy_before"][key] = wait_for_quiet(1.0 if quick else 120.0)
        say(f"{threads} thread(s): GEMM fp32 / bf16 over {len(shapes)} shapes, streaming memory")
        res[key] = {
            "gemm_fp32": bench_gemm(shapes, torch.float32, reps),
            "gemm_bf16": bench_gemm(shapes, torch.bfloat16, reps),
            "memory": bench_memory(n_mem, reps),
        }
        if threads == 1:
            say("1 thread: eager op overhead, attention, element-wise ops, optimizer step")
            res[key]["op_overhead"] = bench_op_overhead(2000 if quick else 20000)
            res[key]["attention"] = bench_attention(reps, quick)
            res[key]["elementwise"] = bench_elementwise(reps, quick)
            res[key]["optimizer"] = bench_optimizer(reps, quick)
        if threads_all == 1:
            break
    torch.set_num_threads(threads_all)
    say("2-process gloo all_reduce and send/recv")
    res["busy_before"]["gloo"] = wait_for_quiet(1.0 if quick else 120.0)
    res["gloo"] = bench_gloo(_AR_SIZES_QUICK if quick else _AR_SIZES_FULL, 5 if quick else 20)
    return res


def run_calibration(out_dir: Path | None = None, quick: bool = True, progress: Progress | None = None) -> dict[str, Any]:
    """Measure this host and write out_dir/accelerators/host-cpu.yaml and out_dir/nodes/host-node.yaml
    (default: `default_out_dir()`, never the committed specs).

    Returns the raw measurements (SI units) plus the written paths under 'paths'.
    """
    out_dir = out_dir or default_out_dir()
    r = measure(quick, progress)
    header = (f"# Written by `perfmodel calibrate` on {r['date']} (torch {r['torch']}); rerun to refresh.\n"
              f"# Describes the machine it ran on: {r['facts']['model_name']}, {r['facts']['cores']} cores.\n"
              "# One 'accelerator' = one core running one torch thread.\n")
    acc_path = out_dir / "accelerators" / "host-cpu.yaml"
    node_path = out_dir / "nodes" / "host-node.yaml"
    dump_spec(accelerator_yaml(r), acc_path, header)
    dump_spec(node_yaml(r), node_path, header)
    r["paths"] = {"accelerator": str(acc_path), "node": str(node_path)}
    return r


def summary_line(r: dict[str, Any]) -> str:
    """One line of the headline measurements of `run_calibration`."""
    t1 = r["t1"]
    return (f"fp32 GEMM max {fmt_si(max(x['flop_per_s'] for x in t1['gemm_fp32']), 'FLOP/s')}, "
            f"bf16 GEMM max {fmt_si(max(x['flop_per_s'] for x in t1['gemm_bf16']), 'FLOP/s')}, "
            f"triad {fmt_si(t1['memory']['triad_Bps'], 'B/s')}, op {fmt_si(t1['op_overhead']['autograd_op_s'], 's')}, "
            f"gloo all_reduce best {fmt_si(max(x['busbw_Bps'] for x in r['gloo']['all_reduce']), 'B/s')}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="perfmodel calibrate", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help=f"specs directory to write (default {default_out_dir()})")
    p.add_argument("--full", action="store_true", help="every shape and size, waiting for quiet CPUs (~15 min)")
    p.add_argument("--json", type=Path, help="also write the raw measurements here")
    a = p.parse_args(argv)
    r = run_calibration(a.out, not a.full, _stderr_progress(time.monotonic()))
    if a.json:
        a.json.write_text(json.dumps(r, indent=1, default=str))
    print(summary_line(r))
    print("wrote", r["paths"]["accelerator"], r["paths"]["node"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
