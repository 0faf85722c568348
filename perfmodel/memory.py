"""Bytes one rank holds: weights, gradients, optimizer states, activations, runtime.

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO §3): per parameter 2 B of bf16/fp16 weights,
`grad_bytes` of gradients (4 B fp32 main grads in Megatron-LM / FSDP mixed precision, 2 B in
fp16 DeepSpeed), 4 B fp32 master weights and 8 B of Adam moments -> 18 B (16 B with 2-byte
grads); other optimizers keep other state (perfmodel/compute/optimizers.py: SGD with momentum
8 B, Adafactor 4 B, Muon 8 B, 8-bit Adam 6 B, all with the master copy). Pure fp32 training keeps
4 B weights that are themselves the master copy (16 B with Adam). ZeRO-1 shards the
optimizer state over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3 (FSDP full
shard) also the weights. Expert weights are sharded by ep·etp and their data-parallel
group is edp = tp·cp·dp/(ep·etp) (MoE parallel folding).

Activations: the per-layer saved bytes of the graph (Korthikanti et al. 2022) times the layers
on the stage times the micro-batches in flight on stage 0, which the schedule states
(perfmodel/parallel/schedules/: 1 without a pipeline, min(m, p) for 1F1B and ZB-H1, m for GPipe,
p·(1 + (p-1)/(p·v)) for the interleaved schedule, Narayanan et al. 2021 §2.2.2). Full recompute
keeps only each layer's input plus one layer's working set; selective recompute drops the
attention core (softmax, dropout, scores). The layers on a stage are Megatron's split
(perfmodel/parallel/split.py); the peak is taken over MEMORY_STAGES.

Runtime: CUDA context, cuBLAS / NCCL workspaces and allocator slack, RUNTIME_BYTES below.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel import precision as registry
from perfmodel.compute.optimizers import state_bytes_per_param
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import get_schedule
from perfmodel.parallel.split import stage_layers
from perfmodel.workload.graph import Graph, Layer

# CUDA context (~0.5 GiB on Hopper with lazy module loading), cuBLAS workspace (32 MiB per
# stream), NCCL channel buffers (4 MiB x channels x peers, a few hundred MiB at scale) and the
# caching allocator's rounding: 1 GiB in total, the same order as nvidia-smi shows for an idle
# PyTorch process that has run one NCCL collective.
RUNTIME_BYTES = 1.0 * 2**30
MASTER_BYTES = 4.0  # the fp32 master copy counted in every optimizer's state (compute/optimizers.py)


def per_param_state_bytes(plan: ParallelPlan) -> tuple[float, float]:
    """(model-copy bytes, optimizer bytes incl. the master) per parameter: the model copy is the
    precision's (perfmodel/precision.py: 2 B bf16 / fp16, kept by fp8 training too, Transformer
    Engine); in pure fp32 training the 4 B weights are the master copy, so the optimizer state does
    not count a second one."""
    prec = registry.get(plan.precision)
    opt = state_bytes_per_param(plan.optimizer)
    return prec.model_copy_bytes, opt if prec.separate_master else opt - MASTER_BYTES


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    runtime_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes + self.runtime_bytes

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights_bytes, "grads": self.grads_bytes, "optimizer": self.optimizer_bytes,
                "activations": self.activations_bytes, "runtime": self.runtime_bytes}


def in_flight_micro_batches(plan: ParallelPlan) -> float:
    if plan.pp == 1:
        return 1.0
    return float(get_schedule(plan.schedule_name).in_flight(plan.num_micro_batches, plan.pp, plan.vp))


def memory_stages(pp: int) -> tuple[int, ...]:
    """Stages whose memory can be the peak: the first (embedding, the most micro-batches in
    flight), the second (a middle stage: with uneven splits or dense-then-MoE layers it can
    hold the most weights) and the last (output layer)."""
    return tuple(sorted({0, min(1, pp - 1), pp - 1}))


def layer_activation_bytes(layer: Layer, recompute: str) -> float:
    if not layer.recomputable or recompute == "none":
        return layer.saved_bytes
    if recompute == "selective":
        return layer.saved_bytes - layer.attn_core_saved_bytes
    return layer.input_bytes


def memory_per_rank(graph: Graph, plan: ParallelPlan, stage: int = 0) -> MemoryBreakdown:
    layers = stage_layers(graph, plan.pp, stage, plan.vp)
    dense = sum((layer.params - layer.expert_params) * n for layer, n in layers)
    expert = sum(layer.expert_params * n for layer, n in layers)
    dp_dense = plan.dp * plan.cp
    dp_expert = plan.edp
    z = plan.zero_stage

    def shard(nbytes_per_param: float, level: int) -> float:
        if z >= level:
            return nbytes_per_param * (dense / dp_dense + expert / dp_expert)
        return nbytes_per_param * (dense + expert)

    copy_bytes, opt_bytes = per_param_state_bytes(plan)
    weights = shard(copy_bytes, 3)
    grads = shard(float(plan.grad_bytes), 2)
    optimizer = shard(opt_bytes, 1)
    if z == 3 and plan.pp > 1:
        # FSDP2 under torch.distributed.pipelining keeps the stage gathered from the first
        # forward to the last backward and accumulates unsharded gradients (at the reduce dtype,
        # FSDPParam.to_accumulated_grad_if_needed) until one reduce-scatter after the last
        # micro-batch (engines/closed_forms.py)
        weights += copy_bytes * (dense + expert)
        grads += plan.grad_bytes * (dense + expert)
    elif z == 3:
        # FSDP materialises one layer's full weights (and its prefetched neighbour)
        biggest = max((layer.params for layer, _ in layers), default=0.0)
        weights += 2 * copy_bytes * biggest
    acts = 0.0
    working = 0.0
    for layer, n in layers:
        per = layer_activation_bytes(layer, plan.recompute)
        acts += per * n
        if plan.recompute == "full" and layer.recomputable:
            working = max(working, layer.saved_bytes)
    acts = acts * in_flight_micro_batches(plan) + working
    return MemoryBreakdown(weights, grads, optimizer, acts, RUNTIME_BYTES)


_PEAK_CACHE: dict[tuple[ParallelPlan, int], tuple[Graph, MemoryBreakdown]] = {}


def peak_memory(graph: Graph, plan: ParallelPlan) -> MemoryBreakdown:
    """The largest memory_per_rank over MEMORY_STAGES (memoised on plan and graph object)."""
    hit = _PEAK_CACHE.get((plan, id(graph)))
    if hit is not None and hit[0] is graph:
        return hit[1]
    out = max((memory_per_rank(graph, plan, s) for s in memory_stages(plan.pp)), key=lambda x: x.total_bytes)
    if len(_PEAK_CACHE) >= 1024:
        _PEAK_CACHE.pop(next(iter(_PEAK_CACHE)))
    _PEAK_CACHE[(plan, id(graph))] = (graph, out)
    return out
