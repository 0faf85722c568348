"""The MoE feed-forward block as Megatron-Core's all-to-all token dispatcher and DeepSeek run it.

Layout (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960): the tp·cp·dp ranks of a
pipeline stage hold the experts as etp x ep x edp. A rank routes its own T/tp tokens (sequence
parallel shard of the T = b·s/cp tokens of its attention group), holds E/ep experts of width
f/etp, and its experts process the token copies of its etp group:
    copies sent per rank        C = (T/tp)·k
    copies its experts process  R = (T/tp)·k·etp = T·k·etp/tp      (balanced routing)
so the expert FLOPs per rank, 2·R·3·h·f/etp for a gated FFN, are the same for every etp.

Forward, per rank (Megatron-Core `MoEAlltoAllTokenDispatcher`, `moe_utils.permute/unpermute`):
    router       GEMM [T/tp, h] x [h, E] in fp32 (DeepSeek-V3 report §3.3.1 keeps the gating
                 in higher precision; Megatron-Core's `moe_router_dtype fp32`)
    score/top-k  softmax or sigmoid over E, top-k and the routing map: T/tp·E fp32 elements
    aux loss     load-balancing loss (Switch Transformer / DeepSeek sequence-wise): a reduction of
                 the T/tp·E probabilities and the routing map, plus an all-reduce of the E
                 per-expert token counts over tp
    count        all-gather of the per-expert token counts over ep (the dispatcher's split sizes)
    permute      gather of C rows of h: reads and writes C·h elements
    dispatch     all-to-all over ep of C·h elements (fp8 + one fp32 scale per 128 values when
                 the stack dispatches in fp8, DeepSeek-V3 §3.3.2), then an all-gather over etp;
                 the Comm carries (k, E) so the plan's dispatcher decides what travels: alltoall
                 moves every copy, flex (DeepEP / HybridEP) a token once per destination node
                 over the network and once per destination rank over NVLink
                 (comm/collectives.ep_exchange_time_s)
    sort chunks  regroup received rows by local expert (when a rank holds more than one)
                 (under the flex dispatcher, DeepEP, the dispatch reads tokens in place and one
                 permutation of the received rows into expert order replaces permute + sort
                 chunks; one un-permutation replaces unsort + unpermute)
    experts      grouped GEMMs fc1 [m, h] x [h, 2f/etp], activation, fc2 [m, f/etp] x [f/etp, h]
                 with m = γ·R / (E/ep) rows per local expert
    unsort, reduce-scatter over etp, combine all-to-all over ep (bf16)
    unpermute    scatter-add of the C copies weighted by their router probabilities, which keeps the
                 copies for the probabilities' gradient (C·h bf16). Megatron-Core's grouped experts
                 apply the probabilities in the activation instead (TEGroupedMLP bias_act_func:
                 weighted_bias_swiglu_impl(fc1_output, bias, permuted_probs), experts.py @ d98e8a64)
                 and both dispatchers unpermute without them (token_dispatcher.py unpermute(...)
                 with no probs): the activation keeps the R probabilities (fp32) beside its input,
                 the unpermute keeps nothing and its backward is one gather
                 (MoEOptions.probs_in_activation, ParallelPlan.moe_probs_in_activation)
    shared       always-on experts as a tp-sharded dense FFN; with `moe_shared_expert_overlap`
                 the dispatch hides behind the shared FC1 and the combine behind its FC2
The backward pass mirrors each step (permute <-> unpermute, all-to-all of the gradients).
Under LatentMoE (spec.moe_latent_size = l, workload/latent_moe.py) the routed tokens are
projected h -> l before the permutation and l -> h after the un-permutation: every row the
permutation, the all-to-alls and the expert GEMMs move is l wide instead of h. The block says
what its collectives move (`MoEExchange`); parallel/shard.py emits them for the layout.

Load imbalance γ (ParallelPlan.moe_imbalance, max over mean tokens of the expert-parallel ranks,
default 1.23 from FEPLB's measured GLM-5 routing, see parallel/plan.py) scales what the busiest
rank receives and computes: every rank waits for it at the combine. With ep = 1 one rank holds
every expert and processes all copies, so γ does not apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from perfmodel import precision as registry
from perfmodel.errors import LayoutError
from perfmodel.workload.graph import ACT_BYTES, MoEExchange, Op
from perfmodel.workload.latent_moe import latent_projections
from perfmodel.workload.spec import ModelSpec

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # e4m3 value + an fp32 scale per 1x128 tile (DeepSeek-V3 §3.3.2)
COUNT_BYTES = 8  # int64 per-expert token counts
PROB_BYTES = 4  # an fp32 router probability per routed copy


@dataclass(frozen=True, slots=True)
class MoEOptions:
    """The run settings that shape the MoE block (hashable: graphs are cached on it)."""

    etp: int = 1
    imbalance: float = 1.0
    fp8_dispatch: bool = False
    shared_expert_overlap: bool = False
    flex: bool = False  # Megatron-Core's flex dispatcher (DeepEP): permutes after the dispatch, no sort_chunks
    probs_in_activation: bool = False  # router probabilities applied in the experts' activation, not the unpermute


@dataclass(frozen=True)
class MoEBlock:
    ops: tuple[Op, ...]
    exchange: MoEExchange
    params: float  # held by this rank: router + local expert shards + shared experts (tp-sharded)
    expert_params: float  # the local expert shards (replicated over edp ranks)


def _mem_op(name: str, elems: float, bytes_per_elem: float, flop: float = 0.0, saved: float = 0.0,
            kernels: int = 1, bwd_bytes_factor: float = 1.0) -> Op:
    """A memory-bound kernel moving `elems` x `bytes_per_elem` bytes (reads + writes)."""
    return Op(name=name, kind="elementwise", flop=flop, bytes=elems * bytes_per_elem, saved_bytes=saved,
              bwd_flop_factor=1.0, bwd_bytes_factor=bwd_bytes_factor, kernels=kernels, bwd_kernels=kernels)


def _grouped(name: str, m: int, n: int, k: int, groups: int, precision: str, model_flop: float, saved: float) -> Op:
    el = registry.get(precision).weight_bytes
    return Op(name=name, kind="gemm", flop=2.0 * m * n * k * groups, model_flop=model_flop,
              bytes=groups * (m * k * ACT_BYTES + m * n * ACT_BYTES + k * n * el), m=m, n=n, k=k, batch=groups,
              precision=precision, weight_params=float(groups * k * n), saved_bytes=saved,
              kernels=1, bwd_kernels=2, grouped=True)


def moe_block(spec: ModelSpec, T: int, tp: int, ep: int, precision: str, opts: MoEOptions,
              shared_ops: list[Op], shared_params: float) -> MoEBlock:
    """Ops, collectives and parameters of one MoE FFN on one rank for T tokens of its
    attention group (see the module docstring). `shared_ops` are the shared experts' FFN ops
    (built by the caller like a dense MLP), prefixed `shared_`."""
    h = spec.hidden
    hx = spec.moe_latent_size or h  # what the routed experts see: the latent width under LatentMoE
    E, k = spec.num_experts or 1, spec.top_k or 1
    etp = opts.etp
    if E % ep:
        raise LayoutError(f"ep {ep} does not divide num_experts {E} of {spec.id}")
    width = spec.moe_ffn_hidden or h
    if width % etp:
        raise LayoutError(f"etp {etp} does not divide moe_ffn_hidden {width} of {spec.id}")
    el_local = E // ep
    f = width // etp
    gated = spec.activation in ("swiglu", "geglu")
    up_n = f * (2 if gated else 1)
    gamma = opts.imbalance if ep > 1 else 1.0

    Tr = math.ceil(T / tp)  # tokens this rank routes (its sequence-parallel shard)
    C = Tr * k  # token copies it sends
    R = C * etp  # copies its experts process, balanced
    R_max = gamma * R  # on the busiest rank
    m = max(1, math.ceil(R_max / el_local))  # rows per local expert
    fp8 = registry.get(precision).quantized
    d_el = FP8_DISPATCH_BYTES if (opts.fp8_dispatch and fp8) else float(ACT_BYTES)

    ops: list[Op] = [
        Op("router", "gemm", flop=2.0 * Tr * E * h, bytes=Tr * h * ACT_BYTES + h * E * 4 + Tr * E * 4, m=Tr, n=E, k=h,
           precision="fp32", weight_params=float(h * E), saved_bytes=Tr * h * ACT_BYTES, kernels=1, bwd_kernels=2),
        # scores (softmax or sigmoid), top-k, routing map: read fp32 logits, write probs and map
        _mem_op("router_topk", Tr * E, 4 + 4 + 1, flop=5.0 * Tr * E, saved=Tr * E * 4, kernels=3),
        # load-balancing loss: per-expert sums of probabilities and of the routing map
        _mem_op("router_aux_loss", Tr * E, 4 + 1, flop=2.0 * Tr * E, kernels=3),
    ]
    latent_down, latent_up, latent_params = latent_projections(spec, Tr, precision)
    ops += latent_down
    if d_el < ACT_BYTES:
        ops.append(_mem_op("dispatch_quantize", Tr * hx, ACT_BYTES + d_el, flop=2.0 * Tr * hx))
    probs_saved = R_max * PROB_BYTES if opts.probs_in_activation else 0.0
    act = _mem_op("expert_act", R_max * f, ACT_BYTES * ((2 if gated else 1) + 1), flop=8.0 * R_max * f,
                  saved=R_max * up_n * ACT_BYTES + probs_saved, bwd_bytes_factor=2.0)
    if spec.activation == "swiglu":
        act = replace(act, act_input_bytes=R_max * up_n * ACT_BYTES)
    experts = [
        _grouped("expert_fc1", m, up_n, hx, el_local, precision, 2.0 * R * up_n * hx, saved=m * el_local * hx * ACT_BYTES),
        act,
        _grouped("expert_fc2", m, hx, f, el_local, precision, 2.0 * R * hx * f, saved=m * el_local * f * ACT_BYTES),
    ]
    # the unpermute: a scatter-add of the copies into their tokens; weighted by the probabilities it
    # saves the copies for their gradient and its backward reads them again, else it is a plain
    # sum whose backward is one gather (module docstring)
    unpermute_bytes = ACT_BYTES * (1 + 1 / k) + (0.0 if opts.probs_in_activation else PROB_BYTES / hx)
    unpermute_bwd = 1.0 if opts.probs_in_activation else 2.0
    if opts.flex and ep * etp > 1:
        # DeepEP's fused dispatch reads the tokens in place and each rank receives a token once;
        # the permutation into expert order (and its inverse before the combine) runs on the
        # received rows, inside the experts' node (Megatron-LM @ d98e8a64 token_dispatcher.py
        # _DeepepManager.get_permuted_hidden_states_by_experts / get_restored_hidden_states_by_experts,
        # moe_layer.py routed_experts_compute): one pass each way over R_max rows, no sort_chunks
        ops.append(_mem_op("expert_permute", R_max * hx, 2 * d_el, kernels=2))
        ops += experts
        ops.append(_mem_op("expert_unpermute", R_max * hx, unpermute_bytes, flop=2.0 * R_max * hx,
                           saved=0.0 if opts.probs_in_activation else C * hx * ACT_BYTES, kernels=2,
                           bwd_bytes_factor=unpermute_bwd))
    else:
        ops.append(_mem_op("permute", C * hx, 2 * d_el, kernels=2))
        if el_local > 1 and ep > 1:
            ops.append(_mem_op("sort_chunks", R_max * hx, 2 * d_el))
        ops += experts
        if el_local > 1 and ep > 1:
            ops.append(_mem_op("unsort_chunks", R_max * hx, 2 * ACT_BYTES))
        ops.append(_mem_op("unpermute", C * hx, unpermute_bytes, flop=2.0 * C * hx,
                           saved=0.0 if opts.probs_in_activation else C * hx * ACT_BYTES, kernels=2,
                           bwd_bytes_factor=unpermute_bwd))
    ops += latent_up
    ops += shared_ops

    # what the dispatch and combine move (latent width under LatentMoE); the collectives
    # themselves are parallel/shard.py's
    exchange = MoEExchange(experts=E, sent_elems=gamma * C * hx, dispatch_bytes_per_elem=d_el,
                           overlap=opts.shared_expert_overlap and bool(shared_ops),
                           routing=(k, E, spec.moe_router_groups, spec.moe_router_group_topk or spec.moe_router_groups))
    expert_params = float(el_local * (hx * up_n + f * hx))
    return MoEBlock(tuple(ops), exchange, expert_params + h * E + latent_params + shared_params, expert_params)
