"""The analytical engine: step time in closed form from the shared per-layer costs.

For m micro-batches over p pipeline stages with per-micro-batch stage times t_i = f_i + b_i:
    1F1B / GPipe   T_pipe = m · max(t) + (Σ t - max(t))        = (m + p - 1)·t when uniform
    interleaved    T_pipe = m · max(t) + (Σ t - max(t)) / v     bubble (p-1)/v·t
    ZB-H1          T_pipe = m · max(t) + (Σ t - max(t)) · (f + b - 2w)/(f + b)
                   (weight-gradient GEMMs w fill the bubble; 1/3 of 1F1B's when f = b/2 = w)
(Narayanan et al. 2021 §2.2; Qi et al. 2024 "Zero Bubble Pipeline Parallelism" §3.)
Then step = T_pipe + exposed DP collectives + optimizer step.

DP gradient sync (grad_bytes per element, over dp·cp ranks; expert weights over edp = tp·cp·dp/(ep·etp)):
    ZeRO 0       all-reduce of the gradients after the last micro-batch's backward
    ZeRO 1, 2    reduce-scatter of gradients + all-gather of the updated bf16 weights
    ZeRO 3       per micro-batch: all-gather weights (fwd), again (bwd), reduce-scatter grads
With overlap on, a collective hides behind the compute it runs beside except its last bucket
(one layer's share); without, it is fully exposed.
Optimizer: 38 B per local parameter through HBM (fp32 grad 4 read, master 4+4, Adam moments
8+8, bf16 weight 2 write, grad-norm pass 4 read, zero_grad 4 write), at achieved bandwidth.
"""

from __future__ import annotations

from functools import lru_cache

from perfmodel.comm.collectives import collective_time_s
from perfmodel.compute import optimizers
from perfmodel.compute.ops import gemm_precision
from perfmodel.engines.costs import LayerTime, group_stride, layer_time
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import System
from perfmodel.hardware.derating import estimate_context
from perfmodel.hardware.specs import Accelerator
from perfmodel.memory import memory_per_rank, stage_layers
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.units import fmt
from perfmodel.workload.builder import build_graph
from perfmodel.workload.graph import Graph, Layer
from perfmodel.workload.moe import MoEOptions
from perfmodel.workload.spec import ModelSpec

ACT_BYTES = 2


@lru_cache(maxsize=512)
def cached_graph(spec: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int, ep: int, sp: bool,
                 precision: str, attention_impl: str, moe: MoEOptions | None = None) -> Graph:
    return build_graph(spec, micro_batch, seq_len, tp, cp, ep, sp, precision, attention_impl, moe)


def moe_options(plan: ParallelPlan) -> MoEOptions:
    """The MoE settings of a plan, in the builder's hashable form."""
    return MoEOptions(plan.etp, plan.moe_imbalance, plan.moe_fp8_dispatch, plan.moe_shared_expert_overlap)


def model_graph(spec: ModelSpec, plan: ParallelPlan) -> Graph:
    """The unsharded graph of one sequence (FLOP counts, full weight shapes)."""
    return cached_graph(spec, 1, plan.seq_len or spec.seq_len, 1, 1, 1, False, plan.precision, plan.attention_impl)


def plan_graph(spec: ModelSpec, plan: ParallelPlan) -> Graph:
    return cached_graph(spec, plan.micro_batch, plan.seq_len or spec.seq_len, plan.tp, plan.cp, plan.ep,
                        plan.sequence_parallel, plan.precision, plan.attention_impl, moe_options(plan))


