"""DualPipe (DeepSeek-V3 Technical Report §3.2.1; deepseek-ai/DualPipe dualpipe/dualpipe.py @
3da1bbe, DualPipe.step): a bidirectional pipeline. Rank s holds two model chunks, stage s of the
forward direction and stage p − 1 − s of the reverse one, so every stage's weights live on two
ranks (twice the parameters per rank, the report's Table 2). Half the m micro-batches enter at
rank 0 and run stages 0 → p − 1 over ranks 0 → p − 1; the other half enter at rank p − 1 and run
the same stages over ranks p − 1 → 0. A rank's order is DualPipe.step's eight phases: forwards of
both directions to fill, then forward / backward pairs of opposite directions, with the
weight-gradient GEMMs (W) deferred at the fill and the drain as in zero-bubble pipelines. DeepSeek
overlap a pair's compute with its communication through the model's own overlapped_forward_backward
(the DualPipe README: "you will need to implement" it); perfmodel does so only where the plan says
moe_a2a_overlap (the MoE all-to-alls of one micro-batch behind the other's compute), which the
schedule alone does not turn on.

Needs p even, m even and m >= 2p (DualPipe.step's asserts) and one chunk per direction (vp 1).

Bubble: what the order itself gives on uniform stages of F (forward), B (input gradients) and W
(weight gradients), beyond m·(F + B + W). It does not depend on m for m >= 2p, so it is played once
for m = 2p (a longest path over the p ranks' sequences, O(p²), memoised). The analytic pipeline is
the largest over ranks of m·t_r + that bubble on rank r's own phases (`pipeline_s`); the layout
search evaluates the same bubble on columns from the order's path counts (`bubble_pieces`). The published form
(p/2 − 1)(F&B + B − 3W) counts an overlapped pair's time F&B; the order played without overlap
inside a pair (a pair's forward output leaves when the forward ends) gives less on equal phases:
F = B = W -> (p/2 − 1)·F against the published (p/2 − 1)·2F; B = 2F, W = F -> (3p/2 − 4)·F. Both
are far below 1F1B's (p − 1)(F + B + W).

In flight: at its peak rank 0 holds the activations of p forward-direction micro-batches and one
reverse one (p + 1 stage activations, Table 2); a stage is half of the rank's layers, so
(p + 1)/2 in a rank's units (memory.py counts the rank's two stages).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work

T = TypeVar("T")


def dualpipe_order(p: int, m: int, s: int) -> list[Work]:
    """Rank s's work as DualPipe.step issues it; the chunk field is the direction (0: stages run
    on ranks 0 → p − 1, 1: on ranks p − 1 → 0). A backward run whole is its B then its W; a
    zero-bubble one defers its W to the queue that the weight chunks pop, first in first out."""
    half_ranks, half = p // 2, m // 2
    hr = min(s, p - 1 - s)
    second = int(s >= half_ranks)  # DualPipe swaps the phases on the second half of the ranks
    f_next, b_next = [0, 0], [0, 0]
    deferred: deque[tuple[int, int]] = deque()
    out: list[Work] = []

    def fwd(phase: int) -> None:
        d = phase ^ second
        out.append(("F", f_next[d], d))
        f_next[d] += 1

    def bwd(phase: int, zero_bubble: bool = False) -> None:
        d = phase ^ second
        j = b_next[d]
        b_next[d] += 1
        out.append(("B", j, d))
        if zero_bubble:
            deferred.append((j, d))
        else:
            out.append(("W", j, d))

    def weight() -> None:
        j, d = deferred.popleft()
        out.append(("W", j, d))

    for _ in range((half_ranks - hr - 1) * 2):  # step 1: nF0
        fwd(0)
    for _ in range(hr + 1):  # step 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(half_ranks - hr - 1):  # step 3: nB1W1F1
        bwd(1, zero_bubble=True)
        weight()
        fwd(1)
    for _ in range(half - p + hr + 1):  # step 4 (main): nF0B1F1B0
        fwd(0)
        bwd(1)
        fwd(1)
        bwd(0)
    for _ in range(half_ranks - hr - 1):  # step 5: nB1F1B0
        bwd(1)
        fwd(1)
        bwd(0)
    zero_bubble = False
    for i in range(hr + 1):  # step 6: nB1B0, the second half of them zero-bubble
        if i == (hr + 1) // 2 and hr % 2 == 1:
            zero_bubble = True
        bwd(1, zero_bubble)
        if i == (hr + 1) // 2 and hr % 2 == 0:
            zero_bubble = True
        bwd(0, zero_bubble)
    for _ in range(half_ranks - hr - 1):  # step 7: nWB0
        weight()
        bwd(0, zero_bubble=True)
    for _ in range(hr + 1):  # step 8: nW
        weight()
    return out


def _position(p: int, s: int, direction: int) -> int:
    return s if direction == 0 else p - 1 - s


@lru_cache(maxsize=64)
def _program(p: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Each rank's order for m = 2p as (phase 0 F / 1 B / 2 W, event it waits for or -1, event it
    completes), events numbered (kind, micro-batch, direction, position)."""
    m = 2 * p

    def event(kind: int, j: int, d: int, pos: int) -> int:
        return ((kind * p + j) * 2 + d) * p + pos

    out = []
    for s in range(p):
        prog = []
        for kind, j, d in dualpipe_order(p, m, s):
            k = "FBW".index(kind)
            pos = _position(p, s, d)
            dep = event(0, j, d, pos - 1) if k == 0 and pos > 0 else (
                event(1, j, d, pos + 1) if k == 1 and pos < p - 1 else -1)
            prog.append((k, dep, event(k, j, d, pos)))
        out.append(tuple(prog))
    return tuple(out)


