"""Lay an unsharded graph out on one rank: `shard(graph, plan)`.

The builder (workload/builder.py) and the torch import (workload/torch_import.py) emit the graph
of one micro-batch with every dimension whole. This module decides what one rank of a layout
holds and which collectives the split implies:

  sizes (`RankAxes`, the graph.Axes a layer's shape function is called with)
    tokens        b·s/cp                       (cp must divide s)
    norm tokens   T/tp under sequence parallelism, else T
    heads         heads/tp; kv heads kv/tp, one each when tp > kv (tp and kv: one divides the other)
    columns       width/tp of a column-parallel weight (FFN, shared experts)
    vocab rows    ceil(V/tp) of the output layer (the last rank padded)
    Mamba-2       heads/tp and groups/tp (groups replicate when tp > groups); per scan /cp
    experts       E/ep experts of width f/etp (workload/moe.py, from the plan's MoE settings)
  collectives (Megatron-LM tensor parallelism, Shoeybi et al. 2019, Sec. 3; sequence parallelism,
  Korthikanti et al. 2022, Sec. 4.2.2)
    column -> row pair   an all-reduce of the [T, h] output, forward and backward; under sp an
                         all-gather before and a reduce-scatter after, forward and backward
    vocab embedding      partial lookups summed: all-reduce (forward), under sp a reduce-scatter
                         whose backward is an all-gather
    vocab output layer   column-parallel lm_head: the input's gradient all-reduced (backward), under
                         sp the input all-gathered; the cross-entropy's row max, target logit and
                         sum of exps all-reduced in fp32 (forward)
    cp attention         by the layout's `cp_ring` (graph.CpRing). p2p (Transformer Engine): K and V
                         of the whole sequence all-gathered in a ring (forward once, backward twice:
                         K/V again and their gradients), hidden behind the attention core.
                         allgather (PyTorch's context_parallel, engines/torch_ring.py): K and V of the
                         heads the model passes all-gathered once in the forward and again in the
                         backward, and the rank's dK, dV sent to the next rank in fp32 at each of the
                         cp backward steps; allgather-repeat-kv the same at the query heads.
                         Either way a sliding window needs only the previous rank's last `window`
                         rows; chunks aligned to the cp split need nothing
    MoE FFN              load-balancing counts all-reduced over tp; per-expert counts all-gathered
                         over ep, dispatch and combine all-to-alls of the busiest rank's token
                         copies (what they move: LayerLayout.moe); etp all-gather / reduce-scatter
    Mamba-2 under cp     an all-to-all from the sequence split to a head split before the conv and
                         scan, one back before out_proj (what they move: LayerLayout.cp_all_to_all)
  DeepSeek-V4's compressed attention still lays itself out over tp and builds its indexer
  all-reduce (workload/compressed_attention.py; LayerLayout.model_comms, emitted as they are).

An imported graph carries no shape functions. Its layers are split by the tensor-parallel pairs
`tp_pairs` recognises (a Linear whose output, through element-wise ops, feeds another Linear:
column-parallel then row-parallel), each op scaled by what tp splits of it; a graph with no such
pair cannot be tensor-parallel and says why. A column-parallel GEMM keeps its whole input, a
row-parallel one its whole output and bias; the ops between and the attention heads are split;
under sp the norms and element-wise ops outside the pairs run on 1/tp of the tokens. Layers
outside the pairs (the embedding, an output layer with no row partner) stay whole on every rank.
cp and ep need the builder's shape functions: an imported graph with cp or ep > 1 is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from perfmodel.errors import LayoutError
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.builder import build_graph
from perfmodel.workload.graph import (
    ACT_BYTES,
    Comm,
    CpExchange,
    CpRing,
    Graph,
    Layer,
    LayerLayout,
    MoEExchange,
    Op,
    OpShare,
)
from perfmodel.workload.moe import COUNT_BYTES, MoEOptions
from perfmodel.workload.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class RankLayout:
    """The degrees that shape one rank's graph (hashable: graphs are cached on it)."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    moe: MoEOptions = field(default_factory=MoEOptions)
    cp_ring: CpRing = "p2p"  # how cp attention exchanges K/V (graph.CpRing)

    @classmethod
    def of(cls, plan: ParallelPlan) -> RankLayout:
        return cls(plan.tp, plan.cp, plan.ep, plan.sequence_parallel, moe_options(plan), plan.cp_ring)

    @property
    def degrees(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.moe.etp, "sp": int(self.sp)}