def model_flop_per_step(spec: ModelSpec, plan: ParallelPlan) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one optimizer step, whole job. Hardware FLOPs are the
    model FLOPs plus the forward FLOPs recomputed, counted in the same (model) convention, as
    PaLM defines HFU (Chowdhery et al. 2022, App. B), so HFU >= MFU always; counting executed
    FLOPs instead (causal attention halved) put HFU below MFU whenever little was recomputed."""
    full = cached_graph(spec, 1, plan.seq_len or spec.seq_len, 1, 1, 1, False, plan.precision, plan.attention_impl)
    return _with_recompute(full, plan, full.train_model_flop() * plan.global_batch, plan.global_batch)


def _with_recompute(graph: Graph, plan: ParallelPlan, model: float, per_graph: float) -> tuple[float, float]:
    recomputed = 0.0
    for layer in graph.layers:
        if not layer.recomputable:
            continue
        if plan.recompute == "full":
            recomputed += layer.fwd_model_flop * layer.count
        elif plan.recompute == "selective":
            recomputed += sum(o.mflop for o in layer.ops if o.attn_core) * layer.count
    return model, model + recomputed * per_graph


@lru_cache(maxsize=4096)
def cached_layer_time(system: System, plan: ParallelPlan, layer: Layer) -> LayerTime:
    """costs.layer_time, memoised on (system, plan, layer): both engines ask for the same layers."""
    return layer_time(system, plan, layer)


def stage_times(system: System, plan: ParallelPlan, graph: Graph) -> list[dict[str, float]]:
    """Per pipeline stage, per micro-batch: fwd, bwd (incl. recompute), and their parts."""
    out = []
    for s in range(plan.pp):
        acc = {"fwd": 0.0, "bwd": 0.0, "fwd_gpu": 0.0, "bwd_gpu": 0.0, "recompute": 0.0, "comm": 0.0,
               "host": 0.0, "wgrad": 0.0, "params": 0.0, "dense_params": 0.0, "expert_params": 0.0, "layers": 0.0}
        for layer, n in stage_layers(graph, plan.pp, s):
            lt = cached_layer_time(system, plan, layer)
            acc["fwd"] += n * lt.fwd_s
            acc["bwd"] += n * lt.bwd_s
            acc["fwd_gpu"] += n * lt.fwd_gpu_s
            acc["bwd_gpu"] += n * lt.bwd_gpu_s
            acc["recompute"] += n * lt.recompute_gpu_s
            acc["comm"] += n * (lt.fwd_comm_s + lt.bwd_comm_s + lt.recompute_comm_s)
            acc["host"] += n * lt.host_exposed_s
            acc["wgrad"] += n * lt.wgrad_s
            acc["params"] += n * layer.params
            acc["dense_params"] += n * (layer.params - layer.expert_params)
            acc["expert_params"] += n * layer.expert_params
            acc["layers"] += n
        out.append(acc)
    return out


def p2p_time_s(system: System, plan: ParallelPlan, graph: Graph, spec: ModelSpec | None) -> float:
    """One activation (or its gradient) crossing one stage boundary for one micro-batch."""
    if plan.pp == 1:
        return 0.0
    _, stride = group_stride(plan, "pp")
    if spec is None:  # imported graph: the biggest body-layer input is what crosses
        size = max((layer.input_bytes for layer in graph.layers if layer.kind not in ("embedding", "head")), default=0.0)
        return collective_time_s(system, "send_recv", size, 2, stride)
    tokens = graph.tokens // plan.cp
    # each tp rank sends 1/tp of the activation and the receivers all-gather it over the
    # scale-up fabric (Megatron's scatter/gather optimisation, Narayanan et al. 2021 §4.1;
    # with sequence parallelism the activation is already split)
    size = tokens * spec.hidden * ACT_BYTES / plan.tp
    return collective_time_s(system, "send_recv", size, 2, stride)


def dp_sync_s(system: System, plan: ParallelPlan, st: dict[str, float]) -> dict[str, float]:
    """Seconds of the data-parallel collectives of one stage, unoverlapped. Expert weights reduce
    over their expert-data-parallel group: edp = tp·cp·dp / (ep·etp) ranks, etp·ep apart."""
    g = plan.grad_bytes
    n_dense, dense_stride = group_stride(plan, "dp")
    n_exp, exp_stride = group_stride(plan, "edp")
    dense, expert = st["dense_params"], st["expert_params"]

    def coll(kind: str, bytes_per: float) -> float:
        t = collective_time_s(system, kind, dense * bytes_per, n_dense, dense_stride)
        if expert:
            t += collective_time_s(system, kind, expert * bytes_per, n_exp, exp_stride)
        return t

    z = plan.zero_stage
    if z == 0:
        return {"grad": coll("all_reduce", g), "param": 0.0, "per_mb_ag": 0.0, "per_mb_rs": 0.0}
    if z in (1, 2):
        return {"grad": coll("reduce_scatter", g), "param": coll("all_gather", ACT_BYTES), "per_mb_ag": 0.0, "per_mb_rs": 0.0}
    return {"grad": 0.0, "param": 0.0, "per_mb_ag": coll("all_gather", ACT_BYTES), "per_mb_rs": coll("reduce_scatter", g)}


# NCCL runs one CTA per channel on an SM of its own ("NCCL CTAs won't share an SM with compute
# kernels", NVIDIA/nccl#689 / #1656), and a ring collective on an 8-GPU NVSwitch node with one NIC
# per GPU runs about 16 channels (2 per NIC: NVIDIA/nccl#438, sjeaugey). While a DP collective
# hides behind compute, that compute runs on SMs - 16 SMs.
NCCL_CHANNELS = 16


def comm_contention_fraction(system: System) -> float:
    """Fraction of compute throughput lost while an overlapped collective runs."""
    if system.accelerator.kind != "gpu":
        return 0.0
    return min(0.5, NCCL_CHANNELS / max(1, system.accelerator.num_compute_units))


def dp_exposed_s(system: System, plan: ParallelPlan, st: dict[str, float], m: int) -> float:
    """Exposed data-parallel communication of one step, plus the compute slowed by the part
    that hides (see NCCL_CHANNELS)."""
    dp = dp_sync_s(system, plan, st)
    layers_on_stage = max(1.0, st["layers"])
    # on a CPU the collective runs on the cores that compute (gloo): nothing hides
    can_overlap = system.accelerator.kind != "cpu"
    if plan.zero_stage == 3:
        ag, rs = dp["per_mb_ag"], dp["per_mb_rs"]
        if plan.overlap_fsdp_prefetch and can_overlap:
            exp_f = max(0.0, ag - st["fwd"]) + ag / layers_on_stage
            exp_b = max(0.0, ag + rs - st["bwd"]) + rs / layers_on_stage
        else:
            exp_f, exp_b = ag, ag + rs
        exposed = m * (exp_f + exp_b)
        total = m * (2 * ag + rs)
    else:
        grad, param = dp["grad"], dp["param"]
        if plan.overlap_dp_comm and can_overlap:
            exposed = max(grad - st["bwd"], grad / layers_on_stage)
            exposed += max(param - st["fwd"], param / layers_on_stage) if param else 0.0
        else:
            exposed = grad + param
        total = grad + param
    hidden = max(0.0, total - exposed)
    return exposed + hidden * comm_contention_fraction(system)


def optimizer_step_s(acc: Accelerator, optimizer: str, local_params: float) -> float:
    """The element-wise optimizer update of `local_params` parameters on this rank
    (perfmodel/compute/optimizers.py; Muon's Newton-Schulz and gathers need the layout: see
    optimizers.optimizer_step_s)."""
    return optimizers.elementwise_step_s(acc, optimizer, local_params)


def pipeline_time_s(stage_s: list[float], m: int, vp: int, schedule: str, fwd_s: float = 0.0,
                    bwd_s: float = 0.0, wgrad_s: float = 0.0) -> tuple[float, float]:
    """(pipeline seconds, bubble seconds) for m micro-batches over stages taking `stage_s`
    each per micro-batch (see the module docstring for the closed forms)."""
    t_max, t_sum = max(stage_s), sum(stage_s)
    bubble = t_sum - t_max
    if schedule == "interleaved":
        bubble /= vp
    elif schedule == "zb-h1":
        fb = fwd_s + bwd_s
        bubble *= max(0.0, fb - 2 * wgrad_s) / fb if fb else 1.0
    return m * t_max + bubble, bubble


def graph_flop_per_step(graph: Graph, plan: ParallelPlan) -> tuple[float, float]:
    """(model, hardware) FLOPs of one step from a graph of one micro-batch (imported graphs)."""
    per_mb = plan.global_batch / graph.micro_batch
    return _with_recompute(graph, plan, graph.train_model_flop() * per_mb, per_mb)


def check_imported(graph: Graph, plan: ParallelPlan) -> list[str]:
    from perfmodel.errors import LayoutError

    if plan.tp > 1 or plan.cp > 1 or plan.ep > 1:
        raise LayoutError(f"an imported graph ({graph.model_id}) is not sharded: use dp and pp only "
                          f"(got tp {plan.tp}, cp {plan.cp}, ep {plan.ep})")
    body = sum(layer.count for layer in graph.layers if layer.kind not in ("embedding", "head"))
    if plan.pp * plan.vp > max(body, 1):
        raise LayoutError(f"pp {plan.pp} x vp {plan.vp} > {body} layers of {graph.model_id}")
    if plan.micro_batch != graph.micro_batch:
        raise LayoutError(f"micro_batch {plan.micro_batch} != the traced example batch {graph.micro_batch}: "
                          "trace with the micro-batch you will run")
    return []


def analytic_estimate(spec: ModelSpec | None, system: System, plan: ParallelPlan, messages: list[str] | None = None,
                      graph: Graph | None = None) -> Estimate:
    """Estimate from a ModelSpec, or (spec None) from a prebuilt graph such as from_torch's."""
    msgs = list(messages or [])
    if spec is not None:
        msgs += plan.validate_for(spec, plan.world)
        graph = plan_graph(spec, plan)
    elif graph is None:
        raise ValueError("analytic_estimate needs a ModelSpec or a Graph")
    else:
        msgs += check_imported(graph, plan)
    m = plan.num_micro_batches
    st = stage_times(system, plan, graph)
    p2p = p2p_time_s(system, plan, graph, spec)
    v = plan.vp
    hops = 2 * v * p2p  # activation forward and gradient backward, per chunk boundary
    t = [s["fwd"] + s["bwd"] + hops for s in st]
    i_max = max(range(len(t)), key=t.__getitem__)
    sched = plan.schedule_name
    if plan.pp > 1 and sched == "interleaved" and m % plan.pp:
        msgs.append(f"interleaved schedule with {m} micro-batches not a multiple of pp {plan.pp} (Megatron requires it)")
    avg = {k: sum(s[k] for s in st) / len(st) for k in ("fwd", "bwd", "wgrad")}
    pipe, bubble = pipeline_time_s(t, m, v, sched, avg["fwd"], avg["bwd"], avg["wgrad"])

    # data parallel
    worst = st[i_max]
    dp_exposed = dp_exposed_s(system, plan, worst, m)

    # optimizer: local parameters after ZeRO sharding
    shard = plan.dp * plan.cp if plan.zero_stage >= 1 else 1
    local = worst["dense_params"] / shard + worst["expert_params"] / (plan.edp if plan.zero_stage >= 1 else 1)
    acc = system.accelerator
    optimizer = optimizers.optimizer_step_s(system, plan, local, optimizers.weight_matrices(stage_layers(model_graph(spec, plan) if spec else graph, plan.pp, i_max)))  # noqa: E501
    if spec is not None and plan.pp > 1 and spec.tied_embeddings and spec.vocab:
        emb = spec.vocab * spec.hidden / plan.tp * plan.grad_bytes
        optimizer += collective_time_s(system, "all_reduce", emb, 2, plan.tp * plan.cp * plan.dp)

    step = pipe + dp_exposed + optimizer
    mem = max((memory_per_rank(graph, plan, s) for s in {0, plan.pp - 1}), key=lambda x: x.total_bytes)
    if mem.total_bytes > acc.hbm_bytes:
        msgs.append(f"does not fit: {fmt(mem.total_bytes, 'B')} per GPU > {fmt(acc.hbm_bytes, 'B')} of HBM")
    model_flop, hw_flop = model_flop_per_step(spec, plan) if spec is not None else graph_flop_per_step(graph, plan)
    prec = gemm_precision(plan.precision)
    peak = acc.matrix_peak_flop_per_s(prec)
    w = worst
    gpu_f = w["fwd_gpu"]
    gpu_b = w["bwd_gpu"]
    breakdown = {
        "compute_fwd_s": m * gpu_f,
        "compute_bwd_s": m * gpu_b,
        "recompute_s": m * w["recompute"],
        "tp_ep_cp_comm_s": m * w["comm"],
        "host_overhead_s": m * w["host"],
        "pp_bubble_s": bubble,
        "pp_p2p_s": m * hops,
        "dp_comm_exposed_s": dp_exposed,
        "optimizer_s": optimizer,
    }
    return Estimate(
        workload=spec.id if spec is not None else graph.model_id, system=system.name, accelerator=acc.id, plan=plan, engine="analytic",
        step_time_s=step, breakdown_s=breakdown, memory=mem, hbm_bytes=acc.hbm_bytes,
        tokens_per_step=float(plan.global_batch * (plan.seq_len or spec.seq_len) if spec is not None
                              else plan.global_batch * graph.tokens / graph.micro_batch),
        model_flop_per_step=model_flop, hardware_flop_per_step=hw_flop, peak_flop_per_s=peak,
        n_gpus=plan.world, messages=tuple(msgs), **estimate_context(system, plan.precision),  # type: ignore[arg-type]
    )


__all__ = [
    "analytic_estimate", "cached_layer_time", "dp_exposed_s", "dp_sync_s", "model_flop_per_step", "optimizer_step_s",
    "p2p_time_s", "pipeline_time_s", "plan_graph", "stage_times",
]
