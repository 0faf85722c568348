"""Per-layer and per-stage seconds both engines share: one layer instance's forward, backward
and recompute time on one rank, with the collectives each needs, and the host-side limit.

Host limit: an eager framework issues kernels from one CPU thread. When the GPU finishes a
kernel faster than the host issues the next, the host is the bottleneck, so on a GPU a layer's
time in one direction is max(GPU seconds + exposed comm, graph kernels x host seconds/kernel).
On a CPU the same thread both dispatches and computes, so the two add.

Host seconds per graph kernel come from the one published launch-bound measurement of a whole
model (CALIBRATION_FACTS §5, ml-engineering "torch.compile" table, B200, torch 2.13): Llama-3.2-1B
at batch 1 x 512 tokens runs its eager forward in 8.1 ms and eager forward+backward with
activation checkpointing in 48.8 ms, while CUDA graphs bring them to 1.9 and 8.1 ms, so eager
is host bound. The same model in perfmodel's graph has 182 forward and 278 backward kernels
(tests/test_engine.py recomputes these counts), hence
    forward   8.1 ms / 182                  = 44.5 us per graph kernel
    backward  (48.8 - 2 x 8.1) ms / 278     = 117 us per graph kernel (recompute = one forward)
A graph kernel stands for the several eager framework ops (views, casts, bias, RNG, autograd
bookkeeping) around one fused kernel; the ratio carries over to other models through their own
kernel counts. It is a property of host CPU plus framework, applied to every GPU whose
calibration does not give `host_op_overhead`; compiled stacks (XLA on TPU) issue no per-op work.

Per-expert GEMMs (ParallelPlan.expert_gemm `per-expert`, Transformer Engine's GroupedLinear on its
default cuBLAS path): the host issues one cuBLASLt GEMM per local expert and GEMM, and splits and
allocates per expert (TE issue #1499: torch.split and 2 x num_gemms torch.empty calls). A graph op
stands for the grouped kernel, so each expert beyond it costs the host EXPERT_GEMM_HOST_S more, per
GEMM: one in the forward, two (dgrad, wgrad) in the backward. The figure is TE PR #3134's
kernel-only comparison on SM100 (8 experts x 128 rows, N = K = 2048, operands pre-swizzled): the
multi-stream loop takes 0.267 ms where one grouped launch takes 0.069 ms, (0.267 - 0.069) / 8 =
24.75 us per expert. It scales with the host like the per-kernel cost above and vanishes when the
layer is a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

from perfmodel.comm.collectives import collective_time_s, ep_exchange_time_s
from perfmodel.compute.fp8_recipes import AMAX_BYTES, amax_allreduce_s, recipe_for
from perfmodel.compute.ops import op_cost
from perfmodel.engines.torch_ring import torch_ring
from perfmodel.engines.userbuffers import all_gather_bytes_per_element, tp_overlap_s
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system import System
from perfmodel.hardware.variability import slowest_unit_factor
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.ranks import group_stride
from perfmodel.parallel.shard import CP_DKV_ROTATE, CP_KV_ALLGATHER, TP_PAIR_COMMS
from perfmodel.parallel.split import EDGE_KINDS
from perfmodel.workload.early_stop import early_stop_tail
from perfmodel.workload.graph import ACT_BYTES, Comm, Layer, Op
from perfmodel.workload.module_recompute import OP_POLICY, module_recompute
from perfmodel.workload.op_checkpoint import op_checkpoint

HOST_FWD_S_PER_KERNEL = 8.1e-3 / 182  # see module docstring: B200 Llama-3.2-1B eager forward
HOST_BWD_S_PER_KERNEL = (48.8e-3 - 2 * 8.1e-3) / 278  # eager fwd+bwd with checkpointing
TINY_EAGER_OP_S = 7e-6  # one tiny eager op on a GPU host (pytorch/pytorch#41383; FlagGems#4812)
EXPERT_GEMM_HOST_S = (0.267e-3 - 0.069e-3) / 8  # one more expert's GEMM on TE's multi-stream path (docstring)


@lru_cache(maxsize=4096)
def host_op_s(acc: Accelerator) -> tuple[float, float]:
    """(forward, backward) host seconds per graph kernel on this accelerator's host."""
    if acc.kind == "tpu":
        return 0.0, 0.0
    cal = acc.calibration.host_op_overhead
    if cal:
        # the calibration measures one tiny eager op; a graph kernel stands for as many eager
        # ops as the B200 figure implies against a tiny eager op on a GPU host (about 7 us:
        # pytorch/pytorch#41383, FlagGems#4812), i.e. 44.5 / 7 = 6.4 of them
        h = cal.si("seconds") * HOST_FWD_S_PER_KERNEL / TINY_EAGER_OP_S
        return h, h * HOST_BWD_S_PER_KERNEL / HOST_FWD_S_PER_KERNEL
    return HOST_FWD_S_PER_KERNEL, HOST_BWD_S_PER_KERNEL