def moe_options(plan: ParallelPlan) -> MoEOptions:
    """The MoE settings of a plan, in the builder's hashable form."""
    return MoEOptions(plan.etp, plan.moe_imbalance, plan.moe_fp8_dispatch, plan.moe_shared_expert_overlap,
                      plan.moe_dispatcher == "flex", plan.moe_probs_in_activation)


class RankAxes:
    """graph.Axes for one rank of `layout`: the sizes it holds, and the errors that name what
    does not divide (see the module docstring)."""

    def __init__(self, layout: RankLayout):
        self.tp, self.cp, self.ep, self.sp, self.moe = layout.tp, layout.cp, layout.ep, layout.sp, layout.moe

    def tokens(self, b: int, s: int) -> int:
        if s % self.cp:
            raise LayoutError(f"seq_len {s} is not divisible by cp {self.cp}")
        return b * s // self.cp

    def norm_tokens(self, tokens: int) -> int:
        return tokens // self.tp if self.sp else tokens

    def query_len(self, s: int) -> int:
        return s // self.cp

    def heads(self, heads: int, kv_heads: int, owner: str) -> tuple[int, int]:
        tp = self.tp
        bad = lambda t: heads % t or (kv_heads % t and t % kv_heads)  # noqa: E731
        if bad(tp):
            valid = ", ".join(str(t) for t in range(1, heads + 1) if not bad(t) and t <= 128)
            raise LayoutError(f"tp {tp} must divide num_heads {heads} and num_kv_heads {kv_heads} (or be a multiple of "
                              f"num_kv_heads) of {owner}; valid tp: {valid}")
        return heads // tp, max(1, kv_heads // tp)

    def columns(self, width: int, owner: str, what: str) -> int:
        if width % self.tp:
            raise LayoutError(f"tp {self.tp} does not divide {what} {width} of {owner}")
        return width // self.tp

    def vocab_columns(self, vocab: int) -> int:
        return vocab // self.tp if vocab % self.tp == 0 else -(-vocab // self.tp)

    def hidden_columns(self, hidden: int) -> int:
        return hidden // self.tp if hidden % self.tp == 0 else hidden

    def ssm_heads(self, heads: int, groups: int, owner: str) -> tuple[int, int, int, int]:
        tp, cp = self.tp, self.cp
        if heads % (tp * cp):
            raise LayoutError(f"tp {tp} x cp {cp} does not divide mamba.num_heads {heads} of {owner}")
        h_tp = heads // tp
        g_tp = groups // tp if groups % tp == 0 else groups
        return h_tp, g_tp, h_tp // cp, (g_tp // cp if g_tp % cp == 0 else g_tp)


# ---- the collectives a split implies ------------------------------------------------------------

# the names of a pair's sequence-parallel collectives (engines/userbuffers.py overlaps them)
TP_PAIR_COMMS = ("tp_allgather", "tp_reducescatter")


def tp_pair_comms(pairs: int, act_bytes: float, sp: bool) -> tuple[Comm, ...]:
    """`pairs` column -> row pairs reducing a [T, h] activation of `act_bytes` (module docstring)."""
    if sp:
        return (Comm(TP_PAIR_COMMS[0], "all_gather", "tp", act_bytes, pairs, pairs),
                Comm(TP_PAIR_COMMS[1], "reduce_scatter", "tp", act_bytes, pairs, pairs))
    return (Comm("tp_allreduce", "all_reduce", "tp", act_bytes, pairs, pairs),)


# the collectives of PyTorch's context-parallel ring (engines/torch_ring.py reads them by name)
CP_KV_ALLGATHER = "cp_kv_allgather"
CP_DKV_ROTATE = "cp_dkv_rotate"
DKV_BYTES = 4  # PyTorch's ring accumulates and rotates dK / dV in fp32 (convert_to_f32)