def _play(p: int, start: T, join: Callable[[T, T], T], step: Callable[[T, int], T]) -> list[T]:
    """Each rank's clock after the order for m = 2p (_program), events in an order that respects
    their dependencies: a rank's clock starts at `start`, joins (`join`) the completion of the
    event it waits for, and passes each phase (`step`, phase 0 F / 1 B / 2 W). With numbers, max
    and + this is the makespan; with sets of path counts, the longest path's candidates."""
    progs = _program(p)
    done: list[T | None] = [None] * (3 * 2 * p * 2 * p)
    clock, nxt = [start] * p, [0] * p
    moved = True
    while moved:
        moved = False
        for s, prog in enumerate(progs):
            i, c = nxt[s], clock[s]
            while i < len(prog):
                k, dep, ev = prog[i]
                if dep >= 0:
                    ready = done[dep]
                    if ready is None:
                        break
                    c = join(c, ready)
                c = step(c, k)
                done[ev] = c
                i += 1
            if i != nxt[s]:
                nxt[s], clock[s], moved = i, c, True
    if any(nxt[s] < len(progs[s]) for s in range(p)):
        raise AssertionError(f"DualPipe order deadlocked for p {p}")
    return clock


@lru_cache(maxsize=4096)
def uniform_bubble_s(p: int, f: float, b: float, w: float) -> float:
    """The order's makespan on p ranks of equal F, B, W seconds per micro-batch (m = 2p, sends
    free: p2p is in F and B), less 2p·(F + B + W): a longest path, so it never grows when a phase
    shrinks by more than the 2p·(F + B + W) it takes off."""
    dur = (f, b, w)
    clock = _play(p, 0.0, max, lambda c, k: c + dur[k])
    return max(clock) - 2 * p * (f + b + w)


@lru_cache(maxsize=64)
def bubble_pieces(p: int) -> npt.NDArray[np.float64]:
    """The makespan of the order on p ranks of equal F, B, W seconds (m = 2p) as the maximum of
    linear forms nF·F + nB·B + nW·W, one row (nF, nB, nW) per path through the order that is the
    longest for some F, B, W >= 0: the count triples of every path, kept where no other path's
    triple is at least as large in all three (a longest path over the same dependency graph that
    uniform_bubble_s walks, with sets of triples in place of one length). The layout search
    evaluates uniform_bubble_s as max(pieces @ (F, B, W)) - 2p·(F + B + W) on columns; p 16 gives
    120 rows, p 32 about 500 (a second to build, once)."""
    clock = _play(p, frozenset({(0, 0, 0)}), lambda x, y: _undominated(x | y),
                  lambda c, k: frozenset((f + (k == 0), b + (k == 1), w + (k == 2)) for f, b, w in c))
    return np.array(sorted(_undominated(frozenset().union(*clock))), dtype=float)


def _undominated(triples: frozenset[tuple[int, int, int]]) -> frozenset[tuple[int, int, int]]:
    keep: list[tuple[int, int, int]] = []
    for q in sorted(triples, reverse=True):
        if not any(k[0] >= q[0] and k[1] >= q[1] and k[2] >= q[2] for k in keep):
            keep.append(q)
    return frozenset(keep)


