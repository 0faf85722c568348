"""Record one forward pass of a `torch.nn.Module` on the meta device as aten-op records.

Two interposers see the pass (workload/torch_import.py turns the records into a `Graph`):

  TorchFunctionMode (FusedCalls)    catches fused calls the meta device would otherwise decompose
                                    (`F.scaled_dot_product_attention` -> one `attention` record,
                                    `F.rms_norm` -> one norm)
  TorchDispatchMode (AtenRecorder)  sees every aten op with its tensor shapes and classifies it: gemm /
                                    bmm (FLOP = 2·m·n·k·batch; convolution as an implicit GEMM), norm,
                                    elementwise (bytes from shapes), embedding, loss, or an unsupported
                                    op kept as elementwise and counted
Each record also carries the activation tensors it reads and writes, which the tensor-parallel
pairing (workload/tp_pairs.py) follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perfmodel.errors import PerfmodelError

__all__ = ["TRACE_DTYPE", "AtenRecord", "AtenRecorder", "FusedCalls", "TorchImportError", "TraceState",
           "UnsupportedOpWarning", "nbytes_of", "tensors_of"]

class TorchImportError(PerfmodelError, ValueError):
    """A module, factory or example input that cannot be traced on the meta device."""


class UnsupportedOpWarning(UserWarning):
    """Ops perfmodel has no cost model for; they are kept as memory-bound element-wise ops."""


# --------------------------------------------------------------------------------------------
# aten op tables (names without the overload, as in `func.overloadpacket.__name__`)
_GEMM = {"mm", "addmm", "bmm", "baddbmm", "mv", "addmv", "dot", "convolution", "_convolution"}
_NORM = {"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
         "_native_batch_norm_legit_no_training", "_fused_rms_norm", "rms_norm"}
_LOSS = {"nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
         "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
_EMBEDDING = {"embedding", "_embedding_bag", "embedding_bag"}
_SOFTMAX = {"_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax"}
# data movement and tensor creation: memory traffic only, known to perfmodel
_MOVE = {"cat", "stack", "clone", "copy_", "_to_copy", "copy", "index", "index_select", "gather", "scatter",
         "scatter_add", "scatter_add_", "scatter_", "index_put", "index_put_", "index_add", "index_add_",
         "index_copy", "masked_fill", "masked_fill_", "masked_scatter", "where", "constant_pad_nd",
         "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d", "fill_", "fill",
         "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "scalar_tensor",
         "tril", "triu", "repeat", "roll", "flip", "native_dropout", "bernoulli_", "bernoulli", "rand",
         "rand_like", "randn", "randn_like", "cumsum", "cumprod", "repeat_interleave", "_unsafe_index",
         "new_zeros", "new_ones", "new_full", "new_empty", "linspace", "tril_indices", "triu_indices",
         "max_pool1d", "max_pool2d", "max_pool2d_with_indices", "avg_pool1d", "avg_pool2d",
         "adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "upsample_nearest2d",
         "_local_scalar_dense"}
# no kernel, no traffic: views, aliases and allocations
_FREE = {"detach", "alias", "lift_fresh", "lift_fresh_copy", "empty", "empty_like", "empty_strided",
         "_reshape_alias", "_unsafe_view", "view", "reshape", "t", "t_", "transpose", "transpose_", "permute", "expand",
         "squeeze", "unsqueeze", "slice", "select", "split", "split_with_sizes", "unsafe_split",
         "unsafe_split_with_sizes", "unbind", "chunk", "narrow", "as_strided", "diagonal", "unfold",
         "contiguous", "resize_", "set_", "sym_size", "sym_stride", "sym_numel", "is_same_size",
         "_has_compatible_shallow_copy_type", "result_type"}
# FLOP per output element of element-wise ops (the builder's conventions: activations 8, norms 5)
_FLOP_PER_EL = {"gelu": 8, "silu": 8, "mish": 8, "tanh": 4, "sigmoid": 4, "exp": 4, "erf": 4, "log": 4,
                "softplus": 4, "elu": 4, "rsqrt": 2, "sqrt": 2, "pow": 2, "sin": 4, "cos": 4}

TRACE_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16}


def _name(func: Any) -> str:
    return str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(getattr(func, "__name__", func))


def nbytes_of(t: torch.Tensor) -> float:
    """Bytes a kernel touches for `t`: its elements, capped by its storage (expanded views are small)."""
    n = t.numel() * t.element_size()
    try:
        return float(min(n, t.untyped_storage().nbytes()))
    except (RuntimeError, NotImplementedError):
        return float(n)


def tensors_of(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


# --------------------------------------------------------------------------------------------
@dataclass
class AtenRecord:
    """One recorded aten (or fused torch) op."""

    path: str
    aten: str
    kind: str
    flop: float
    bytes: float
    model_flop: float = -1.0
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    weight: str = ""  # name of the parameter operand, if any
    weight_params: float = 0.0
    saved_bytes: float = 0.0
    shapes: tuple[tuple[int, ...], ...] = ()
    out_ids: frozenset[int] = frozenset()  # valid while `TraceState.last_outs` holds the outputs
    causal: bool = False
    heads: int = 0
    head_dim: int = 0
    seq_q: int = 0
    seq_kv: int = 0
    unsupported: bool = False
    # dataflow for the tensor-parallel pairs (workload/tp_pairs.py): activation tensors in and out
    ins: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    act_in_bytes: float = 0.0  # a GEMM: its activation operand
    out_bytes: float = 0.0
    bias_bytes: float = 0.0
    bias_params: float = 0.0
    role: str = ""  # column / row / inner, set after the trace


@dataclass
class TraceState:
    """Everything the interposers share during one trace."""

    params: dict[int, tuple[str, int, bool]]  # id(meta tensor) -> (name, numel, requires_grad)
    stack: list[str] = field(default_factory=lambda: [""])
    records: list[AtenRecord] = field(default_factory=list)
    keep: list[torch.Tensor] = field(default_factory=list)  # keeps ids of marked tensors stable
    saved_seen: set[int] = field(default_factory=set)
    pending_saved: float = 0.0
    suppress: int = 0
    input_bytes: dict[str, float] = field(default_factory=dict)
    last_outs: list[torch.Tensor] = field(default_factory=list)  # keeps the last op's output ids unique
    alias: dict[int, int] = field(default_factory=dict)  # id of a view -> id of the tensor it views
    current: dict[int, int] = field(default_factory=dict)  # id of a tensor -> its dataflow node id (in-place ops renew it)
    next_node: int = -1

    def node_id(self, t: torch.Tensor) -> int:
        r = self.alias.get(id(t), id(t))
        return self.current.get(r, r)

    def view_of(self, outs: list[torch.Tensor], src: torch.Tensor) -> None:
        for o in outs:
            if o is not src:
                self.alias[id(o)] = self.alias.get(id(src), id(src))
                self.keep.append(o)

    def param_of(self, t: torch.Tensor) -> tuple[str, int, bool] | None:
        p = self.params.get(id(t))
        if p is None and t._base is not None:
            p = self.params.get(id(t._base))
        return p

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        """saved_tensors_hooks pack: count each saved activation once, on the op that made it."""
        if self.suppress or self.param_of(t) is not None:
            return t
        base = t._base if t._base is not None else t
        if id(base) in self.saved_seen:
            return t
        self.saved_seen.add(id(base))
        self.keep.append(base)
        nb = nbytes_of(base)
        if self.records and id(t) in self.records[-1].out_ids:
            self.records[-1].saved_bytes += nb
        else:  # an input saved before its op runs: goes to the next op recorded
            self.pending_saved += nb
        return t

    def add(self, rec: AtenRecord, outs: list[torch.Tensor], ins: list[torch.Tensor] | None = None) -> None:
        rec.saved_bytes += self.pending_saved
        rec.out_ids = frozenset(id(o) for o in outs)
        rec.ins = tuple(self.node_id(t) for t in ins or () if self.param_of(t) is None)
        fresh = []
        for o in outs:  # every output a new dataflow node, in-place results included
            r = self.alias.get(id(o), id(o))
            self.current[r] = self.next_node
            fresh.append(self.next_node)
            self.next_node -= 1
            self.keep.append(o)
        rec.outs = tuple(fresh)
        self.pending_saved = 0.0
        self.last_outs = outs
        self.records.append(rec)


class AtenRecorder(TorchDispatchMode):
    def __init__(self, st: TraceState):
        super().__init__()
        self.st = st

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        st = self.st
        name = _name(func)
        ins = tensors_of((args, kwargs))
        outs = tensors_of(out)
        if name in _FREE or getattr(func, "is_view", False):
            # a view of a parameter is still that parameter (W.t() feeding addmm)
            src = st.param_of(ins[0]) if ins else None
            if src is not None:
                for o in outs:
                    st.params[id(o)] = src
                    st.keep.append(o)
            elif ins and not name.startswith("empty"):
                st.view_of(outs, ins[0])
            return out
        if st.suppress:
            return out
        rec = _classify(st, func, name, args, kwargs, ins, outs)
        rec.path = st.stack[-1]
        st.add(rec, outs, ins)
        return out


class FusedCalls(TorchFunctionMode):
    """Records fused functions as one op each and hides their meta-device decomposition."""

    def __init__(self, st: TraceState):
        super().__init__()
        self.st = st

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            rec = _attention(args, kwargs)
        elif func in (F.rms_norm, torch.rms_norm):
            x = args[0]
            w = args[2] if len(args) > 2 else kwargs.get("weight")
            p = self.st.param_of(w) if isinstance(w, torch.Tensor) else None
            rec = AtenRecord("", "rms_norm", "norm", flop=5.0 * x.numel(), bytes=2 * nbytes_of(x),
                       weight=p[0] if p else "", weight_params=float(p[1]) if p else 0.0,
                       saved_bytes=nbytes_of(x), shapes=(tuple(x.shape),))
        else:
            return func(*args, **kwargs)
        self.st.suppress += 1
        try:
            out = func(*args, **kwargs)  # its decomposition is neither recorded nor saved
        finally:
            self.st.suppress -= 1
        rec.path = self.st.stack[-1]
        self.st.add(rec, tensors_of(out), tensors_of((args, kwargs)))
        return out


def _attention(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AtenRecord:
    """F.scaled_dot_product_attention(q [..., H, Sq, D], k [..., Hkv, Skv, D], v [..., Hkv, Skv, Dv]).

    FLOP (QK^T and PV) = 2·B·H·Sq·Skv·(D + Dv), as FlopCounterMode counts; a causal kernel executes
    half. Saved for backward (FlashAttention): Q, K, V, O and the fp32 log-sum-exp per row."""
    q, k, v = args[:3]
    causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
    *lead, H, Sq, D = q.shape
    Hkv, Skv, Dv = k.shape[-3], k.shape[-2], v.shape[-1]
    B = math.prod(lead)
    full = 2.0 * B * H * Sq * Skv * (D + Dv)
    el = q.element_size()
    io = B * (H * Sq * (D + Dv) + Hkv * Skv * (D + Dv)) * el
    saved = B * H * Sq * (2 * D + 2 * Dv) * el + B * H * Sq * 4
    return AtenRecord("", "scaled_dot_product_attention", "attention", flop=full / 2 if causal else full, bytes=float(io),
                model_flop=full, saved_bytes=float(saved), shapes=(tuple(q.shape), tuple(k.shape), tuple(v.shape)),
                causal=causal, heads=H, head_dim=D, seq_q=Sq, seq_kv=Skv)


def _classify(st: TraceState, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
              ins: list[torch.Tensor], outs: list[torch.Tensor]) -> AtenRecord:
    shapes = tuple(tuple(t.shape) for t in ins)
    io = sum(nbytes_of(t) for t in ins) + sum(nbytes_of(t) for t in outs)
    out_el = float(sum(t.numel() for t in outs))
    if name in _GEMM:
        return _gemm_rec(st, name, args, ins, outs, shapes, io)
    if name in _EMBEDDING:
        w, idx = args[0], args[1]
        p = st.param_of(w)
        return AtenRecord("", name, "embedding", flop=0.0, bytes=nbytes_of(idx) + 2 * sum(nbytes_of(o) for o in outs),
                    weight=p[0] if p else "", weight_params=float(p[1]) if p and p[2] else 0.0, shapes=shapes)
    if name in _NORM:
        wp = [st.param_of(t) for t in ins[1:]]
        params = float(sum(p[1] for p in wp if p and p[2]))
        return AtenRecord("", name, "norm", flop=5.0 * ins[0].numel(), bytes=2.0 * nbytes_of(ins[0]) + sum(nbytes_of(t) for t in ins[1:]),
                    weight=",".join(p[0] for p in wp if p), weight_params=params, shapes=shapes)
    if name.startswith("nll_loss"):
        # a gather of one log-probability per target, not a pass over the whole [T, V] input
        x, target = args[0], args[1]
        return AtenRecord("", name, "loss", flop=2.0 * target.numel(), shapes=shapes,
                    bytes=nbytes_of(target) + target.numel() * x.element_size() + sum(nbytes_of(o) for o in outs))
    if name in _LOSS:
        return AtenRecord("", name, "loss", flop=5.0 * (ins[0].numel() if ins else 0), bytes=io, shapes=shapes)
    if name in _SOFTMAX:
        return AtenRecord("", name, "elementwise", flop=5.0 * out_el, bytes=io, shapes=shapes)
    tags = getattr(func, "tags", ())
    if torch.Tag.pointwise in tags:
        return AtenRecord("", name, "elementwise", flop=_FLOP_PER_EL.get(name.rstrip("_"), 1) * out_el, bytes=io, shapes=shapes)
    if torch.Tag.reduction in tags or name in _MOVE:
        flop = float(sum(t.numel() for t in ins[:1])) if torch.Tag.reduction in tags else 0.0
        return AtenRecord("", name, "elementwise", flop=flop, bytes=io, shapes=shapes)
    return AtenRecord("", name, "elementwise", flop=0.0, bytes=io, shapes=shapes, unsupported=True)


def _gemm_rec(st: TraceState, name: str, args: tuple[Any, ...], ins: list[torch.Tensor], outs: list[torch.Tensor],
              shapes: tuple[tuple[int, ...], ...], io: float) -> AtenRecord:
    batch = 1
    bias: torch.Tensor | None = None
    if name in ("convolution", "_convolution"):
        x, w = args[0], args[1]
        bias = args[2] if isinstance(args[2], torch.Tensor) else None
        transposed, groups = bool(args[6]), int(args[8])
        out = outs[0]
        spatial = x.shape[2:] if transposed else out.shape[2:]
        # FlopCounterMode's conv_flop_count: 2 · N · prod(spatial) · prod(w.shape)
        m = int(x.shape[0] * math.prod(spatial))
        kprod = math.prod(w.shape[2:])
        if transposed:  # w [C_in, C_out/g, k...]
            n, k = int(w.shape[1]), int(w.shape[0] // groups * kprod)
        else:  # w [C_out, C_in/g, k...]
            n, k = int(w.shape[0] // groups), int(w.shape[1] * kprod)
        batch = groups
        a, b = x, w
    else:
        if name in ("addmm", "baddbmm", "addmv"):
            bias, a, b = args[0], args[1], args[2]
        else:
            a, b = args[0], args[1]
        if name in ("bmm", "baddbmm"):
            batch, m, k, n = int(a.shape[0]), int(a.shape[1]), int(a.shape[2]), int(b.shape[2])
        elif name in ("mv", "addmv"):
            m, k, n = int(a.shape[0]), int(a.shape[1]), 1
        elif name == "dot":
            m, k, n = 1, int(a.shape[0]), 1
        else:
            m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
    pw = st.param_of(b) or st.param_of(a)
    pb = st.param_of(bias) if isinstance(bias, torch.Tensor) else None
    weight_params = 0.0
    if pw and pw[2]:
        weight_params += pw[1]
    bias_params = float(pb[1]) if pb and pb[2] else 0.0
    weight_params += bias_params
    act = a if st.param_of(a) is None else b
    return AtenRecord("", name, "gemm" if pw else "bmm", flop=2.0 * m * n * k * batch, bytes=io, m=m, n=n, k=k,
                batch=batch, weight=pw[0] if pw else "", weight_params=weight_params, shapes=shapes,
                act_in_bytes=nbytes_of(act), out_bytes=sum(nbytes_of(o) for o in outs),
                bias_bytes=nbytes_of(bias) if pb and bias is not None else 0.0, bias_params=bias_params)
