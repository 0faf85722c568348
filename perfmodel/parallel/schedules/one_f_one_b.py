"""1F1B (PipeDream-Flush, Narayanan et al. 2021 §2.2): p−s−1 warm-up forwards on stage s, then
one forward one backward. T = m·max t + (Σt − max t), i.e. (m + p − 1)·t on uniform stages
(exact for any m >= 1); stage s holds min(m, p − s) micro-batches in flight (p − s − 1
warm-up forwards and the steady state's one; Megatron-LM schedules.py
forward_backward_pipelining_without_interleaving, num_warmup_microbatches)."""

from __future__ import annotations

import numpy as np

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


def one_f_one_b_order(p: int, m: int, s: int) -> list[Work]:
    warm = min(p - s - 1, m)
    order: list[Work] = [("F", j, 0) for j in range(warm)]
    for j in range(m - warm):
        order += [("F", warm + j, 0), ("B", j, 0)]
    return order + [("B", j, 0) for j in range(m - warm, m)]


class OneFOneB(PipelineSchedule):
    name = "1f1b"

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        return one_f_one_b_order(p, m, s)

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        return idle_s

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        return np.minimum(m, p - s)


SCHEDULE = OneFOneB()
