"""The graph of ops a workload expands into, one micro-batch on one model-parallel shard.

A `Graph` is a sequence of `Layer`s, each repeated `count` times; a `Layer` holds the forward
`Op`s of one instance and the collectives they need. The backward pass and the optimizer step
are implied by each op's fields (weight gradients exist where `weight_params > 0`).

Conventions (per op instance, summed over `batch` and `repeat`):
  flop        floating-point operations the kernels execute in the forward pass
  model_flop  the same under the standard model-FLOPs convention (causal attention counted in
              full, as Megatron-LM Eq. 3 and the MosaicML tables do) -> MFU
  bytes       bytes read + written by the forward kernels (HBM traffic)
  saved_bytes activation bytes kept for the backward pass when nothing is recomputed
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

OpKind = Literal["gemm", "bmm", "attention", "ssd", "recurrence", "elementwise", "norm", "embedding", "loss"]
CommKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
CommGroup = Literal["tp", "cp", "ep", "etp", "dp", "pp"]


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
    """One micro-batch of `micro_batch` sequences on one shard (tp, cp, ep) of the model."""

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
