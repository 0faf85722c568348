"""Turn any `torch.nn.Module` into a perfmodel `Graph` by tracing one forward pass on the meta device.

No real memory is touched: parameters, buffers and inputs are replaced by meta tensors (shapes and
dtypes only), so a 70B-parameter module traces on a laptop. Two interposers see the forward pass
(workload/torch_trace.py records it; this module groups the records into layers and ops):

  TorchFunctionMode   catches fused calls the meta device would otherwise decompose
                      (`F.scaled_dot_product_attention` -> one `attention` op, `F.rms_norm` -> one norm)
  TorchDispatchMode   sees every aten op with its tensor shapes and maps it to an `Op`:
      mm / addmm / bmm / baddbmm / mv   -> gemm [m,k]x[k,n] (kind "gemm" when one operand is a
                                           parameter, else "bmm"); FLOP = 2·m·n·k·batch
      convolution                       -> implicit GEMM: m = N·prod(out spatial), n = C_out/groups,
                                           k = C_in/groups·prod(kernel), batch = groups
      native_layer_norm, group/batch/rms norm -> "norm" (5 FLOP per element)
      pointwise ops, reductions, softmax, copies, cat, index... -> "elementwise", bytes from shapes
      embedding                         -> "embedding" (reads the looked-up rows, not the table)
      nll_loss / mse_loss / ...         -> "loss"
      anything else                     -> "elementwise" with its bytes, named `unsupported.<op>`
                                           and listed in an `UnsupportedOpWarning`
Module hooks give each op its owning module; ops are grouped into `Layer`s by top-level submodule
(descending into `ModuleList` / `Sequential` / `ModuleDict`, so `blocks.3` is one layer) and
consecutive identical layers collapse into one `Layer` with `count`. Saved activations come from
`torch.autograd.graph.saved_tensors_hooks` (parameters excluded, shared storage counted once).

Tensor parallelism: the trace follows each activation tensor from the op that made it to the ops
that read it (views resolved to the tensor they view, in-place results as new tensors), and
workload/tp_pairs.py marks the column -> row Linear pairs in it (`Op.split`, and per layer what tp
leaves whole: `LayerLayout.op_shares`); parallel/shard.py splits them.

FLOP convention: `Op.model_flop` of gemm / bmm / attention ops equals what
`torch.utils.flop_counter.FlopCounterMode` counts on the same module (it counts causal attention in
full); `Op.flop` of a causal attention op is halved, what a FlashAttention kernel executes.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch import nn
from torch.utils._pytree import tree_map

from perfmodel.workload.graph import Graph, Layer, LayerLayout, Op, OpShare
from perfmodel.workload.torch_trace import (
    TRACE_DTYPE,
    AtenRecord,
    AtenRecorder,
    FusedCalls,
    TorchImportError,
    TraceState,
    UnsupportedOpWarning,
    nbytes_of,
    tensors_of,
)
from perfmodel.workload.tp_pairs import Node, tp_roles

__all__ = ["TorchImportError", "TraceResult", "UnsupportedOpWarning", "estimate_module_cli",
           "flop_counter_flop", "from_torch", "trace_module"]


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceResult:
    """A traced module: its graph, the ops perfmodel has no model for, and what the trace cost."""

    graph: Graph
    unsupported: dict[str, int]  # aten op -> occurrences, kept as memory-bound element-wise ops
    notes: tuple[str, ...]
    trace_time_s: float
    num_aten_ops: int


def _materialise(module_or_factory: nn.Module | Callable[[], nn.Module]) -> nn.Module:
    if isinstance(module_or_factory, nn.Module):
        return module_or_factory
    if not callable(module_or_factory):
        raise TorchImportError(f"expected an nn.Module or a factory returning one, got {type(module_or_factory).__name__}")
    with torch.device("meta"):
        built = module_or_factory()
    if not isinstance(built, nn.Module):
        raise TorchImportError(f"factory {module_or_factory!r} returned {type(built).__name__}, expected an nn.Module")
    return built


def _meta(t: Any, dtype: torch.dtype) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    dt = dtype if t.is_floating_point() else t.dtype
    return torch.empty(t.shape, dtype=dt, device="meta")


def _meta_state(module: nn.Module, dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], dict[int, tuple[str, int, bool]], dict[int, str]]:
    """Meta copies of parameters and buffers for `functional_call` (tied parameters stay one tensor).

    Returns (state by name, id(meta param) -> (name, numel, requires_grad), id(real param) -> name)."""
    state: dict[str, torch.Tensor] = {}
    by_id: dict[int, torch.Tensor] = {}
    params: dict[int, tuple[str, int, bool]] = {}
    first_name: dict[int, str] = {}
    for pname, p in module.named_parameters(remove_duplicate=False):
        if id(p) not in by_id:
            mt = torch.empty(p.shape, dtype=dtype if p.is_floating_point() else p.dtype, device="meta")
            mt.requires_grad_(p.requires_grad and mt.is_floating_point())
            by_id[id(p)] = mt
            first_name[id(p)] = pname
            params[id(mt)] = (pname, p.numel(), p.requires_grad)
        state[pname] = by_id[id(p)]
    for bname, b in module.named_buffers(remove_duplicate=False):
        state[bname] = _meta(b, dtype)
    return state, params, first_name


def _meta_inputs(example_inputs: Any, dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) on the meta device: a tensor, a tuple / list of inputs or a dict of keyword inputs."""
    conv = lambda t: _meta(t, dtype)  # noqa: E731
    if isinstance(example_inputs, dict):
        return (), tree_map(conv, example_inputs)
    seq = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    return tuple(tree_map(conv, seq)), {}


