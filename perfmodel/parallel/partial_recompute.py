"""Full recompute of some layers: Megatron-Core's recompute_method and recompute_num_layers
(NVIDIA/Megatron-LM @ d98e8a64 megatron/core/recompute.py checkpointed_forward;
transformer_config.py:543-555 and the checks at :1908-1931).

Under recompute_granularity full, each TransformerBlock (one model chunk: a pipeline rank's layers,
or one virtual stage of them under interleaving) checkpoints its layers one of two ways:

    uniform N   every run of N consecutive layers at the run's input. Every layer reruns its
                forward before its backward, as with N = 1; the chunk keeps ceil(L/N) run inputs
                instead of L layer inputs, and a run's backward rebuilds all N layers' saved
                tensors at once (memory.py).
    block N     the first N layers of the chunk at their own inputs; the layers after them keep
                every saved tensor and rerun nothing. N at or above the chunk's L is full
                recompute of every layer.

ParallelPlan's recompute 'full' alone is uniform 1 (each layer checkpointed at its input).
The FP8 corner of block (a first layer whose input needs no gradient is skipped and the window
moves on) never occurs here: a chunk's input always carries a gradient (embedding or a previous
stage's output).

A graph keeps layers of one kind together (Layer.count): where a model alternates kinds (sliding and
global attention), "the first N" takes them in the graph's order, not the model's alternation; the
seconds and bytes of the N layers differ only by what the kinds differ in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfmodel.parallel.split import chunk_layers, pipeline_split

if TYPE_CHECKING:
    from perfmodel.parallel.plan import ParallelPlan
    from perfmodel.workload.graph import Graph, Layer

LayerRun = tuple["Layer", float, "ParallelPlan"]  # (layer, instances, the plan they run under)


def is_block(plan: ParallelPlan) -> bool:
    """Whether only some layers of each chunk recompute (block method under full recompute)."""
    return plan.recompute == "full" and plan.recompute_method == "block"


def uniform_group(plan: ParallelPlan) -> int:
    """Layers per checkpointed run under full recompute's uniform method (1 when unset)."""
    if plan.recompute != "full" or plan.recompute_method != "uniform":
        return 1
    return plan.recompute_num_layers or 1


def kept_plan(plan: ParallelPlan) -> ParallelPlan:
    """The plan the layers after a block's recompute window run under: no recompute."""
    return plan.model_copy(update={"recompute": "none", "recompute_method": "uniform", "recompute_num_layers": None})


def split_runs(layers: list[tuple[Layer, float]], plan: ParallelPlan) -> list[LayerRun]:
    """One chunk's (layer, instances), in order, with the plan each part runs under: under block N
    the first N recomputable instances keep `plan` (full recompute) and the rest run under
    kept_plan; otherwise every layer runs under `plan`."""
    if not is_block(plan):
        return [(layer, n, plan) for layer, n in layers]
    kept = kept_plan(plan)
    left = float(plan.recompute_num_layers or 0)
    out: list[LayerRun] = []
    for layer, n in layers:
        if not layer.recomputable:
            out.append((layer, n, plan))
            continue
        k = min(n, left)
        left -= k
        out += [(layer, k, plan)] if k > 0 else []
        out += [(layer, n - k, kept)] if n - k > 0 else []
    return out


def chunk_runs(graph: Graph, plan: ParallelPlan, vstage: int) -> list[LayerRun]:
    """split_runs of virtual stage `vstage`'s layers (parallel/split.chunk_layers)."""
    return split_runs(chunk_layers(graph, plan.pp, plan.vp, vstage), plan)


def recomputed_instances(graph: Graph, plan: ParallelPlan) -> dict[int, float]:
    """Per layer (by id), the instances of the whole model whose forward reruns under block N, over
    every model chunk (for the hardware FLOPs)."""
    out: dict[int, float] = {}
    for vs in range(plan.pp * plan.vp):
        for layer, n, p in chunk_runs(graph, plan, vs):
            if p is plan and layer.recomputable:
                out[id(layer)] = out.get(id(layer), 0.0) + n
    return out


def window_notes(num_layers: int, plan: ParallelPlan) -> list[str]:
    """What a recompute_num_layers that reaches past a model chunk's layers does."""
    n = plan.recompute_num_layers
    if plan.recompute != "full" or n is None:
        return []
    most = max(pipeline_split(num_layers, plan.pp, plan.vp).chunk_layers)
    if plan.recompute_method == "block" and n >= most:
        return [f"recompute_num_layers {n} >= the {most} layers of a model chunk: block recompute reruns every "
                "layer, as full recompute does"]
    if plan.recompute_method == "uniform" and n > most:
        return [f"recompute_num_layers {n} > the {most} layers of a model chunk: each chunk is one checkpointed run"]
    return []


def window_label(plan: ParallelPlan) -> str:
    """How the layout line names the method: '' for full recompute of every layer at its input."""
    if plan.recompute != "full" or plan.recompute_num_layers is None:
        return ""
    if plan.recompute_method == "block":
        return f"first {plan.recompute_num_layers} layers per chunk"
    return f"uniform, {plan.recompute_num_layers} layers per checkpoint"


__all__ = ["chunk_runs", "is_block", "kept_plan", "recomputed_instances", "split_runs", "uniform_group",
           "window_label", "window_notes"]
