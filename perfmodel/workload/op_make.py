"""The two op constructors every layer builder shares (workload/builder.py, attention_ops.py,
ssm.py, timeseries.py): a (batched) GEMM and a memory-bound element-wise op, with their FLOPs,
bytes, saved activations and kernel counts; and replace_op, an op with some fields changed."""

from __future__ import annotations

from dataclasses import replace

from perfmodel import precision as registry
from perfmodel.workload.graph import ACT_BYTES, Op, TpSplit

__all__ = ["elementwise_op", "gemm_op", "replace_op"]


def gemm_op(name: str, m: int, n: int, k: int, precision: str, weight: bool = True, batch: int = 1,
          repeat: int = 1, saved: float | None = None, bias: bool = False, in_bytes: int = ACT_BYTES,
          split: TpSplit = "") -> Op:
    """A (batched) GEMM [m,k]x[k,n]; `saved` defaults to its input activation (what wgrad needs)."""
    el = registry.get(precision).weight_bytes
    wbytes = k * n * el * batch  # every batch entry has its own B operand (bmm, one per expert)
    ab = batch * repeat
    bytes_ = ab * (m * k * in_bytes + m * n * ACT_BYTES) + wbytes * repeat
    flop = 2.0 * m * n * k * ab
    params = (k * n + (n if bias else 0)) if weight else 0
    return Op(
        name=name, kind="gemm" if weight else "bmm", flop=flop, bytes=bytes_, m=m, n=n, k=k,
        batch=batch, repeat=repeat, precision=precision, weight_params=params,
        saved_bytes=(m * k * ACT_BYTES * ab) if saved is None else saved,
        kernels=repeat, bwd_kernels=2 * repeat, split=split,
    )


def elementwise_op(name: str, elems: float, reads: float = 1, writes: float = 1, flop_per_el: float = 1,
                 saved: float = 0.0, bwd_bytes_factor: float = 2.0, kind: str = "elementwise",
                 params: float = 0.0, kernels: int = 1, attn_core: bool = False) -> Op:
    return Op(
        name=name, kind=kind, flop=flop_per_el * elems, bytes=(reads + writes) * elems * ACT_BYTES,  # type: ignore[arg-type]
        saved_bytes=saved, bwd_flop_factor=1.0, bwd_bytes_factor=bwd_bytes_factor,
        weight_params=params, kernels=kernels, bwd_kernels=kernels, attn_core=attn_core,
    )


def replace_op(op: Op, **kw: object) -> Op:
    """`op` with the given fields changed (dataclasses.replace, typed for Op)."""
    return replace(op, **kw)  # type: ignore[arg-type]