def _layer_key(root: nn.Module, path: str) -> tuple[str, bool]:
    """The layer a module path belongs to: its top-level child, descending through containers."""
    if not path:
        return "", False
    parts = path.split(".")
    mod, key, item = root, cast(list[str], []), False
    for part in parts:
        is_container = isinstance(mod, nn.ModuleList | nn.Sequential | nn.ModuleDict)
        if key and not is_container:
            break
        item = item or is_container
        key.append(part)
        mod = mod.get_submodule(part)
    return ".".join(key), item


def trace_module(module_or_factory: nn.Module | Callable[[], nn.Module], example_inputs: Any,
                 precision: str = "bf16", name: str | None = None, micro_batch: int | None = None,
                 seq_len: int | None = None, collapse_repeats: bool = True) -> TraceResult:
    """Trace one forward pass on the meta device and build the Graph (see the module docstring).

    `example_inputs`: a tensor, a tuple of positional inputs or a dict of keyword inputs (real or
    meta tensors; only shapes and dtypes are read). Floating inputs, parameters and buffers are
    traced in the activation dtype of `precision` (bf16 unless fp32/tf32/fp16). `micro_batch` and
    `seq_len` default to dims 0 and 1 of the first input (batch-first)."""
    t0 = time.perf_counter()
    module = _materialise(module_or_factory)
    dtype = TRACE_DTYPE.get(precision, torch.bfloat16)
    state, params, first_name = _meta_state(module, dtype)
    args, kwargs = _meta_inputs(example_inputs, dtype)
    st = TraceState(params)
    keys = {p: _layer_key(module, p) for p, _ in module.named_modules()}
    hooks = _install_hooks(module, st, keys)
    dispatch = AtenRecorder(st)

    try:
        with torch.autograd.graph.saved_tensors_hooks(st.pack, lambda t: t), dispatch, FusedCalls(st):
            torch.func.functional_call(module, state, args, kwargs, tie_weights=False, strict=False)
    except (RuntimeError, NotImplementedError, TypeError) as e:
        raise TorchImportError(
            f"tracing {type(module).__name__} on the meta device failed: {e}. Meta tensors carry no values, so "
            "data-dependent code (.item(), boolean masks, Python branches on tensor values) cannot be traced; "
            "pass inputs whose shapes are all the module needs, or move the data-dependent part out of forward") from e
    finally:
        for h in hooks:
            h.remove()
    if st.pending_saved and st.records:
        st.records[-1].saved_bytes += st.pending_saved
    first = tensors_of((args, kwargs))
    _mark_tp_pairs(st, frozenset(st.node_id(t) for t in first))
    shape = tuple(first[0].shape) if first else ()
    # [b, s] token ids or [b, s, features] series carry a sequence; [b, features] does not
    has_seq = bool(first) and len(shape) >= (3 if first[0].is_floating_point() else 2)
    b = micro_batch or (shape[0] if shape else 1)
    s = seq_len or (shape[1] if has_seq else 1)
    graph, notes = _build_graph(module, st, keys, name or type(module).__name__, b, s, precision, collapse_repeats, first_name)
    unsupported = dict(Counter(r.aten for r in st.records if r.unsupported))
    return TraceResult(graph, unsupported, tuple(notes), time.perf_counter() - t0, len(st.records))