def expert_gemm_host_s(acc: Accelerator, plan: ParallelPlan, ops: Iterable[Op]) -> float:
    """Host seconds a per-expert GEMM loop adds to one forward pass of `ops` (module docstring):
    for every grouped op, EXPERT_GEMM_HOST_S per local expert beyond the one its graph kernel
    counts, scaled like the host's per-kernel cost; 0 where the experts run as one kernel."""
    if plan.expert_gemm != "per-expert" or acc.kind != "gpu":
        return 0.0
    scale = host_op_s(acc)[0] / HOST_FWD_S_PER_KERNEL
    return sum(EXPERT_GEMM_HOST_S * scale * (op.batch * op.repeat - 1) for op in ops if op.grouped)


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds for one instance of a layer on one rank, one micro-batch. The backward is two
    phases: input (data) gradients, on the pipeline's critical path, and weight gradients,
    which zero-bubble schedules defer (each with its own GPU seconds and host kernels)."""

    fwd_gpu_s: float
    bwd_gpu_s: float  # both phases
    recompute_gpu_s: float
    fwd_comm_s: float  # exposed collectives (tp, ep, cp) in the forward pass
    bwd_comm_s: float
    recompute_comm_s: float
    fwd_host_s: float
    bwd_host_s: float  # both phases
    recompute_host_s: float
    wgrad_gpu_s: float = 0.0  # the weight-gradient part of bwd_gpu_s
    wgrad_host_s: float = 0.0  # host seconds issuing the weight-gradient kernels (part of bwd_host_s)

    host_serial: bool = False  # CPU: the dispatching thread also computes, times add

    def _run(self, gpu: float, host: float) -> float:
        return gpu + host if self.host_serial else max(gpu, host)

    @property
    def fwd_s(self) -> float:
        return self._run(self.fwd_gpu_s + self.fwd_comm_s, self.fwd_host_s)

    @property
    def bwd_s(self) -> float:
        """Backward including recompute (recompute runs right before the layer's backward)."""
        gpu = self.bwd_gpu_s + self.bwd_comm_s + self.recompute_gpu_s + self.recompute_comm_s
        return self._run(gpu, self.bwd_host_s + self.recompute_host_s)

    @property
    def wgrad_s(self) -> float:
        """The weight-gradient phase run on its own (as ZB-H1's W)."""
        return self._run(self.wgrad_gpu_s, self.wgrad_host_s)

    @property
    def bwd_input_s(self) -> float:
        """The backward without its weight-gradient phase (ZB-H1's B), recompute included."""
        gpu = self.bwd_gpu_s - self.wgrad_gpu_s + self.bwd_comm_s + self.recompute_gpu_s + self.recompute_comm_s
        return self._run(gpu, self.bwd_host_s - self.wgrad_host_s + self.recompute_host_s)

    @property
    def host_exposed_s(self) -> float:
        f = self.fwd_s - self.fwd_gpu_s - self.fwd_comm_s
        b = self.bwd_s - self.bwd_gpu_s - self.bwd_comm_s - self.recompute_gpu_s - self.recompute_comm_s
        return max(0.0, f) + max(0.0, b)


def fused_cross_entropy(op: Op) -> Op:
    """The vocab-parallel cross-entropy as Transformer Engine's fused kernels
    (transformer_engine/pytorch/triton/cross_entropy.py @ d0067d0; Megatron-Core
    cross_entropy_loss_fusion with cross_entropy_fusion_impl "te"): the forward is an online-softmax
    pass reading the bf16 logits and a second pass reading them again and writing the fp32
    gradient of the logits, 2 + 2 + 4 = 8 B per logit in 2 kernels; the backward one element-wise
    multiply of that gradient by the incoming loss gradient, 4 + 4 = 8 B in 1 kernel. The unfused
    loss (builder `cross_entropy`: fp32 softmax, loss and gradient kernels) moves 10 B per logit
    each way in 3 + 2 kernels. The fp32 gradient kept for the backward is the same 4 B per logit
    the unfused loss saves, so memory does not change."""
    logits = op.bytes / (2 + 4 + 4)  # builder: T·V/tp·(ACT_BYTES + 4 + 4)
    return replace(op, bytes=8.0 * logits, bwd_bytes_factor=1.0, kernels=2, bwd_kernels=1)


def fused_classifier(op: Op) -> Op:
    """The cross-entropy as llm.c's fused classifier (karpathy/llm.c llmc/fused_classifier.cuh @
    0c4b1e1, fused_classifier_kernel5; LLMQ's src/kernels/fused_classifier.cu is based on it): one
    kernel, one block per token row, reads the row of bf16 logits for the online softmax, reads it
    again and overwrites it with the bf16 gradient of the logits, so the loss has no backward kernel.
    2 + 2 + 2 = 6 B per logit (the second read is from L2 when the rows in flight fit, then 4 B: 6
    is the bound) in 1 kernel, nothing in the backward. The backward keeps that bf16 gradient, 2 B
    per logit, in place of the unfused loss's fp32 one."""
    logits = op.bytes / (2 + 4 + 4)
    return replace(op, bytes=6.0 * logits, bwd_flop_factor=0.0, bwd_bytes_factor=0.0, kernels=1, bwd_kernels=0,
                   saved_bytes=2.0 * logits)


def cross_entropy_op(op: Op, impl: str) -> Op:
    """The graph's cross-entropy op as the plan's kernels run it (ParallelPlan.cross_entropy_impl);
    every other op unchanged."""
    if impl == "unfused" or op.kind != "loss" or not op.name.endswith("cross_entropy"):
        return op
    return fused_classifier(op) if impl == "classifier" else fused_cross_entropy(op)


def comm_s(system: System, plan: ParallelPlan, c: Comm) -> float:
    degree, stride = group_stride(plan, c.group)
    if c.routing is not None:  # MoE dispatch / combine: what travels depends on the dispatcher
        dispatcher = plan.moe_dispatcher or "alltoall"
        flex = dispatcher == "flex"
        if c.group == "etp":
            # alltoall: the dispatched rows are all-gathered over etp (reduce-scattered after the
            # experts); flex expands the routing map to the etp ranks and sends to them directly
            # (Megatron-Core MoEFlexTokenDispatcher over the expert tp x ep group), so nothing is left
            return 0.0 if flex else collective_time_s(system, c.kind, c.bytes, degree, stride)
        if flex:
            degree, stride = plan.ep * plan.etp, 1
        t = ep_exchange_time_s(system, dispatcher, c.bytes, degree, stride, *c.routing, etp=plan.etp if flex else 1)
        return t / system.ep_dispatch_efficiency
    return collective_time_s(system, c.kind, c.bytes, degree, stride)


# the ops of a MoE layer between the dispatch and the combine (Megatron-Core's `mlp` schedule node:
# the routed experts); every other op of the layer is its `pre_dispatch_computation` node
# (attention, norms, router, shared experts: models/common/utils.py backward_dw runs the shared
# experts' weight gradients with the attention's)
EXPERT_OP_PREFIXES = ("sort_chunks", "expert_", "unsort_chunks")


def combined_1f1b_pair_s(pre_f: float, mlp_f: float, pre_b: float, pre_w: float, mlp_b: float, mlp_w: float,
                         disp_f: float, comb_f: float, disp_b: float, comb_b: float) -> float:
    """Seconds of one MoE layer's forward (micro-batch i) and backward (micro-batch j) run together
    as Megatron-Core's combined 1F1B does (overlap_moe_expert_parallel_comm with delay_wgrad_compute;
    Megatron-LM @ d98e8a64 megatron/core/models/common/model_chunk_schedule_plan.py
    TransformerLayerSchedulePlan.run): a compute stream and one communication stream,

        comm:  combine_b   | dispatch_f -> dispatch_b          | combine_f
        comp:  pre_f       | mlp_b -> mlp_w -> mlp_f           | pre_b -> pre_w

    pre = attention, norms, router, shared experts (its backward split into the data gradient pre_b
    and the weight gradient pre_w, which runs last); mlp = the routed experts (mlp_b the data
    gradient, mlp_w the delayed weight gradient). Each transfer waits for its producer and for the
    stream: dispatch_f for pre_f, mlp_b for combine_b, dispatch_b for mlp_b, mlp_f for dispatch_f,
    combine_f for mlp_f, pre_b for dispatch_b:

        s1    = max(pre_f, combine_b)
        disp_b ends  max(s1 + dispatch_f, s1 + mlp_b) + dispatch_b
        mlp_f  ends  max(s1 + mlp_b + mlp_w, s1 + dispatch_f) + mlp_f
        pair  = max(max(disp_b end, mlp_f end) + combine_f, max(mlp_f end, disp_b end) + pre_b + pre_w)

    Each all-to-all hides behind one piece of the other micro-batch's compute only; the pair is
    never shorter than its compute, and never longer than compute plus every transfer."""
    s1 = max(pre_f, comb_b)
    mlp_b_end = s1 + mlp_b
    disp_f_end = s1 + disp_f
    disp_b_end = max(disp_f_end, mlp_b_end) + disp_b
    mlp_f_end = max(mlp_b_end + mlp_w, disp_f_end) + mlp_f
    comb_f_end = max(disp_b_end, mlp_f_end) + comb_f
    pre_b_end = max(mlp_f_end, disp_b_end) + pre_b + pre_w
    return max(comb_f_end, pre_b_end)


# NCCL runs one CTA per channel on an SM of its own ("NCCL CTAs won't share an SM with compute
# kernels", NVIDIA/nccl#689 / #1656), and a ring collective on an 8-GPU NVSwitch node with one NIC
# per GPU runs about 16 channels (2 per NIC: NVIDIA/nccl#438, sjeaugey). While a collective hides
# behind compute, that compute runs on SMs - 16 SMs (engines/stages.comm_contention_fraction).
NCCL_CHANNELS = 16
# SMs the MoE token-exchange kernels hold while they run: NCCL's all-to-all its channels, the flex
# dispatcher's DeepEP / HybridEP kernels Megatron-Core's historical default of 20 (Megatron-LM @
# d98e8a64 transformer_config.py moe_deepep_num_sms; HybridEP takes DeepEP's default, the Bridge
# recipes set 16 or 32)
A2A_SMS = {"alltoall": NCCL_CHANNELS, "flex": 20}


def sm_contention(acc: Accelerator, sms: int) -> float:
    """Share of compute throughput lost while a communication kernel holding `sms` SMs runs beside
    it (at most half); none off a GPU, where the SM picture does not apply."""
    if acc.kind != "gpu":
        return 0.0
    return min(0.5, sms / max(1, acc.num_compute_units))


def a2a_contention_fraction(acc: Accelerator, plan: ParallelPlan) -> float:
    """Share of compute throughput lost while an overlapped MoE token exchange runs beside it: the
    plan's moe_a2a_sms where it states them, else the dispatcher's default."""
    return sm_contention(acc, plan.moe_a2a_sms or A2A_SMS[plan.moe_dispatcher or "alltoall"])


def combined_1f1b_paired_fraction(plan: ParallelPlan) -> float:
    """Share of a rank's layer forwards that run paired with another micro-batch's backward under
    the combined 1F1B (the rest run alone, their all-to-alls exposed). Without pipelining, m
    micro-batches give m - 1 pairs (the first forward and the last backward run alone: Megatron-LM
    @ d98e8a64 pipeline_parallel/combined_1f1b.py combined_1f1b_schedule_for_no_pipelining). With
    pipelining, Megatron-Core needs the interleaved schedule (transformer_config.py: pp > 1 requires
    virtual_pipeline_model_parallel_size), whose warmup on rank r is 2(pp - 1 - r) + (vp - 1)·pp
    forwards plus one extra for the overlap (schedules.py get_pp_rank_microbatches; the micro-batch
    group per virtual stage defaults to pp): over the ranks that is on average
    (pp - 1) + (vp - 1)·pp + 1 of the m·vp chunk forwards, and as many backwards in the cooldown."""
    m = plan.num_micro_batches
    if plan.pp == 1:
        return (m - 1) / m
    total = m * plan.vp
    warmup = (plan.pp - 1) + (plan.vp - 1) * plan.pp + 1
    return max(0, total - warmup) / total


def sp_amax_allreduce_s(system: System, plan: ParallelPlan, layer: Layer) -> tuple[float, float]:
    """(forward, backward) seconds of the per-tensor amax all-reduces over tp that current scaling
    and NVFP4 need for sequence-parallel operands (compute/fp8_recipes.py): one per quantized
    all-gather, i.e. per tp all-gather of the forward (the column-parallel GEMMs' inputs) and per
    tp reduce-scatter's backward (the row-parallel GEMMs' output gradients). Only inside the
    fp8_autocast region (the transformer layers, not the embedding or the output layer)."""
    if layer.kind in EDGE_KINDS or plan.tp <= 1:
        return 0.0, 0.0
    recipe = next((r for op in layer.ops if op.kind == "gemm"
                   and (r := recipe_for(op.precision, plan.fp8_recipe_name)) is not None), None)
    if recipe is None or recipe.amax_reduction != "sp_gather":
        return 0.0, 0.0
    n_f = sum(c.fwd for c in layer.comms if c.group == "tp" and c.kind == "all_gather")
    n_b = sum(c.bwd for c in layer.comms if c.group == "tp" and c.kind == "reduce_scatter")
    t = amax_allreduce_s(system, AMAX_BYTES, *group_stride(plan, "tp"))
    return n_f * t, n_b * t


def layer_time(system: System, plan: ParallelPlan, layer: Layer, world: int | None = None) -> LayerTime:
    """One instance of `layer` on one rank, one micro-batch, on the slowest of the `world` chips the
    job holds (default plan.world; hardware/variability.py): its kernels run that chip's seconds."""
    acc = system.accelerator
    pace = slowest_unit_factor(system.speed_spread, plan.world if world is None else world)
    fwd = bwd = core = wgrad = 0.0
    kf = kb = kcore = kw = 0
    attn_compute = attn_bwd = 0.0  # the attention core's forward and backward seconds
    mlp_f = mlp_b = mlp_w = 0.0  # the routed experts' forward, backward and its weight-gradient part
    prefixes = {c.hide_behind for c in layer.comms if c.overlappable and c.hide_behind}
    behind = {p: [0.0, 0.0] for p in prefixes}  # fwd / bwd seconds of the ops a collective hides behind
    fused = plan.fp8_fused_casts
    rec = plan.recompute if layer.recomputable else "none"
    # the block's tail a non-reentrant checkpoint's early stop does not rerun (workload/early_stop.py):
    # the last ops of the layer, their forward seconds and kernels summed as the loop costs them
    tail_from = len(layer.ops) - (len(early_stop_tail(layer)) if rec == "full" and plan.recompute_early_stop else 0)
    tail_f, k_tail = 0.0, 0
    for i, graph_op in enumerate(layer.ops):
        op = cross_entropy_op(graph_op, plan.cross_entropy_impl)
        f = op_cost(acc, op, "fwd", plan.fp8_recipe_name, fused).time_s * pace
        b = op_cost(acc, op, "bwd", plan.fp8_recipe_name, fused).time_s * pace
        if i >= tail_from:
            tail_f += f
            k_tail += op.kernels
        for p in prefixes:
            if op.name.startswith(p):
                behind[p][0] += f
                behind[p][1] += b
        fwd += f
        bwd += b
        kf += op.kernels
        kb += op.bwd_kernels
        if op.wgrad_factor > 0 and op.bwd_flop_factor > 0:
            # the weight-gradient GEMM's share of the backward's seconds (its FLOP share)
            wgrad += b * op.wgrad_factor / op.bwd_flop_factor
        kw += op.wgrad_kernel_count
        if op.attn_core:
            core += f
            kcore += op.kernels
        if op.kind == "attention" or op.attn_core:
            attn_compute += f
            attn_bwd += b
        if op.name.startswith(EXPERT_OP_PREFIXES):
            mlp_f += f
            mlp_b += b
            if op.wgrad_factor > 0 and op.bwd_flop_factor > 0:
                mlp_w += b * op.wgrad_factor / op.bwd_flop_factor
    cf = cb = 0.0
    ep_f = ep_b = 0.0  # expert-parallel collectives (ep, etp groups) left exposed so far
    ub = {"all_gather": [0.0, 0.0], "reduce_scatter": [0.0, 0.0]}  # userbuffers pairs: seconds, occurrences
    userbuffers = plan.overlap_tp_comm and plan.sequence_parallel and acc.kind == "gpu"
    ag_scale = all_gather_bytes_per_element(layer, plan.fp8_recipe_name) / ACT_BYTES if userbuffers else 1.0
    a2a = {"disp_f": 0.0, "comb_f": 0.0, "disp_b": 0.0, "comb_b": 0.0}  # under the combined 1F1B
    ring_s = {CP_KV_ALLGATHER: 0.0, CP_DKV_ROTATE: 0.0}  # PyTorch's context-parallel ring (torch_ring.py)
    for c in layer.comms:
        t = comm_s(system, plan, c)
        if c.name in ring_s:
            ring_s[c.name] = t
            continue
        if plan.moe_a2a_overlap and c.routing is not None:
            # the token exchange (dispatch, combine and their etp all-gather / reduce-scatter);
            # the backward of a combine runs first, that of a dispatch after the experts' backward
            side = "comb" if ("combine" in c.name or c.kind == "reduce_scatter") else "disp"
            a2a[side + "_f"] += t * c.fwd
            a2a[side + "_b"] += t * c.bwd
            continue
        if c.overlappable and c.hide_behind:
            # e.g. the MoE dispatch / combine all-to-alls beside the shared experts' GEMMs, which
            # run on the SMs the exchange leaves them while it hides
            hf_s, hb_s = behind[c.hide_behind]
            slow = a2a_contention_fraction(acc, plan) if c.routing is not None else 0.0
            ep_f += (max(0.0, t - hf_s) + slow * min(t, hf_s)) * c.fwd
            ep_b += (max(0.0, t - hb_s) + slow * min(t, hb_s)) * c.bwd
            continue
        if c.group in ("ep", "etp"):
            ep_f += t * c.fwd
            ep_b += t * c.bwd
            continue
        if c.overlappable:
            # the CP ring passes K/V chunks while attention computes on the previous chunk
            t_f = max(0.0, t - attn_compute)
            t_b = max(0.0, t * c.bwd / max(c.fwd, 1) - 2.5 * attn_compute) if c.bwd else 0.0
            cf += t_f * (1 if c.fwd else 0)
            cb += t_b
            continue
        if userbuffers and c.name.endswith(TP_PAIR_COMMS) and c.fwd == c.bwd:
            if c.kind == "all_gather" and ag_scale != 1.0:  # gathered quantized (engines/userbuffers.py)
                t = comm_s(system, plan, replace(c, bytes=c.bytes * ag_scale))
            ub[c.kind][0] += t * c.fwd  # every pair of a layer reduces the same [T, h] activation
            ub[c.kind][1] += c.fwd
            continue
        cf += t * c.fwd
        cb += t * c.bwd
    if ub["all_gather"][1] or ub["reduce_scatter"][1]:
        # Transformer Engine's userbuffers run each pair's all-gathers and reduce-scatters beside the
        # GEMMs that consume or produce them (engines/userbuffers.py); pairs beyond the layer's
        # column -> row GEMMs, if any, stay exposed
        (sum_ag, n_ag), (sum_rs, n_rs) = ub["all_gather"], ub["reduce_scatter"]
        t_ag, t_rs = sum_ag / max(n_ag, 1), sum_rs / max(n_rs, 1)
        # its GEMMs run at the slowest chip's pace too: the overlap's makespans are sums and maxima
        # of GEMM and collective seconds, so the paced result is pace x the result with the
        # collectives' seconds divided by the pace
        ov = tp_overlap_s(acc, layer, plan.tp, t_ag / pace, t_rs / pace, int(min(n_ag, n_rs)))
        left = t_ag * (n_ag - ov.pairs) + t_rs * (n_rs - ov.pairs)
        cf += ov.fwd_s * pace + left
        cb += ov.bwd_s * pace + left
    amax_f, amax_b = sp_amax_allreduce_s(system, plan, layer)
    cf += amax_f
    cb += amax_b
    ring_rerun_s = 0.0  # the ring's forward exposure a core-attention recompute runs again
    if ring_s[CP_KV_ALLGATHER] > 0.0 and layer.layout is not None and layer.layout.cp is not None:
        ring = torch_ring(acc, layer.layout.cp, plan.cp, plan.cp_ring, attn_compute, attn_bwd,
                          ring_s[CP_KV_ALLGATHER], ring_s[CP_DKV_ROTATE])
        # the merges run on the compute stream after each attention step: part of the attention core
        fwd += ring.merge_fwd_s * pace
        core += ring.merge_fwd_s * pace
        bwd += ring.merge_bwd_s * pace
        kf += ring.merge_fwd_kernels
        kcore += ring.merge_fwd_kernels
        kb += ring.merge_bwd_kernels
        cf += ring.exposed_fwd_s
        cb += ring.exposed_bwd_s
        ring_rerun_s = ring.exposed_fwd_s
    per_op = op_checkpoint(layer, plan.tp, plan.etp) if rec == "selective" and plan.selective_recompute == OP_POLICY else None
    mods = module_recompute(layer, plan.selective_recompute) if rec == "selective" and per_op is None else None
    # selective recompute reruns the attention core (and the ring's forward call) under core_attn only
    core_rerun = mods is not None and mods.core_attn
    r_gpu = fwd - tail_f if rec == "full" else core if core_rerun else 0.0
    kcore = kcore if core_rerun else 0
    r_op_comm = 0.0
    rerun = per_op or mods
    if rerun is not None:
        # torchtitan's per-op policy (workload/op_checkpoint.py): the forward ops and matmuls it does
        # not save, and the collectives it does not save, rerun before the backward; Megatron's
        # recompute modules (workload/module_recompute.py): the other modules' ops and collectives
        r_gemm, r_tp = 0.0, 0.0
        for op in rerun.recomputed:
            t = op_cost(acc, op, "fwd", plan.fp8_recipe_name, fused).time_s * pace
            r_gpu += t
            kcore += op.kernels
            r_gemm += t if op.kind == "gemm" and not op.grouped else 0.0
        for c in rerun.comms:
            t = comm_s(system, plan, c) * c.fwd
            if c.group == "tp" and plan.overlap_tp_comm:
                r_tp += t  # pipelined with the rerun GEMMs, as in the forward
            else:
                r_op_comm += t
        r_op_comm += max(0.0, r_tp - r_gemm)
    plain_f, plain_b = a2a["disp_f"] + a2a["comb_f"], a2a["disp_b"] + a2a["comb_b"]
    if plain_f + plain_b > 0.0:
        # Megatron-Core's combined 1F1B (overlap_moe_expert_parallel_comm): a paired forward and
        # backward expose what their pair takes beyond its compute (combined_1f1b_pair_s; the
        # recompute runs before the backward's attention), split between the passes by their
        # all-to-all seconds; the unpaired warmup forwards and cooldown backwards expose all of theirs
        pre_w = wgrad - mlp_w
        comp = fwd + bwd + r_gpu
        pair = combined_1f1b_pair_s(fwd - mlp_f, mlp_f, bwd - mlp_b - pre_w + r_gpu, pre_w, mlp_b - mlp_w, mlp_w,
                                    a2a["disp_f"], a2a["comb_f"], a2a["disp_b"], a2a["comb_b"])
        paired = combined_1f1b_paired_fraction(plan)
        hidden = comp + plain_f + plain_b - pair  # seconds both streams are busy
        exposed = pair - comp + a2a_contention_fraction(acc, plan) * hidden
        ep_f += paired * exposed * plain_f / (plain_f + plain_b) + (1.0 - paired) * plain_f
        ep_b += paired * exposed * plain_b / (plain_f + plain_b) + (1.0 - paired) * plain_b
    cf += ep_f
    cb += ep_b
    hf, hb = host_op_s(acc)
    per_expert = expert_gemm_host_s(acc, plan, layer.ops)  # forward, one GEMM per op and expert
    r_per_expert = expert_gemm_host_s(acc, plan, rerun.recomputed) if rerun is not None else 0.0
    if plan.cuda_graphs and layer.recomputable and acc.kind == "gpu":
        # a captured layer is one graph launch per pass (its kernels' launch gaps are already in
        # their GPU seconds, compute/ops.launch_s): the host issues 1 op, not one per kernel
        kf, kb, kcore, kw = min(kf, 1), min(kb, 1), min(kcore, 1), min(kw, 1)
        per_expert = r_per_expert = 0.0
    if rec == "full":
        r_comm, r_host = cf, (kf - min(k_tail, kf)) * hf + per_expert
    elif rec == "selective":
        # core_attn reruns the ring's forward call (all-gather and merges); the per-op policy saves it
        r_comm, r_host = r_op_comm + (ring_rerun_s if core_rerun else 0.0), kcore * hf + r_per_expert
    else:
        r_comm = r_host = 0.0
    return LayerTime(fwd_gpu_s=fwd, bwd_gpu_s=bwd, recompute_gpu_s=r_gpu, fwd_comm_s=cf, bwd_comm_s=cb,
                     recompute_comm_s=r_comm, fwd_host_s=kf * hf + per_expert, bwd_host_s=kb * hb + 2 * per_expert,
                     recompute_host_s=r_host, wgrad_gpu_s=wgrad, wgrad_host_s=kw * hb + per_expert, host_serial=acc.kind == "cpu")
