"""The graph of ops a workload expands into, one micro-batch, whole (as the builder and the torch
import emit it) or on one model-parallel rank (as `perfmodel.parallel.shard.shard` lays it out).

A `Graph` is a sequence of `Layer`s, each repeated `count` times; a `Layer` holds the forward
`Op`s of one instance and the collectives they need. The backward pass and the optimizer step
are implied by each op's fields (weight gradients exist where `weight_params > 0`).

What sharding needs travels with the graph: each op says which of its dimensions tensor
parallelism splits (`Op.split`: column-parallel GEMMs split N, row-parallel GEMMs split K,
attention splits heads), and each layer a `LayerLayout`: its shapes on a rank as a function of
the sizes that rank holds (`Axes`, decided by parallel/shard.py), and the facts the collectives
of a split follow from (tensor-parallel column->row pairs, vocab-parallel embedding and output
layer, the keys and values context parallelism exchanges or the all-to-alls it needs, what the MoE
dispatch moves).

Conventions (per op instance, summed over `batch` and `repeat`):
  flop        floating-point operations the kernels execute in the forward pass
  model_flop  the same under the standard model-FLOPs convention (causal attention counted in
              full, as Megatron-LM Eq. 3 and the MosaicML tables do) -> MFU
  bytes       bytes read + written by the forward kernels (HBM traffic)
  saved_bytes activation bytes kept for the backward pass when nothing is recomputed
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, get_args

if TYPE_CHECKING:
    from perfmodel.workload.moe import MoEOptions

OpKind = Literal["gemm", "bmm", "attention", "ssd", "recurrence", "elementwise", "norm", "embedding", "loss"]
CommKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
CommGroup = Literal["tp", "cp", "ep", "etp", "dp", "pp"]
# which dimension tensor parallelism splits: a column-parallel GEMM its N (outputs), a row-parallel
# GEMM its K (inputs, the partial sums then reduced), attention its heads; "" = not split
# attention kernels: FlashAttention-2 (`flash`: flash-attn 2.x, torch SDPA's flash backend; on a
# generation with no FA2 measurement its newest), a named later generation (`flash3`: flash-attn 3,
# Hopper; `flash4`: flash-attn 4, Blackwell; as Hugging Face's attn_implementation
# flash_attention_3 / _4 runs it: only where the chip's generation measured that kernel),
# cuDNN's fused attention (`fused`: what Transformer
# Engine runs on Hopper and later, llm.c and XLA: cuDNN's measured rate where the generation has
# one, else the newest FlashAttention generation measured on the chip, FA4 on Blackwell, FA2 on
# Ampere), a FlashAttention-1-era fused kernel (`flash1`: flash-attn 1.x or the 2022-23 Triton
# kernel), or unfused baddbmm + softmax + bmm (`unfused`); hardware/attention.AttentionCurve.kernel_points
# picks the fused kernels' measured rates
# bytes per activation element between ops: bf16 / fp16 (fp8 GEMMs cast at their inputs and keep
# bf16 activations between ops); every workload module and the pipeline's stage boundaries read it
ACT_BYTES = 2
AttentionImpl = Literal["flash", "flash3", "flash4", "fused", "flash1", "unfused"]
ATTENTION_IMPLS: tuple[str, ...] = get_args(AttentionImpl)
TpSplit = Literal["", "column", "row", "heads", "inner"]  # inner: element-wise between a column and its row
# how a context-parallel attention layer gets the other ranks' keys and values (parallel/shard.py
# cp_attention_comms, engines/torch_ring.py): `p2p` passes K/V chunks of the kv heads rank to rank,
# each hidden behind the attention on the previous chunk (Transformer Engine's
# AttnFuncWithCPAndKVP2P under Megatron-Core); `allgather` is PyTorch's experimental
# context_parallel with its default all-gather rotation; `allgather-repeat-kv` the same when the
# model repeats K/V to the query heads before the attention call (torchtitan's Llama until Jan 2026)
CpRing = Literal["p2p", "allgather", "allgather-repeat-kv"]
CP_RINGS: tuple[str, ...] = get_args(CpRing)
# how the norms, gated activations and RoPE run: as the fused kernels the graph builders cost, or as
# the eager ATen chains of a model written in PyTorch ops (compute/eager.py)
ElementwiseImpl = Literal["fused", "eager"]
ELEMENTWISE_IMPLS: tuple[str, ...] = get_args(ElementwiseImpl)
# how the softmax cross-entropy over the vocabulary runs (engines/costs.cross_entropy_op): `unfused`
# fp32 softmax, loss and gradient kernels; `fused` Transformer Engine's two-pass kernels (Megatron-Core
# cross_entropy_loss_fusion); `classifier` llm.c's fused classifier, one kernel that writes the
# logits' bf16 gradient over the logits in the forward
CrossEntropyImpl = Literal["unfused", "fused", "classifier"]
CROSS_ENTROPY_IMPLS: tuple[str, ...] = get_args(CrossEntropyImpl)
# how an MoE layer's expert GEMMs are issued: one grouped kernel for the local experts, or one GEMM
# per local expert from the host (Transformer Engine's GroupedLinear, engines/costs.EXPERT_GEMM_HOST_S)
ExpertGemm = Literal["grouped", "per-expert"]
EXPERT_GEMMS: tuple[str, ...] = get_args(ExpertGemm)


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    kind: OpKind
    flop: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    repeat: int = 1
    model_flop: float = -1.0
    precision: str = "bf16"
    weight_params: float = 0.0
    saved_bytes: float = 0.0
    kernels: int = 1
    bwd_kernels: int = 1
    bwd_flop_factor: float = 2.0
    bwd_bytes_factor: float = 2.0
    attn_core: bool = False  # recomputed by selective recompute
    attention_kernel: str = "flash"  # fused attention: flash, flash3, flash4, fused or flash1 (see AttentionImpl)
    causal: bool = False
    heads: int = 0
    head_dim: int = 0
    seq_q: int = 0
    seq_kv: int = 0
    grouped: bool = False  # one grouped GEMM over `batch` experts (MoE), costed per expert shape
    # the backward as two phases: input (data) gradients and weight gradients. -1 = derived:
    # a GEMM with weights spends as many FLOPs on its weight-gradient GEMM as on its forward
    # (1 of bwd_flop_factor 2) in one kernel per forward kernel; other ops have no separate phase
    wgrad_flop_factor: float = -1.0
    wgrad_kernels: int = -1
    split: TpSplit = ""  # what tensor parallelism splits (see TpSplit)
    # the GEMM's input is a norm's output (Megatron-Core's TELayerNormColumnParallelLinear: QKV and
    # the dense FC1), so a stack that fuses the norm into the linear quantizes it in the norm kernel
    norm_input: bool = False
    # the output widths (N on this rank), in call order, of the separate matmuls a stack that keeps
    # the projections as separate Linear modules runs for this one GEMM: torchtitan's Llama wq, wk,
    # wv for the fused QKV GEMM and w1, w3 for the gated FC1 (torchtitan @ 6b03ffa3
    # models/llama/model.py:189, :253); () = one matmul. Per-op checkpointing counts matmuls by it
    mm_parts: tuple[int, ...] = ()
    # bytes of the forward's output tensors; -1 = derived (a GEMM's m·n·batch·repeat at 2 B, else
    # unknown). A fused attention kernel's are its output and its fp32 log-sum-exp
    out_bytes: float = -1.0
    # bytes of a SwiGLU's bf16 input among saved_bytes: what Megatron-Core keeps in fp8 under
    # activation_func_fp8_input_store (ParallelPlan.act_fp8_input_store, memory.op_saved_bytes)
    act_input_bytes: float = 0.0

    @property
    def wgrad_factor(self) -> float:
        """Weight-gradient FLOPs as a multiple of the forward's (part of bwd_flop_factor)."""
        if self.wgrad_flop_factor >= 0:
            return self.wgrad_flop_factor
        return 1.0 if self.kind == "gemm" and self.has_weight_grad else 0.0

    @property
    def dgrad_factor(self) -> float:
        return self.bwd_flop_factor - self.wgrad_factor

    @property
    def wgrad_kernel_count(self) -> int:
        if self.wgrad_kernels >= 0:
            return self.wgrad_kernels
        return self.kernels if self.kind == "gemm" and self.has_weight_grad else 0

    @property
    def mflop(self) -> float:
        return self.flop if self.model_flop < 0 else self.model_flop

    @property
    def has_weight_grad(self) -> bool:
        return self.weight_params > 0


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective inside a layer's forward pass (the backward mirrors it, see `bwd`)."""

    name: str
    kind: CommKind
    group: CommGroup
    bytes: float  # per rank: the size of the full result buffer (nccl-tests 'size')
    fwd: int = 1  # occurrences in the forward pass
    bwd: int = 1  # occurrences in the backward pass
    overlappable: bool = False  # can hide behind independent compute (CP ring, EP pipelining)
    hide_behind: str = ""  # overlappable: the ops (name prefix) it hides behind; "" = the attention core
    # MoE dispatch / combine: (top_k, routed experts, router groups, groups a token may use).
    # `bytes` is then the buffer with one row per routed copy; the plan's dispatcher decides what
    # travels (comm/collectives.ep_exchange_time_s)
    routing: tuple[int, int, int, int] | None = None


