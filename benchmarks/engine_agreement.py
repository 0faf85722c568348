"""How far the analytic engine is from the discrete-event one on random layouts.

    python benchmarks/engine_agreement.py [--seed 1] [--layouts 200] [--schedules all|dualpipe]
                                          [--hardware h100-sxm5-80gb]

The analytic engine's closed forms stand for what the DES plays; a layout where the two differ
by more than a few per cent is a closed form to look at (the session notes list the ones found
this way and fixed). Random layouts of five workloads on one system (H100 SXM unless --hardware): tp, pp, dp, ep, vp,
micro-batch, sequence length, every schedule, ZeRO 0-3, recompute and the overlap flags; layouts
a workload cannot run are skipped. Prints the median |DES / analytic - 1|, how many layouts
differ by more than 2 % and 5 %, and the worst ones. Physics only (no calibration profile), so
the two engines read the same rates.
"""

from __future__ import annotations

import argparse
import random
import statistics
from typing import Any

from perfmodel.api import estimate
from perfmodel.errors import PerfmodelError
from perfmodel.parallel.plan import ParallelPlan

WORKLOADS = ("gpt2-124m", "llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b")
MOE = ("mixtral-8x7b", "qwen3-30b-a3b")


def random_layout(rng: random.Random, schedules: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    wl = rng.choice(WORKLOADS)
    kw: dict[str, Any] = dict(tp=rng.choice([1, 2, 4, 8]), pp=rng.choice([1, 2, 4, 8]), dp=rng.choice([1, 2, 4, 8]),
                              micro_batch=rng.choice([1, 2]), seq_len=rng.choice([1024, 2048, 4096]))
    if wl in MOE:
        kw["ep"] = rng.choice([1, 2, 4, 8])
    if kw["pp"] > 1:
        kw["schedule"] = rng.choice(schedules)
        kw["vp"] = rng.choice([2, 3]) if kw["schedule"] == "interleaved" else 1
    kw["global_batch"] = rng.choice([1, 2, 3, 4, 6, 8, 16]) * kw["micro_batch"] * kw["dp"]
    kw.update(zero_stage=rng.choice([0, 1, 2, 3]), recompute=rng.choice(["none", "selective", "full"]),
              overlap_dp_comm=rng.random() < 0.7, overlap_p2p_comm=rng.random() < 0.5)
    kw["sequence_parallel"] = kw["tp"] > 1 and rng.random() < 0.5
    return wl, kw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layouts", type=int, default=200)
    ap.add_argument("--schedules", choices=("all", "dualpipe"), default="all")
    ap.add_argument("--hardware", default="h100-sxm5-80gb", help="an accelerator, node or cluster id")
    a = ap.parse_args(argv)
    schedules = ("dualpipe",) if a.schedules == "dualpipe" else ("1f1b", "gpipe", "interleaved", "zb-h1")
    rng = random.Random(a.seed)
    rows: list[tuple[float, str, dict[str, Any]]] = []
    while len(rows) < a.layouts:
        wl, kw = random_layout(rng, schedules)
        try:
            plan = ParallelPlan(**kw)
            an = estimate(wl, a.hardware, plan, engine="analytic", calibration="none")
            des = estimate(wl, a.hardware, plan, engine="des", calibration="none")
        except PerfmodelError:
            continue
        rows.append((des.step_time_s / an.step_time_s - 1, wl, kw))
    off = [abs(r) for r, _, _ in rows]
    print(f"{len(rows)} layouts: median |DES/analytic - 1| {statistics.median(off):.2%}, "
          f"over 2 %: {sum(x > 0.02 for x in off)}, over 5 %: {sum(x > 0.05 for x in off)}")
    for r, wl, kw in sorted(rows, key=lambda x: -abs(x[0]))[:8]:
        print(f"  {r:+6.1%}  {wl:14s} {kw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
