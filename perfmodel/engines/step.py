"""What both engines do around the pipeline: check the plan against the model, cost every stage
once, and turn a step time into an Estimate (memory, FLOPs, fit, messages). Neither engine runs
the other: each takes the same `StepInputs` and times the step its own way."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from perfmodel.compute.alignment import MISALIGNED_GEMM_RATIO, alignment_bytes, alignment_elements
from perfmodel.compute.autocast import autocast_on, grad_accumulation_s_per_param
from perfmodel.compute.ops import gemm_precision, misaligned_gemms
from perfmodel.engines import closed_forms as cf
from perfmodel.engines.offload import can_offload
from perfmodel.engines.stages import (
    StageCost,
    check_imported,
    chunk_costs,
    delayed_amax_s_per_micro_batch,
    graph_flop_per_step,
    model_flop_per_step,
    optimizer_matrix_s,
    optimizer_s_per_param,
    p2p_time_s,
    plan_graph,
    rank_costs,
    sp_replicated_grad_sync_s,
    tied_embedding_sync_s,
)
from perfmodel.estimate import Estimate
from perfmodel.hardware.attention import check_attention_kernel
from perfmodel.hardware.derating import estimate_context
from perfmodel.hardware.system import System
from perfmodel.memory import fit_message, offloaded_bytes, peak_memory
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import get_schedule
from perfmodel.parallel.shard import shard
from perfmodel.units import fmt
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec


@dataclass(frozen=True)
class StepInputs:
    spec: ModelSpec | None
    system: System
    plan: ParallelPlan
    graph: Graph
    messages: tuple[str, ...]
    chunks: tuple[StageCost, ...]  # per virtual stage chunk·pp + rank
    ranks: tuple[StageCost, ...]  # per pipeline rank
    p2p_s: float  # one activation crossing one stage boundary
    whole: Graph | None = None  # an imported graph before shard(): the whole model's FLOPs and weights

    @cached_property
    def rank_hops_s(self) -> tuple[float, ...]:
        """Per pipeline rank, p2p seconds per micro-batch (closed_forms.pipeline_hops_s): all of
        them when the sends block; with overlap_p2p_comm what the rank's own forward and backward
        chunks do not cover (a rank's exposure follows its own chunks: a faster rank elsewhere
        never lengthens it)."""
        plan = self.plan
        return tuple(float(cf.pipeline_hops_s(plan.vp, self.p2p_s, r.fwd_s, r.bwd_s, plan.overlap_p2p_comm))
                     for r in self.ranks)

    @cached_property
    def own_stage_s(self) -> tuple[float, ...]:
        """Per rank, seconds of one micro-batch's own chunks under the plan's schedule (p2p aside)."""
        sched = get_schedule(self.plan.schedule_name)
        return tuple(float(sched.stage_s(r.fwd_s, r.bwd_s, r.bwd_input_s, r.wgrad_s)) for r in self.ranks)

    @property
    def stage_time_s(self) -> tuple[float, ...]:
        """Per rank, seconds of one micro-batch under the plan's schedule, p2p included."""
        return tuple(t + h for t, h in zip(self.own_stage_s, self.rank_hops_s, strict=True))

    @property
    def worst_rank(self) -> int:
        """The rank whose own chunks take longest (p2p aside): its parameters and terms make the
        step's breakdown, and it is one of the tail candidates (analytic.tail_candidates)."""
        t = self.own_stage_s
        return max(range(len(t)), key=t.__getitem__)

    def optimizer_s(self, rank: int) -> float:
        """Optimizer step of pipeline rank `rank`, with the step's small synchronous collectives:
        the tied-embedding sync, the tp all-reduce of sequence-parallel replicated gradients and
        the delayed-scaling amax all-reduces (latency-bound, issued per micro-batch and chunk), and
        under autocast the fp32 gradient accumulation of the micro-batches after the first."""
        plan, r = self.plan, self.ranks[rank]
        local = cf.local_params(plan.zero_stage, r.dense_params, r.expert_params, plan.dp * plan.cp, plan.edp)
        accumulate = grad_accumulation_s_per_param(self.system.accelerator.elementwise_achieved_Bps, autocast_on(plan))
        extra = (tied_embedding_sync_s(self.system, plan, self.spec)
                 + (plan.num_micro_batches - 1) * accumulate
                 * cf.grad_params(plan.zero_stage, r.dense_params, r.expert_params, plan.dp * plan.cp, plan.edp)
                 + optimizer_matrix_s(self.system, plan, self.spec, self.whole or self.graph, rank)
                 + plan.num_micro_batches * delayed_amax_s_per_micro_batch(self.system, plan, self.graph)
                 + sp_replicated_grad_sync_s(self.system, plan, self.graph, rank))
        return float(cf.optimizer_step_s(local, optimizer_s_per_param(self.system.accelerator, plan.optimizer), extra))