class Axes(Protocol):
    """The sizes of a layer's split dimensions that one rank holds. `UNSHARDED` holds all of them;
    parallel/shard.py's `RankAxes` decides them for a layout (the divisibility rules and the
    errors that name them live there). `UNSHARDED` is in builder.py."""

    tp: int
    cp: int
    ep: int
    sp: bool
    moe: MoEOptions  # the expert layout (etp) and MoE run settings

    def tokens(self, b: int, s: int) -> int:
        """Tokens of b sequences of length s this rank's attention group holds (b·s/cp)."""
        ...

    def norm_tokens(self, tokens: int) -> int:
        """Of those, the ones whose norms and dropout this rank computes (1/tp more under sp)."""
        ...

    def query_len(self, s: int) -> int:
        """Queries per sequence on this rank (s/cp)."""
        ...

    def heads(self, heads: int, kv_heads: int, owner: str) -> tuple[int, int]:
        """(query heads, key/value heads) on this rank; kv heads replicate when tp exceeds them."""
        ...

    def columns(self, width: int, owner: str, what: str) -> int:
        """Columns of a column-parallel weight of `width` outputs on this rank."""
        ...

    def vocab_columns(self, vocab: int) -> int:
        """Vocabulary rows of the vocab-parallel output layer on this rank (the last one padded)."""
        ...

    def hidden_columns(self, hidden: int) -> int:
        """Outputs of a column-parallel [2h, h] projection (replicated when tp does not divide h)."""
        ...

    def ssm_heads(self, heads: int, groups: int, owner: str) -> tuple[int, int, int, int]:
        """Mamba-2 (heads, groups) on this tp rank and (heads, groups) of its scan after the cp all-to-all."""
        ...