def cp_attention_comms(x: CpExchange, cp: int, ring: CpRing = "p2p") -> tuple[Comm, ...]:
    """K and V an attention layer fetches from the other cp ranks (module docstring).

    PyTorch's ring (`allgather`, `allgather-repeat-kv`) with H heads of K and V (the kv heads, or
    the query heads when the model repeats them), head dims d_k, d_v, b sequences of s tokens:
        K/V all-gather   b·s·H·(d_k + d_v)·2 B     forward once, backward once
        dK/dV rotation   b·(s/cp)·H·(d_k + d_v)·4 B, one send to the next rank per backward step (cp)"""
    local_len = x.seq_len // cp
    if x.local and x.chunked and local_len % x.keys == 0:
        return ()  # chunks aligned to the cp split: every key a rank needs is its own
    if x.local and x.keys < local_len:
        # a window reaches back `keys` tokens: only the previous rank's last `keys` K/V rows
        return (Comm("cp_kv_halo", "send_recv", "cp", x.halo_bytes, 1, 2, overlappable=True),)
    if ring == "p2p":
        return (Comm("cp_kv_ring", "all_gather", "cp", x.ring_bytes, 1, 2, overlappable=True),)
    heads = x.q_heads if ring == "allgather-repeat-kv" else x.kv_heads
    kv_elems = x.micro_batch * x.seq_len * heads * (x.qk_head_dim + x.v_head_dim)
    return (Comm(CP_KV_ALLGATHER, "all_gather", "cp", kv_elems * ACT_BYTES, 1, 1, overlappable=True),
            Comm(CP_DKV_ROTATE, "send_recv", "cp", kv_elems / cp * DKV_BYTES, 0, cp, overlappable=True))


def moe_comms(x: MoEExchange, tp: int, ep: int, etp: int) -> tuple[Comm, ...]:
    """An MoE FFN's collectives on a rank (Megatron-Core's all-to-all token dispatcher, module
    docstring of workload/moe.py): the load-balancing counts all-reduced over tp; over ep the
    per-expert counts all-gathered, then the dispatch and combine all-to-alls of the busiest
    rank's token copies (an fp8 dispatch's backward is bf16); over etp an all-gather after the
    dispatch and a reduce-scatter before the combine."""
    out: list[Comm] = []
    if tp > 1:
        out.append(Comm("moe_aux_count_allreduce", "all_reduce", "tp", x.experts * 4, 1, 0))
    if ep > 1 or etp > 1:
        out.append(Comm("moe_count_allgather", "all_gather", "ep", x.experts * COUNT_BYTES * ep, 1, 0))
        sent, d_el, overlap = x.sent_elems, x.dispatch_bytes_per_elem, x.overlap
        rt = x.routing  # the plan's dispatcher decides what travels (comm/collectives.ep_exchange_time_s)
        if ep > 1:
            if d_el < ACT_BYTES:  # fp8 forward dispatch; its backward (the combine's gradient) is bf16
                out += [Comm("moe_dispatch", "all_to_all", "ep", sent * d_el, 1, 0, overlap, "shared_fc1", rt),
                        Comm("moe_dispatch_grad", "all_to_all", "ep", sent * ACT_BYTES, 0, 1, overlap, "shared_fc1", rt)]
            else:
                out.append(Comm("moe_dispatch", "all_to_all", "ep", sent * ACT_BYTES, 1, 1, overlap, "shared_fc1", rt))
            out.append(Comm("moe_combine", "all_to_all", "ep", sent * ACT_BYTES, 1, 1, overlap, "shared_fc2", rt))
        if etp > 1:  # routed: the dispatcher decides (flex sends to the etp ranks in its exchange)
            out += [Comm("moe_etp_allgather", "all_gather", "etp", sent * etp * d_el, 1, 1, routing=rt),
                    Comm("moe_etp_reducescatter", "reduce_scatter", "etp", sent * etp * ACT_BYTES, 1, 1, routing=rt)]
    return tuple(out)


