"""Megatron-LM's interleaved 1F1B (Narayanan et al. 2021 §2.2; schedules.py,
forward_backward_pipelining_with_interleaving): each rank runs v model chunks, virtual stage
c·p + s is chunk c of rank s; micro-batches go in groups of g, chunk-major.

The group g is Megatron-Core's microbatch_group_size_per_vp_stage (schedules.py,
get_schedule_table; default pp). It refuses a last group of fewer than pp micro-batches
(0 < m mod g < pp), so for m > p not a multiple of p the default cannot run; the order here takes
the smallest g in [p, m] that it accepts (m mod g = 0 or >= p; g = m always is), which is what a
run with that count must set. PyTorch's ScheduleInterleaved1F1B takes groups of m // (m // p),
one of the same kind where it divides m.

Bubble on uniform stages of t per micro-batch (all v chunks of a rank), k = min(m, p):
    T = max(m, p)·t + (k − 1)·t/v
For m >= p this is m·t + (p − 1)·t/v (the paper's bubble divided by v). For m < p a rank idles
between chunk rounds: the first micro-batch's chunk c + 1 waits for its chunk c to cross all p
ranks, so the pipeline is p·t deep and the other m − 1 micro-batches add t/v each. As a factor
of the 1F1B idle time (p − 1)·t: bubble = idle·((k − 1)/v + (p − k))/(p − 1).
With groups of g >= p the steady state never waits on a dependency, so the bubble is the same
(p − 1)·t/v for every m >= p (tests/test_des.py holds the DES to it).
In flight on rank s: Megatron's 2(p − s − 1) + (v − 1)·g warm-up chunk forwards plus the steady
state's one (schedules.py, get_num_warmup_microbatches), each a 1/v of the rank's layers:
(2(p − s − 1) + (v − 1)·g + 1)/v, for g = p on rank 0 p·(1 + (p − 1)/(p·v)) (paper §2.2.2);
all m when every forward runs first (m < p, or a warm-up as long as the step).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


@lru_cache(maxsize=4096)
def _group(m: int, p: int) -> int:
    if m <= p or m % p == 0:
        return p
    return next(g for g in range(p + 1, m + 1) if m % g == 0 or m % g >= p)


def group_size(m: Num, p: Num) -> Num:
    """Micro-batches per group (microbatch_group_size_per_vp_stage, see the module docstring),
    on floats or NumPy columns (computed once per distinct (m, p))."""
    if np.ndim(m) == 0 and np.ndim(p) == 0:
        return float(_group(int(m), int(p)))
    mb, pb = np.broadcast_arrays(np.asarray(m, dtype=np.int64), np.asarray(p, dtype=np.int64))
    out = pb.astype(float)
    odd = (mb > pb) & (mb % np.maximum(pb, 1) != 0)
    if odd.any():
        keys, inv = np.unique(mb[odd] * (1 << 32) + pb[odd], return_inverse=True)
        out[odd] = np.array([_group(int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys], dtype=float)[inv.ravel()]
    return out


class Interleaved(PipelineSchedule):
    name = "interleaved"
    chunked = True

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        size = _group(m, p)
        fwd = [(j, c) for g in range(0, m, size) for c in range(v) for j in range(g, min(m, g + size))]
        total = m * v
        warm = total if m < p else min(2 * (p - s - 1) + (v - 1) * size, total)
        order: list[Work] = [("F", j, c) for j, c in fwd[:warm]]
        for k in range(total - warm):
            j, c = fwd[warm + k]
            jb, cb = fwd[k]
            order += [("F", j, c), ("B", jb, v - 1 - cb)]
        return order + [("B", j, v - 1 - c) for j, c in fwd[total - warm:]]

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        k = np.minimum(m, p)
        return idle_s * ((k - 1) / v + (p - k)) / np.maximum(p - 1, 1)

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        steady = np.minimum(m, (2 * (p - s - 1) + (v - 1) * group_size(m, p) + 1) / v)
        return np.where(m < p, m, steady)

    def check(self, pp: int, vp: int, m: int) -> list[str]:
        notes = super().check(pp, vp, m)
        if m > pp and m % pp:
            notes.append(f"interleaved schedule with {m} micro-batches, not a multiple of pp {pp}: micro-batches run in "
                         f"groups of {_group(m, pp)} (Megatron's microbatch_group_size_per_vp_stage; its default, pp, "
                         "refuses this count)")
        return notes


SCHEDULE = Interleaved()