def _is_linear(r: AtenRecord) -> bool:
    """A GEMM on one weight matrix as nn.Linear runs it (not a conv, a bmm or a recurrence's weights)."""
    last = r.weight.rsplit(".", 1)[-1]
    return (r.kind == "gemm" and r.aten in ("mm", "addmm") and r.batch == 1
            and not last.startswith(("weight_hh", "weight_ih")))


def _mark_tp_pairs(st: TraceState, inputs: frozenset[int]) -> None:
    """Each record's role in a tensor-parallel pair (workload/tp_pairs.py)."""
    nodes = [Node(r.kind, _is_linear(r), r.ins, r.outs, not r.unsupported) for r in st.records]
    for r, role in zip(st.records, tp_roles(nodes, inputs), strict=True):
        r.role = role


def _share(r: AtenRecord, n: int) -> OpShare:
    """What tp leaves whole of the merged op of `n` records like `r` (graph.OpShare)."""
    if r.role == "column":
        return OpShare("column", whole_bytes=n * r.act_in_bytes)
    if r.role == "row":
        return OpShare("row", whole_bytes=n * (r.out_bytes + r.bias_bytes), whole_params=r.bias_params,
                       reduce_bytes=r.out_bytes)
    if r.role == "inner":
        return OpShare("heads" if r.kind == "attention" else "inner")
    return OpShare()


def _install_hooks(module: nn.Module, st: TraceState, keys: dict[str, tuple[str, bool]]) -> list[Any]:
    hooks = []
    for path, sub in module.named_modules():
        def pre(_m: nn.Module, inp: Any, path: str = path) -> None:
            st.stack.append(path)
            if keys[path][0] == path and path not in st.input_bytes:
                st.input_bytes[path] = sum(nbytes_of(t) for t in tensors_of(inp))

        def post(_m: nn.Module, _inp: Any, _out: Any) -> None:
            st.stack.pop()

        hooks += [sub.register_forward_pre_hook(pre), sub.register_forward_hook(post, always_call=True)]
    return hooks


# --------------------------------------------------------------------------------------------
def _merge(recs: list[AtenRecord], key: str, precision: str,
           rnn_paths: frozenset[str] = frozenset()) -> tuple[tuple[Op, ...], tuple[OpShare, ...]]:
    """Identical ops of one layer (same module, op, shapes, weight) become one Op with `repeat`.

    Recurrences become what cuDNN and ATen run (one fused call per layer, see builder._rnn): the
    per-step GEMMs on a `weight_hh*` parameter (nn.LSTM / GRU / RNN and their cells, unrolled or
    not) become one `recurrence` op of `repeat` steps; the per-step GEMMs on `weight_ih*` become
    one GEMM over all steps; the per-step gate math inside an RNN module launches nothing of its
    own (fused into the recurrence kernels, its bytes kept)."""
    groups: dict[tuple[Any, ...], list[AtenRecord]] = {}
    for r in recs:
        groups.setdefault((r.path, r.aten, r.shapes, r.weight, r.causal, r.role), []).append(r)
    ops = []
    shares = []
    for rs in groups.values():
        r, n = rs[0], len(rs)
        rel = r.path[len(key) + 1:] if key and r.path.startswith(key + ".") else ("" if r.path == key else r.path)
        label = ("unsupported." if r.unsupported else "") + r.aten
        nm = f"{rel}.{label}" if rel else label
        matmul = r.kind in ("gemm", "bmm")
        model_flop = sum(x.model_flop for x in rs) if r.model_flop >= 0 else -1.0
        op = Op(
            name=nm, kind=r.kind, flop=sum(x.flop for x in rs), bytes=sum(x.bytes for x in rs),  # type: ignore[arg-type]
            m=r.m, n=r.n, k=r.k, batch=r.batch, repeat=n, model_flop=model_flop,
            precision=precision if (matmul or r.kind == "attention") else "bf16",
            weight_params=r.weight_params, saved_bytes=sum(x.saved_bytes for x in rs), kernels=n,
            bwd_kernels=(2 * n if matmul else (3 * n if r.kind == "attention" else n)),
            bwd_flop_factor=2.0 if matmul else (2.5 if r.kind == "attention" else (0.0 if r.kind == "embedding" else 1.0)),
            bwd_bytes_factor=2.5 if r.kind == "attention" else 2.0, attn_core=r.kind == "attention", causal=r.causal,
            heads=r.heads, head_dim=r.head_dim, seq_q=r.seq_q, seq_kv=r.seq_kv,
        )
        share = _share(r, n)
        ops.append(replace(_fuse_recurrent(op, r, n, rnn_paths), split=share.split))
        shares.append(share)
    return tuple(ops), tuple(shares)


