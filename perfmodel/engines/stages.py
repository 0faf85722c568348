"""The stage-cost library both engines and the planner share: per model chunk and pipeline rank,
the seconds of one micro-batch's forward, backward and weight-gradient work and what they are
made of; the pipeline send; the data-parallel collectives of a stage's parameters; the FLOPs of
a step. Every number comes from the cost functions (`costs.layer_time`, `comm.collectives`);
the closed forms that combine them are in `closed_forms.py`, the schedules in
`perfmodel/parallel/schedules/`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from perfmodel.comm.collectives import collective_time_s, in_one_bridge
from perfmodel.compute import optimizers
from perfmodel.compute.autocast import autocast_applies, autocast_on, with_autocast
from perfmodel.compute.eager import with_elementwise
from perfmodel.compute.fp8_recipes import amax_allreduce_s, delayed_amax_bytes, recipe_for
from perfmodel.compute.ops import memory_bound_cost
from perfmodel.engines.costs import NCCL_CHANNELS, LayerTime, layer_time, sm_contention
from perfmodel.engines.offload import body_instances, offload_stall
from perfmodel.errors import LayoutError, SpecError
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system import System
from perfmodel.memory import layer_saved_bytes
from perfmodel.parallel.partial_recompute import LayerRun, chunk_runs, is_block, kept_plan, recomputed_instances
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.ranks import expert_dp_stride, group_stride
from perfmodel.parallel.schedules import get_schedule, rank_chunks
from perfmodel.parallel.shard import RankLayout, moe_options, shard, unsharded_graph
from perfmodel.parallel.split import EDGE_KINDS, chunk_layers, stage_layers
from perfmodel.workload.graph import ACT_BYTES, CpRing, Graph, Layer
from perfmodel.workload.hyper_connections import streams
from perfmodel.workload.module_recompute import OP_POLICY, check_modules, module_recompute
from perfmodel.workload.moe import MoEOptions
from perfmodel.workload.op_checkpoint import op_checkpoint
from perfmodel.workload.spec import ModelSpec

# ---- graphs and FLOPs -------------------------------------------------------------------------

@lru_cache(maxsize=512)
def cached_graph(spec: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int, ep: int, sp: bool,
                 precision: str, attention_impl: str, moe: MoEOptions | None = None, cp_ring: CpRing = "p2p",
                 elementwise: str = "fused", autocast_weights: bool = False) -> Graph:
    """The builder's graph laid out on one rank of (tp, cp, ep, sp, moe.etp, cp_ring) by parallel/shard.py,
    its element-wise ops as `elementwise` runs them (compute/eager.py), with autocast's weight casts
    when `autocast_weights` and the precision is 16-bit (compute/autocast.py)."""
    g = with_elementwise(spec, shard(unsharded_graph(spec, micro_batch, seq_len, precision, attention_impl),
                                     RankLayout(tp, cp, ep, sp, moe or MoEOptions(), cp_ring)), elementwise)
    return with_autocast(g, autocast_applies(autocast_weights, precision))


def model_graph(spec: ModelSpec, plan: ParallelPlan) -> Graph:
    """The unsharded graph of one sequence (FLOP counts, full weight shapes)."""
    return unsharded_graph(spec, 1, plan.seq_len or spec.seq_len, plan.precision, plan.attention_impl)


def stack_spec(spec: ModelSpec, vocab_multiple: int, tp: int) -> ModelSpec:
    """`spec` with its vocabulary padded as the training stack pads it (ParallelPlan.vocab_multiple:
    to a multiple of vocab_multiple x tp rows, Megatron's _vocab_size_with_padding); `spec` itself
    when the stack does not pad or the vocabulary already is a multiple."""
    if vocab_multiple <= 1 or not spec.vocab:
        return spec
    step = vocab_multiple * tp
    padded = -(-spec.vocab // step) * step
    return spec if padded == spec.vocab else spec.model_copy(update={"vocab": padded})


def plan_graph(spec: ModelSpec, plan: ParallelPlan) -> Graph:
    if plan.recompute == "selective":
        check_modules(plan.selective_recompute, spec.attention == "mla", spec.id)
    if plan.act_fp8_input_store and spec.activation != "swiglu":
        raise LayoutError(f"act_fp8_input_store keeps a SwiGLU's input in fp8; {spec.id} runs {spec.activation} "
                          "(Megatron-Core refuses it too: transformer_config.py 'supported only for SwiGLU')")
    return cached_graph(stack_spec(spec, plan.vocab_multiple, plan.tp), plan.micro_batch, plan.seq_len or spec.seq_len,
                        plan.tp, plan.cp, plan.ep,
                        plan.sequence_parallel, plan.precision, plan.attention_impl, moe_options(plan), plan.cp_ring,
                        plan.elementwise, autocast_on(plan))


@lru_cache(maxsize=1024)
def model_flop_per_step(spec: ModelSpec, plan: ParallelPlan) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one optimizer step, whole job. Hardware FLOPs are the
    model FLOPs plus the forward FLOPs recomputed, counted in the same (model) convention, as
    PaLM defines HFU (Chowdhery et al. 2022, App. B), so HFU >= MFU always; counting executed
    FLOPs instead (causal attention halved) put HFU below MFU whenever little was recomputed."""
    full = model_graph(spec, plan)
    return _with_recompute(full, plan, full.train_model_flop() * plan.global_batch, plan.global_batch)


def _with_recompute(graph: Graph, plan: ParallelPlan, model: float, per_graph: float) -> tuple[float, float]:
    recomputed = 0.0
    window = recomputed_instances(graph, plan) if is_block(plan) else None  # block: some layers per chunk
    for layer in graph.layers:
        if not layer.recomputable:
            continue
        if plan.recompute == "full":
            recomputed += layer.fwd_model_flop * (layer.count if window is None else window.get(id(layer), 0.0))
        elif plan.recompute == "selective" and plan.selective_recompute == OP_POLICY:
            recomputed += sum(o.mflop for o in op_checkpoint(layer).recomputed) * layer.count
        elif plan.recompute == "selective":
            mods = module_recompute(layer, plan.selective_recompute)
            core = sum(o.mflop for o in layer.ops if o.attn_core) if mods.core_attn else 0.0
            recomputed += (core + sum(o.mflop for o in mods.recomputed)) * layer.count
    return model, model + recomputed * per_graph


def graph_flop_per_step(graph: Graph, plan: ParallelPlan) -> tuple[float, float]:
    """(model, hardware) FLOPs of one step from a graph of one micro-batch (imported graphs)."""
    per_mb = plan.global_batch / graph.micro_batch
    return _with_recompute(graph, plan, graph.train_model_flop() * per_mb, per_mb)


def check_imported(graph: Graph, plan: ParallelPlan) -> list[str]:
    """An imported graph is traced at the micro-batch it runs; shard() splits it by tp where it
    recognised Linear pairs (cp, ep and a graph without pairs are errors there)."""
    if plan.micro_batch != graph.micro_batch:
        raise LayoutError(f"micro_batch {plan.micro_batch} != the traced example batch {graph.micro_batch}: "
                          "trace with the micro-batch you will run")
    body = sum(layer.count for layer in graph.layers if layer.kind not in EDGE_KINDS)
    return plan.pipeline_notes(max(body, 1), graph.model_id)


# ---- per stage ----------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def cached_layer_time(system: System, plan: ParallelPlan, layer: Layer, world: int | None = None) -> LayerTime:
    """costs.layer_time, memoised on (system, plan, layer, world): engines and planner ask for the
    same layers (the planner's shape plans name the layout's GPU count in `world`)."""
    return layer_time(system, plan, layer, world)


@dataclass(frozen=True, slots=True)
class StageCost:
    """One model chunk (or a whole pipeline rank: the sum of its chunks) for one micro-batch."""

    fwd_s: float = 0.0  # forward, host limit included
    bwd_s: float = 0.0  # backward incl. recompute, host limit included
    bwd_input_s: float = 0.0  # the backward without its weight-gradient phase, run on its own (ZB-H1's B)
    wgrad_s: float = 0.0  # the weight-gradient phase, run on its own (ZB-H1's W)
    fwd_gpu_s: float = 0.0
    bwd_gpu_s: float = 0.0
    recompute_s: float = 0.0
    comm_s: float = 0.0  # exposed tp / ep / cp collectives (forward, backward, recompute)
    host_s: float = 0.0  # host time not hidden behind the GPU
    dense_params: float = 0.0  # parameters held (data-parallel over dp·cp)
    expert_params: float = 0.0  # expert parameters held (data-parallel over dp·cp/ep)
    layers: float = 0.0  # layer instances
    offload_s: float = 0.0  # waits for activation-offload copies (engines/offload.py), in fwd_s and bwd_s

    def __add__(self, other: StageCost) -> StageCost:
        return StageCost(*(a + b for a, b in zip(self._astuple(), other._astuple(), strict=True)))

    def _astuple(self) -> tuple[float, ...]:
        return (self.fwd_s, self.bwd_s, self.bwd_input_s, self.wgrad_s, self.fwd_gpu_s, self.bwd_gpu_s, self.recompute_s, self.comm_s,
                self.host_s, self.dense_params, self.expert_params, self.layers, self.offload_s)

    @property
    def t_s(self) -> float:
        return self.fwd_s + self.bwd_s

    def time_scaled(self, share: float) -> StageCost:
        """Its seconds times `share` (the held parameters and layers unchanged)."""
        return StageCost(self.fwd_s * share, self.bwd_s * share, self.bwd_input_s * share, self.wgrad_s * share,
                         self.fwd_gpu_s * share, self.bwd_gpu_s * share, self.recompute_s * share, self.comm_s * share,
                         self.host_s * share, self.dense_params, self.expert_params, self.layers, self.offload_s * share)


def layers_cost(system: System, plan: ParallelPlan, layers: list[tuple[Layer, float]],
                memo: dict[int, LayerTime] | None = None) -> StageCost:
    """The StageCost of `layers` ((layer, instances) pairs) on one rank; `memo` (by layer
    identity) spares re-hashing the same layers for every chunk of one plan."""
    f = b = bi = w = fg = bg = rc = cm = h = dense = expert = n_total = 0.0
    memo = {} if memo is None else memo
    for layer, n in layers:
        lt = memo.get(id(layer))
        if lt is None:
            lt = memo[id(layer)] = cached_layer_time(system, plan, layer)
        f += n * lt.fwd_s
        b += n * lt.bwd_s
        bi += n * lt.bwd_input_s
        w += n * lt.wgrad_s
        fg += n * lt.fwd_gpu_s
        bg += n * lt.bwd_gpu_s
        rc += n * lt.recompute_gpu_s
        cm += n * (lt.fwd_comm_s + lt.bwd_comm_s + lt.recompute_comm_s)
        h += n * lt.host_exposed_s
        dense += n * (layer.params - layer.expert_params)
        expert += n * layer.expert_params
        n_total += n
    return StageCost(f, b, bi, w, fg, bg, rc, cm, h, dense, expert, n_total)


_CHUNK_CACHE: dict[tuple[System, ParallelPlan, int], tuple[Graph, tuple[StageCost, ...]]] = {}
_CHUNK_CACHE_SIZE = 1024


def chunk_costs(system: System, plan: ParallelPlan, graph: Graph) -> tuple[StageCost, ...]:
    """Per virtual stage vs = chunk·pp + rank (Megatron's layout, parallel/split.py); memoised on
    (system, plan, the graph object) since a warm estimate asks for the same ones again."""
    key = (system, plan, id(graph))
    hit = _CHUNK_CACHE.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    p, v = plan.pp, plan.vp
    memo: dict[int, LayerTime] = {}
    if is_block(plan):
        kept_memo: dict[int, LayerTime] = {}
        out = tuple(_block_cost(system, plan, chunk_runs(graph, plan, vs), memo, kept_memo) for vs in range(p * v))
    else:
        out = tuple(layers_cost(system, plan, chunk_layers(graph, p, v, vs), memo) for vs in range(p * v))
    if plan.offload_activations:
        out = (with_offload(system, plan, chunk_layers(graph, p, v, 0), out[0]),)  # pp 1 (ParallelPlan)
    if len(_CHUNK_CACHE) >= _CHUNK_CACHE_SIZE:
        _CHUNK_CACHE.pop(next(iter(_CHUNK_CACHE)))
    _CHUNK_CACHE[key] = (graph, out)
    return out


def _block_cost(system: System, plan: ParallelPlan, runs: list[LayerRun], memo: dict[int, LayerTime],
                kept_memo: dict[int, LayerTime]) -> StageCost:
    """A chunk under block recompute (parallel/partial_recompute.py): its recompute window's layers
    under `plan`, the layers after it under no recompute (each plan with its own memo of layer times)."""
    window = layers_cost(system, plan, [(layer, n) for layer, n, q in runs if q is plan], memo)
    return window + layers_cost(system, kept_plan(plan), [(layer, n) for layer, n, q in runs if q is not plan],
                                kept_memo)


def with_offload(system: System, plan: ParallelPlan, layers: list[tuple[Layer, float]], cost: StageCost) -> StageCost:
    """`cost` with the forward and backward waits of activation offloading (engines/offload.py)
    over the node's host link."""
    link = system.node.host_link
    if link is None:
        raise SpecError("host_link", f"node {system.node.id} has no measured host-link bandwidth, which activation "
                        "offloading moves its tensors over", "host_link: {h2d: ..., d2h: ...} in its node spec "
                        "(nvbandwidth host_to_device / device_to_host), or offload_activations 0")
    if system.accelerator.kind != "gpu":
        raise LayoutError(f"offload_activations {plan.offload_activations}: activation offloading needs a GPU "
                          f"(got {system.accelerator.id}); allowed: 0")
    body = body_instances(layers)
    times = [cached_layer_time(system, plan, layer) for layer in body]
    stall = offload_stall([t.fwd_s for t in times], [t.bwd_s for t in times],
                          [layer_saved_bytes(layer, plan) for layer in body], plan.offload_activations,
                          link.d2h.one_way_Bps("host_link.d2h"), link.h2d.one_way_Bps("host_link.h2d"))
    return dataclasses.replace(cost, fwd_s=cost.fwd_s + stall.fwd_s, bwd_s=cost.bwd_s + stall.bwd_s,
                               bwd_input_s=cost.bwd_input_s + stall.bwd_s, offload_s=stall.total_s)


def rank_costs(chunks: tuple[StageCost, ...], plan: ParallelPlan) -> tuple[StageCost, ...]:
    """Per pipeline rank, for one micro-batch: the sum of the model chunks it holds (the
    schedule's rank_stages), their seconds times the share of them a micro-batch runs through
    (DualPipe: one of its two stages), their parameters and layers whole."""
    share = get_schedule(plan.schedule_name).run_share() if plan.pp > 1 else 1.0
    out = []
    for s in range(plan.pp):
        held = rank_chunks(plan.schedule_name, plan.pp, plan.vp, s)
        acc = chunks[held[0]]
        for vs in held[1:]:
            acc = acc + chunks[vs]
        out.append(acc.time_scaled(share) if share != 1.0 else acc)
    return tuple(out)


def p2p_time_s(system: System, plan: ParallelPlan, graph: Graph, spec: ModelSpec | None) -> float:
    """One activation (or its gradient) crossing one stage boundary for one micro-batch, times the
    calibrated pipeline p2p overhead (System.p2p_time_factor, 1 = the send/recv as modelled)."""
    if plan.pp == 1:
        return 0.0
    _, stride = group_stride(plan, "pp")
    if spec is None:  # imported graph: the biggest body-layer input is what crosses
        size = max((layer.input_bytes for layer in graph.layers if layer.kind not in EDGE_KINDS), default=0.0)
    else:
        # each tp rank sends 1/tp of the activation and the receivers all-gather it over the
        # scale-up fabric (Megatron's scatter/gather optimisation, Narayanan et al. 2021 §4.1;
        # with sequence parallelism the activation is already split); hyper-connections send n streams
        size = graph.tokens // plan.cp * spec.hidden * streams(spec) * ACT_BYTES / plan.tp
    # on a bridged PCIe node the neighbour sends use the bridges only when the whole pipeline sits in
    # one clique; otherwise a hop crosses PCIe, and the slowest hop sets the steady state
    return (collective_time_s(system, "send_recv", size, 2, stride, aligned=pipeline_in_one_bridge(system, plan, stride))
            * system.p2p_time_factor)


def pipeline_in_one_bridge(system: System, plan: ParallelPlan, stride: int) -> bool:
    """Every stage of the pipeline (ranks `stride` apart) lies inside one bridged clique
    (comm/collectives.py): pp 2 on a 2-way pair, up to pp 4 in a 4-way clique."""
    return in_one_bridge(system, plan.pp, stride)


@dataclass(frozen=True, slots=True)
class DpCollectives:
    """Seconds of a stage's data-parallel collectives, unoverlapped, by ZeRO stage:
        ZeRO 0       grad: all-reduce of the gradients after the last micro-batch's backward
        ZeRO 1, 2    grad: reduce-scatter of the gradients; param: all-gather of the bf16 weights
        ZeRO 3       per micro-batch and FSDP unit (one per layer instance): all-gather of the
                     unit's weights (forward, again in backward) and reduce-scatter of its
                     gradients, each a collective of its own (its own latency, the busbw of a
                     unit-sized message), and the copy kernels a per-parameter layout runs on the
                     compute stream (plan.fsdp_impl "per-param", FSDP2's fully_shard):
                       copy-out   split_with_sizes_copy of the gathered bf16 weights into the
                                  parameters after every all-gather: read + write 2 x 2 B/param
                       chunk_cat  the unsharded bf16 gradients copied into the reduce-scatter
                                  input at the reduce dtype: 2 + grad bytes per parameter
                     (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py @ 010ae4a:
                     foreach_all_gather_copy_out and foreach_reduce run them on the current
                     stream). A flat layout (FSDP1's FlatParameter, DeepSpeed ZeRO-3) gathers
                     straight into the buffer the parameters view: no copy kernels.
    Gradients reduce at `plan.grad_bytes` per element (grad_reduce_bytes when set)."""

    all_reduce_s: float
    reduce_scatter_s: float
    all_gather_s: float
    unit_all_gather_s: float = 0.0
    unit_reduce_scatter_s: float = 0.0
    unit_copy_fwd_s: float = 0.0  # copy-out after the forward gather
    unit_copy_bwd_s: float = 0.0  # copy-out after the backward re-gather + chunk_cat
    # the rank's first unit (its first layer instance: the embedding on the first stage), gathered
    # first with nothing to hide behind and reduce-scattered last; the unit_* figures above are
    # then the mean of the other units (equal to them where no first unit is named)
    first_all_gather_s: float = 0.0
    first_reduce_scatter_s: float = 0.0
    first_share: float = 0.0  # the first unit's share of the stage's parameters (its last gradient bucket)


def dp_collectives(system: System, plan: ParallelPlan, dense_params: float, expert_params: float,
                   units: float = 1.0, first: tuple[float, float] | None = None) -> DpCollectives:
    """The stage's DP collectives; `units` is its FSDP unit count (layer instances) for ZeRO 3,
    `first` the (dense, expert) parameters of its first unit (first_unit_params)."""
    n_dense, dense_stride = group_stride(plan, "dp")
    n_exp, exp_stride = expert_dp_stride(plan)
    g = plan.grad_bytes
    u = max(1.0, units)
    if first is None or u <= 1:  # all units alike
        fd, fe = rd, re_ = dense_params / u, expert_params / u
    else:  # the first unit its own, the others their mean
        fd, fe = first
        rd, re_ = (dense_params - fd) / (u - 1), (expert_params - fe) / (u - 1)

    def coll(kind: str, bytes_per: float, dense: float = dense_params, expert: float = expert_params) -> float:
        t = collective_time_s(system, kind, dense * bytes_per, n_dense, dense_stride)
        if expert:
            t += collective_time_s(system, kind, expert * bytes_per, n_exp, exp_stride)
        return t

    copy_out = copy_in = 0.0
    if plan.fsdp_impl == "per-param" and dense_params + expert_params > 0:
        unit_params = (dense_params + expert_params) / u
        acc = system.accelerator
        copy_out = memory_bound_cost(acc, 0.0, 2 * ACT_BYTES * unit_params, 1).time_s
        copy_in = memory_bound_cost(acc, 0.0, (ACT_BYTES + g) * unit_params, 1).time_s
    return DpCollectives(coll("all_reduce", g), coll("reduce_scatter", g), coll("all_gather", ACT_BYTES),
                         coll("all_gather", ACT_BYTES, rd, re_), coll("reduce_scatter", g, rd, re_),
                         copy_out, copy_out + copy_in,
                         coll("all_gather", ACT_BYTES, fd, fe), coll("reduce_scatter", g, fd, fe),
                         (fd + fe) / (dense_params + expert_params) if dense_params + expert_params > 0 else 1.0 / u)


@lru_cache(maxsize=4096)
def cached_dp_collectives(system: System, plan: ParallelPlan, dense_params: float, expert_params: float,
                          units: float = 1.0, first: tuple[float, float] | None = None) -> DpCollectives:
    """dp_collectives, memoised: the analytic engine asks for the same ranks' again per estimate."""
    return dp_collectives(system, plan, dense_params, expert_params, units, first)


def first_unit_params(graph: Graph, plan: ParallelPlan, rank: int) -> tuple[float, float]:
    """(dense, expert) parameters of pipeline rank `rank`'s first FSDP unit: its first layer
    instance in model order (the embedding on the first stage)."""
    order = {id(layer): i for i, layer in enumerate(graph.layers)}
    held = [layer for layer, n in stage_layers(graph, plan.pp, rank, plan.vp, plan.schedule_name) if n > 0]
    if not held:
        return 0.0, 0.0
    layer = min(held, key=lambda x: order[id(x)])
    return layer.params - layer.expert_params, layer.expert_params


def comm_contention_fraction(system: System) -> float:
    """Fraction of compute throughput lost while an overlapped collective runs (NCCL_CHANNELS)."""
    return sm_contention(system.accelerator, NCCL_CHANNELS)


def can_overlap(system: System) -> bool:
    """On a CPU the collective runs on the cores that compute (gloo): nothing hides."""
    return system.accelerator.kind != "cpu"


@lru_cache(maxsize=256)
def optimizer_s_per_param(acc: Accelerator, optimizer: str) -> float:
    """Seconds of the element-wise optimizer update per local parameter (compute/optimizers.py:
    measured where calibrated, else its bytes per parameter through HBM); linear in the count."""
    return optimizers.elementwise_step_s(acc, optimizer, 1.0)


def optimizer_matrix_s(system: System, plan: ParallelPlan, spec: ModelSpec | None, graph: Graph, rank: int) -> float:
    """The optimizer work that is not element-wise, for pipeline rank `rank`: Muon's
    Newton-Schulz on the rank's full 2-D weights and the gathers it needs (0 for the others)."""
    if plan.optimizer != "muon":
        return 0.0
    full = model_graph(spec, plan) if spec is not None else graph
    mats = optimizers.weight_matrices(stage_layers(full, plan.pp, rank, plan.vp, plan.schedule_name))
    return optimizers.optimizer_step_s(system, plan, 0.0, mats)


def tied_embedding_sync_s(system: System, plan: ParallelPlan, spec: ModelSpec | None) -> float:
    """All-reduce of the tied embedding's gradient between the first and last stage (pp > 1)."""
    if spec is None or plan.pp == 1 or not spec.tied_embeddings or not spec.vocab:
        return 0.0
    emb = spec.vocab * spec.hidden / plan.tp * plan.grad_bytes
    stride = plan.tp * plan.cp * plan.dp
    return collective_time_s(system, "all_reduce", emb, 2, stride, aligned=pipeline_in_one_bridge(system, plan, stride))


# weights every tp rank holds whole while their inputs are sequence-parallel shards: the layer
# norms and LatentMoE's duplicated projections (TELinear parallel_mode="duplicated" sets
# param.sequence_parallel); Megatron-Core all-reduces their gradients over tp once per step
# (finalize_model_grads._allreduce_non_tensor_model_parallel_grads, one coalesced all-reduce)
SP_REPLICATED_OPS = ("norm1", "norm2", "final_norm", "moe_latent_down", "moe_latent_up")


def sp_replicated_grad_sync_s(system: System, plan: ParallelPlan, graph: Graph, rank: int) -> float:
    """All-reduce over tp of the gradients of pipeline rank `rank`'s sequence-parallel
    replicated weights (SP_REPLICATED_OPS), at plan.grad_bytes per element; 0 without sp."""
    if plan.tp <= 1 or not plan.sequence_parallel:
        return 0.0
    params = sum(n * sum(op.weight_params for op in layer.ops if op.name in SP_REPLICATED_OPS)
                 for layer, n in stage_layers(graph, plan.pp, rank, plan.vp, plan.schedule_name))
    if params <= 0:
        return 0.0
    degree, stride = group_stride(plan, "tp")
    return collective_time_s(system, "all_reduce", params * plan.grad_bytes, degree, stride)


def fp8_gemms_per_chunk(graph: Graph, plan: ParallelPlan) -> float:
    """fp8 / fp4 GEMMs (a grouped GEMM counts its groups, as TE's GroupedLinear does) of the
    transformer layers one model chunk holds: the body's over pp·vp chunks."""
    n = 0.0
    for layer in graph.layers:
        if layer.kind in EDGE_KINDS:
            continue
        per = sum((op.batch if op.grouped else 1) for op in layer.ops
                  if op.kind == "gemm" and recipe_for(op.precision, plan.fp8_recipe_name) is not None)
        n += layer.count * per
    return n / (plan.pp * plan.vp)


def delayed_amax_s_per_micro_batch(system: System, plan: ParallelPlan, graph: Graph) -> float:
    """Seconds per micro-batch of delayed scaling's amax all-reduces (compute/fp8_recipes.py): per
    model chunk, one at the forward's fp8_autocast exit and one in the backward, over Megatron's
    amax reduction group tp·cp·dp (contiguous ranks); 0 for the other recipes. Charged with the
    step's other synchronous small collectives (optimizer_s), num_micro_batches times."""
    recipe = recipe_for(plan.precision, plan.fp8_recipe_name)
    if recipe is None or recipe.amax_reduction != "region":
        return 0.0
    gemms = fp8_gemms_per_chunk(graph, plan)
    degree = plan.tp * plan.cp * plan.dp
    per_chunk = sum(amax_allreduce_s(system, delayed_amax_bytes(gemms, d), degree) for d in ("fwd", "bwd"))
    return plan.vp * per_chunk


__all__ = [
    "ACT_BYTES", "DpCollectives", "StageCost", "cached_graph", "cached_layer_time", "can_overlap", "check_imported",
    "chunk_costs", "comm_contention_fraction", "delayed_amax_s_per_micro_batch", "dp_collectives", "fp8_gemms_per_chunk",
    "graph_flop_per_step", "layers_cost",
    "model_flop_per_step", "model_graph", "moe_options", "optimizer_matrix_s", "optimizer_s_per_param", "p2p_time_s",
    "plan_graph", "rank_costs", "sp_replicated_grad_sync_s", "tied_embedding_sync_s",
]