def layer_comms(lo: LayerLayout, layout: RankLayout) -> tuple[Comm, ...]:
    """The collectives of one layer on a rank: the model's own, then those the split implies."""
    tp, sp = layout.tp, layout.sp
    out = [Comm(name, "all_to_all", "cp", nbytes) for name, nbytes in lo.cp_all_to_all] if layout.cp > 1 else []
    out += lo.model_comms
    if lo.moe is not None:
        out += moe_comms(lo.moe, tp, layout.ep, layout.moe.etp)
    if tp > 1 and lo.vocab == "embedding":
        # under sp the reduce-scatter's backward is an all-gather of the output gradient; the
        # all-reduce's backward is the identity
        out.append(Comm("embedding_ar", "reduce_scatter" if sp else "all_reduce", "tp", lo.tp_bytes, 1, 1 if sp else 0))
    if tp > 1 and lo.vocab == "head":
        out += [Comm("head_allgather", "all_gather", "tp", lo.tp_bytes, 1, 1) if sp
                else Comm("head_grad_allreduce", "all_reduce", "tp", lo.tp_bytes, 0, 1),
                Comm("loss_allreduce", "all_reduce", "tp", lo.loss_bytes, 1, 0)]
    if tp > 1 and lo.tp_region:
        out += tp_pair_comms(lo.tp_pairs, lo.tp_bytes, sp)
    if layout.cp > 1 and lo.cp is not None:
        out += cp_attention_comms(lo.cp, layout.cp, layout.cp_ring)
    for prefix, part in lo.parts:
        out += [replace(c, name=prefix + c.name) for c in layer_comms(part, layout)]
    return tuple(out)


# ---- shard --------------------------------------------------------------------------------------

def shard(graph: Graph, plan: ParallelPlan | RankLayout) -> Graph:
    """The graph of one rank of `plan`'s layout (tp, cp, ep, etp, sp and the MoE settings): each
    layer's shape on the rank and the collectives the split implies. `graph` is unsharded."""
    layout = plan if isinstance(plan, RankLayout) else RankLayout.of(plan)
    for name, v in (("tp", layout.tp), ("cp", layout.cp), ("ep", layout.ep), ("etp", layout.moe.etp)):
        if v < 1:
            raise LayoutError(f"{name} {v} must be a positive integer")
    if any(graph.degrees.get(k, 1) != 1 for k in ("tp", "cp", "ep", "etp")) or graph.degrees.get("sp", 0):
        raise LayoutError(f"graph {graph.model_id} is already sharded ({graph.degrees}); shard the unsharded graph")
    axes = RankAxes(layout)
    layers: list[Layer] = []
    for layer in graph.layers:
        lo = layer.layout
        if lo is not None and lo.shape is not None:
            rank = lo.shape(axes)
            assert rank.layout is not None
            layers.append(replace(rank, comms=layer_comms(rank.layout, layout)))
        else:
            layers.append(_shard_imported(graph.model_id, layer, layout))
    if layout.tp > 1 and not any(layer.layout is not None and layer.layout.tp_region and layer.layout.tp_pairs
                                 for layer in layers):
        raise LayoutError(f"tp {layout.tp}: {graph.model_id} has no tensor-parallel pair (a column-parallel Linear whose "
                          "output, through element-wise ops, feeds a row-parallel Linear), so tensor parallelism "
                          "would only replicate it; use tp 1")
    return replace(graph, layers=tuple(layers), degrees=layout.degrees)


