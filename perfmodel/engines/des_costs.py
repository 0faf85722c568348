"""What each (stage, chunk) of the discrete-event engine costs, all from the shared stage costs
(engines/stages.py): forward, backward and deferred weight-gradient seconds, the ZeRO-3 per-unit
gathers the compute stream waits for, and the data-parallel gradient buckets with the point of
the grad-final op at which each is ready (engines/des.py plays them)."""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.engines.stages import (
    StageCost,
    cached_layer_time,
    can_overlap,
    comm_contention_fraction,
    dp_collectives,
)
from perfmodel.engines.step import StepInputs
from perfmodel.hardware.system import System
from perfmodel.parallel.partial_recompute import chunk_runs
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import get_schedule, rank_chunks
from perfmodel.workload.graph import Graph


@dataclass(frozen=True, slots=True)
class ChunkCost:
    fwd_s: float
    bwd_s: float  # backward incl. recompute; without the weight-gradient part under ZB-H1
    wgrad_s: float  # deferred weight-gradient part (ZB-H1), else 0
    fsdp_fwd_s: float  # ZeRO-3: per micro-batch, the forward's wait for its unit gathers + copy kernels
    fsdp_bwd_s: float  # the same for the backward's re-gathers and reduce-scatters, plus contention
    buckets: tuple[tuple[float, float], ...]  # (fraction of the grad-final op done when ready, DP seconds)
    stage: StageCost


@dataclass(frozen=True, slots=True)
class FsdpUnit:
    """One FSDP unit (a layer instance) of a chunk: its compute seconds per micro-batch, its own
    collectives and copy kernels (stages.DpCollectives with units = 1)."""

    fwd_s: float
    bwd_s: float
    all_gather_s: float
    reduce_scatter_s: float
    copy_fwd_s: float = 0.0
    copy_bwd_s: float = 0.0


def fsdp_unit_schedule(units: list[FsdpUnit], prefetch: bool) -> tuple[float, float, float, float]:
    """One micro-batch of ZeRO-3 over `units` (forward order), played out on two streams:
    (forward wait, backward wait, collective seconds, copy-kernel seconds); a wait is the
    phase's makespan minus its unit compute, so it holds the copy kernels.

    Compute stream: unit k starts when unit k-1 is done and its gather has arrived, then runs its
    copy kernels and compute. Communication stream: one NCCL queue in issue order. The gather of
    the next unit is issued when unit k starts (prefetch; FSDP2's one-unit-ahead prefetch and
    FSDP1's BACKWARD_PRE / rate-limited forward) or when it ends (no prefetch); a unit's
    reduce-scatter when its backward ends, before the next unit's backward starts. The backward
    runs the units in reverse and re-gathers each one (reshard after forward) but the first,
    which stays gathered from the forward (the root unit; closed_forms' docstring)."""
    def phase(order: list[FsdpUnit], backward: bool) -> tuple[float, float]:
        if not order:
            return 0.0, 0.0
        comm = ready = 0.0 if backward else order[0].all_gather_s
        t = 0.0
        for k, u in enumerate(order):
            start = max(t, ready)
            nxt = order[k + 1].all_gather_s if k + 1 < len(order) else None
            if prefetch and nxt is not None:
                comm = ready = max(comm, start) + nxt
            t = start + (u.copy_bwd_s + u.bwd_s if backward else u.copy_fwd_s + u.fwd_s)
            if backward:
                comm = max(comm, t) + u.reduce_scatter_s
            if not prefetch and nxt is not None:
                comm = ready = max(comm, t) + nxt
        return t, comm

    t_f, _ = phase(units, False)
    t_b, comm_b = phase(units[::-1], True)
    fwd_wait = max(0.0, t_f - sum(u.fwd_s for u in units))  # clamped: summation order leaves ~1e-18
    bwd_wait = max(0.0, max(t_b, comm_b) - sum(u.bwd_s for u in units))
    comm = sum(2 * u.all_gather_s + u.reduce_scatter_s for u in units) - (units[-1].all_gather_s if units else 0.0)
    return fwd_wait, bwd_wait, comm, sum(u.copy_fwd_s + u.copy_bwd_s for u in units)


