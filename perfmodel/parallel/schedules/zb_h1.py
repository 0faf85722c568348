"""ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism" §3.1): 1F1B's F and B order with
the backward split into B (input gradients, on the critical path) and W (weight gradients,
deferred). Stage s runs W(j) after B(j + s), so it holds at most p activations (1F1B's peak)
and the deferred W's fill the drain.

On uniform stages with f, b (incl. w) and w per micro-batch and t = f + b, m >= p:
    T = m·t + (p − 1)·(t − 2w)          (paper Fig. 3: (p − 1)(F + B − W), B without W)
so the bubble is the 1F1B idle time scaled by (t − 2w)/t. Stage s can defer only the W's of
micro-batches it has (s of them, at most m), so with fewer micro-batches than stages the bubble
shrinks by less: see `bubble_s`.
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

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, fwd_s: Num, bwd_s: Num, wgrad_s: Num) -> Num:
        t = fwd_s + bwd_s
        with np.errstate(invalid="ignore", divide="ignore"):
            factor = np.where(t > 0, np.maximum(0.0, t - 2 * wgrad_s) / np.where(t > 0, t, 1.0), 1.0)
        return idle_s * factor

    def in_flight(self, m: Num, p: Num, v: Num) -> Num:
        return np.minimum(m, p)


SCHEDULE = ZeroBubbleH1()
