"""The layout grid of a search: every (dp, tp, pp, cp, ep, vp, sp, ZeRO, micro-batch, recompute,
schedule) a job could run with, as NumPy columns, with the invalid combinations masked out.

Validity follows `ParallelPlan` and `ParallelPlan.validate_for` (tp divides the heads and is
divided by, or divides, the KV heads; cp divides the sequence; ep divides the experts and
tp·cp·dp (MoE parallel folding, etp 1); pp·vp chunks no more than the layers; global batch a multiple of micro-batch · dp) plus
two rules of the frameworks themselves: Megatron's interleaved schedule needs the micro-batch
count to be a multiple of pp, and tensor parallelism stays inside one scale-up domain unless
`tp_within_node` is off. `SearchSpace` narrows the grid (fixed degrees, choices per knob).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfmodel.errors import LayoutError
from perfmodel.hardware.system import System
from perfmodel.parallel.schedules import DEFAULT_SEARCHED_SCHEDULES, SCHEDULE_NAMES, SEARCHED_SCHEDULES, get_schedule
from perfmodel.parallel.split import splittable
from perfmodel.workload.spec import ModelSpec

SCHEDULE_LIST: tuple[str, ...] = SCHEDULE_NAMES  # the grid's `sched` column indexes this
# what a search tries unless told: DualPipe (DeepSeek's own code, in no stack perfmodel models) on request
DEFAULT_SCHEDULES = DEFAULT_SEARCHED_SCHEDULES
SCHEDULES = SCHEDULE_LIST
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")
ONE_F_ONE_B = SCHEDULE_LIST.index("1f1b")

Ints = tuple[int, ...]


class SearchSpace(BaseModel):
    """What the search may choose. `None` for a degree means every valid value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: Ints | None = Field(None, description="tensor-parallel degrees to try")
    pp: Ints | None = Field(None, description="pipeline stages to try")
    cp: Ints | None = Field(None, description="context-parallel degrees (default powers of two up to max_cp)")
    ep: Ints | None = Field(None, description="expert-parallel degrees (MoE only)")
    dp: Ints | None = Field(None, description="data-parallel degrees (default: whatever fills the GPUs)")
    vp: Ints = Field((1, 2, 4), description="virtual stages per pipeline rank")
    micro_batch: Ints = Field((1, 2, 4, 8), description="sequences per micro-batch")
    zero_stage: tuple[Literal[0, 1, 2, 3], ...] = (0, 1, 2, 3)
    recompute: tuple[Literal["none", "selective", "full"], ...] = RECOMPUTES  # type: ignore[assignment]
    schedules: tuple[str, ...] = Field(DEFAULT_SCHEDULES, description=(
        "pipeline schedules to try (parallel/schedules/ whose `searched` is set); default all but dualpipe"))
    sequence_parallel: tuple[bool, ...] = (False, True)
    max_cp: int = Field(8, gt=0)
    tp_within_node: bool = Field(True, description="tp group inside one scale-up domain (NVLink)")
    min_headroom_bytes: float = Field(0.0, ge=0, description="HBM left free per GPU for a layout to count as fitting")
    overlap_dp_comm: bool = True
    overlap_fsdp_prefetch: bool = True
    offload_activations: bool = Field(False, description=(
        "also try activation offloading (Megatron-Core cpu_offloading_num_layers) on a layout that does not "
        "fit otherwise: where Megatron-Core accepts it (pp 1, no recompute) on a node with a host link, the "
        "fewest offloaded layers that fit"))
    block_recompute: bool = Field(True, description=(
        "also try Megatron-Core's block recompute (recompute_method block) on a full-recompute layout whose "
        "no-recompute twin does not fit: the fewest layers per model chunk that fit, wherever that could beat "
        "the best layout found (its twin without recompute bounds it from below)"))

    @field_validator("schedules")
    @classmethod
    def _known_schedules(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in v if s not in SCHEDULE_NAMES]
        if bad:
            raise LayoutError(f"unknown pipeline schedule(s) {bad}; valid: {', '.join(SCHEDULE_NAMES)}")
        unsearched = [s for s in v if s not in SEARCHED_SCHEDULES]
        if unsearched:
            raise LayoutError(f"the layout search does not evaluate schedule(s) {unsearched} (its vectorised "
                              f"evaluator does not model them); searched: {', '.join(SEARCHED_SCHEDULES)}; "
                              "estimate such a layout with `perfmodel estimate --schedule`")
        return v


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_choices(spec: ModelSpec, system: System, space: SearchSpace, max_world: int) -> list[int]:
    if not spec.is_transformer:
        return [1]
    heads, kv = spec.num_heads or 1, spec.kv_heads
    cap = system.domain_size if space.tp_within_node else max_world
    tps = [t for t in divisors(heads) if t <= cap and (kv % t == 0 or t % kv == 0)]
    if spec.csa is not None:  # DeepSeek-V4: output groups and indexer heads are split over tp too
        tps = [t for t in tps if spec.csa.o_groups % t == 0 and spec.csa.index_heads % t == 0]
    return [t for t in tps if t in space.tp] if space.tp else tps