@dataclass(frozen=True)
class CpExchange:
    """The keys and values an attention layer needs from other context-parallel ranks."""

    ring_bytes: float  # K and V of the whole sequence, per rank's kv heads (all-gathered in a ring)
    halo_bytes: float  # K and V of the `keys` tokens before a rank's chunk (a sliding window's reach)
    seq_len: int
    keys: int  # keys one query sees
    local: bool  # sliding-window / chunked attention
    chunked: bool  # chunked attention: chunks aligned to the cp split need nothing
    # the attention call's shapes on the rank, which PyTorch's context-parallel ring moves and merges
    # (engines/torch_ring.py): sequences, query and kv heads after tp, key and value head dims
    micro_batch: int = 1
    q_heads: int = 1
    kv_heads: int = 1
    qk_head_dim: int = 0
    v_head_dim: int = 0


@dataclass(frozen=True)
class MoEExchange:
    """What an MoE block's token dispatch and combine move on one rank (workload/moe.py)."""

    experts: int  # E: the router's per-expert counts and load-balancing statistics
    sent_elems: float  # elements the busiest expert-parallel rank sends (imbalance x top-k copies x hidden)
    dispatch_bytes_per_elem: float  # forward dispatch: bf16, or fp8 plus its scales
    overlap: bool  # dispatch and combine hide behind the shared experts' FC1 / FC2
    routing: tuple[int, int, int, int] | None = None  # Comm.routing of the dispatch / combine / etp collectives


@dataclass(frozen=True)
class OpShare:
    """What tensor parallelism leaves whole of one op of an imported layer (the rest is split tp
    ways): a column-parallel GEMM reads its whole input, a row-parallel GEMM writes its whole
    output and keeps its bias whole; the op's saved output follows its split."""

    split: TpSplit = ""
    whole_bytes: float = 0.0
    whole_params: float = 0.0
    reduce_bytes: float = 0.0  # a row-parallel GEMM: the output its pair all-reduces


