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
on the stage times the micro-batches in flight on that stage, which the schedule states
(perfmodel/parallel/schedules/: 1 without a pipeline; on rank s min(m, p - s) for 1F1B (so the
last stage, which holds the fp32 logits, keeps one micro-batch), min(m, p) for ZB-H1, m for
GPipe, (2(p-s-1) + (v-1)p + 1)/v for the interleaved schedule, p·(1 + (p-1)/(p·v)) on rank 0,
Narayanan et al. 2021 §2.2.2; Megatron-LM schedules.py warm-up counts). Full recompute
keeps only each layer's input plus one layer's working set; selective recompute drops what the
named Megatron recompute modules free (workload/module_recompute.py) plus the largest module's
rebuilt tensors: by default core_attn, the attention core's s²-sized intermediates (softmax,
dropout), keeping its Q, K, V inputs (selective_dropped_bytes); or, as torchtitan's per-op policy (plan.selective_recompute 'op'), keeps
each layer's input and the outputs of the ops it saves plus one layer's working set
(workload/op_checkpoint.py). Activation offloading (plan.offload_activations) keeps at most
L - N of a rank's L transformer layers' saved activations on the GPU (engines/offload.py,
resident_bytes); the rest wait in host memory (offloaded_bytes). The layers on a stage are Megatron's split
(perfmodel/parallel/split.py); the peak is taken over MEMORY_STAGES.

Runtime: CUDA context, cuBLAS / NCCL workspaces and allocator slack, RUNTIME_BYTES below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfmodel import precision as registry
from perfmodel.compute.fp8_recipes import recipe_for
from perfmodel.compute.optimizers import state_bytes_per_param
from perfmodel.engines.costs import cross_entropy_op
from perfmodel.engines.offload import body_instances, resident_bytes
from perfmodel.parallel.partial_recompute import chunk_runs, is_block, uniform_group
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import get_schedule, rank_chunks
from perfmodel.parallel.split import graph_split, stage_layers
from perfmodel.units import fmt
from perfmodel.workload.graph import Graph, Layer, Op
from perfmodel.workload.module_recompute import OP_POLICY, module_recompute
from perfmodel.workload.op_checkpoint import op_checkpoint

# CUDA context (~0.5 GiB on Hopper with lazy module loading), cuBLAS workspace (32 MiB per
# stream), NCCL channel buffers (4 MiB x channels x peers, a few hundred MiB at scale) and the
# caching allocator's rounding: 1 GiB in total, the same order as nvidia-smi shows for an idle
# PyTorch process that has run one NCCL collective.
RUNTIME_BYTES = 1.0 * 2**30
RECOMPUTE_LEVELS = ("none", "selective", "full")  # each keeps fewer activations than the one before
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


def in_flight_micro_batches(plan: ParallelPlan, stage: int = 0) -> float:
    """Micro-batches whose activations pipeline rank `stage` holds at its peak (a whole rank's
    layers' worth): 1 without a pipeline, else the schedule's count for that rank."""
    if plan.pp == 1:
        return 1.0
    return float(get_schedule(plan.schedule_name).in_flight(plan.num_micro_batches, plan.pp, plan.vp, stage))


def memory_stages(pp: int) -> tuple[int, ...]:
    """Stages whose memory can be the peak: the first (embedding, the most micro-batches in
    flight), the second (a middle stage: with uneven splits or dense-then-MoE layers it can
    hold the most weights) and the last (output layer)."""
    return tuple(sorted({0, min(1, pp - 1), pp - 1}))


def selective_dropped_bytes(layer: Layer) -> float:
    """Saved bytes selective recompute frees: the attention core's own intermediates (the
    softmax output and the dropout mask and output, the s²-sized terms), not its inputs Q, K and V,
    which the checkpoint keeps to rerun the core (Korthikanti et al. 2022 §4.2 and Table 2: 34·sbh/t
    per layer remains, Q, K and V among it; Megatron-Core attention.py _checkpointed_attention_forward
    checkpoints core_attention(query, key, value, ...)). The attention-core GEMMs save exactly those
    inputs and a fused (flash) kernel Q, K, V and its fp32 log-sum-exp (< 2 % of it), so with a fused
    kernel selective recompute frees almost nothing: the reason Megatron recommends it for the
    unfused core only."""
    return sum(o.saved_bytes for o in layer.ops if o.attn_core and o.kind == "elementwise")


