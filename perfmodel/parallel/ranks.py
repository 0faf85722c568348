"""Rank order: where each parallel group's members sit among the GPUs.

Megatron-Core's default order (`order="tp-cp-ep-dp-pp"`, parallel_state.initialize_model_parallel)
lays ranks out with tp varying fastest, then cp, then dp, then pp; expert parallelism folds inside
the dp·cp ranks. A group of `degree` members whose consecutive members are `stride` ranks apart
spans ceil(degree·stride / domain) scale-up domains, which is what a collective's cost reads.

    group   degree    stride
    tp      tp        1
    cp      cp        tp
    dp      dp·cp     tp        (gradients reduce over data and context parallel ranks together)
    pp      pp        tp·cp·dp
Expert layers fold onto the same tp·cp·dp ranks as etp x ep x edp (MoE parallel folding,
etp fastest: Megatron-Core's expert RankGenerator), edp = tp·cp·dp/(ep·etp):
    etp     etp       1
    ep      ep        etp
    edp     edp       etp·ep

This is the only place the order is written; every cost that needs a group's span asks here.
"""

from __future__ import annotations

from perfmodel.parallel.plan import ParallelPlan

GROUPS = ("tp", "cp", "dp", "pp", "etp", "ep", "edp")


def group_stride(plan: ParallelPlan, group: str) -> tuple[int, int]:
    """(degree, stride) of `group` in Megatron rank order (see the module docstring)."""
    if group == "tp":
        return plan.tp, 1
    if group == "cp":
        return plan.cp, plan.tp
    if group == "etp":
        return plan.etp, 1
    if group == "ep":
        return plan.ep, plan.etp
    if group == "edp":
        return plan.edp, plan.etp * plan.ep
    if group == "dp":
        return plan.dp * plan.cp, plan.tp
    if group == "pp":
        return plan.pp, plan.tp * plan.cp * plan.dp
    raise ValueError(f"parallel group {group!r}: expected one of {', '.join(GROUPS)}")


def expert_dp_stride(plan: ParallelPlan) -> tuple[int, int]:
    """(degree, stride) of the data-parallel group of expert weights: edp ranks, etp·ep apart."""
    return group_stride(plan, "edp")


__all__ = ["GROUPS", "expert_dp_stride", "group_stride"]
