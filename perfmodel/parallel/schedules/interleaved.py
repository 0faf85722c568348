"""Megatron-LM's interleaved 1F1B (Narayanan et al. 2021 §2.2; schedules.py,
forward_backward_pipelining_with_interleaving): each rank runs v model chunks, virtual stage
c·p + s is chunk c of rank s; micro-batches go in groups of p, chunk-major.

Bubble on uniform stages of t per micro-batch (all v chunks of a rank), k = min(m, p):
    T = max(m, p)·t + (k − 1)·t/v
For m >= p this is m·t + (p − 1)·t/v (the paper's bubble divided by v). For m < p a rank idles
between chunk rounds: the first micro-batch's chunk c + 1 waits for its chunk c to cross all p
ranks, so the pipeline is p·t deep and the other m − 1 micro-batches add t/v each. As a factor
of the 1F1B idle time (p − 1)·t: bubble = idle·((k − 1)/v + (p − k))/(p − 1).
In flight on rank s: Megatron's 2(p − s − 1) + (v − 1)·p warm-up chunk forwards plus the steady
state's one (schedules.py, get_num_warmup_microbatches), each a 1/v of the rank's layers:
(2(p − s − 1) + (v − 1)·p + 1)/v, on rank 0 p·(1 + (p − 1)/(p·v)) (paper §2.2.2); all m
when every forward runs first (m <= p, or m not a multiple of p).
"""

from __future__ import annotations

import numpy as np

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


class Interleaved(PipelineSchedule):
    name = "interleaved"
    chunked = True

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        fwd = [(j, c) for g in range(0, m, p) for c in range(v) for j in range(g, min(m, g + p))]
        total = m * v
        # Megatron needs m a multiple of p; otherwise its order can deadlock, so all forwards go first
        warm = total if m <= p or m % p else min(2 * (p - s - 1) + (v - 1) * p, total)
        order: list[Work] = [("F", j, c) for j, c in fwd[:warm]]
        for k in range(total - warm):
            j, c = fwd[warm + k]
            jb, cb = fwd[k]
            order += [("F", j, c), ("B", jb, v - 1 - cb)]
        return order + [("B", j, v - 1 - c) for j, c in fwd[total - warm:]]

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num) -> Num:
        k = np.minimum(m, p)
        return idle_s * ((k - 1) / v + (p - k)) / np.maximum(p - 1, 1)

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        steady = np.minimum(m, (2 * (p - s - 1) + (v - 1) * p + 1) / v)
        return np.where((m <= p) | (np.mod(m, p) != 0), m, steady)

    def check(self, pp: int, vp: int, m: int) -> list[str]:
        notes = super().check(pp, vp, m)
        if m > pp and m % pp:
            notes.append(f"interleaved schedule with {m} micro-batches not a multiple of pp {pp} (Megatron requires it): "
                         "all forwards run first")
        return notes


SCHEDULE = Interleaved()