def prepare(spec: ModelSpec | None, system: System, plan: ParallelPlan, messages: list[str] | None = None,
            graph: Graph | None = None) -> StepInputs:
    """Validate `plan` for the model (a ModelSpec, or with spec None a prebuilt graph such as
    from_torch's) and cost its stages."""
    msgs = list(messages or [])
    # a run in a precision the chip has no matrix format for is refused here, before any op is
    # costed (an op of fixed precision inside it may fall back: compute/ops.op_gemm_format)
    system.accelerator.check_precision(plan.precision)
    check_attention_kernel(system.accelerator, plan.attention_impl)  # flash3 / flash4 where measured only
    if spec is not None:
        msgs += plan.validate_for(spec, plan.world)
        graph = plan_graph(spec, plan)
    elif graph is None:
        raise ValueError("an estimate needs a ModelSpec or a Graph")
    else:
        msgs += check_imported(graph, plan)
        whole, graph = graph, shard(graph, plan)
    off = misaligned_gemms(system.accelerator, (op for layer in graph.layers for op in layer.ops))
    if off:
        acc = system.accelerator
        msgs.append(f"GEMMs off {acc.id}'s tensor-core alignment (every dimension a multiple of "
                    f"{alignment_bytes(acc)} B: {alignment_elements(acc, 'bf16')} bf16 elements) run at "
                    f"{MISALIGNED_GEMM_RATIO:.3g} of their rate: "
                    f"{', '.join(off[:6])}{' ...' if len(off) > 6 else ''} (docs/DESIGN.md 'Cost models')")
    chunks = chunk_costs(system, plan, graph)
    return StepInputs(spec, system, plan, graph, tuple(msgs), chunks, rank_costs(chunks, plan),
                      p2p_time_s(system, plan, graph, spec), whole if spec is None else None)


def offload_note(system: System, graph: Graph, plan: ParallelPlan) -> str:
    """What activation offloading moves and over what; whether the host memory holds it."""
    link = system.node.host_link
    assert link is not None  # stages.with_offload refused the plan otherwise
    host = offloaded_bytes(graph, plan)
    note = (f"activation offload: {plan.offload_activations} layers, {fmt(host, 'B')} per GPU to host memory at "
            f"{fmt(link.d2h.one_way_Bps('host_link.d2h'), 'B/s')} out, {fmt(link.h2d.one_way_Bps('host_link.h2d'), 'B/s')} "
            "back (measured one GPU at a time: GPUs sharing a host uplink get less)")
    if system.node.host_memory is not None:
        share = system.node.host_memory.si("bytes", "host_memory") / system.node.accelerators_per_node
        if host > share:
            note += f"; more than the host memory per GPU ({fmt(share, 'B')}): the run cannot offload this much"
    return note


def finish(inp: StepInputs, engine: str, step_time_s: float, breakdown_s: dict[str, float],
           timeline: list[dict[str, Any]] | None = None) -> Estimate:
    spec, plan, graph, acc = inp.spec, inp.plan, inp.graph, inp.system.accelerator
    msgs = list(inp.messages)
    mem = peak_memory(graph, plan)
    over = fit_message(graph, plan, acc.hbm_bytes, mem.total_bytes,
                       offload_ok=can_offload(inp.system))
    if over is not None:
        msgs.append(over)
    if plan.offload_activations:
        msgs.append(offload_note(inp.system, graph, plan))
    model_flop, hw_flop = model_flop_per_step(spec, plan) if spec is not None else graph_flop_per_step(inp.whole or graph, plan)
    tokens = (plan.global_batch * (plan.seq_len or spec.seq_len) if spec is not None
              else plan.global_batch * graph.tokens / graph.micro_batch)
    return Estimate(
        workload=spec.id if spec is not None else graph.model_id, system=inp.system.name, accelerator=acc.id, plan=plan,
        engine=engine, step_time_s=float(step_time_s), breakdown_s=breakdown_s, memory=mem, hbm_bytes=acc.hbm_bytes,
        tokens_per_step=float(tokens), model_flop_per_step=model_flop, hardware_flop_per_step=hw_flop,
        peak_flop_per_s=acc.matrix_peak_flop_per_s(gemm_precision(plan.precision)), n_gpus=plan.world,
        messages=tuple(msgs), timeline=timeline, stage_time_s=inp.stage_time_s,
        **estimate_context(inp.system, plan.precision),  # type: ignore[arg-type]
    )


__all__ = ["StepInputs", "finish", "prepare"]
