"""Step time and memory of a whole layout grid at once, from the engines' own stage costs and
closed forms.

The analytic engine's step splits into two kinds of terms:

* costs that depend on a few shape parameters only: per-layer forward / backward / weight-grad
  seconds (`stages.cached_layer_time`, a function of tp, cp, ep, sp, micro-batch, recompute and
  precision), the layers on each rank (`parallel.split.stage_layers`, a function of pp and vp),
  the data-parallel collectives (`stages.dp_collectives`), the pipeline send
  (`stages.p2p_time_s`) and the bytes a rank holds (`memory.memory_per_rank`). These are computed
  by those same scalar functions, once per distinct combination, and cached;
* the closed forms that combine them (`engines/closed_forms.py`: DP exposure, optimizer step,
  memory; the schedules' bubble and in-flight micro-batches), which are the very functions the
  analytic engine calls, here with one NumPy entry per layout.

So a change to a GEMM, attention or collective cost, or to a closed form, moves the search and
the engine together; `tests/test_planning.py` holds the two equal to 1e-9 on random layouts of
every accelerator kind, schedule, ZeRO stage, overlap flag, recompute and precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfmodel.calibration.frameworks import Framework, apply_framework
from perfmodel.compute.autocast import autocast_on, grad_accumulation_s_per_param
from perfmodel.engines import closed_forms as cf
from perfmodel.engines.stages import (
    cached_graph,
    cached_layer_time,
    can_overlap,
    comm_contention_fraction,
    delayed_amax_s_per_micro_batch,
    dp_collectives,
    moe_options,
    optimizer_matrix_s,
    optimizer_s_per_param,
    p2p_time_s,
    sp_replicated_grad_sync_s,
    stack_spec,
    tied_embedding_sync_s,
)
from perfmodel.hardware.attention import check_attention_kernel
from perfmodel.hardware.system import System
from perfmodel.memory import (
    RUNTIME_BYTES,
    layer_activation_bytes,
    memory_per_rank,
    memory_stages,
    recompute_working_bytes,
)
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import SCHEDULES
from perfmodel.parallel.schedules.base import split_excess_s
from perfmodel.parallel.split import stage_layers
from perfmodel.planning.cost_rows import (
    COST_COLUMNS,
    N_TAILS,
    RowTable,
    StageTable,
    cost_columns,
    first_params,
    pad,
    placement_name,
    placements,
    schedule_of,
    unique_rows,
)
from perfmodel.planning.space import RECOMPUTES, SCHEDULE_LIST
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec

# per `sched` index: the share of a rank's chunks one micro-batch runs through (schedule.run_share)
RUN_SHARE = np.array([SCHEDULES[name].run_share() for name in SCHEDULE_LIST])


@dataclass
class Evaluator:
    """Caches of the scalar shared costs for one (model, system, sequence length, precision)."""

    spec: ModelSpec
    system: System
    seq_len: int
    precision: str
    attention_impl: str = ""  # empty: the framework's kernel, else flash; a named one outranks the stack's
    optimizer: str = "adam"
    grad_reduce_bytes: int | None = None
    moe_dispatcher: str | None = None  # the stack's MoE dispatcher (None: alltoall), as estimate applies it
    framework: Framework | None = None  # the stack's layer mechanisms (attention_impl is its kernel)
    _base: ParallelPlan | None = field(default=None, repr=False)
    _layers: dict[tuple[Any, ...], dict[str, np.ndarray]] = field(default_factory=dict, repr=False)
    _counts: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _stages: dict[tuple[Any, ...], StageTable] = field(default_factory=dict, repr=False)
    _static: dict[tuple[Any, ...], tuple[float, ...]] = field(default_factory=dict, repr=False)
    _costs: dict[tuple[Any, ...], tuple[float, ...]] = field(default_factory=dict, repr=False)
    _coll: dict[tuple[Any, ...], float] = field(default_factory=dict, repr=False)
    _mem: dict[tuple[Any, ...], tuple[tuple[float, ...], ...]] = field(default_factory=dict, repr=False)
    _pipe: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _cost_rows: RowTable = field(default_factory=RowTable, repr=False)
    _mem_rows: RowTable = field(default_factory=RowTable, repr=False)

    def __post_init__(self) -> None:
        self.system.accelerator.check_precision(self.precision)  # as engines/step.prepare refuses it
        if not self.attention_impl:
            # the stack's kernel, as estimate applies it (frameworks.apply_framework)
            self.attention_impl = self.framework.attention if self.framework is not None else "flash"
        check_attention_kernel(self.system.accelerator, self.attention_impl)

    # -- plans the shared functions read (validated grids need no pydantic pass) ---------------
    def plan(self, **kw: Any) -> ParallelPlan:
        """A plan with these fields, unvalidated: the grid already holds only valid layouts, and
        `model_copy` costs a microsecond where validation costs tens."""
        if self._base is None:
            self._base = ParallelPlan(seq_len=self.seq_len, precision=self.precision, attention_impl=self.attention_impl,
                                      optimizer=self.optimizer, grad_reduce_bytes=self.grad_reduce_bytes,
                                      moe_dispatcher=self.moe_dispatcher)
        kw.setdefault("global_batch", kw.get("micro_batch", 1) * kw.get("dp", 1))
        plan = self._base.model_copy(update=kw)
        if self.framework is None:
            return plan
        return apply_framework(plan, self.framework, self.spec)

    def graph(self, tp: int, cp: int, ep: int, sp: int, mb: int) -> Graph:
        base = self.plan()
        return cached_graph(stack_spec(self.spec, base.vocab_multiple, tp), mb, self.seq_len, tp, cp, ep, bool(sp),
                            self.precision, self.attention_impl,
                            moe_options(base), base.cp_ring, base.elementwise, base.autocast_weights)

    # -- per shape: one vector entry per graph layer ----------------------------------------------
    def layer_vectors(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int, world: int,
                      a2a: tuple[int, int, int] | None = None) -> dict[str, np.ndarray]:
        """`world`: the layout's GPU count (its slowest chip sets the kernels' pace,
        hardware/variability.py); `a2a`: (pp, vp, micro-batches) of a layout whose MoE all-to-alls
        run under the combined 1F1B (a2a_overlap_micro_batches), whose exposed share depends on
        them; None: not overlapped."""
        key = (tp, cp, ep, sp, mb, rec, world, a2a)
        if key not in self._layers:
            g = self.graph(tp, cp, ep, sp, mb)
            shape = {"tp": tp, "cp": cp, "ep": ep, "dp": ep, "sequence_parallel": bool(sp), "micro_batch": mb,
                     "recompute": RECOMPUTES[rec], "moe_a2a_overlap": a2a is not None}
            if a2a is not None:
                shape.update(pp=a2a[0], vp=a2a[1], global_batch=a2a[2] * mb * ep)
            plan = self.plan(**shape)
            lts = [cached_layer_time(self.system, plan, layer, world) for layer in g.layers]
            self._layers[key] = {
                "fwd": np.array([lt.fwd_s for lt in lts]),
                "bwd": np.array([lt.bwd_s for lt in lts]),
                "bwd_in": np.array([lt.bwd_input_s for lt in lts]),
                "wgrad": np.array([lt.wgrad_s for lt in lts]),
                "dense": np.array([layer.params - layer.expert_params for layer in g.layers]),
                "expert": np.array([layer.expert_params for layer in g.layers]),
                "act": np.array([layer_activation_bytes(layer, plan) for layer in g.layers]),
                "work": np.array([recompute_working_bytes(layer, plan) for layer in g.layers]),
            }
        return self._layers[key]

    def stage_counts(self, g: Graph, pp: int, vp: int, place: int = -1) -> np.ndarray:
        """C[rank, layer] = instances of graph layer `layer` on pipeline rank `rank` (parallel.split),
        placed as schedule SCHEDULE_LIST[place] places chunks (-1: Megatron's c·pp + s)."""
        key = (tuple((layer.kind, layer.count) for layer in g.layers), pp, vp, place)
        if key not in self._counts:
            index = {id(layer): i for i, layer in enumerate(g.layers)}
            c = np.zeros((pp, len(g.layers)))
            for s in range(pp):
                for layer, n in stage_layers(g, pp, s, vp, placement_name(place)):
                    c[s, index[id(layer)]] = n
            self._counts[key] = c
        return self._counts[key]

    def stages(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int, pp: int, vp: int, dp: int,
               split_wgrad: int = 0, a2a_m: int = 0, place: int = -1) -> StageTable:
        """`split_wgrad`: the schedule runs the weight-gradient phase apart (schedule.defers_wgrad);
        `a2a_m`: the micro-batches of a layout under the combined 1F1B, 0 where it is off; `place`:
        the schedule that places the chunks on ranks, -1 for Megatron's (stage_counts)."""
        key = (tp, cp, ep, sp, mb, rec, pp, vp, dp, split_wgrad, a2a_m, place)
        if key in self._stages:
            return self._stages[key]
        v = self.layer_vectors(tp, cp, ep, sp, mb, rec, tp * cp * pp * dp, (pp, vp, a2a_m) if a2a_m else None)
        c = self.stage_counts(self.graph(tp, cp, ep, sp, mb), pp, vp, place)
        # a micro-batch runs through the schedule's share of a rank's chunks (stages.rank_costs)
        ct = c * (SCHEDULES[placement_name(place)].run_share() if pp > 1 else 1.0)
        f, b, w = ct @ v["fwd"], ct @ v["bwd"], ct @ v["wgrad"]
        t = f + ct @ v["bwd_in"] + w if split_wgrad else f + b
        i = int(np.argmax(t))
        cs = c[list(memory_stages(pp))]
        acts = (cs @ v["act"]).tolist()
        work = np.max((cs > 0) * v["work"], axis=1, initial=0.0).tolist()
        tab = StageTable(
            t_max_s=float(t[i]), t_sum_s=float(t.sum()), avg_wgrad_s=float(w.sum()) / pp, worst_rank=i,
            act_per_mb_bytes=tuple(acts), act_working_bytes=tuple(work),
            all_t_s=tuple(t.tolist()), all_fwd_s=tuple(f.tolist()), all_bwd_s=tuple(b.tolist()),
            all_wgrad_s=tuple(w.tolist()),
            all_dense_params=tuple((c @ v["dense"]).tolist()), all_expert_params=tuple((c @ v["expert"]).tolist()),
            all_layers=tuple(c.sum(axis=1).tolist()), all_first_params=tuple(first_params(row, v) for row in c),
        )
        self._stages[key] = tab
        return tab

    # -- per (degrees, ZeRO): parameter bytes, collectives --------------------------------------
    def static_bytes(self, tp: int, cp: int, ep: int, pp: int, vp: int, dp: int, zero: int,
                     place: int = -1) -> tuple[float, ...]:
        """Per memory stage: weights + grads + optimizer states per rank."""
        key = (tp, cp, ep, pp, vp, dp, zero, place)
        if key not in self._static:
            g = self.graph(tp, cp, ep, 0, 1)
            plan = self.plan(tp=tp, cp=cp, ep=ep, pp=pp, vp=vp, dp=dp, zero_stage=zero, schedule=schedule_of(place))
            parts = []
            for stage in memory_stages(pp):
                mem = memory_per_rank(g, plan, stage)
                parts.append(mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes)
            self._static[key] = tuple(parts)
        return self._static[key]

    def memory_rows(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int, pp: int, vp: int,
                    dp: int, place: int = -1) -> tuple[tuple[float, ...], ...]:
        """Per memory stage (padded to 3 by repeating the last): static bytes for ZeRO 0..3, then
        activation bytes per micro-batch and the working set."""
        key = ("mem", tp, cp, ep, sp, mb, rec, pp, vp, dp, place)
        if key not in self._mem:
            st = self.stages(tp, cp, ep, sp, mb, rec, pp, vp, dp, place=place)
            rows = [self.static_bytes(tp, cp, ep, pp, vp, dp, z, place) for z in range(4)]
            rows += [st.act_per_mb_bytes, st.act_working_bytes]
            self._mem[key] = tuple(pad(r, 3) for r in rows)
        return self._mem[key]

    def layout_costs(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int, pp: int, vp: int, dp: int,
                     split_wgrad: int, a2a_m: int = 0, place: int = -1) -> tuple[float, ...]:
        key = (tp, cp, ep, sp, mb, rec, pp, vp, dp, split_wgrad, a2a_m, place)
        if key in self._costs:
            return self._costs[key]
        st = self.stages(tp, cp, ep, sp, mb, rec, pp, vp, dp, split_wgrad, a2a_m, place)
        hops = self.rank_hops(st, tp, cp, pp, vp, dp, mb)
        t = np.asarray(st.all_t_s) + hops
        row = [float(t.max()), float(t.sum()), float(t[st.worst_rank]), st.avg_wgrad_s,
               self.fp8_amax(tp, cp, ep, pp, vp, dp),
               split_excess_s(t.tolist(), (np.asarray(st.all_fwd_s) + hops / 2).tolist())]
        lead = cf.drain_leads(st.all_bwd_s, hops, vp, bool(split_wgrad))
        tied = self.tied_embedding(tp, cp, pp, dp)
        for r in (st.worst_rank, 0, pp - 1):
            coll_key = ("dp", tp, cp, ep, pp, dp, st.all_dense_params[r], st.all_expert_params[r], st.all_layers[r],
                        st.all_first_params[r])
            if coll_key not in self._coll:
                plan = self.plan(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp)
                self._coll[coll_key] = dp_collectives(  # type: ignore[assignment]
                    self.system, plan, st.all_dense_params[r], st.all_expert_params[r], st.all_layers[r],
                    st.all_first_params[r])
            dpc: Any = self._coll[coll_key]
            row += [st.all_fwd_s[r], st.all_bwd_s[r], st.all_dense_params[r], st.all_expert_params[r], st.all_layers[r],
                    float(hops[r]), float(lead[r]), dpc.all_reduce_s, dpc.reduce_scatter_s, dpc.all_gather_s,
                    dpc.unit_all_gather_s, dpc.unit_reduce_scatter_s, dpc.unit_copy_fwd_s, dpc.unit_copy_bwd_s,
                    dpc.first_all_gather_s, dpc.first_reduce_scatter_s, dpc.first_share,
                    tied + self.optimizer_matrix(tp, cp, pp, vp, dp, r, place)
                    + self.sp_grad_sync(tp, cp, ep, sp, pp, vp, dp, r, place),
                    float(cf.grad_window_s(bool(split_wgrad), st.all_bwd_s[r], st.all_wgrad_s[r], float(hops[r])))]
        out = tuple(row)
        self._costs[key] = out
        return out

    def rank_hops(self, st: StageTable, tp: int, cp: int, pp: int, vp: int, dp: int, mb: int) -> np.ndarray:
        """Per pipeline rank, exposed p2p seconds per micro-batch (closed_forms.pipeline_hops_s on
        the rank's own chunks), overlapped where the stack turns overlap_p2p_comm on and vp > 1
        (frameworks.apply_framework)."""
        over = self.framework is not None and self.framework.p2p_overlap and vp > 1 and pp > 1
        f, b = np.asarray(st.all_fwd_s), np.asarray(st.all_bwd_s)
        hops = cf.pipeline_hops_s(float(vp), self.p2p(tp, cp, pp, dp, mb), f, b, float(over))
        return np.broadcast_to(np.asarray(hops, dtype=float), f.shape)

    def p2p(self, tp: int, cp: int, pp: int, dp: int, mb: int) -> float:
        key = ("p2p", tp, cp, pp, dp, mb)
        if key not in self._coll:
            g = self.graph(tp, cp, 1, 0, mb)
            self._coll[key] = p2p_time_s(self.system, self.plan(tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=mb), g, self.spec)
        return self._coll[key]

    def tied_embedding(self, tp: int, cp: int, pp: int, dp: int) -> float:
        key = ("emb", tp, cp, pp > 1, dp)
        if key not in self._coll:
            self._coll[key] = tied_embedding_sync_s(self.system, self.plan(tp=tp, cp=cp, pp=pp, dp=dp), self.spec)
        return self._coll[key]

    def sp_grad_sync(self, tp: int, cp: int, ep: int, sp: int, pp: int, vp: int, dp: int, rank: int,
                     place: int = -1) -> float:
        """The tp all-reduce of sequence-parallel replicated gradients (stages.sp_replicated_grad_sync_s)."""
        if not sp or tp == 1:
            return 0.0
        key = ("spgrad", tp, cp, ep, pp, vp, dp, rank, place)
        if key not in self._coll:
            plan = self.plan(tp=tp, cp=cp, ep=ep, pp=pp, vp=vp, dp=dp, sequence_parallel=True,
                             schedule=schedule_of(place))
            self._coll[key] = sp_replicated_grad_sync_s(self.system, plan, self.graph(tp, cp, ep, 1, 1), rank)
        return self._coll[key]

    def fp8_amax(self, tp: int, cp: int, ep: int, pp: int, vp: int, dp: int) -> float:
        """Delayed scaling's amax all-reduces per micro-batch (stages.delayed_amax_s_per_micro_batch)."""
        key = ("amax", tp, cp, ep, pp, vp, dp)
        if key not in self._coll:
            plan = self.plan(tp=tp, cp=cp, ep=ep, pp=pp, vp=vp, dp=dp)
            self._coll[key] = delayed_amax_s_per_micro_batch(self.system, plan, self.graph(tp, cp, ep, 0, 1))
        return self._coll[key]

    def optimizer_matrix(self, tp: int, cp: int, pp: int, vp: int, dp: int, rank: int, place: int = -1) -> float:
        if self.optimizer != "muon":
            return 0.0
        key = ("opt", tp, cp, pp, vp, dp, rank, place)
        if key not in self._coll:
            plan = self.plan(tp=tp, cp=cp, pp=pp, vp=vp, dp=dp, schedule=schedule_of(place))
            self._coll[key] = optimizer_matrix_s(self.system, plan, self.spec, self.graph(tp, cp, 1, 0, 1), rank)
        return self._coll[key]

    def a2a_overlap_micro_batches(self, g: dict[str, np.ndarray], place: np.ndarray) -> np.ndarray:
        """Per grid row, its micro-batches where the stack runs the MoE all-to-alls under the combined
        1F1B, else 0: decided per distinct (ep, recompute, pp, vp) by the plan the stack makes of it
        (frameworks.apply_framework, ParallelPlan.a2a_overlap_refusal), as estimate decides it."""
        if self.framework is None or self.precision not in self.framework.moe_a2a_overlap_precisions:
            return np.zeros(len(g["tp"]), dtype=np.int64)  # the stack selects it for no layout of this precision
        uniq, inv = unique_rows([g["ep"], g["rec"], g["pp"], g["vp"], place])
        on = np.array([self._a2a_overlap(*row) for row in uniq.tolist()])
        return np.where(on[inv], g["m"], 0).astype(np.int64)

    def _a2a_overlap(self, ep: int, rec: int, pp: int, vp: int, place: int = -1) -> bool:
        key = ("a2a", ep, rec, pp, vp, place)
        if key not in self._coll:
            plan = self.plan(ep=ep, dp=ep, recompute=RECOMPUTES[rec], pp=pp, vp=vp, schedule=schedule_of(place))
            self._coll[key] = float(plan.moe_a2a_overlap)
        return bool(self._coll[key])

    # -- the vectorised pass ---------------------------------------------------------------------
    def evaluate(self, grid: dict[str, np.ndarray], overlap_dp_comm: bool = True,
                 overlap_fsdp_prefetch: bool = True) -> dict[str, np.ndarray]:
        """step_time_s and memory_bytes for every row of `grid` (space.layout_grid's columns)."""
        g = grid
        n = len(g["tp"])
        split = np.array([SCHEDULES[name].defers_wgrad for name in SCHEDULE_LIST], dtype=np.int64)[g["sched"]]
        place = placements(g)
        uniq, inv = unique_rows([g[c] for c in ("tp", "cp", "ep", "sp", "mb", "rec", "pp", "vp", "dp")]
                                + [split, self.a2a_overlap_micro_batches(g, place), place])
        layouts = uniq.tolist()  # the distinct layouts as Python rows, converted once for both lookups
        idx = self._cost_rows.lookup(list(map(tuple, layouts)), self.layout_costs)
        c = cost_columns(self._cost_rows.array()[idx[inv]])

        m, pp, vp = (g[k].astype(float) for k in ("m", "pp", "vp"))
        sched, zero = g["sched"], g["zero"]
        t_max = c["t_max_s"]
        idle = c["t_sum_s"] - t_max
        bubble = np.zeros(n)
        for k, name in enumerate(SCHEDULE_LIST):
            rows = (sched == k) & (pp > 1)
            if rows.any() and SCHEDULES[name].per_rank_pipeline:
                bubble[rows] = self._per_rank_bubble(name, uniq, inv, np.flatnonzero(rows), m)
            elif rows.any():
                t_avg = c["t_sum_s"][rows] / pp[rows]
                bubble[rows] = SCHEDULES[name].bubble_s(idle[rows], m[rows], pp[rows], vp[rows], t_avg,
                                                        c["avg_wgrad_s"][rows], c["split_excess_s"][rows])
        pipe = cf.pipeline_s(t_max, m, bubble)
        # the breakdown's bubble: all the pipeline beyond the slowest rank's own micro-batches
        bubble = np.where(pp > 1, pipe - m * c["t_worst_s"], 0.0)
        # the step's tail: the largest over the candidate ranks of its own DP exposure and optimizer
        # less its drain lead (analytic.tail_candidates; the first maximum, as max() takes it there)
        tails = [self._tail(c, k, g, m, zero, pp, vp, overlap_dp_comm, overlap_fsdp_prefetch) for k in range(N_TAILS)]
        ends = np.stack([dp_k + opt_k - c[f"lead_s_{k}"] for k, (dp_k, opt_k) in enumerate(tails)])
        pick = np.argmax(ends, axis=0)
        tail = np.take_along_axis(ends, pick[None, :], axis=0)[0]
        dp_own = np.choose(pick, [t[0] for t in tails])
        lead = np.choose(pick, [c[f"lead_s_{k}"] for k in range(N_TAILS)])
        dp_exp = np.maximum(0.0, dp_own - lead)
        step = np.asarray(pipe + tail)

        mem = self._memory(layouts, inv, m, pp, vp, sched, zero)
        assert mem.shape == (n,)
        return {"step_time_s": step, "memory_bytes": mem, "pp_bubble_s": bubble, "dp_comm_exposed_s": np.asarray(dp_exp)}

    def _tail(self, c: dict[str, np.ndarray], k: int, g: dict[str, np.ndarray], m: np.ndarray, zero: np.ndarray,
              pp: np.ndarray, vp: np.ndarray, overlap_dp_comm: bool,
              overlap_fsdp_prefetch: bool) -> tuple[np.ndarray, np.ndarray]:
        """(exposed DP seconds, optimizer seconds) after candidate rank `k`'s last compute
        (analytic.rank_tail_s), per grid row."""
        def col(name: str) -> np.ndarray:
            return c[f"{name}_{k}"]

        hops = col("hops_s")
        dp_exp = cf.dp_exposed_s(zero, m, col("fwd_s") + hops / 2, col("bwd_s") + hops / 2, col("layers"),
                                 col("all_reduce_s"), col("reduce_scatter_s"), col("all_gather_s"), overlap_dp_comm,
                                 overlap_fsdp_prefetch, can_overlap(self.system), comm_contention_fraction(self.system),
                                 col("unit_all_gather_s"), col("unit_reduce_scatter_s"), col("unit_copy_fwd_s"),
                                 col("unit_copy_bwd_s"), cf.fsdp_fill(pp), col("first_all_gather_s"),
                                 col("first_reduce_scatter_s"), col("first_share"), col("grad_window_s"), vp,
                                 RUN_SHARE[g["sched"]])
        folded = g["tp"] * g["dp"] * g["cp"]  # MoE parallel folding: edp = tp·cp·dp/(ep·etp), etp 1 in the grid
        dpcp, edp = (g["dp"] * g["cp"]).astype(float), (folded // g["ep"]).astype(float)
        local = cf.local_params(zero, col("dense_params"), col("expert_params"), dpcp, edp)
        accumulate = grad_accumulation_s_per_param(self.system.accelerator.elementwise_achieved_Bps,
                                                   autocast_on(self.plan()))
        held = cf.grad_params(zero, col("dense_params"), col("expert_params"), dpcp, edp)
        opt = (cf.optimizer_step_s(local, optimizer_s_per_param(self.system.accelerator, self.optimizer),
                                   col("optimizer_extra_s")) + m * c["amax_per_mb_s"] + (m - 1) * accumulate * held)
        return np.asarray(dp_exp, dtype=float), np.asarray(opt, dtype=float)

    def _per_rank_bubble(self, name: str, uniq: np.ndarray, inv: np.ndarray, rows: np.ndarray,
                         m: np.ndarray) -> np.ndarray:
        """pipeline_s of a schedule that reads each rank's phases (DualPipe: the largest over ranks
        of m·t_r + its bubble on rank r's own F, B, W), less m·max t, for grid rows `rows`: per
        distinct layout its ranks' t_r and bubbles once (cached; the hops are one layout's), then
        one padded max over ranks for every row."""
        keys, kinv = np.unique(inv[rows], return_inverse=True)
        terms = [self._rank_terms(name, tuple(uniq[u].tolist())) for u in keys]
        width = max(len(t) for t, _ in terms)
        t_all = np.zeros((len(terms), width))
        lift = np.full((len(terms), width), -np.inf)
        for j, (t, b) in enumerate(terms):
            t_all[j, :len(t)], lift[j, :len(b)] = t, b
        mm = m[rows][:, None]
        return np.max(mm * t_all[kinv] + lift[kinv], axis=1) - mm[:, 0] * t_all.max(axis=1)[kinv]

    def _rank_terms(self, name: str, row: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(t_r with p2p, the bubble of rank r's own phases) of one distinct layout (`row`: its
        uniq columns, tp .. place) for schedule `name`, as the analytic engine forms them."""
        key = ("ranks", name, row)
        if key not in self._pipe:
            st = self.stages(*row)
            tp, cp, _, _, mb, _, pp, vp, dp = row[:9]
            hops = self.rank_hops(st, tp, cp, pp, vp, dp, mb)
            t = np.asarray(st.all_t_s) + hops
            f = np.asarray(st.all_fwd_s) + hops / 2  # a micro-batch's p2p: one send each way
            w = np.asarray(st.all_wgrad_s)
            self._pipe[key] = (t, SCHEDULES[name].rank_bubbles_s(len(t), f, np.maximum(0.0, t - f - w), w))
        return self._pipe[key]

    def _memory(self, layouts: list[list[int]], inv: np.ndarray, m: np.ndarray, pp: np.ndarray,
                vp: np.ndarray, sched: np.ndarray, zero: np.ndarray) -> np.ndarray:
        """memory.peak_memory over the grid: max over the memory stages (first, second, last).
        `layouts`: the grid's distinct layouts (evaluate's uniq, as lists)."""
        idx = self._mem_rows.lookup([(*row[:-3], row[-1]) for row in layouts], self.memory_rows)  # less split, a2a_m
        per = self._mem_rows.array()[idx]  # (distinct, 6, k)
        s = per[inv, zero]  # (n, k): static bytes of the row's ZeRO stage
        a = per[inv, 4:]  # (n, 2, k): activations per micro-batch, working set
        # the ranks of memory_stages(pp) as memory_rows pads them to 3: 0, min(1, pp-1), pp-1
        stage = np.stack([np.zeros_like(pp), np.minimum(1, pp - 1), pp - 1], axis=1)
        flight_p = np.zeros(s.shape)
        for i, name in enumerate(SCHEDULE_LIST):
            rows = sched == i
            if rows.any():
                flight_p[rows] = SCHEDULES[name].in_flight(m[rows, None], pp[rows, None], vp[rows, None], stage[rows])
        flight = np.asarray(cf.in_flight(pp[:, None], flight_p))
        return np.max(cf.rank_memory_bytes(s, a[:, 0], flight, a[:, 1], RUNTIME_BYTES), axis=1)


__all__ = ["COST_COLUMNS", "Evaluator", "StageTable", "unique_rows"]