def op_saved_bytes(op: Op, plan: ParallelPlan) -> float:
    """What `op` keeps for its backward. A weight GEMM in fp8 / fp4 under Transformer Engine's
    casts (plan.fp8_fused_casts) keeps its input in the quantized form it cast it to, column-wise
    data only (TE linear.py / layernorm_linear.py / grouped_linear.py: `saved_inputmat = inputmat`
    after `update_usage(rowwise_usage=False, columnwise_usage=True)`; the fused norm's ln_out the
    same): the recipe's element plus its scale share (1 B for delayed / current fp8, 1 + 1/32 B for
    MXFP8, 0.5 + 1/16 B for NVFP4) instead of 2 B. The graph's GEMM ops save exactly their bf16
    input (workload/op_make.py gemm_op, workload/moe.py _grouped); a 16-bit GEMM (the LM head, the
    fp32 router) keeps it as is, and without TE's casts (torchao) the bf16 input stays. The loss
    keeps what the plan's cross-entropy kernels keep (engines/costs.cross_entropy_op)."""
    op = cross_entropy_op(op, plan.cross_entropy_impl)
    if op.act_input_bytes and plan.act_fp8_input_store:
        # the SwiGLU input cast to e4m3 for the backward (Megatron-LM @ d98e8a64 fusions/fused_bias_swiglu.py
        # input.to(torch.float8_e4m3fn)): 1 B where bf16 kept 2
        return op.saved_bytes - op.act_input_bytes / 2
    if op.kind != "gemm" or not plan.fp8_fused_casts:
        return op.saved_bytes
    recipe = recipe_for(op.precision, plan.fp8_recipe)
    if recipe is None:
        return op.saved_bytes
    return op.saved_bytes * (recipe.element_bytes + recipe.scale_bytes_per_element) / registry.BF16_BYTES


def layer_saved_bytes(layer: Layer, plan: ParallelPlan) -> float:
    """Bytes the layer keeps for its backward without recompute (op_saved_bytes summed),
    remembered per layer object and the four plan fields op_saved_bytes reads: an estimate asks
    for the same layers many times (memory per rank, the recompute that fits, the offload)."""
    key = (id(layer), plan.cross_entropy_impl, plan.act_fp8_input_store, plan.fp8_fused_casts, plan.fp8_recipe)
    hit = _SAVED.get(key)
    if hit is None or hit[0] is not layer:
        if len(_SAVED) > _SAVED_MAX:
            _SAVED.clear()
        # the entry holds the layer too, so its id is never reused while the entry lives
        hit = _SAVED[key] = (layer, sum(op_saved_bytes(o, plan) for o in layer.ops))
    return hit[1]


_SAVED: dict[tuple[object, ...], tuple[Layer, float]] = {}
_SAVED_MAX = 16384


def layer_activation_bytes(layer: Layer, plan: ParallelPlan) -> float:
    """Bytes the layer keeps per micro-batch under plan.recompute: everything it saves (none); less
    what the named Megatron recompute modules free (selective: the attention core's s² terms for
    core_attn, workload/module_recompute.py for the others), or its input and the outputs of the
    ops the per-op policy saves (selective, op: workload/op_checkpoint.py); only its input (full)."""
    if not layer.recomputable or plan.recompute == "none":
        return layer_saved_bytes(layer, plan)
    if plan.recompute == "selective" and plan.selective_recompute == OP_POLICY:
        return op_checkpoint(layer, plan.tp, plan.etp).saved_bytes
    if plan.recompute == "selective":
        mods = module_recompute(layer, plan.selective_recompute)
        core = selective_dropped_bytes(layer) if mods.core_attn else 0.0
        return layer_saved_bytes(layer, plan) - core - _share_bytes(layer, plan, mods.freed)
    return layer.input_bytes


def _share_bytes(layer: Layer, plan: ParallelPlan, shares: tuple[tuple[int, float], ...]) -> float:
    return sum(op_saved_bytes(layer.ops[i], plan) * share for i, share in shares)