def _fuse_recurrent(op: Op, r: AtenRecord, steps: int, rnn_paths: frozenset[str]) -> Op:
    """See `_merge`: one recorded per-step op of a recurrence -> its fused form."""
    last = r.weight.rsplit(".", 1)[-1]
    if op.kind == "gemm" and last.startswith("weight_hh") and op.batch == 1:
        return replace(op, kind="recurrence", kernels=1, bwd_kernels=2)
    if op.kind == "gemm" and last.startswith("weight_ih") and steps > 1 and op.batch == 1:
        return replace(op, m=op.m * steps, repeat=1, kernels=1, bwd_kernels=2)
    if op.kind == "elementwise" and steps > 1 and r.path in rnn_paths:
        return replace(op, kernels=0, bwd_kernels=0)
    return op


def _build_graph(module: nn.Module, st: TraceState, keys: dict[str, tuple[str, bool]], model_id: str, b: int, s: int,
                 precision: str, collapse: bool, first_name: dict[int, str]) -> tuple[Graph, list[str]]:
    # consecutive records with the same layer key form a segment
    segs: list[tuple[str, bool, list[AtenRecord]]] = []
    for r in st.records:
        key, item = keys.get(r.path, ("", False))
        if segs and segs[-1][0] == key:
            segs[-1][2].append(r)
        else:
            segs.append((key, item, [r]))
    notes: list[str] = []
    # parameters: each counted once, in the first layer whose module owns it
    owned: set[str] = set()
    seg_params: list[float] = []
    for key, _item, _recs in segs:
        sub = module.get_submodule(key) if key else module
        total = 0.0
        for pname, p in sub.named_parameters(recurse=bool(key)):
            full = f"{key}.{pname}" if key else pname
            canon = first_name.get(id(p), full)
            if canon not in owned:
                owned.add(canon)
                total += p.numel()
        seg_params.append(total)
    unused = sum(p.numel() for n, p in module.named_parameters() if n not in owned)
    if unused and segs:
        seg_params[0] += unused
        notes.append(f"{unused:.0f} parameters of modules the forward pass never called are counted in layer '{segs[0][0] or 'root'}'")
    rnn_paths = frozenset(p for p, m in module.named_modules() if isinstance(m, (nn.RNNBase, nn.RNNCellBase)))
    items = [i for i, (_k, item, _r) in enumerate(segs) if item]
    lo, hi = (items[0], items[-1]) if items else (0, len(segs) - 1)
    layers: list[Layer] = []
    seen_names: Counter[str] = Counter()
    for i, (key, _item, recs) in enumerate(segs):
        ops, shares = _merge(recs, key, precision, rnn_paths)
        if i < lo or (not items and all(o.kind == "embedding" for o in ops) and i == 0):
            kind = "embedding"
        elif i > hi:
            kind = "head"
        elif any(o.kind == "attention" for o in ops):
            kind = "transformer"
        else:
            kind = "block"
        label = key or "root"
        seen_names[label] += 1
        if seen_names[label] > 1:
            label = f"{label}#{seen_names[label]}"
        body = kind not in ("embedding", "head")
        split = any(sh.split for sh in shares)
        layers.append(Layer(label, kind, 1, ops, params=seg_params[i], params_full=seg_params[i],
                            input_bytes=st.input_bytes.get(key, 0.0), recomputable=body,
                            layout=LayerLayout(op_shares=shares) if split else None))
    if collapse:
        layers = _collapse(layers)
    unsup = Counter(r.aten for r in st.records if r.unsupported)
    if unsup:
        notes.append("ops without a cost model, kept as memory-bound element-wise ops: "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(unsup.items())))
    tokens = b * s
    return Graph(model_id=model_id, layers=tuple(layers), micro_batch=b, seq_len=s, tokens=tokens,
                 degrees={"tp": 1, "cp": 1, "ep": 1, "sp": 0}), notes


def _signature(layer: Layer) -> tuple[Any, ...]:
    return (layer.kind, layer.params, layer.ops)


