"""GPipe (Huang et al. 2019): all forwards, then all backwards in reverse micro-batch order.
Every micro-batch's activations are held.

Each phase is a flow shop of m identical jobs over the p ranks: the forwards end after
Σ_s f_s + (m − 1)·max_s f_s, and the backwards, which start on the last rank as soon as its own
forwards are done, take Σ_s b_s + (m − 1)·max_s b_s. So T = Σ_s t_s + (m − 1)(max f + max b):
the 1F1B time (m − 1)·max t + Σ t plus (m − 1)·split_excess_s, where the rank with the slowest
forward is not the one with the slowest backward (a last stage whose LM head and loss weigh more
in one phase than the other). On uniform stages both are (m + p − 1)·t."""

from __future__ import annotations

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


class GPipe(PipelineSchedule):
    name = "gpipe"

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in reversed(range(m))]

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        return idle_s + (m - 1) * split_excess_s

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        return m


SCHEDULE = GPipe()