def recompute_working_bytes(layer: Layer, plan: ParallelPlan) -> float:
    """Bytes the backward rebuilds for one layer at a time: under full recompute and torchtitan's
    per-op policy the layer reruns inside its checkpoint, so what it saves without recompute
    exists again while its backward runs, less what the checkpoint already keeps (full: the
    layer input, which the rerun's first norm saves by reference, not as a copy; per-op: the
    input and the outputs the policy saved, which the rerun reads from its cache). Counting the
    whole layer made full recompute of a one-layer, one-micro-batch model keep more than no
    recompute. Megatron's recompute modules rebuild one module's freed tensors at a time (the
    attention core's already counted as kept). 0 for a layer that is not recomputed."""
    if not layer.recomputable:
        return 0.0
    if plan.recompute == "full" or (plan.recompute == "selective" and plan.selective_recompute == OP_POLICY):
        return max(0.0, layer_saved_bytes(layer, plan) - layer_activation_bytes(layer, plan))
    if plan.recompute == "selective":
        rebuilt = module_recompute(layer, plan.selective_recompute).rebuilt
        return max((_share_bytes(layer, plan, r) for r in rebuilt), default=0.0)
    return 0.0


def windowed_activation_bytes(graph: Graph, plan: ParallelPlan, stage: int) -> tuple[float, float]:
    """(bytes kept per micro-batch, working bytes of the backward) on pipeline rank `stage` under
    full recompute with a recompute_method window (parallel/partial_recompute.py), chunk by chunk:
    block N keeps the inputs of each chunk's first N layers and everything the later ones save,
    and rebuilds one recomputed layer at a time; uniform N keeps the input of each run of N layers
    and rebuilds a whole run at once. Layers outside the transformer block (embedding, head) keep
    what they save."""
    acts = working = 0.0
    group = uniform_group(plan)
    for vs in rank_chunks(plan.schedule_name, plan.pp, plan.vp, stage):
        runs = chunk_runs(graph, plan, vs)
        body: list[Layer] = []
        for layer, n, run_plan in runs:
            if not layer.recomputable:
                acts += layer_activation_bytes(layer, run_plan) * n
            elif group > 1:
                body += [layer] * round(n)
            else:
                acts += layer_activation_bytes(layer, run_plan) * n
                working = max(working, recompute_working_bytes(layer, run_plan))
        for i in range(0, len(body), group):
            acts += body[i].input_bytes
            # the run's input is kept; the rerun's first layer saves it by reference
            working = max(working, sum(layer_saved_bytes(layer, plan) for layer in body[i:i + group])
                          - body[i].input_bytes)
    return acts, working


def memory_per_rank(graph: Graph, plan: ParallelPlan, stage: int = 0) -> MemoryBreakdown:
    layers = stage_layers(graph, plan.pp, stage, plan.vp, plan.schedule_name)
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
    if is_block(plan) or uniform_group(plan) > 1:
        acts, working = windowed_activation_bytes(graph, plan, stage)
    else:
        acts, working = stage_activation_bytes(layers, plan)
    acts = acts * in_flight_micro_batches(plan, stage) + working
    return MemoryBreakdown(weights, grads, optimizer, acts, RUNTIME_BYTES)


def stage_activation_bytes(layers: list[tuple[Layer, float]], plan: ParallelPlan) -> tuple[float, float]:
    """(bytes kept per micro-batch, working bytes of the backward) of a rank's layers when every
    layer recomputes alike: each layer's layer_activation_bytes (the offloaded layers' only while
    resident, engines/offload.py) and the largest layer rebuilt at a time."""
    acts = working = 0.0
    body: list[float] = []  # transformer-layer instances, under activation offloading
    for layer, n in layers:
        per = layer_activation_bytes(layer, plan)
        if plan.offload_activations and layer.recomputable:
            body += [per] * int(n)
        else:
            acts += per * n
        working = max(working, recompute_working_bytes(layer, plan))
    if body:
        acts += resident_bytes(body, plan.offload_activations)
    return acts, working


_PEAK_CACHE: dict[tuple[ParallelPlan, int], tuple[Graph, MemoryBreakdown]] = {}


def offloaded_bytes(graph: Graph, plan: ParallelPlan) -> float:
    """Host bytes activation offloading fills per micro-batch: the saved activations of the first
    plan.offload_activations transformer layers (pp 1, one micro-batch in flight)."""
    body = body_instances(stage_layers(graph, plan.pp, 0, plan.vp))
    return sum(layer_saved_bytes(layer, plan) for layer in body[:plan.offload_activations])


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


