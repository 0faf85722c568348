"""What a pipeline schedule is: an order of work per stage (the DES plays it), a closed-form
bubble and the micro-batches whose activations it holds (the analytic engine and the planner
evaluate them, on floats and on NumPy columns alike).

Units: seconds for times, micro-batches for `in_flight` (a whole rank's layers' worth: a chunk
of a v-chunk rank counts 1/v). A rank's time per micro-batch t_s is
`stage_s` (forward + backward, or forward + input-gradient + weight-gradient phases for a
schedule that splits them) plus its p2p sends; `idle_s` is Σ_s t_s − max_s t_s, the 1F1B bubble
(Narayanan et al. 2021 §2.2), and a schedule's bubble is a function of it, of the mean t_s
(`t_avg_s`), of the mean weight-gradient phase (`wgrad_avg_s`) and of `split_excess_s`,
max_s f_s + max_s b_s − max_s t_s (f_s a rank's forward with its send, b_s = t_s − f_s): what a
schedule that runs every forward before any backward waits beyond one that alternates them, 0
when one rank is the slowest in both phases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

Work = tuple[str, int, int]  # (kind F / B / W, micro-batch, model chunk)
Num = float | npt.NDArray[np.float64]


def split_excess_s(stage_s: Sequence[float], fwd_s: Sequence[float]) -> float:
    """max_s f_s + max_s b_s − max_s t_s over the ranks (module docstring), >= 0."""
    return max(0.0, max(fwd_s) + max(t - f for t, f in zip(stage_s, fwd_s, strict=True)) - max(stage_s))


class PipelineSchedule:
    """One schedule. Subclasses set the class variables and override the three methods."""

    name: ClassVar[str]
    chunked: ClassVar[bool] = False  # runs vp > 1 model chunks per rank
    defers_wgrad: ClassVar[bool] = False  # splits backward into B (input grads) and W (weight grads)
    searched: ClassVar[bool] = True  # the layout search's vectorised evaluator (planning/evaluate.py) models it
    # the pipeline reads each rank's own phases (pipeline_s), not the mean stage's (bubble_s): the
    # layout search evaluates pipeline_s per rank for it (planning/evaluate.py)
    per_rank_pipeline: ClassVar[bool] = False
    # in the layout search's default schedules (a schedule no common stack runs is searched on request)
    searched_by_default: ClassVar[bool] = True

    # -- where a rank's work sits: the engines, memory and the DES read these ---------------------
    def rank_stages(self, p: int, v: int, s: int) -> tuple[int, ...]:
        """The model chunks rank s holds, as indices of the plan's p·v chunks (parallel/split.py
        chunk_layers), in the order of the Work tuples' chunk field: Megatron's layout puts chunk c
        of rank s at c·p + s."""
        return tuple(c * p + s for c in range(v))

    def run_share(self) -> float:
        """The share of a rank's chunks one micro-batch runs through (1: every one)."""
        return 1.0

    def place(self, p: int, v: int, s: int, ch: int) -> tuple[int, int]:
        """(pipeline, position) of chunk ch of rank s: a micro-batch's forward runs a pipeline's
        positions 0, 1, ... in order and its backward in reverse (one pipeline of p·v positions)."""
        return 0, ch * p + s

    def depth(self, p: int, v: int) -> int:
        """Positions of one pipeline."""
        return p * v

    def rank_at(self, p: int, v: int, pipeline: int, position: int) -> int:
        """The rank that runs `position` of `pipeline`."""
        return position % p

    def micro_batches_per_chunk(self, m: int) -> int:
        """Micro-batches that pass one chunk of a rank: its gradients are final after that many."""
        return m

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        """Stage s's sequence of work for m micro-batches over p ranks with v chunks each."""
        raise NotImplementedError

    def stage_s(self, fwd_s: Num, bwd_s: Num, bwd_input_s: Num, wgrad_s: Num) -> Num:
        """A rank's compute seconds per micro-batch under this schedule (p2p excluded)."""
        return fwd_s + bwd_s

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        """Pipeline seconds beyond m·max_s t_s (see the module docstring)."""
        raise NotImplementedError

    def pipeline_s(self, stage_s: Sequence[float], fwd_s: Sequence[float], wgrad_s: Sequence[float], m: int,
                   v: int) -> float:
        """Seconds of the pipeline: m micro-batches over ranks taking stage_s[r] each (p2p
        included), of which fwd_s[r] forward and wgrad_s[r] weight gradients: m·max t + the
        bubble. The analytic engine calls this; the planner evaluates bubble_s on columns."""
        p = len(stage_s)
        t_max, t_sum = max(stage_s), sum(stage_s)
        if p == 1:
            return m * t_max
        excess = split_excess_s(stage_s, fwd_s)
        return m * t_max + float(self.bubble_s(t_sum - t_max, m, p, v, t_sum / p, sum(wgrad_s) / p, excess))

    def rank_bubbles_s(self, p: int, fwd_s: npt.NDArray[np.float64], bwd_input_s: npt.NDArray[np.float64],
                       wgrad_s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """For a per_rank_pipeline schedule: per rank, what its pipeline_s adds to m·t_r (the bubble
        of the rank's own phases), on columns."""
        raise NotImplementedError

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        """Micro-batches of a whole rank's activations pipeline rank s holds at its peak, for
        p > 1: the most forwards `order(p, m, v, s)` has run whose backward (weight gradient,
        for a schedule that defers it) has not, over v (tests/test_schedules.py checks it)."""
        raise NotImplementedError

    def grid_mask(self, pp: npt.NDArray[np.int64], m: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which (pp > 1, micro-batches) columns of the layout search this schedule runs (check's
        conditions on pp and m, vectorised; vp is the grid's own rule)."""
        return np.ones(np.shape(pp), dtype=bool)

    def check(self, pp: int, vp: int, m: int) -> list[str]:
        """Notes on a layout this schedule runs with caveats; a LayoutError if it cannot run it."""
        from perfmodel.errors import LayoutError

        if pp == 1 and self.defers_wgrad:
            # the split backward exists to fill pipeline bubbles; alone it only loses the
            # host / GPU overlap between the two phases (and the engines would disagree on it)
            raise LayoutError(f"schedule {self.name!r} defers weight gradients into pipeline bubbles; with pp 1 "
                              "there is no pipeline: use pp > 1, or leave the schedule unset (allowed at pp 1: "
                              "1f1b, gpipe)")
        if vp > 1 and not self.chunked:
            raise LayoutError(f"schedule {self.name!r} runs one model chunk per pipeline rank: vp must be 1 (got vp {vp}); "
                              "use schedule 'interleaved' for virtual stages")
        if self.chunked and vp == 1:
            raise LayoutError(f"schedule {self.name!r} needs vp > 1 (got vp 1)")
        return []


__all__ = ["Num", "PipelineSchedule", "Work"]
