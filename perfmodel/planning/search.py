"""Layout search: the best parallel layouts of a job, from every valid one, in one NumPy pass.

    >>> import perfmodel
    >>> res = perfmodel.search("llama3-70b", "h100-sxm5-80gb", n_gpus=1024, global_batch=1024)
    >>> res.table.head()          # every fitting layout, best first
    >>> res.best()                # the winner as a full analytic Estimate

`space.layout_grid` enumerates the layouts, `evaluate.Evaluator` scores them with the analytic
engine's own cost functions (equal to `perfmodel.estimate(..., engine="analytic")` to rounding),
layouts that do not fit in HBM (less `min_headroom_bytes`) are dropped, and the rest are ranked by
the objective: step time, cost per step (GPUs x step x hourly price) or tokens per joule.
The Pareto fronts trade step time against memory headroom and against GPU count. The DES engine
re-scores the top layouts on request (`SearchResult.estimates(k, engine="des")`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pandas as pd

from perfmodel.calibration.frameworks import Framework, apply_framework, context_parallel_refusal
from perfmodel.calibration.frameworks import framework as get_framework
from perfmodel.calibration.profile import NONE, Profile, calibrated_system, load_profile, with_interval
from perfmodel.compute.ops import gemm_precision
from perfmodel.engines.offload import can_offload
from perfmodel.engines.registry import DEFAULT_ENGINE, run_engine
from perfmodel.engines.stages import model_flop_per_step
from perfmodel.errors import LayoutError
from perfmodel.estimate import Estimate
from perfmodel.hardware.system import System
from perfmodel.hardware.system import resolve_hardware as catalog_resolve_hardware
from perfmodel.memory import block_that_fits, offload_that_fits
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.evaluate import Evaluator
from perfmodel.planning.space import RECOMPUTES, SCHEDULES, SearchSpace, layout_grid
from perfmodel.planning.train import gpu_power_w, hourly_price_per_gpu
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.spec import ModelSpec

Objective = Literal["step_time", "cost", "tokens_per_joule"]
LAYOUT_COLUMNS = ["world", "dp", "tp", "pp", "cp", "ep", "vp", "sequence_parallel", "zero_stage", "micro_batch",
                  "recompute", "recompute_num_layers", "schedule", "num_micro_batches", "offload_activations"]


def resolve_hardware(cluster: str | System, n_gpus: int) -> System:
    """An accelerator id (its reference node), a node or cluster id, or a System as is; a
    fallback the resolver had to take is an error here (a search must run on what was named)."""
    system, msgs = catalog_resolve_hardware(cluster, n_gpus)
    fallbacks = [m for m in msgs if m not in system.notes]  # notes (racks spanned, what-if) are no fallback
    if fallbacks:
        raise LayoutError(f"hardware {cluster!r}: {'; '.join(fallbacks)}")
    return system


@lru_cache(maxsize=32)
def evaluator(spec: ModelSpec, system: System, seq_len: int, precision: str, moe_dispatcher: str | None = None,
              framework: Framework | None = None, optimizer: str = "adam", attention: str = "") -> Evaluator:
    """One Evaluator (and its caches of shared costs) per model, system, sequence, precision, MoE
    dispatcher, training stack (the framework's, as `perfmodel.estimate` applies them), optimizer
    and attention kernel (empty: the stack's)."""
    return Evaluator(spec, system, seq_len, precision, attention, moe_dispatcher=moe_dispatcher, framework=framework,
                     optimizer=optimizer)


@dataclass(frozen=True)
class SearchResult:
    spec: ModelSpec
    system: System
    global_batch: int
    seq_len: int
    precision: str
    objective: Objective
    table: pd.DataFrame  # every fitting layout, ranked by the objective
    n_layouts: int  # layouts evaluated (valid, before the memory filter)
    elapsed_s: float  # enumeration + evaluation + ranking
    profile: Profile = NONE  # calibration the layouts were scored with (system is the uncalibrated one)
    framework: str | None = None
    optimizer: str = "adam"
    attention: str | None = None  # the kernel the search named (None: the framework's)

    @property
    def layouts_per_s(self) -> float:
        return self.n_layouts / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def plan(self, rank: int = 0) -> ParallelPlan:
        if self.table.empty:
            raise LayoutError(f"no layout of {self.spec.id} fits on {self.system.name} "
                              f"(global batch {self.global_batch}, {self.n_layouts} layouts tried)")
        return row_plan(self.table.iloc[rank], self.global_batch, self.seq_len, self.precision,
                        get_framework(self.framework).moe_dispatcher if self.framework else None, self.optimizer,
                        self.attention)

    def best(self, engine: str = DEFAULT_ENGINE) -> Estimate:
        return self._estimate(0, engine)

    def _estimate(self, rank: int, engine: str) -> Estimate:
        """The full estimate of layout `rank` on the calibrated System the table was scored on."""
        fw = get_framework(self.framework) if self.framework else None
        plan = self.plan(rank)
        if fw is not None:
            plan = apply_framework(plan, fw, self.spec)
        est = run_engine(engine, self.spec, calibrated_system(self.system, self.profile, fw), plan)
        return with_interval(est, self.profile, self.system, self.spec)

    def estimates(self, k: int = 5, engine: str = DEFAULT_ENGINE) -> list[Estimate]:
        """Full estimates of the top k (engine="des" re-scores them with the event simulation)."""
        return [self._estimate(i, engine) for i in range(min(k, len(self.table)))]

    def pareto_memory(self) -> pd.DataFrame:
        """Layouts no other layout beats on both step time and memory headroom."""
        return pareto(self.table, "step_time_s", "headroom_bytes", maximise_y=True)

    def pareto_gpus(self) -> pd.DataFrame:
        """The fastest layout for each GPU count that beats every smaller count."""
        return pareto(self.table, "step_time_s", "world", maximise_y=False)


def pareto(df: pd.DataFrame, x: str, y: str, maximise_y: bool) -> pd.DataFrame:
    """Rows not dominated in (minimise x, maximise or minimise y)."""
    if df.empty:
        return df
    yv = -df[y] if maximise_y else df[y]
    order = np.lexsort((df[x].to_numpy(), yv.to_numpy()))  # by y (best first), then x
    best_x, keep = np.inf, []
    for i in order:
        xv = df[x].iloc[i]
        if xv < best_x:
            keep.append(i)
            best_x = xv
    return df.iloc[keep].sort_values(x).reset_index(drop=True)


def row_plan(row: pd.Series, global_batch: int, seq_len: int, precision: str,
             moe_dispatcher: str | None = None, optimizer: str = "adam", attention: str | None = None) -> ParallelPlan:
    pp, vp = int(row["pp"]), int(row["vp"])
    window = int(row.get("recompute_num_layers", 0) or 0)
    return ParallelPlan(dp=int(row["dp"]), tp=int(row["tp"]), pp=pp, cp=int(row["cp"]), ep=int(row["ep"]), vp=vp,
                        sequence_parallel=bool(row["sequence_parallel"]), zero_stage=int(row["zero_stage"]),
                        micro_batch=int(row["micro_batch"]), global_batch=global_batch, seq_len=seq_len,
                        recompute=str(row["recompute"]), precision=precision, optimizer=optimizer,
                        schedule=_schedule_field(pp, vp, str(row["schedule"])), moe_dispatcher=moe_dispatcher,
                        offload_activations=int(row.get("offload_activations", 0)),
                        **({"attention_impl": attention} if attention else {}),
                        **({"recompute_method": "block", "recompute_num_layers": window} if window else {}))


def _schedule_field(pp: int, vp: int, name: str) -> str | None:
    """A plan's `schedule` for a searched layout: None where the name is the one the plan picks
    itself (interleaved with vp > 1, else 1F1B; any without a pipeline)."""
    return None if pp == 1 or name == ("interleaved" if vp > 1 else "1f1b") else name


def space_for_stack(space: SearchSpace, fw: Framework | None) -> SearchSpace:
    """`space` as the stack can run it: a stack without ring context parallelism
    (frameworks.NO_CONTEXT_PARALLEL) searches cp 1 only; asking it for more is the estimate's
    refusal, not a silently narrower search."""
    if fw is None or fw.context_parallel:
        return space
    if space.cp is not None and any(c > 1 for c in space.cp):
        raise context_parallel_refusal(fw, max(space.cp))
    return space.model_copy(update={"cp": (1,)})


def search(workload: str | ModelSpec, cluster: str | System, n_gpus: int, global_batch: int, *,
           seq_len: int | None = None, precision: str = "bf16", space: SearchSpace | None = None,
           objective: Objective = "step_time", gpu_counts: list[int] | None = None,
           calibration: str | Profile | None = "default", framework: str | None = None,
           optimizer: str = "adam", attention: str | None = None) -> SearchResult:
    """Every valid layout of `workload` for `global_batch` sequences on `n_gpus` GPUs (or on each
    of `gpu_counts`), scored, filtered by memory and ranked by `objective`. `calibration` and
    `framework` as in `perfmodel.estimate` (the planner applies the framework's host dispatch
    and layer mechanisms: TP / p2p overlap, fused fp8 casts and loss, and its attention kernel);
    `optimizer` sets every layout's optimizer state and step (ParallelPlan.optimizer); `attention`
    names the attention kernel (ParallelPlan.attention_impl), which outranks the framework's."""
    t0 = time.perf_counter()
    spec = get_workload(workload) if isinstance(workload, str) else workload
    counts = sorted(set(gpu_counts or [n_gpus]))
    system = resolve_hardware(cluster, max(counts))
    fw = get_framework(framework) if framework else None
    space = space_for_stack(space or SearchSpace(), fw)
    seq = seq_len or spec.seq_len
    grid = layout_grid(spec, system, counts, global_batch, seq, space)
    prof = load_profile(calibration)
    ev = evaluator(spec, calibrated_system(system, prof, fw), seq, precision, fw.moe_dispatcher if fw else None, fw,
                   optimizer, attention or "")
    out = ev.evaluate(grid, space.overlap_dp_comm, space.overlap_fsdp_prefetch) if len(grid["tp"]) else {
        "step_time_s": np.empty(0), "memory_bytes": np.empty(0)}
    out["offload_activations"] = np.zeros(len(grid["tp"]), dtype=np.int64)
    out["recompute_num_layers"] = np.zeros(len(grid["tp"]), dtype=np.int64)
    budget = system.accelerator.hbm_bytes - space.min_headroom_bytes
    if space.offload_activations and can_offload(system):
        _offload_where_needed(ev, grid, out, budget, global_batch, space)
    if space.block_recompute and "full" in space.recompute and "none" in space.recompute:
        _block_where_better(ev, grid, out, budget, global_batch, space, objective)
    table = _table(spec, system, grid, out, global_batch, seq, precision, space, objective)
    return SearchResult(spec, system, global_batch, seq, precision, objective, table, len(grid["tp"]),
                        time.perf_counter() - t0, prof, framework, optimizer, attention)


def _offload_where_needed(ev: Evaluator, grid: dict[str, np.ndarray], out: dict[str, np.ndarray], budget: float,
                          global_batch: int, space: SearchSpace) -> None:
    """Rows that do not fit in `budget` but would with activation offloading (pp 1, no recompute:
    where Megatron-Core offloads) get the fewest offloaded layers that fit and the analytic
    engine's step and memory under them, in place. Such layouts are few (one per tp, cp, ep, sp,
    micro-batch, dp and ZeRO stage), so each is costed by the engine itself."""
    none = RECOMPUTES.index("none")
    rows = np.flatnonzero((out["memory_bytes"] > budget) & (grid["pp"] == 1) & (grid["rec"] == none))
    if not len(rows):
        return
    cols = ("tp", "cp", "ep", "sp", "mb", "dp", "zero", "vp")
    done: dict[tuple[int, ...], tuple[int, float, float] | None] = {}
    for i in rows.tolist():
        key = tuple(int(grid[c][i]) for c in cols)
        if key not in done:
            done[key] = _offloaded(ev, dict(zip(cols, key, strict=True)), budget, global_batch, space)
        got = done[key]
        if got is not None:
            out["offload_activations"][i], out["step_time_s"][i], out["memory_bytes"][i] = got


def _offloaded(ev: Evaluator, k: dict[str, int], budget: float, global_batch: int,
               space: SearchSpace) -> tuple[int, float, float] | None:
    """(offloaded layers, step seconds, peak bytes) of one layout under the fewest offloaded layers
    that fit, as `perfmodel.estimate` computes them; None where no count fits or the stack refuses."""
    plan = _grid_plan(ev, k, global_batch, space, pp=1, recompute="none")
    fits = offload_that_fits(ev.graph(k["tp"], k["cp"], k["ep"], k["sp"], k["mb"]), plan, budget)
    if fits is None:
        return None
    est = run_engine("analytic", ev.spec, ev.system, plan.model_copy(update={"offload_activations": fits[0]}))
    return fits[0], est.step_time_s, est.memory_per_gpu_bytes


def _grid_plan(ev: Evaluator, k: dict[str, int], global_batch: int, space: SearchSpace, **fields: Any) -> ParallelPlan:
    """The plan of grid row `k` (its tp, cp, ep, sp, mb, dp, ZeRO and vp columns) as the evaluator
    makes it (the framework's mechanisms applied), with the space's overlaps and `fields` on top."""
    return ev.plan(tp=k["tp"], cp=k["cp"], ep=k["ep"], sequence_parallel=bool(k["sp"]), micro_batch=k["mb"],
                   dp=k["dp"], zero_stage=k["zero"], vp=k["vp"], global_batch=global_batch,
                   overlap_dp_comm=space.overlap_dp_comm, overlap_fsdp_prefetch=space.overlap_fsdp_prefetch, **fields)


def _block_where_better(ev: Evaluator, grid: dict[str, np.ndarray], out: dict[str, np.ndarray], budget: float,
                        global_batch: int, space: SearchSpace, objective: Objective) -> None:
    """Full-recompute rows that fit, whose twin without recompute does not, get Megatron-Core's block
    recompute of the fewest layers per model chunk that fit (memory.block_that_fits) and the analytic
    engine's step and memory under it, in place: it reruns fewer layers, so it is faster and still
    fits. Branch and bound keeps this to the few layouts that matter: a block layout is never faster
    than its twin without recompute, so rows are refined in the order of that bound and only while it
    beats the best fitting layout so far (on the objective: step time, or GPU-seconds per step, which
    cost and energy per token are proportional to on one system)."""
    rec, full, none = grid["rec"], RECOMPUTES.index("full"), RECOMPUTES.index("none")
    scale = np.ones(len(rec)) if objective == "step_time" else grid["world"].astype(float)
    fits = out["memory_bytes"] <= budget
    if not fits.any():
        return
    keys = ("world", "dp", "tp", "pp", "cp", "ep", "vp", "sp", "mb", "zero", "sched")
    twin = pd.DataFrame({k: grid[k] for k in keys})
    twin["i"] = np.arange(len(rec))
    rows = twin[(rec == full) & fits].merge(twin[(rec == none) & ~fits], on=list(keys), suffixes=("", "_none"))
    if rows.empty:
        return
    bound = out["step_time_s"][rows["i_none"].to_numpy()] * scale[rows["i"].to_numpy()]
    best = float(np.min(out["step_time_s"][fits] * scale[fits]))
    for j in np.argsort(bound, kind="stable"):
        if bound[j] >= best:
            break
        i = int(rows["i"].iloc[j])
        got = _block_recomputed(ev, {k: int(grid[k][i]) for k in keys}, budget, global_batch, space)
        if got is not None:
            out["recompute_num_layers"][i], out["step_time_s"][i], out["memory_bytes"][i] = got
            best = min(best, got[1] * scale[i])


def _block_recomputed(ev: Evaluator, k: dict[str, int], budget: float, global_batch: int,
                      space: SearchSpace) -> tuple[int, float, float] | None:
    """(layers per chunk recomputed, step seconds, peak bytes) of one layout under block recompute of
    the fewest layers that fit, as `perfmodel.estimate` computes them; None where recomputing fewer
    than every layer of the largest chunk does not fit."""
    plan = _grid_plan(ev, k, global_batch, space, pp=k["pp"], recompute="full",
                      schedule=_schedule_field(k["pp"], k["vp"], SCHEDULES[k["sched"]]))
    fits = block_that_fits(ev.graph(k["tp"], k["cp"], k["ep"], k["sp"], k["mb"]), plan, budget)
    if fits is None:
        return None
    est = run_engine("analytic", ev.spec, ev.system,
                     plan.model_copy(update={"recompute_method": "block", "recompute_num_layers": fits[0]}))
    return fits[0], est.step_time_s, est.memory_per_gpu_bytes


def _table(spec: ModelSpec, system: System, grid: dict[str, np.ndarray], out: dict[str, np.ndarray], global_batch: int,
           seq: int, precision: str, space: SearchSpace, objective: Objective) -> pd.DataFrame:
    acc = system.accelerator
    headroom = acc.hbm_bytes - out["memory_bytes"]
    fit = headroom >= space.min_headroom_bytes
    g = {k: v[fit] for k, v in grid.items()}
    step = out["step_time_s"][fit]
    tokens = float(global_batch * seq)
    plan = ParallelPlan(global_batch=global_batch, seq_len=seq, precision=precision)
    model_flop, _ = model_flop_per_step(spec, plan)
    peak = acc.matrix_peak_flop_per_s(gemm_precision(precision))
    world = g["world"].astype(float)
    df = pd.DataFrame({
        "world": g["world"], "dp": g["dp"], "tp": g["tp"], "pp": g["pp"], "cp": g["cp"], "ep": g["ep"], "vp": g["vp"],
        "sequence_parallel": g["sp"].astype(bool), "zero_stage": g["zero"], "micro_batch": g["mb"],
        "recompute": np.asarray(RECOMPUTES, dtype=object)[g["rec"]],
        "recompute_num_layers": out["recompute_num_layers"][fit],
        "schedule": np.asarray(SCHEDULES, dtype=object)[g["sched"]],
        "num_micro_batches": g["m"], "offload_activations": out["offload_activations"][fit],
        "step_time_s": step, "memory_bytes": out["memory_bytes"][fit],
        "headroom_bytes": headroom[fit], "tokens_per_s": tokens / step, "mfu": model_flop / (step * world * peak),
    })
    if objective == "cost":
        df["cost_per_step_usd"] = world * step / 3600.0 * hourly_price_per_gpu(system)
        key, ascending = "cost_per_step_usd", True
    elif objective == "tokens_per_joule":
        df["tokens_per_joule"] = tokens / (world * step * gpu_power_w(system))
        key, ascending = "tokens_per_joule", False
    elif objective == "step_time":
        key, ascending = "step_time_s", True
    else:
        raise ValueError(f"objective {objective!r}: expected 'step_time', 'cost' or 'tokens_per_joule'")
    return df.sort_values([key, "world", "memory_bytes"], ascending=[ascending, True, True], kind="stable").reset_index(drop=True)


def layout_labels(t: pd.DataFrame) -> pd.Series:
    """'dp 16 tp 8 pp 8 vp 2 zero 1 mb 1 recompute selective interleaved-1f1b' for every row of a
    search table at once (string columns, no per-row Python call: thousands of rows label in
    milliseconds); the window and offload columns are optional."""
    def s(c: str) -> pd.Series:
        return t[c].astype(int).astype(str)

    out = "dp " + s("dp") + " tp " + s("tp") + " pp " + s("pp")
    for k in ("cp", "ep", "vp"):
        out = out.where(t[k].astype(int) <= 1, out + f" {k} " + s(k))
    out = out.where(~t["sequence_parallel"].astype(bool), out + " sp")
    out = out + " zero " + s("zero_stage") + " mb " + s("micro_batch")
    out = out.where(t["recompute"] == "none", out + " recompute " + t["recompute"].astype(str))
    if "recompute_num_layers" in t:
        window = t["recompute_num_layers"].fillna(0).astype(int)
        out = out.where(window <= 0, out + " (first " + window.astype(str) + " per chunk)")
    if "offload_activations" in t:
        out = out.where(t["offload_activations"].fillna(0).astype(int) <= 0, out + " offload " +
                        t["offload_activations"].fillna(0).astype(int).astype(str))
    return out.where(t["pp"].astype(int) <= 1, out + " " + t["schedule"].astype(str))


def layout_label(row: pd.Series | ParallelPlan) -> str:
    """`layout_labels` of one table row or of a plan."""
    if isinstance(row, ParallelPlan):
        d: dict[str, Any] = {
            "dp": row.dp, "tp": row.tp, "pp": row.pp, "cp": row.cp, "ep": row.ep, "vp": row.vp,
            "sequence_parallel": row.sequence_parallel, "zero_stage": row.zero_stage, "micro_batch": row.micro_batch,
            "recompute": row.recompute, "schedule": row.schedule_name, "offload_activations": row.offload_activations,
            "recompute_num_layers": row.recompute_num_layers if row.recompute_method == "block" else 0}
    else:
        d = dict(row)
    return str(layout_labels(pd.DataFrame([d])).iloc[0])


__all__ = ["LAYOUT_COLUMNS", "SearchResult", "SearchSpace", "layout_label", "layout_labels", "pareto", "resolve_hardware",
           "row_plan", "search"]
