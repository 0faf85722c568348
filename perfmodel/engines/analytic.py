"""The analytical engine: step time in closed form from the shared stage costs.

    step = T_pipe + exposed DP collectives + optimizer step
with T_pipe = m · max_s t_s + bubble, t_s a rank's forward + backward + p2p seconds per
micro-batch and the bubble the schedule's closed form (perfmodel/parallel/schedules/); the DP
exposure and the optimizer step are `closed_forms`' (written once, shared with the planner and
the DES), evaluated on the rank whose tail ends last (tail_candidates).
"""

from __future__ import annotations

from perfmodel.engines import closed_forms as cf
from perfmodel.engines.stages import cached_dp_collectives, can_overlap, comm_contention_fraction, first_unit_params
from perfmodel.engines.step import StepInputs, finish, prepare
from perfmodel.estimate import Estimate
from perfmodel.hardware.system import System
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import get_schedule
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec


def pipeline_time_s(stage_s: list[float], m: int, vp: int, schedule: str, wgrad_s: float = 0.0,
                    fwd_s: list[float] | None = None, wgrad_ranks_s: list[float] | None = None) -> tuple[float, float]:
    """(pipeline seconds, bubble seconds) for m micro-batches over ranks taking `stage_s` each per
    micro-batch (the schedule's stage time plus p2p); wgrad_s is the mean weight-gradient phase;
    fwd_s and wgrad_ranks_s the ranks' own forward (with p2p) and weight-gradient phases, for a
    schedule whose pipeline reads them (DualPipe; else the mean forward is a third of t)."""
    p = len(stage_s)
    fwd = fwd_s if fwd_s is not None else [t / 3 for t in stage_s]
    wgrad = wgrad_ranks_s if wgrad_ranks_s is not None else [wgrad_s] * p
    pipe = get_schedule(schedule).pipeline_s(stage_s, fwd, wgrad, m, vp)
    return float(pipe), float(pipe - m * max(stage_s)) if p > 1 else 0.0


def tail_candidates(inp: StepInputs, rank_hops: tuple[float, ...]) -> list[tuple[int, float]]:
    """(rank, lead) of the ranks whose DP tail and optimizer may end the step: the slowest compute
    rank, the first (which ends a pipeline) and the last (the head, MTP layers), each with its
    drain lead (closed_forms.drain_leads)."""
    plan = inp.plan
    lead = cf.drain_leads([r.bwd_s for r in inp.ranks], rank_hops, plan.vp,
                          get_schedule(plan.schedule_name).defers_wgrad)
    return [(r, float(lead[r])) for r in (inp.worst_rank, 0, plan.pp - 1)]


def rank_tail_s(inp: StepInputs, r: int, rank_hops: tuple[float, ...]) -> tuple[float, float]:
    """(exposed data-parallel seconds, optimizer seconds) after pipeline rank `r`'s last compute."""
    plan, system, rank = inp.plan, inp.system, inp.ranks[r]
    h = rank_hops[r]
    dp = cached_dp_collectives(system, plan, rank.dense_params, rank.expert_params, rank.layers,
                               first_unit_params(inp.graph, plan, r))
    # the data-parallel collectives run on their own stream while the rank also waits for its
    # pipeline sends: a micro-batch's wall time, p2p included, is what hides them
    exposed = float(cf.dp_exposed_s(plan.zero_stage, plan.num_micro_batches, rank.fwd_s + h / 2, rank.bwd_s + h / 2,
                                    rank.layers, dp.all_reduce_s, dp.reduce_scatter_s, dp.all_gather_s,
                                    plan.overlap_dp_comm, plan.overlap_fsdp_prefetch, can_overlap(system),
                                    comm_contention_fraction(system), dp.unit_all_gather_s, dp.unit_reduce_scatter_s,
                                    dp.unit_copy_fwd_s, dp.unit_copy_bwd_s, cf.fsdp_fill(plan.pp),
                                    dp.first_all_gather_s, dp.first_reduce_scatter_s, dp.first_share,
                                    cf.grad_window_s(get_schedule(plan.schedule_name).defers_wgrad, rank.bwd_s,
                                                     rank.wgrad_s, h), plan.vp,
                                    get_schedule(plan.schedule_name).run_share()))
    return exposed, inp.optimizer_s(r)


def step_from_inputs(inp: StepInputs) -> Estimate:
    plan = inp.plan
    m, p = plan.num_micro_batches, plan.pp
    rank_hops = inp.rank_hops_s
    t = inp.stage_time_s
    i_max = inp.worst_rank
    worst, hops = inp.ranks[i_max], rank_hops[i_max]
    avg_w = sum(r.wgrad_s for r in inp.ranks) / p
    # a micro-batch's p2p: one send each way
    fwd = [r.fwd_s + h / 2 for r, h in zip(inp.ranks, rank_hops, strict=True)]
    pipe, _ = pipeline_time_s(list(t), m, plan.vp, plan.schedule_name, avg_w, fwd, [r.wgrad_s for r in inp.ranks])
    bubble = pipe - m * t[i_max] if p > 1 else 0.0  # all the pipeline beyond the worst rank's own micro-batches
    # the step ends when the last rank's data-parallel tail and optimizer end: each candidate rank's
    # own tail, less how long before the pipeline's end its compute ends (tail_candidates)
    candidates = tail_candidates(inp, rank_hops)
    own = {r: rank_tail_s(inp, r, rank_hops) for r in dict.fromkeys(r for r, _ in candidates)}
    tails = [(own[r], lead) for r, lead in candidates]
    (dp_own, opt_own), lead = max(tails, key=lambda x: x[0][0] + x[0][1] - x[1])
    tail = dp_own + opt_own - lead  # >= 0: the first stage, which ends the pipeline, leads by 0
    dp_exposed = max(0.0, dp_own - lead)  # the drain hides the DP part first
    optimizer = tail - dp_exposed
    breakdown = {
        "compute_fwd_s": m * worst.fwd_gpu_s,
        "compute_bwd_s": m * worst.bwd_gpu_s,
        "recompute_s": m * worst.recompute_s,
        "tp_ep_cp_comm_s": m * worst.comm_s,
        # a schedule that runs the weight-gradient phase apart loses the host / GPU overlap
        # between the two phases: that difference is host time too
        "host_overhead_s": m * (worst.host_s + t[i_max] - hops - (worst.fwd_s + worst.bwd_s)),
        "activation_offload_s": m * worst.offload_s,
        "pp_bubble_s": bubble,
        "pp_p2p_s": m * hops,
        "dp_comm_exposed_s": dp_exposed,
        "optimizer_s": optimizer,
    }
    return finish(inp, "analytic", pipe + dp_exposed + optimizer, breakdown)


def analytic_estimate(spec: ModelSpec | None, system: System, plan: ParallelPlan, messages: list[str] | None = None,
                      graph: Graph | None = None) -> Estimate:
    """Estimate from a ModelSpec, or (spec None) from a prebuilt graph such as from_torch's."""
    return step_from_inputs(prepare(spec, system, plan, messages, graph))


__all__ = ["analytic_estimate", "pipeline_time_s", "step_from_inputs"]