def _cp_choices(spec: ModelSpec, seq_len: int, space: SearchSpace) -> list[int]:
    if not spec.is_transformer or spec.csa is not None:  # no cp for compressed sparse attention (not modelled)
        return [1]
    cps = space.cp or tuple(2**i for i in range(16) if 2**i <= space.max_cp)
    return [c for c in cps if seq_len % c == 0]


def _ep_choices(spec: ModelSpec, space: SearchSpace) -> list[int]:
    if spec.family != "moe":
        return [1]
    eps = divisors(spec.num_experts or 1)
    return [e for e in eps if e in space.ep] if space.ep else eps


def _pp_choices(spec: ModelSpec, worlds: list[int], space: SearchSpace) -> list[int]:
    pps = sorted({d for w in worlds for d in divisors(w) if d <= spec.num_layers})
    return [p for p in pps if p in space.pp] if space.pp else pps


def _expand(cols: dict[str, np.ndarray], name: str, values: list[int]) -> dict[str, np.ndarray]:
    """Cartesian product of the current rows with `values` for a new column."""
    n, k = len(next(iter(cols.values()))), len(values)
    out = {key: np.repeat(col, k) for key, col in cols.items()}
    out[name] = np.tile(np.asarray(values, dtype=np.int64), n)
    return out


def _keep(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {key: col[mask] for key, col in cols.items()}


def layout_grid(spec: ModelSpec, system: System, gpu_counts: list[int], global_batch: int, seq_len: int,
                space: SearchSpace) -> dict[str, np.ndarray]:
    """Every valid layout as int64 columns: world, dp, tp, pp, cp, ep, vp, sp (0/1), mb,
    rec (index into RECOMPUTES), zero, sched (index into SCHEDULE_LIST), m (micro-batches)."""
    cols: dict[str, np.ndarray] = {"world": np.asarray(sorted(set(gpu_counts)), dtype=np.int64)}
    cols = _expand(cols, "tp", _tp_choices(spec, system, space, max(gpu_counts)))
    cols = _expand(cols, "cp", _cp_choices(spec, seq_len, space))
    cols = _expand(cols, "pp", _pp_choices(spec, gpu_counts, space))
    model = cols["tp"] * cols["cp"] * cols["pp"]
    cols = _keep(cols, cols["world"] % model == 0)
    cols["dp"] = cols["world"] // (cols["tp"] * cols["cp"] * cols["pp"])
    if space.dp:
        cols = _keep(cols, np.isin(cols["dp"], space.dp))
    cols = _expand(cols, "ep", _ep_choices(spec, space))
    folded = cols["tp"] * cols["dp"] * cols["cp"]  # MoE parallel folding: ep (etp 1) over tp·cp·dp
    cols = _keep(cols, folded % cols["ep"] == 0)

    cols = _expand(cols, "sp", sorted({int(s) for s in space.sequence_parallel}))
    cols = _keep(cols, (cols["sp"] == 0) | (cols["tp"] > 1))
    cols = _expand(cols, "mb", list(space.micro_batch))
    per_step = cols["mb"] * cols["dp"]
    cols = _keep(cols, global_batch % per_step == 0)
    cols["m"] = global_batch // (cols["mb"] * cols["dp"])
    cols = _expand(cols, "rec", [RECOMPUTES.index(r) for r in space.recompute])

    cols = _expand(cols, "vp", sorted(set(space.vp) | {1}))
    allowed = sorted({SCHEDULE_LIST.index(s) for s in space.schedules})
    cols = _expand(cols, "sched", sorted(set(allowed) | {ONE_F_ONE_B}))  # pp = 1 runs "1f1b" whatever is allowed
    pp, vp, sched = cols["pp"], cols["vp"], cols["sched"]
    chunked = np.array([get_schedule(name).chunked for name in SCHEDULE_LIST])[sched]
    one_stage = (pp == 1) & (vp == 1) & (sched == ONE_F_ONE_B)
    flat = (pp > 1) & (vp == 1) & ~chunked & np.isin(sched, allowed)
    for k, name in enumerate(SCHEDULE_LIST):  # a schedule's own conditions on pp and m (DualPipe's asserts)
        rows = flat & (sched == k)
        if rows.any():
            flat[rows] = get_schedule(name).grid_mask(pp[rows], cols["m"][rows])
    # Megatron's interleaved schedule needs the micro-batch count a multiple of pp
    inter = (pp > 1) & (vp > 1) & chunked & np.isin(sched, allowed) & np.isin(vp, space.vp) & (cols["m"] % pp == 0)
    cols = _keep(cols, one_stage | flat | inter)
    # pp x vp must split the layers as Megatron can (parallel/split.py)
    codes = np.unique(cols["pp"] * 4096 + cols["vp"])
    pairs = {(int(c) // 4096, int(c) % 4096) for c in codes if c // 4096 > 1}
    bad = [pv for pv in pairs if not splittable(spec.num_layers, *pv)]
    if bad:
        drop = np.zeros(len(cols["pp"]), dtype=bool)
        for p, v in bad:
            drop |= (cols["pp"] == p) & (cols["vp"] == v)
        cols = _keep(cols, ~drop)
    return _expand(cols, "zero", list(space.zero_stage))
