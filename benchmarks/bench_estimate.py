"""How long one analytical estimate takes (target: well under a millisecond).

    python benchmarks/bench_estimate.py
Prints the median wall time per call for a few layouts, cold (first call, graph built) and warm.
"""

from __future__ import annotations

import statistics
import time

import perfmodel
from perfmodel import ParallelPlan

CASES = [
    ("gpt3-175b", "a100-sxm4-80gb", ParallelPlan(dp=16, tp=8, pp=8, global_batch=1536, recompute="full")),
    ("llama3-70b", "h100-sxm5-80gb", ParallelPlan(dp=2, tp=8, pp=4, global_batch=256, recompute="selective", sequence_parallel=True)),
    ("mixtral-8x7b", "h100-sxm5-80gb", ParallelPlan(dp=8, tp=2, pp=2, ep=8, global_batch=512, sequence_parallel=True)),
]


def main() -> None:
    for wl, hw, plan in CASES:
        try:
            t0 = time.perf_counter()
            perfmodel.estimate(wl, hw, plan)
            cold = time.perf_counter() - t0
        except perfmodel.PerfmodelError as e:
            print(f"{wl:14s} {hw:16s} skipped: {e}")
            continue
        times = []
        for _ in range(500):
            t0 = time.perf_counter()
            perfmodel.estimate(wl, hw, plan)
            times.append(time.perf_counter() - t0)
        # a new plan each call: caches on (system, plan, layer) miss, the graph cache hits
        fresh = []
        for i in range(200):
            p = plan.model_copy(update={"global_batch": plan.global_batch * (i + 2)})
            t0 = time.perf_counter()
            perfmodel.estimate(wl, hw, p)
            fresh.append(time.perf_counter() - t0)
        print(f"{wl:14s} {hw:16s} cold {cold * 1e3:7.2f} ms   warm {statistics.median(times) * 1e6:7.1f} us"
              f"   new plan {statistics.median(fresh) * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