def chunk_costs(inp: StepInputs) -> list[list[ChunkCost]]:
    """[stage][chunk]: the model chunks rank s holds, in the schedule's order (rank_stages:
    Megatron's virtual stage c·p + s for chunk c; DualPipe's stages s and p − 1 − s)."""
    system, plan, graph = inp.system, inp.plan, inp.graph
    p, v = plan.pp, plan.vp
    zb = get_schedule(plan.schedule_name).defers_wgrad
    overlap = bool(plan.overlap_dp_comm and can_overlap(system))
    contention = comm_contention_fraction(system)
    out: list[list[ChunkCost]] = []
    for s in range(p):
        row = []
        for vs in rank_chunks(plan.schedule_name, p, v, s):
            st = inp.chunks[vs]
            dp = dp_collectives(system, plan, st.dense_params, st.expert_params)
            fsdp_f = fsdp_b = 0.0
            grad_s = dp.all_reduce_s if plan.zero_stage == 0 else dp.reduce_scatter_s if plan.zero_stage < 3 else 0.0
            buckets = _buckets(system, plan, graph, vs, grad_s, zb, overlap)
            if plan.zero_stage == 3:
                fsdp_f, fsdp_b, once = _fsdp_waits(system, plan, graph, vs, contention)
                buckets = once if p > 1 else buckets
            if zb:  # input- and weight-gradient phases run apart (LayerTime.bwd_input_s, wgrad_s)
                row.append(ChunkCost(st.fwd_s, st.bwd_input_s, st.wgrad_s, fsdp_f, fsdp_b, buckets, st))
            else:
                row.append(ChunkCost(st.fwd_s, st.bwd_s, 0.0, fsdp_f, fsdp_b, buckets, st))
        out.append(row)
    return out


def _fsdp_waits(system: System, plan: ParallelPlan, graph: Graph, vstage: int,
                contention: float) -> tuple[float, float, tuple[tuple[float, float], ...]]:
    """ZeRO-3 on virtual stage `vstage`, each layer instance an FSDP unit with its own
    collectives (fsdp_unit_schedule); the collectives' hidden part slows the compute beside it by
    the contention fraction. Without a pipeline, per micro-batch: (wait before each F, wait
    before each B, ()). With one (pp > 1; closed_forms' docstring): (wait before the first
    micro-batch's F, the chunk_cat copies before the grad-final op, one reduce-scatter bucket per
    unit for the DP stream, ready when that op ends)."""
    units: list[FsdpUnit] = []
    for layer, n, run_plan in chunk_runs(graph, plan, vstage):
        lt = cached_layer_time(system, run_plan, layer)
        dp = dp_collectives(system, plan, layer.params - layer.expert_params, layer.expert_params)
        units += [FsdpUnit(lt.fwd_s, lt.bwd_s, dp.unit_all_gather_s, dp.unit_reduce_scatter_s, dp.unit_copy_fwd_s,
                           dp.unit_copy_bwd_s)] * int(n)
    prefetch = bool(plan.overlap_fsdp_prefetch and can_overlap(system))
    fwd_wait, bwd_wait, comm, copies = fsdp_unit_schedule(units, prefetch)
    if plan.pp > 1:
        gathers = sum(u.all_gather_s for u in units)
        hidden = max(0.0, gathers - (fwd_wait - sum(u.copy_fwd_s for u in units)))
        buckets = tuple((1.0, u.reduce_scatter_s) for u in reversed(units) if u.reduce_scatter_s > 0)
        return fwd_wait + hidden * contention, sum(u.copy_bwd_s - u.copy_fwd_s for u in units), buckets
    hidden = max(0.0, comm - (fwd_wait + bwd_wait - copies))
    return fwd_wait, bwd_wait + hidden * contention, ()


def _buckets(system: System, plan: ParallelPlan, graph: Graph, vstage: int, grad_s: float, zb: bool,
             overlap: bool) -> tuple[tuple[float, float], ...]:
    """One bucket per layer instance in backward order: ready when its backward (or W) is done."""
    if grad_s <= 0:
        return ()
    inst = []
    for layer, n, run_plan in reversed(chunk_runs(graph, plan, vstage)):
        lt = cached_layer_time(system, run_plan, layer)
        inst += [(lt.wgrad_s if zb else lt.bwd_s, layer.params)] * int(n)
    t_sum = sum(t for t, _ in inst) or 1.0
    p_sum = sum(q for _, q in inst) or 1.0
    out, done = [], 0.0
    for t, q in inst:
        done += t
        out.append((done / t_sum if overlap else 1.0, grad_s * q / p_sum))
    return tuple(out)

__all__ = ["ChunkCost", "FsdpUnit", "chunk_costs", "fsdp_unit_schedule"]