def uniform_bubble_columns(p: int, f: npt.ArrayLike, b: npt.ArrayLike, w: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """uniform_bubble_s on columns of F, B, W (one pipeline depth p), from bubble_pieces."""
    fbw = np.stack(np.broadcast_arrays(np.asarray(f, float), np.asarray(b, float), np.asarray(w, float)), axis=-1)
    return np.max(fbw @ bubble_pieces(p).T, axis=-1) - 2 * p * fbw.sum(axis=-1)


class DualPipe(PipelineSchedule):
    name = "dualpipe"
    defers_wgrad = True
    per_rank_pipeline = True
    searched_by_default = False  # DeepSeek's own pipeline (deepseek-ai/DualPipe), in no stack perfmodel models

    def grid_mask(self, pp: npt.NDArray[np.int64], m: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return np.asarray((pp % 2 == 0) & (m % 2 == 0) & (m >= 2 * pp))

    def order(self, p: int, m: int, v: int, s: int) -> list[Work]:
        return dualpipe_order(p, m, s)

    def stage_s(self, fwd_s: Num, bwd_s: Num, bwd_input_s: Num, wgrad_s: Num) -> Num:
        return fwd_s + bwd_input_s + wgrad_s

    def bubble_s(self, idle_s: Num, m: Num, p: Num, v: Num, t_avg_s: Num, wgrad_avg_s: Num,
                 split_excess_s: Num = 0.0) -> Num:
        """The uniform bubble of the mean stage, its forward taken as a third of it (only the
        interface's columns are known here; the analytic engine calls pipeline_s)."""
        one = np.vectorize(lambda pp, tt, ww: uniform_bubble_s(int(pp), tt / 3, max(0.0, 2 * tt / 3 - ww), float(ww))
                           if pp > 1 else 0.0, otypes=[float])
        return one(p, t_avg_s, wgrad_avg_s)

    def pipeline_s(self, stage_s: Sequence[float], fwd_s: Sequence[float], wgrad_s: Sequence[float], m: int,
                   v: int) -> float:
        """The largest over ranks of m·t_r + the uniform bubble of rank r's own phases: each rank
        as if every rank ran like it (a rank's two stages mirror its partner's, so DualPipe's ranks
        pair up). Each term is a longest path in phases that only shrink with more hardware, so
        the pipeline never slows when a resource grows (a mean-stage bubble could: a shorter W
        can lengthen it while t_max stays)."""
        p = len(stage_s)
        if p == 1:
            return m * stage_s[0]
        return max(m * t + uniform_bubble_s(p, f, max(0.0, t - f - w), w)
                   for t, f, w in zip(stage_s, fwd_s, wgrad_s, strict=True))

    def rank_bubbles_s(self, p: int, fwd_s: npt.NDArray[np.float64], bwd_input_s: npt.NDArray[np.float64],
                       wgrad_s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return uniform_bubble_columns(p, fwd_s, bwd_input_s, wgrad_s)

    def in_flight(self, m: Num, p: Num, v: Num, s: Num = 0) -> Num:
        return np.minimum(m, p + 1) / 2

    # where a rank's work sits: two directions over the same p stages
    def rank_stages(self, p: int, v: int, s: int) -> tuple[int, ...]:
        return s, p - 1 - s

    def run_share(self) -> float:
        return 0.5

    def place(self, p: int, v: int, s: int, ch: int) -> tuple[int, int]:
        return ch, _position(p, s, ch)

    def depth(self, p: int, v: int) -> int:
        return p

    def rank_at(self, p: int, v: int, pipeline: int, position: int) -> int:
        return _position(p, position, pipeline)

    def micro_batches_per_chunk(self, m: int) -> int:
        return m // 2

    def check(self, pp: int, vp: int, m: int) -> list[str]:
        from perfmodel.errors import LayoutError

        notes = super().check(pp, vp, m)
        if pp % 2 or m % 2 or m < 2 * pp:
            raise LayoutError(f"schedule 'dualpipe' needs an even pp, an even number of micro-batches and at least "
                              f"2 x pp of them (DualPipe.step's asserts): got pp {pp}, {m} micro-batches")
        return notes


SCHEDULE = DualPipe()