def _shard_imported(model_id: str, layer: Layer, layout: RankLayout) -> Layer:
    """A layer without a shape function (an imported graph): tp splits its recognised pairs."""
    if layout.cp > 1 or layout.ep > 1 or layout.moe.etp > 1:
        raise LayoutError(f"{model_id}: an imported graph can be split by tp (its recognised Linear pairs), dp and pp; "
                          f"not by cp / ep / etp (got cp {layout.cp}, ep {layout.ep}, etp {layout.moe.etp})")
    tp, lo = layout.tp, layer.layout
    if tp == 1 or lo is None or not lo.op_shares:
        return layer
    ops = tuple(_split_op(model_id, layer.name, op, share, tp, layout.sp) for op, share in zip(layer.ops, lo.op_shares, strict=True))
    params = layer.params - sum((op.weight_params - sh.whole_params) * (1 - 1 / tp)
                                for op, sh in zip(layer.ops, lo.op_shares, strict=True) if sh.split)
    reduce: dict[float, int] = {}  # all-reduced bytes -> pairs (one per run of a row-parallel GEMM)
    for op, sh in zip(layer.ops, lo.op_shares, strict=True):
        if sh.split == "row":
            reduce[sh.reduce_bytes] = reduce.get(sh.reduce_bytes, 0) + op.repeat
    comms = list(layer.comms)
    for act, pairs in reduce.items():
        comms += tp_pair_comms(pairs, act, layout.sp)
    rank_layout = replace(lo, tp_region=True, tp_pairs=sum(reduce.values()),
                          tp_bytes=max(reduce, default=0.0))
    return replace(layer, ops=ops, comms=tuple(comms), params=params, layout=rank_layout)


def _split_op(model_id: str, layer: str, op: Op, share: OpShare, tp: int, sp: bool) -> Op:
    """One op of an imported layer on a tp rank (see OpShare); under sp the ops outside the pairs
    (norms, residual adds) run on 1/tp of the tokens, as Megatron-LM's sequence parallelism."""
    if not share.split:
        if sp and op.kind in ("norm", "elementwise"):
            return replace(op, flop=op.flop / tp, bytes=op.bytes / tp, saved_bytes=op.saved_bytes / tp)
        return op
    dim = {"column": op.n, "row": op.k, "heads": op.heads, "inner": tp}[share.split]
    if dim % tp:
        what = {"column": "output features (N)", "row": "input features (K)", "heads": "heads", "inner": ""}[share.split]
        raise LayoutError(f"tp {tp} does not divide the {dim} {what} of {layer}.{op.name} in {model_id} "
                          f"({share.split}-parallel)")
    whole_saved = op.saved_bytes if share.split == "row" else 0.0
    kw: dict[str, object] = dict(
        flop=op.flop / tp, model_flop=op.model_flop / tp if op.model_flop >= 0 else op.model_flop,
        bytes=share.whole_bytes + (op.bytes - share.whole_bytes) / tp,
        weight_params=share.whole_params + (op.weight_params - share.whole_params) / tp,
        saved_bytes=whole_saved + (op.saved_bytes - whole_saved) / tp, split=share.split)
    if op.out_bytes >= 0 and share.split in ("column", "heads"):
        kw["out_bytes"] = op.out_bytes / tp
    if share.split == "column":
        kw["n"] = op.n // tp
    elif share.split == "row":
        kw["k"] = op.k // tp
    elif share.split == "heads":
        kw["heads"] = op.heads // tp
    elif op.kind == "bmm" and op.batch % tp == 0:
        kw["batch"] = op.batch // tp  # unfused attention's per-head matmuls
    return replace(op, **kw)  # type: ignore[arg-type]


@lru_cache(maxsize=256)
def unsharded_graph(spec: ModelSpec, micro_batch: int, seq_len: int, precision: str, attention_impl: str) -> Graph:
    return build_graph(spec, micro_batch, seq_len, precision, attention_impl)


def sharded_graph(spec: ModelSpec, micro_batch: int = 1, seq_len: int | None = None, tp: int = 1, cp: int = 1,
                  ep: int = 1, sp: bool = False, precision: str = "bf16", attention_impl: str = "flash",
                  moe: MoEOptions | None = None, cp_ring: CpRing = "p2p") -> Graph:
    """The builder's graph of `spec` on one rank of (tp, cp, ep, sp, moe.etp, cp_ring)."""
    g = unsharded_graph(spec, micro_batch, seq_len or spec.seq_len, precision, attention_impl)
    return shard(g, RankLayout(tp, cp, ep, sp, moe or MoEOptions(), cp_ring))


__all__ = ["CP_DKV_ROTATE", "CP_KV_ALLGATHER", "DKV_BYTES", "RankAxes", "RankLayout", "cp_attention_comms", "layer_comms",
           "moe_comms", "moe_options", "shard", "sharded_graph", "tp_pair_comms", "unsharded_graph"]
