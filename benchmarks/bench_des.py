"""How long one discrete-event estimate takes.

    python benchmarks/bench_des.py
Prints the median wall time per `des_estimate` (its shared stage costs included; it no longer runs the analytic engine first)
and the compute ops simulated, for GPT-3 175B 1F1B over 8 stages with 192 micro-batches, and the
issue's speed targets on a uniform synthetic graph with p2p transfers: 16 stages x 256
micro-batches (< 1 s) and 64 x 1,024 (< 10 s).
"""

from __future__ import annotations

import functools
import statistics
import time

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.engines.des import des_estimate
from perfmodel.hardware.system import resolve_system
from perfmodel.workload.graph import Graph, Layer, Op


def uniform_graph(count: int) -> Graph:
    op = Op("g", "gemm", flop=2.0 * 8192**3, bytes=3 * 8192 * 8192 * 2, m=8192, n=8192, k=8192,
            weight_params=8192 * 8192, kernels=1, bwd_kernels=2)
    # input_bytes: a 128 MiB activation crosses each stage boundary (p2p on the links)
    layer = Layer("layers", "transformer", count, (op,), params=8192 * 8192, params_full=8192 * 8192,
                  input_bytes=8192 * 8192 * 2)
    return Graph("synthetic", (layer,), micro_batch=1, seq_len=8192, tokens=8192)


def timed(fn, repeat: int) -> tuple[float, object]:
    """Median of `repeat` calls after one warm-up call (graph and layer-cost caches filled)."""
    times, out = [], fn()
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    spec = perfmodel.get_workload("gpt3-175b")
    for sched, vp in (("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)):
        plan = ParallelPlan(tp=8, pp=8, vp=vp, global_batch=192, schedule=sched)
        system = resolve_system("a100-sxm4-80gb", None, plan.world)[0]
        for trace in (True, False):
            t, est = timed(functools.partial(des_estimate, spec, system, plan, trace=trace), 9)
            ops = 8 * 192 * vp * (3 if sched == "zb-h1" else 2)
            print(f"gpt3-175b pp8 m=192 {sched:11s} trace={trace!s:5s} {t * 1e3:8.1f} ms per estimate"
                  f"  ({ops:,} compute ops, step {est.step_time_s:.3f} s)")
    for p, m, target_s in ((16, 256, 1.0), (64, 1024, 10.0)):
        plan = ParallelPlan(pp=p, global_batch=m)
        system = resolve_system("a100-sxm4-80gb", None, plan.world)[0]
        t, _ = timed(functools.partial(des_estimate, None, system, plan, graph=uniform_graph(2 * p), trace=False),
                     3 if p < 64 else 1)
        print(f"synthetic 1f1b pp{p} m={m:<5d} {t * 1e3:8.1f} ms per estimate  ({2 * p * m:,} compute ops, "
              f"{2 * (p - 1) * m:,} sends; target < {target_s:g} s)")

if __name__ == "__main__":
    main()
