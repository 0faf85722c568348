"""Step time and memory of a whole layout grid at once, from the analytic engine's own costs.

The analytic engine's step (perfmodel/engines/analytic.py) splits into two kinds of terms:

* costs that depend on a few shape parameters only: per-layer forward / backward / weight-grad
  seconds (`costs.layer_time`, a function of tp, cp, ep, sp, micro-batch, recompute and precision),
  the stage a layer lands on (`memory.stage_layers`, a function of pp), the collectives of the
  data-parallel group (`analytic.dp_sync_s`), the pipeline send (`analytic.p2p_time_s`) and the
  bytes a rank holds (`memory.memory_per_rank`). These are computed by those same scalar
  functions, once per distinct combination, and cached;
* the closed forms that combine them (pipeline bubble, DP exposure, optimizer step, activations
  in flight), which are evaluated here with NumPy over every layout of the grid:

    T_pipe  = m·(t_max + 2v·t_p2p) + B,   B = (Σt − t_max + (p−1)·2v·t_p2p) · {1, 1/v, (f+b−2w)/(f+b)}
    T_dp    = ZeRO 0-2: max(G − b_w, G/L) + max(P − f_w, P/L);  ZeRO 3: m·(max(0, A − f_w) + A/L
              + max(0, A + R − b_w) + R/L)
              plus (total − exposed) · analytic.comm_contention_fraction (SMs lost to NCCL while hidden)
    T_opt   = local params · bytes per param / achieved HBM bandwidth (+ tied-embedding all-reduce)
    step    = T_pipe + T_dp + T_opt
    memory  = static(ZeRO) + activations per micro-batch · in-flight(schedule, m, p, v) + working

so a change to a GEMM, attention or collective cost moves the search and the engine together;
`tests/test_planning.py` holds the two equal on random layouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfmodel.comm.collectives import collective_time_s
from perfmodel.engines.analytic import (
    ACT_BYTES,
    cached_graph,
    comm_contention_fraction,
    dp_sync_s,
    moe_options,
    optimizer_step_s,
    p2p_time_s,
)
from perfmodel.engines.costs import layer_time
from perfmodel.hardware.catalog import System
from perfmodel.memory import RUNTIME_BYTES, layer_activation_bytes, memory_per_rank, stage_layers
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.space import GPIPE, INTERLEAVED, RECOMPUTES, ZB_H1
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec

FULL = RECOMPUTES.index("full")


@dataclass
class StageTable:
    """Per (shape, pp): what the closed forms need from the stages, unrolled to scalars."""

    t_max: float  # max over stages of fwd + bwd (no p2p), per micro-batch
    t_sum: float
    avg_fwd: float
    avg_bwd: float
    avg_wgrad: float
    worst_fwd: float
    worst_bwd: float
    worst_dense: float  # parameters of the slowest stage
    worst_expert: float
    worst_layers: float
    act_per_mb: tuple[float, float]  # (first, last stage) activation bytes per in-flight micro-batch
    act_working: tuple[float, float]


@dataclass
class Evaluator:
    """Caches of the scalar shared costs for one (model, system, sequence length, precision)."""

    spec: ModelSpec
    system: System
    seq_len: int
    precision: str
    attention_impl: str = "flash"
    optimizer: str = "adam"
    _base: ParallelPlan | None = field(default=None, repr=False)
    _layers: dict[tuple[Any, ...], dict[str, np.ndarray]] = field(default_factory=dict, repr=False)
    _counts: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _stages: dict[tuple[Any, ...], StageTable] = field(default_factory=dict, repr=False)
    _static: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict, repr=False)
    _coll: dict[tuple[Any, ...], float] = field(default_factory=dict, repr=False)

    # -- plans the shared functions read (validated grids need no pydantic pass) ---------------
    def plan(self, **kw: Any) -> ParallelPlan:
        """A plan with these fields, unvalidated: the grid already holds only valid layouts, and
        `model_copy` costs a microsecond where validation costs tens."""
        if self._base is None:
            self._base = ParallelPlan(seq_len=self.seq_len, precision=self.precision, attention_impl=self.attention_impl,
                                      optimizer=self.optimizer)
        kw.setdefault("global_batch", kw.get("micro_batch", 1) * kw.get("dp", 1))
        return self._base.model_copy(update=kw)

    def graph(self, tp: int, cp: int, ep: int, sp: int, mb: int) -> Graph:
        return cached_graph(self.spec, mb, self.seq_len, tp, cp, ep, bool(sp), self.precision, self.attention_impl,
                            moe_options(self.plan()))

    # -- per shape: one vector entry per graph layer ----------------------------------------------
    def layer_vectors(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int) -> dict[str, np.ndarray]:
        key = (tp, cp, ep, sp, mb, rec)
        if key not in self._layers:
            g = self.graph(tp, cp, ep, sp, mb)
            plan = self.plan(tp=tp, cp=cp, ep=ep, dp=ep, sequence_parallel=bool(sp), micro_batch=mb,
                             recompute=RECOMPUTES[rec])
            lts = [layer_time(self.system, plan, layer) for layer in g.layers]
            self._layers[key] = {
                "fwd": np.array([lt.fwd_s for lt in lts]),
                "bwd": np.array([lt.bwd_s for lt in lts]),
                "wgrad": np.array([lt.wgrad_s for lt in lts]),
                "dense": np.array([layer.params - layer.expert_params for layer in g.layers]),
                "expert": np.array([layer.expert_params for layer in g.layers]),
                "act": np.array([layer_activation_bytes(layer, RECOMPUTES[rec]) for layer in g.layers]),
                "work": np.array([layer.saved_bytes if rec == FULL and layer.recomputable else 0.0 for layer in g.layers]),
            }
        return self._layers[key]

    def stage_counts(self, g: Graph, pp: int) -> np.ndarray:
        """C[stage, layer] = instances of graph layer `layer` on pipeline `stage` (memory.stage_layers)."""
        key = (tuple((layer.kind, layer.count) for layer in g.layers), pp)
        if key not in self._counts:
            index = {id(layer): i for i, layer in enumerate(g.layers)}
            c = np.zeros((pp, len(g.layers)))
            for s in range(pp):
                for layer, n in stage_layers(g, pp, s):
                    c[s, index[id(layer)]] = n
            self._counts[key] = c
        return self._counts[key]

    def stages(self, tp: int, cp: int, ep: int, sp: int, mb: int, rec: int, pp: int) -> StageTable:
        key = (tp, cp, ep, sp, mb, rec, pp)
        if key in self._stages:
            return self._stages[key]
        v = self.layer_vectors(tp, cp, ep, sp, mb, rec)
        g = self.graph(tp, cp, ep, sp, mb)
        c = self.stage_counts(g, pp)
        f, b, w = c @ v["fwd"], c @ v["bwd"], c @ v["wgrad"]
        t = f + b
        i = int(np.argmax(t))
        acts, working = self._activations(v, c, pp)
        tab = StageTable(
            t_max=float(t[i]), t_sum=float(t.sum()), avg_fwd=float(f.sum()) / pp, avg_bwd=float(b.sum()) / pp,
            avg_wgrad=float(w.sum()) / pp, worst_fwd=float(f[i]), worst_bwd=float(b[i]),
            worst_dense=float(c[i] @ v["dense"]), worst_expert=float(c[i] @ v["expert"]), worst_layers=float(c[i].sum()),
            act_per_mb=acts, act_working=working,
        )
        self._stages[key] = tab
        return tab

    def _activations(self, v: dict[str, np.ndarray], c: np.ndarray, pp: int) -> tuple[tuple[float, float], tuple[float, float]]:
        """memory_per_rank's activations of the first and last stage as a·in_flight + w: a sums
        memory.layer_activation_bytes over the stage, w is the largest full-recompute working set."""
        a, w = [], []
        for stage in (0, pp - 1):
            a.append(float(c[stage] @ v["act"]))
            w.append(float(np.max(v["work"] * (c[stage] > 0), initial=0.0)))
        return (a[0], a[1]), (w[0], w[1])

    # -- per (degrees, ZeRO): parameter bytes, collectives --------------------------------------
    def static_bytes(self, tp: int, cp: int, ep: int, pp: int, dp: int, zero: int) -> tuple[float, float]:
        """(first, last stage) weights + grads + optimizer states per rank."""
        key = (tp, cp, ep, pp, dp, zero)
        if key not in self._static:
            g = self.graph(tp, cp, ep, 0, 1)
            plan = self.plan(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, zero_stage=zero)
            parts = []
            for stage in sorted({0, pp - 1}):
                mem = memory_per_rank(g, plan, stage)
                parts.append(mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes)
            self._static[key] = (parts[0], parts[-1])
        return self._static[key]

    def dp_collectives(self, tp: int, cp: int, ep: int, pp: int, dp: int, dense: float, expert: float) -> tuple[float, ...]:
        """(all-reduce of grads, reduce-scatter of grads, all-gather of bf16 weights) seconds."""
        key = ("dp", tp, cp, ep, pp, dp, dense, expert)
        if key not in self._coll:
            st = {"dense_params": dense, "expert_params": expert}
            z0 = dp_sync_s(self.system, self.plan(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, zero_stage=0), st)
            z1 = dp_sync_s(self.system, self.plan(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, zero_stage=1), st)
            self._coll[key] = (z0["grad"], z1["grad"], z1["param"])  # type: ignore[assignment]
        return self._coll[key]  # type: ignore[return-value]

    def p2p(self, tp: int, cp: int, pp: int, dp: int, mb: int) -> float:
        key = ("p2p", tp, cp, pp, dp, mb)
        if key not in self._coll:
            g = self.graph(tp, cp, 1, 0, mb)
            self._coll[key] = p2p_time_s(self.system, self.plan(tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=mb), g, self.spec)
        return self._coll[key]

    def tied_embedding(self, tp: int, cp: int, pp: int, dp: int, grad_bytes: int) -> float:
        spec = self.spec
        if pp == 1 or not spec.tied_embeddings or not spec.vocab:
            return 0.0
        key = ("emb", tp, cp, dp, grad_bytes)
        if key not in self._coll:
            emb = spec.vocab * spec.hidden / tp * grad_bytes
            self._coll[key] = collective_time_s(self.system, "all_reduce", emb, 2, tp * cp * dp)
        return self._coll[key]

    # -- the vectorised pass ---------------------------------------------------------------------
    def evaluate(self, grid: dict[str, np.ndarray], overlap_dp_comm: bool = True,
                 overlap_fsdp_prefetch: bool = True) -> dict[str, np.ndarray]:
        """step_time_s and memory_bytes for every row of `grid` (space.layout_grid's columns)."""
        g = grid
        n = len(g["tp"])
        uniq, inv = unique_rows([g[c] for c in ("tp", "cp", "ep", "sp", "mb", "rec", "pp", "dp")])
        grad_bytes = 2 if self.precision == "fp16" else 4
        per = np.empty((len(uniq), 16))
        for j, (tp, cp, ep, sp, mb, rec, pp, dp) in enumerate(uniq.tolist()):
            st = self.stages(tp, cp, ep, sp, mb, rec, pp)
            ar, rs, ag = self.dp_collectives(tp, cp, ep, pp, dp, st.worst_dense, st.worst_expert)
            per[j] = (st.t_max, st.t_sum, st.avg_fwd, st.avg_bwd, st.avg_wgrad, st.worst_fwd, st.worst_bwd,
                      st.worst_dense, st.worst_expert, st.worst_layers, ar, rs, ag,
                      self.p2p(tp, cp, pp, dp, mb), self.tied_embedding(tp, cp, pp, dp, grad_bytes), 0.0)
        (t_max0, t_sum0, avg_f, avg_b, avg_w, wf, wb, wdense, wexp, wlayers, ar, rs, ag, p2p, emb, _) = per[inv].T

        m, pp, vp = (g[c].astype(float) for c in ("m", "pp", "vp"))
        sched, zero = g["sched"], g["zero"]
        hops = 2 * vp * p2p
        t_max = t_max0 + hops
        bubble = (t_sum0 + pp * hops) - t_max
        bubble = np.where(sched == INTERLEAVED, bubble / vp, bubble)
        fb = avg_f + avg_b
        with np.errstate(invalid="ignore", divide="ignore"):
            zb = np.where(fb > 0, np.maximum(0.0, fb - 2 * avg_w) / fb, 1.0)
        bubble = np.where(sched == ZB_H1, bubble * zb, bubble)
        pipe = m * t_max + bubble

        layers = np.maximum(1.0, wlayers)
        grad = np.where(zero == 0, ar, np.where(zero < 3, rs, 0.0))
        param = np.where((zero == 1) | (zero == 2), ag, 0.0)
        if overlap_dp_comm:
            dp_exp = np.maximum(grad - wb, grad / layers) + np.where(param > 0, np.maximum(param - wf, param / layers), 0.0)
        else:
            dp_exp = grad + param
        if overlap_fsdp_prefetch:
            z3 = m * (np.maximum(0.0, ag - wf) + ag / layers + np.maximum(0.0, ag + rs - wb) + rs / layers)
        else:
            z3 = m * (ag + ag + rs)
        dp_exp = np.where(zero == 3, z3, dp_exp)
        # the part that hides still slows the compute beside it (analytic.comm_contention_fraction)
        total = np.where(zero == 3, m * (2 * ag + rs), grad + param)
        dp_exp = dp_exp + np.maximum(0.0, total - dp_exp) * comm_contention_fraction(self.system)

        dpcp = (g["dp"] * g["cp"]).astype(float)
        sharded = zero >= 1
        local = wdense / np.where(sharded, dpcp, 1.0) + wexp / np.where(sharded, np.maximum(1.0, g["tp"] * dpcp // g["ep"]), 1.0)
        opt = optimizer_step_s(self.system.accelerator, self.optimizer, local) + emb
        step = pipe + dp_exp + opt

        mem = self._memory(g, uniq, inv, m, pp, vp, sched, zero)
        assert mem.shape == (n,)
        return {"step_time_s": step, "memory_bytes": mem, "pp_bubble_s": bubble, "dp_comm_exposed_s": dp_exp}

    def _memory(self, g: dict[str, np.ndarray], uniq: np.ndarray, inv: np.ndarray, m: np.ndarray, pp: np.ndarray,
                vp: np.ndarray, sched: np.ndarray, zero: np.ndarray) -> np.ndarray:
        """memory.memory_per_rank over the grid: max of the first and last stage."""
        per = np.empty((len(uniq), 4, 4))  # [shape, zero, (static0, static1, act0·, act1·)]
        acts = np.empty((len(uniq), 4))
        for j, (tp, cp, ep, sp, mb, rec, p, dp) in enumerate(uniq.tolist()):
            st = self.stages(tp, cp, ep, sp, mb, rec, p)
            acts[j] = (*st.act_per_mb, *st.act_working)
            for z in range(4):
                per[j, z, :2] = self.static_bytes(tp, cp, ep, p, dp, z)
        s = per[inv, zero]  # (n, 4)
        a = acts[inv]
        # in-flight micro-batches (memory.in_flight_micro_batches): 1 | m (GPipe) | min(m, p(1 + (p-1)/(p v)))
        inter = np.minimum(m, pp * (1.0 + (pp - 1) / (pp * vp)))
        flight = np.where(pp == 1, 1.0, np.where(sched == GPIPE, m, np.where(sched == INTERLEAVED, inter, np.minimum(m, pp))))
        first = s[:, 0] + a[:, 0] * flight + a[:, 2] + RUNTIME_BYTES
        last = s[:, 1] + a[:, 1] * flight + a[:, 3] + RUNTIME_BYTES
        return np.maximum(first, last)


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


__all__ = ["ACT_BYTES", "Evaluator", "StageTable"]