NO_FIT_PREFIX = "does not fit:"  # how every over-capacity message begins (the app and validate read it)


def fit_message(graph: Graph, plan: ParallelPlan, hbm_bytes: float, need_bytes: float | None = None,
                offload_ok: bool = False) -> str | None:
    """None when the peak fits in `hbm_bytes`; else 'does not fit: X per GPU > Y of HBM' with
    what the plan would need under the first stronger recompute that fits (or under full
    recompute, and that it is still over), so a run that needs recompute says so instead of
    reading as impossible: '... (with full recompute 60.3 GB)'; with `offload_ok` (a GPU whose
    node has a host link) also the fewest offloaded layers that fit, where Megatron-Core would
    offload (pp 1, no recompute). `need_bytes`: the plan's peak when the caller already has it."""
    need = peak_memory(graph, plan).total_bytes if need_bytes is None else need_bytes
    if need <= hbm_bytes:
        return None
    msg = f"{NO_FIT_PREFIX} {fmt(need, 'B')} per GPU > {fmt(hbm_bytes, 'B')} of HBM"
    offload = offload_that_fits(graph, plan, hbm_bytes) if offload_ok else None
    also = ""
    if offload is not None:
        n, peak = offload
        whose = "1 layer's" if n == 1 else f"{n} layers'"
        also = f"; or offloading {whose} activations {fmt(peak, 'B')}"
    stronger = RECOMPUTE_LEVELS[RECOMPUTE_LEVELS.index(plan.recompute) + 1:]
    # recompute replaces offloading (Megatron-Core takes one or the other, ParallelPlan.offload_refusal)
    instead = " and no offload" if plan.offload_activations else ""
    for level in stronger:
        alt = peak_memory(graph, plan.model_copy(update={"recompute": level, "offload_activations": 0})).total_bytes
        if alt <= hbm_bytes:
            window = block_that_fits(graph, plan, hbm_bytes) if level == "full" else None
            fewer = (f"; or block recompute of the first {window[0]} layers per model chunk {fmt(window[1], 'B')}"
                     if window is not None else "")
            return f"{msg} (with {level} recompute{instead} {fmt(alt, 'B')}{fewer}{also})"
    if stronger:
        return f"{msg} (with full recompute {fmt(alt, 'B')}, still over{also})"
    return msg


def block_that_fits(graph: Graph, plan: ParallelPlan, hbm_bytes: float) -> tuple[int, float] | None:
    """(the fewest layers per model chunk whose block recompute fits, that peak), or None where
    recomputing fewer than every layer of the largest chunk does not fit: Megatron-Core's
    recompute_method block (parallel/partial_recompute.py), which reruns only those layers. The
    peak falls as the count grows."""
    most = max(graph_split(graph, plan.pp, plan.vp).chunk_layers)

    def peak(n: int) -> float:
        return peak_memory(graph, plan.model_copy(update={"recompute": "full", "offload_activations": 0,
                                                          "recompute_method": "block", "recompute_num_layers": n})
                           ).total_bytes

    return fewest_that_fit(peak, 1, most - 1, hbm_bytes)


def fewest_that_fit(peak: Callable[[int], float], lo: int, hi: int, hbm_bytes: float) -> tuple[int, float] | None:
    """(the smallest n in [lo, hi] with peak(n) <= hbm_bytes, that peak) by bisection, for a peak
    that falls as n grows; None where even hi does not fit."""
    if lo > hi or peak(hi) > hbm_bytes:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if peak(mid) <= hbm_bytes:
            hi = mid
        else:
            lo = mid + 1
    return lo, peak(lo)


def offload_that_fits(graph: Graph, plan: ParallelPlan, hbm_bytes: float) -> tuple[int, float] | None:
    """(the fewest offloaded layers whose peak fits, that peak), or None where Megatron-Core would
    not offload this plan or no count fits. The peak falls as the count grows (resident_bytes)."""
    if plan.offload_refusal() is not None:
        return None
    layers = len(body_instances(stage_layers(graph, 1, 0, 1)))

    def peak(n: int) -> float:
        return peak_memory(graph, plan.model_copy(update={"offload_activations": n})).total_bytes

    return fewest_that_fit(peak, plan.offload_activations + 1, layers - 1, hbm_bytes)
