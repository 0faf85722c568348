"""Bytes one rank holds: weights, gradients, optimizer states, activations, runtime.

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO §3): per parameter 2 B of bf16/fp16 weights,
`grad_bytes` of gradients (4 B fp32 main grads in Megatron-LM / FSDP mixed precision, 2 B in
fp16 DeepSpeed), 4 B fp32 master weights and 8 B of Adam moments -> 18 B (16 B with 2-byte
grads); other optimizers keep other state (perfmodel/compute/optimizers.py: SGD with momentum
8 B, Adafactor 4 B, Muon 8 B, 8-bit Adam 6 B, all with the master copy). ZeRO-1 shards the
optimizer state over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3 (FSDP full
shard) also the weights. Expert weights are sharded by ep·etp and their data-parallel
group is edp = tp·cp·dp/(ep·etp) (MoE parallel folding).

Activations: the per-layer saved bytes of the graph (Korthikanti et al. 2022) times the layers
on the stage times the micro-batches in flight on stage 0: 1 (no pipeline), min(m, p) for 1F1B
and ZB-H1, m for GPipe, p·(1 + (p-1)/(p·v)) for the interleaved schedule (Narayanan et al. 2021
§2.2.2). Full recompute keeps only each layer's input plus one layer's working set; selective
recompute drops the attention core (softmax, dropout, scores).

Runtime: CUDA context, cuBLAS / NCCL workspaces and allocator slack, RUNTIME_BYTES below.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.compute.optimizers import state_bytes_per_param
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.graph import Graph, Layer

# CUDA context (~0.5 GiB on Hopper with lazy module loading), cuBLAS workspace (32 MiB per
# stream), NCCL channel buffers (4 MiB x channels x peers, a few hundred MiB at scale) and the
# caching allocator's rounding: 1 GiB in total, the same order as nvidia-smi shows for an idle
# PyTorch process that has run one NCCL collective.
RUNTIME_BYTES = 1.0 * 2**30
WEIGHT_BYTES = 2.0  # bf16 / fp16 model copy (fp8 training keeps it too, Transformer Engine)


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
    p, m, v = plan.pp, plan.num_micro_batches, plan.vp
    if p == 1:
        return 1.0
    sched = plan.schedule_name
    if sched == "gpipe":
        return float(m)
    if sched == "interleaved":
        return min(float(m), p * (1.0 + (p - 1) / (p * v)))
    return float(min(m, p))


def layer_activation_bytes(layer: Layer, recompute: str) -> float:
    if not layer.recomputable or recompute == "none":
        return layer.saved_bytes
    if recompute == "selective":
        return layer.saved_bytes - layer.attn_core_saved_bytes
    return layer.input_bytes


def stage_layers(graph: Graph, pp: int, stage: int) -> list[tuple[Layer, float]]:
    """(layer, instances) on pipeline `stage`: body layers split evenly (ceil on the slowest
    stage), the embedding on the first stage and the head on the last."""
    out: list[tuple[Layer, float]] = []
    body = [layer for layer in graph.layers if layer.kind not in ("embedding", "head")]
    total = sum(layer.count for layer in body)
    per = -(-total // pp)
    lo, hi = stage * per, min(total, (stage + 1) * per)
    pos = 0
    for layer in graph.layers:
        if layer.kind == "embedding":
            if stage == 0:
                out.append((layer, 1.0))
            continue
        if layer.kind == "head":
            if stage == pp - 1:
                out.append((layer, 1.0))
            continue
        a, b = max(lo, pos), min(hi, pos + layer.count)
        if b > a:
            out.append((layer, float(b - a)))
        pos += layer.count
    return out


def memory_per_rank(graph: Graph, plan: ParallelPlan, stage: int = 0) -> MemoryBreakdown:
    layers = stage_layers(graph, plan.pp, stage)
    dense = sum((layer.params - layer.expert_params) * n for layer, n in layers)
    expert = sum(layer.expert_params * n for layer, n in layers)
    dp_dense = plan.dp * plan.cp
    dp_expert = plan.edp
    z = plan.zero_stage

    def shard(nbytes_per_param: float, level: int) -> float:
        if z >= level:
            return nbytes_per_param * (dense / dp_dense + expert / dp_expert)
        return nbytes_per_param * (dense + expert)

    weights = shard(WEIGHT_BYTES, 3)
    grads = shard(float(plan.grad_bytes), 2)
    opt_bytes = state_bytes_per_param(plan.optimizer)  # fp32 master + the optimizer's own state
    optimizer = shard(opt_bytes, 1)
    if z == 3:
        # FSDP materialises one layer's full weights (and its prefetched neighbour)
        biggest = max((layer.params for layer, _ in layers), default=0.0)
        weights += 2 * WEIGHT_BYTES * biggest
    acts = 0.0
    working = 0.0
    for layer, n in layers:
        per = layer_activation_bytes(layer, plan.recompute)
        acts += per * n
        if plan.recompute == "full" and layer.recomputable:
            working = max(working, layer.saved_bytes)
    acts = acts * in_flight_micro_batches(plan) + working
    return MemoryBreakdown(weights, grads, optimizer, acts, RUNTIME_BYTES)
