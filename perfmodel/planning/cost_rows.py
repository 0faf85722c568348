"""The rows the layout search keeps per distinct shape: a pipeline's per-rank stage costs
(StageTable), the named float columns of one layout's shared and per-tail-rank costs
(COST_COLUMNS, which planning/evaluate.py fills from the engines' own functions) and the
NumPy helpers that index a grid by its distinct rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.parallel.schedules import SCHEDULES
from perfmodel.planning.space import SCHEDULE_LIST


@dataclass(frozen=True)
class StageTable:
    """Per (shape, pp, vp): what the closed forms need from the ranks, unrolled to scalars."""

    t_max_s: float  # max over ranks of the schedule's stage time (no p2p), per micro-batch
    t_sum_s: float
    avg_wgrad_s: float
    worst_rank: int
    act_per_mb_bytes: tuple[float, ...]  # per memory stage: activation bytes per in-flight micro-batch
    act_working_bytes: tuple[float, ...]
    # per rank: stage time (no p2p), forward, backward and weight-gradient seconds per micro-batch
    # (the chunk windows that cover its pipeline sends under overlap_p2p_comm; the phases a
    # per_rank_pipeline schedule reads)
    all_t_s: tuple[float, ...] = ()
    all_fwd_s: tuple[float, ...] = ()
    all_bwd_s: tuple[float, ...] = ()
    all_wgrad_s: tuple[float, ...] = ()
    # per rank: parameters held, layer instances (FSDP units) and its first unit's (dense, expert)
    # parameters (stages.first_unit_params), for the data-parallel tail
    all_dense_params: tuple[float, ...] = ()
    all_expert_params: tuple[float, ...] = ()
    all_layers: tuple[float, ...] = ()
    all_first_params: tuple[tuple[float, float], ...] = ()


# Per distinct (tp, cp, ep, sp, mb, rec, pp, vp, dp, split, a2a_m, place): the shared costs of that
# layout, one row of floats (rows stack into a table without a per-field copy; columns by name).
SHARED_COLUMNS = (
    "t_max_s",  # max over ranks of the stage time with the rank's own exposed p2p
    "t_sum_s",  # their sum
    "t_worst_s",  # the slowest rank's (StageTable.worst_rank), p2p included
    "avg_wgrad_s",
    "amax_per_mb_s",  # delayed scaling's amax all-reduces per micro-batch (stages.delayed_amax_s_per_micro_batch)
    "split_excess_s",  # max forward + max backward - max stage time over the ranks (schedules.base.split_excess_s)
)
# per candidate rank of the step's tail (analytic.tail_candidates: the slowest, the first, the last):
# its windows, parameters and units, exposed p2p, drain lead, DP collectives (stages.DpCollectives),
# the optimizer work that is not element-wise (tied-embedding sync, sp replicated gradients, Muon) and
# the phase that makes its gradients final (closed_forms.grad_window_s)
TAIL_COLUMNS = ("fwd_s", "bwd_s", "dense_params", "expert_params", "layers", "hops_s", "lead_s", "all_reduce_s",
                "reduce_scatter_s", "all_gather_s", "unit_all_gather_s", "unit_reduce_scatter_s", "unit_copy_fwd_s",
                "unit_copy_bwd_s", "first_all_gather_s", "first_reduce_scatter_s", "first_share", "optimizer_extra_s",
                "grad_window_s")
N_TAILS = 3
COST_COLUMNS = SHARED_COLUMNS + tuple(f"{c}_{k}" for k in range(N_TAILS) for c in TAIL_COLUMNS)


class RowTable:
    """Records computed once per key, kept as the rows of one growing NumPy array, so a grid
    takes its rows by index instead of converting Python records on every pass."""

    def __init__(self) -> None:
        self.index: dict[tuple[Any, ...], int] = {}
        self.rows: list[Any] = []
        self._array: np.ndarray | None = None

    def lookup(self, keys: list[tuple[Any, ...]], make: Any) -> np.ndarray:
        """Row numbers of `keys`, computing `make(*key)` for the keys not seen before."""
        index = self.index
        for key in keys:
            if key not in index:
                index[key] = len(self.rows)
                self.rows.append(make(*key))
        return np.fromiter((index[key] for key in keys), dtype=np.int64, count=len(keys))

    def array(self) -> np.ndarray:
        if self._array is None or len(self._array) != len(self.rows):
            self._array = np.array(self.rows, dtype=float)
        return self._array


def cost_columns(table: np.ndarray) -> dict[str, np.ndarray]:
    """{column: its values} of a table whose rows are layout_costs rows (COST_COLUMNS)."""
    return {name: table[:, j] for j, name in enumerate(COST_COLUMNS)}


def first_params(counts: np.ndarray, v: dict[str, np.ndarray]) -> tuple[float, float]:
    """(dense, expert) parameters of a rank's first FSDP unit: the first layer in model order it
    holds (stages.first_unit_params)."""
    held = np.flatnonzero(counts > 0)
    if not len(held):
        return 0.0, 0.0
    return float(v["dense"][held[0]]), float(v["expert"][held[0]])


def placements(g: dict[str, np.ndarray]) -> np.ndarray:
    """Per grid row, the schedule that places its chunks on the ranks where that is not Megatron's
    c·pp + s (DualPipe's two stages per rank: an index into SCHEDULE_LIST), else -1."""
    own = np.array([k if SCHEDULES[name].per_rank_pipeline else -1 for k, name in enumerate(SCHEDULE_LIST)])
    return np.where(g["pp"] > 1, own[g["sched"]], -1).astype(np.int64)


def placement_name(place: int) -> str:
    return "1f1b" if place < 0 else SCHEDULE_LIST[place]


def schedule_of(place: int) -> str | None:
    return None if place < 0 else SCHEDULE_LIST[place]


def pad(xs: tuple[float, ...], k: int) -> tuple[float, ...]:
    return xs + (xs[-1],) * (k - len(xs))


def unique_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's distinct row) of integer columns, through one
    mixed-radix int64 key (np.unique(axis=0) sorts rows lexicographically, ten times slower)."""
    codes, sizes, values = [], [], []
    for col in cols:
        vals, code = np.unique(col, return_inverse=True)
        codes.append(code.reshape(-1))
        sizes.append(len(vals))
        values.append(vals)
    key = np.ravel_multi_index(codes, sizes)
    ukey, inv = np.unique(key, return_inverse=True)
    parts = np.unravel_index(ukey, sizes)
    uniq = np.stack([vals[p] for vals, p in zip(values, parts, strict=True)], axis=1)
    return uniq, inv.reshape(-1)
