"""GPipe (Huang et al. 2019): all forwards, then all backwards in reverse micro-batch order.
Bubble (p−1)·t on uniform stages, like 1F1B, but every micro-batch's activations are held."""

from __future__ import annotations

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


class GPipe(PipelineSchedule):
    name = "gpipe"

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in reversed(range(m))]

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num) -> Num:
        return idle_s

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        return m


SCHEDULE = GPipe()
