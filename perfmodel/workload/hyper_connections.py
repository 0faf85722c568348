"""Manifold-constrained hyper-connections (mHC; DeepSeek-V4): the residual stream is n copies of
the hidden state, mixed around every sub-layer by per-token matrices (Zhu et al. 2024,
"Hyper-Connections"; DeepSeek-AI 2026, mHC with Sinkhorn-normalised mixing).

As DeepSeek-V4's reference (deepseek-ai/DeepSeek-V4-Flash inference/model.py, Block.hc_pre /
hc_post, config hc_mult n = 4, hc_sinkhorn_iters 20) runs each sub-layer (attention, FFN):
    hc_pre   x [T, n, h] flattened to [T, n·h] in fp32, scaled by its rms; one fp32 GEMM
             [T, n·h] x [n·h, (2 + n)·n] gives per token the n pre weights, n post weights and the
             n x n combination matrix (Sinkhorn-normalised over `iters` iterations, on n² values);
             the sub-layer input is sum_i pre_i · x_i: [T, h]
    sublayer pre-norm, attention or FFN on [T, h] as usual
    hc_post  y_j = post_j · out + sum_i comb_ij · x_i: reads out [T, h] and x [T, n·h], writes
             [T, n·h] (n + n² multiply-adds per element of h)
Parameters per sub-layer: the mixing weight (2 + n)·n x n·h, its bias (2 + n)·n, 3 scales.
The embedding is copied into the n streams; the output head mixes them back with its own
[n·h, n] weight, n biases and a scale (hc_head). Between layers, and across pipeline stages,
the activation is n·h wide.
"""

from __future__ import annotations

from perfmodel.workload.graph import ACT_BYTES, Op
from perfmodel.workload.spec import ModelSpec

FP32 = 4


def streams(spec: ModelSpec) -> int:
    """Residual streams n (1 without hyper-connections)."""
    return spec.hyper_connections.streams if spec.hyper_connections is not None else 1


def mix_width(n: int) -> int:
    """Per-token mixing outputs: n pre + n post weights and the n x n combination."""
    return (2 + n) * n


def sublayer_params(spec: ModelSpec) -> float:
    """Parameters of one sub-layer's hyper-connection: weight, bias and the 3 scales."""
    if spec.hyper_connections is None:
        return 0.0
    n, h = streams(spec), spec.hidden
    return float(mix_width(n) * n * h + mix_width(n) + 3)


def head_params(spec: ModelSpec) -> float:
    """The output head's stream mix (hc_head): [n, n·h] weight, n biases, 1 scale."""
    if spec.hyper_connections is None:
        return 0.0
    n, h = streams(spec), spec.hidden
    return float(n * n * h + n + 1)


def hc_pre_ops(spec: ModelSpec, tokens: int, name: str) -> list[Op]:
    """The fp32 mixing GEMM and the memory-bound pre-mix (rms, Sinkhorn, weighted stream sum)."""
    hc = spec.hyper_connections
    assert hc is not None
    n, h = hc.streams, spec.hidden
    w = mix_width(n)
    gemm = Op(f"{name}_hc_mix", "gemm", flop=2.0 * tokens * n * h * w,
              bytes=tokens * n * h * FP32 + n * h * w * FP32 + tokens * w * FP32, m=tokens, n=w, k=n * h,
              precision="fp32", weight_params=float(n * h * w), saved_bytes=tokens * n * h * ACT_BYTES,
              kernels=1, bwd_kernels=2)
    # rms of x, the Sinkhorn iterations on the n x n matrix (a few FLOPs per iteration and entry),
    # and sum_i pre_i x_i: reads the n streams, writes one
    sinkhorn_flop = tokens * (hc.sinkhorn_iters * 4.0 * n * n + 4.0 * w)
    pre = Op(f"{name}_hc_pre", "elementwise", flop=3.0 * tokens * n * h + sinkhorn_flop,
             bytes=tokens * (n * h + h) * ACT_BYTES + tokens * w * FP32, saved_bytes=tokens * w * FP32,
             bwd_flop_factor=1.0, bwd_bytes_factor=2.0, kernels=2, bwd_kernels=2)
    return [gemm, pre]


def hc_post_op(spec: ModelSpec, tokens: int, name: str) -> Op:
    """y_j = post_j · out + sum_i comb_ij · x_i over the n streams."""
    n, h = streams(spec), spec.hidden
    return Op(f"{name}_hc_post", "elementwise", flop=2.0 * tokens * h * (n + n * n),
              bytes=tokens * (h + 2 * n * h) * ACT_BYTES, saved_bytes=tokens * h * ACT_BYTES,
              bwd_flop_factor=1.0, bwd_bytes_factor=2.0, kernels=1, bwd_kernels=2)


def with_hyper_connections(spec: ModelSpec, ops: list[Op], tokens: int) -> tuple[list[Op], float]:
    """`ops` of one layer with each sub-layer's residual add replaced by hc_pre (before its
    pre-norm) and hc_post (in place of the residual add); returns (ops, added parameters)."""
    if spec.hyper_connections is None:
        return ops, 0.0
    out: list[Op] = []
    params = 0.0
    for op in ops:
        if op.kind == "norm" and op.name in ("norm1", "norm2"):
            out += hc_pre_ops(spec, tokens, op.name)
            params += sublayer_params(spec)
            out.append(op)
        elif op.name.endswith("_residual"):
            out.append(hc_post_op(spec, tokens, op.name.removesuffix("_residual")))
        else:
            out.append(op)
    return out, params


def hc_head_ops(spec: ModelSpec, tokens: int) -> list[Op]:
    """The head's stream mix: an fp32 GEMM [T, n·h] x [n·h, n] and the weighted stream sum."""
    n, h = streams(spec), spec.hidden
    return [Op("hc_head_mix", "gemm", flop=2.0 * tokens * n * h * n,
               bytes=tokens * n * h * FP32 + n * h * n * FP32 + tokens * n * FP32, m=tokens, n=n, k=n * h,
               precision="fp32", weight_params=float(n * h * n), saved_bytes=tokens * n * h * ACT_BYTES,
               kernels=1, bwd_kernels=2),
            Op("hc_head_sum", "elementwise", flop=2.0 * tokens * n * h, bytes=tokens * (n * h + h) * ACT_BYTES,
               saved_bytes=0.0, bwd_flop_factor=1.0, bwd_bytes_factor=2.0)]


def hc_expand_op(spec: ModelSpec, tokens: int) -> Op:
    """The embedding copied into the n streams."""
    n, h = streams(spec), spec.hidden
    return Op("hc_expand", "elementwise", flop=0.0, bytes=tokens * (h + n * h) * ACT_BYTES, saved_bytes=0.0,
              bwd_flop_factor=1.0, bwd_bytes_factor=1.0)


__all__ = [
    "hc_expand_op",
    "hc_head_ops",
    "hc_post_op",
    "hc_pre_ops",
    "head_params",
    "mix_width",
    "streams",
    "sublayer_params",
    "with_hyper_connections",
]