@dataclass(frozen=True)
class LayerLayout:
    """What `shard` needs to lay a layer out on a rank (see the module docstring)."""

    shape: Callable[[Axes], Layer] | None = None  # the layer on a rank; None: shard the ops by `Op.split`
    tp_region: bool = False  # a tensor-parallel region: its pairs' collectives exist whenever tp > 1
    tp_pairs: int = 0  # column-parallel -> row-parallel pairs: each reduces `tp_bytes` (forward and backward)
    tp_bytes: float = 0.0  # the activation a pair reduces (per rank's shape); embedding and head: their [T, h]
    vocab: Literal["", "embedding", "head"] = ""  # vocab-parallel embedding / output layer and loss
    loss_bytes: float = 0.0  # head: the fp32 row max, target logit and sum of exps all-reduced over tp
    cp: CpExchange | None = None
    cp_all_to_all: tuple[tuple[str, float], ...] = ()  # (name, bytes) a cp split re-shards by (Mamba-2: sequence <-> heads)
    model_comms: tuple[Comm, ...] = ()  # collectives a layer's own module still builds (DeepSeek-V4's CSA indexer)
    moe: MoEExchange | None = None  # an MoE FFN: its dispatch / combine, laid out over ep and etp by shard()
    parts: tuple[tuple[str, LayerLayout], ...] = ()  # sub-blocks (multi-token prediction), their comms prefixed
    op_shares: tuple[OpShare, ...] = ()  # imported layers: per op, what tp splits (recognised column -> row pairs)


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str
    count: int
    ops: tuple[Op, ...]
    comms: tuple[Comm, ...] = ()
    params: float = 0.0  # parameters of one instance held by this rank (after tp / ep sharding)
    params_full: float = 0.0  # parameters of one instance, unsharded
    expert_params: float = 0.0  # the part of `params` that is expert weights (sharded by ep)
    input_bytes: float = 0.0  # the layer input kept under full recompute
    recomputable: bool = True
    active_params_full: float | None = None  # MoE: unsharded parameters one token uses; None = params_full
    layout: LayerLayout | None = field(default=None, compare=False, repr=False)  # how to shard it (see LayerLayout)

    @property
    def fwd_flop(self) -> float:
        return sum(o.flop for o in self.ops)

    @property
    def fwd_model_flop(self) -> float:
        return sum(o.mflop for o in self.ops)

    @property
    def saved_bytes(self) -> float:
        return sum(o.saved_bytes for o in self.ops)

    @property
    def attn_core_saved_bytes(self) -> float:
        return sum(o.saved_bytes for o in self.ops if o.attn_core)


@dataclass(frozen=True)
class Graph:
    """One micro-batch of `micro_batch` sequences, whole or on one shard (`degrees`: tp, cp, ep, etp, sp)."""

    model_id: str
    layers: tuple[Layer, ...]
    micro_batch: int
    seq_len: int
    tokens: int  # tokens of one micro-batch (all cp ranks together)
    degrees: dict[str, int] = field(default_factory=dict)

    @property
    def body(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if layer.kind in ("transformer", "moe", "mamba", "block"))

    def total_params_full(self) -> float:
        return sum(layer.params_full * layer.count for layer in self.layers)

    def active_params_full(self) -> float:
        """Unsharded parameters a token passes through (MoE: top_k routed + shared experts)."""
        return sum((layer.params_full if layer.active_params_full is None else layer.active_params_full) * layer.count
                   for layer in self.layers)

    def fwd_flop(self) -> float:
        return sum(layer.fwd_flop * layer.count for layer in self.layers)

    def fwd_model_flop(self) -> float:
        return sum(layer.fwd_model_flop * layer.count for layer in self.layers)

    def train_flop(self) -> float:
        """Forward plus backward FLOPs executed for one micro-batch on this shard (no recompute)."""
        total = 0.0
        for layer in self.layers:
            for o in layer.ops:
                total += layer.count * o.flop * (1.0 + o.bwd_flop_factor)
        return total

    def train_model_flop(self) -> float:
        """Model FLOPs of forward plus backward: 3x the forward model FLOPs (backward = 2x)."""
        return 3.0 * self.fwd_model_flop()