def _collapse(layers: list[Layer]) -> list[Layer]:
    """Consecutive body layers with identical ops and parameters -> one Layer with `count`."""
    out: list[Layer] = []
    run: list[Layer] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            out.append(run[0])
        else:
            first, last = run[0].name, run[-1].name.rsplit(".", 1)[-1]
            from dataclasses import replace
            out.append(replace(run[0], name=f"{first}..{last}", count=len(run)))
        run.clear()

    for layer in layers:
        if run and layer.kind not in ("embedding", "head") and _signature(layer) == _signature(run[0]):
            run.append(layer)
            continue
        flush()
        run.append(layer)
    flush()
    return out


# --------------------------------------------------------------------------------------------
def from_torch(module: nn.Module | Callable[[], nn.Module], example_inputs: Any, precision: str = "bf16",
               name: str | None = None, **kw: Any) -> Graph:
    """The Graph of one forward pass of `module` on `example_inputs` (traced on the meta device).

    Ops perfmodel has no cost model for are kept as memory-bound element-wise ops named
    `unsupported.<aten op>` and listed in an `UnsupportedOpWarning`. See `trace_module` for the
    trace time, the unsupported-op counts and the notes."""
    res = trace_module(module, example_inputs, precision=precision, name=name, **kw)
    if res.unsupported:
        warnings.warn(f"{res.graph.model_id}: " + "; ".join(res.notes), UnsupportedOpWarning, stacklevel=2)
    return res.graph


def flop_counter_flop(module: nn.Module | Callable[[], nn.Module], example_inputs: Any, precision: str = "bf16") -> float:
    """Forward FLOPs `torch.utils.flop_counter.FlopCounterMode` counts on the same meta-device module."""
    from torch.utils.flop_counter import FlopCounterMode

    module = _materialise(module)
    dtype = TRACE_DTYPE.get(precision, torch.bfloat16)
    state, _, _ = _meta_state(module, dtype)
    args, kwargs = _meta_inputs(example_inputs, dtype)
    with FlopCounterMode(display=False) as counter:
        torch.func.functional_call(module, state, args, kwargs, strict=False)
    return float(counter.get_total_flops())


def matmul_model_flop(graph: Graph) -> float:
    """Forward model FLOPs of the gemm, bmm and attention ops (what FlopCounterMode counts)."""
    return sum(layer.count * o.mflop for layer in graph.layers for o in layer.ops
               if o.kind in ("gemm", "bmm", "attention", "recurrence"))


# --------------------------------------------------------------------------------------------
def _load_factory(path_spec: str) -> Callable[..., Any]:
    from perfmodel.user_code import load_factory

    return load_factory(path_spec, "--torch", TorchImportError)


def estimate_module_cli(path_spec: str, example_shape: Iterable[int] | None = None, precision: str = "bf16",
                        input_dtype: str = "auto", name: str | None = None) -> Graph:
    """The Graph of the module a 'package.module:factory' or 'file.py:factory' spec builds.

    The factory is called with no arguments under `torch.device("meta")`. It returns a module, or
    `(module, example_inputs)`; with a bare module, `example_shape` (e.g. (8, 2048)) gives the
    input: int64 token ids when the module has an nn.Embedding (`input_dtype="auto"`), else floats."""
    from perfmodel.user_code import call_factory

    factory = _load_factory(path_spec)
    with torch.device("meta"):
        built = call_factory(factory, path_spec, TorchImportError)
    inputs: Any = None
    if isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module):
        built, inputs = built
    if not isinstance(built, nn.Module):
        raise TorchImportError(f"{path_spec!r} returned {type(built).__name__}; expected an nn.Module or (module, example_inputs)")
    if example_shape is not None:
        shape = tuple(int(d) for d in example_shape)
        if input_dtype == "auto":
            is_tokens = any(isinstance(m, nn.Embedding) for m in built.modules())
            dt = torch.int64 if is_tokens else torch.float32
        else:
            dt = getattr(torch, input_dtype)
        inputs = torch.empty(shape, dtype=dt, device="meta")
    if inputs is None:
        raise TorchImportError(f"{path_spec!r} returned a bare module and no example shape was given; pass "
                               "--example-shape 8,2048 or return (module, example_inputs) from the factory")
    return from_torch(built, inputs, precision=precision, name=name or path_spec.rsplit(":", 1)[-1])
