"""ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism" §3.1): 1F1B's F and B order with
the backward split into B (input gradients, on the critical path) and W (weight gradients,
deferred), each run as a phase of its own (`LayerTime.bwd_input_s`, `wgrad_s`). Stage s runs
W(j) after B(j + s), so it holds at most p activations (1F1B's peak) and the deferred W's fill
the drain.

On uniform stages of t = f + B + W per micro-batch (p2p included in t):
    T = (m + p − 1)·t − (2(p − 1) − max(0, p − m))·W
For m >= p this is the paper's m·t + (p − 1)·(t − 2W) (Fig. 3: (p − 1)(F + B − W)); with fewer
micro-batches than stages, stage s can defer only the W's it has, and the DES order gives
(p − m)·W back (one micro-batch: the F and B chain through every stage, then the last W).
As a factor of the 1F1B idle time (p − 1)·t:
    bubble = idle·(1 − c·W/t),  c = (2(p − 1) − max(0, p − m))/(p − 1)
In T every cost enters with a positive weight (W with m − p + 1 + max(0, p − m) >= 1), so
faster hardware never slows the step.
"""

from __future__ import annotations

import numpy as np

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work
from perfmodel.parallel.schedules.one_f_one_b import one_f_one_b_order


class ZeroBubbleH1(PipelineSchedule):
    name = "zb-h1"
    defers_wgrad = True

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        order: list[Work] = []
        n_w = 0
        for work in one_f_one_b_order(p, m, s):
            order.append(work)
            if work[0] == "B" and work[1] - s >= 0:
                order.append(("W", work[1] - s, 0))
                n_w += 1
        return order + [("W", j, 0) for j in range(n_w, m)]

    def stage_s(self, fwd_s: Num, bwd_s: Num, bwd_input_s: Num, wgrad_s: Num) -> Num:
        return fwd_s + bwd_input_s + wgrad_s

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        c = (2 * (p - 1) - np.maximum(0, p - m)) / np.maximum(p - 1, 1)
        t = np.where(t_avg_s > 0, t_avg_s, 1.0)
        return np.maximum(0.0, idle_s * (1 - c * wgrad_avg_s / t))

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        return np.minimum(m, p)


SCHEDULE = ZeroBubbleH1()
