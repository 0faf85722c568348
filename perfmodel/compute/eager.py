"""Element-wise ops as an eager PyTorch model runs them: one kernel per torch call, each reading
and writing whole tensors, instead of the one fused kernel the builder's graph assumes.

The builder costs a norm, an activation and a rotary embedding as the fused kernels of
Megatron-Core / Transformer Engine / Apex or a compiled step (`fused`). A model written in plain
PyTorch ops and run eagerly (`eager`: Hugging Face transformers' Llama / Mistral / Qwen code,
torchtitan without --compile, nanoGPT-style code) runs the same math as a chain of ATen kernels.
Only the ops whose eager form is such a chain change; torch's own fused kernels stay one kernel:
F.layer_norm, F.gelu / nn.GELU, F.scaled_dot_product_attention, the residual add.

Bytes per element of the builder's element count, bf16 activations (2 B) and fp32 (4 B) where the
code upcasts, each kernel's reads + writes (forward; backward = what autograd's kernels move for
the same chain; saved = what autograd keeps for it):

    RMSNorm   x.float() 2+4 | pow(2) 4+4 | mean(-1) 4 | (+eps, rsqrt on [T, 1]) | x * r 4+4 |
              .to(bf16) 4+2 | weight * y 2+2                                     = 36 B, 8 kernels
              (transformers LlamaRMSNorm.forward; torchtitan RMSNorm._norm(x.float()).type_as(x)
              * weight, the same chain). Backward: weight mul (g*w 2+2, grad_w (g*y).sum 4+2+2),
              cast 2+4, x * r (g*r 4+4, (g*x).sum(-1) 8+4+4), mean / pow (expand 4, g * 2x 8+4+4+4),
              the two paths' sum into x 8+4, cast 4+2                             = 96 B, 14 kernels.
              Saved: fp32 x (4) and the bf16 normalised y (2) = 6 B against the fused kernel's 2.
    SwiGLU    silu(gate) 2+2 | silu * up 4+2                                      = 10 B per T·f, 2 kernels
              (fused: read gate and up, write the product, 6 B). Backward: g * up and g * silu
              (4+2 each), silu's backward 4+2 = 18 B, 3 kernels (fused 12). Saved: gate, silu(gate)
              and up, 6 B (fused 4: gate and up).
    RoPE      q and k each: q * cos 2+2 | rotate_half: -x2 (half the elements) 1+1, cat 2+2 |
              * sin 2+2 | add 4+2                                                 = 20 B, 5 kernels
              (transformers apply_rotary_pos_emb; torchtitan's complex form, x.float() 2+4,
              complex mul 4+4, type_as 4+2, moves the same 20 B in 3). Backward 22 B (the grads of
              the two uses of x summed), fused 8.

A graph op stands for one fused kernel and its eager framework calls: the host seconds per graph
kernel (engines/costs.HOST_FWD_S_PER_KERNEL) were measured on an eager model, so kernel counts,
and with them the host-dispatch limit, stay those of the graph; only the bytes and the saved
activations change. The launch gaps of the extra kernels (about 2.5 us each on the GPU) are left
out: a few per cent of a host-bound step, nothing of a bandwidth-bound one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfmodel.workload.graph import ACT_BYTES, ELEMENTWISE_IMPLS, ElementwiseImpl, Graph, Layer, Op
from perfmodel.workload.spec import ModelSpec


@dataclass(frozen=True)
class EagerChain:
    """One fused op's eager form, in bytes per element of the builder's element count."""

    fused_fwd: float  # what the builder's fused op moves forward (its bytes / elements)
    fwd: float
    bwd: float
    saved: float  # bytes kept for the backward (fused: the builder's saved_bytes / elements)


RMSNORM = EagerChain(fused_fwd=2 * ACT_BYTES, fwd=36.0, bwd=96.0, saved=6.0)
SWIGLU = EagerChain(fused_fwd=3 * ACT_BYTES, fwd=10.0, bwd=18.0, saved=6.0)
ROPE = EagerChain(fused_fwd=2 * ACT_BYTES, fwd=20.0, bwd=22.0, saved=0.0)

# the builder's op names for each chain (workload/builder.py: _block, _head, _ffn_ops; workload/attention_ops.py: attention_ops)
NORM_OPS = ("norm1", "norm2", "final_norm", "q_norm", "kv_norm")
GATED_ACT_OPS = ("mlp_act", "shared_act")
ROPE_OPS = ("rope",)


def _chain(spec: ModelSpec, op: Op) -> EagerChain | None:
    if op.name in NORM_OPS and op.kind == "norm" and spec.norm == "rmsnorm":
        return RMSNORM
    if op.name in GATED_ACT_OPS and spec.activation == "swiglu":
        return SWIGLU
    if op.name in ROPE_OPS:
        return ROPE
    return None


def eager_op(op: Op, chain: EagerChain) -> Op:
    """`op` (the builder's fused form) as its eager chain: same elements, the chain's bytes."""
    elems = op.bytes / chain.fused_fwd
    return replace(op, bytes=elems * chain.fwd, bwd_bytes_factor=chain.bwd / chain.fwd,
                   saved_bytes=elems * chain.saved if op.saved_bytes > 0 else 0.0)


def eager_layer(spec: ModelSpec, layer: Layer) -> Layer:
    ops = tuple(eager_op(op, c) if (c := _chain(spec, op)) is not None else op for op in layer.ops)
    return layer if ops == layer.ops else replace(layer, ops=ops)


def with_elementwise(spec: ModelSpec, graph: Graph, impl: str) -> Graph:
    """The builder's graph of `spec` with its element-wise ops as `impl` runs them (`fused`: as
    built). Imported graphs (torch_import) already hold every ATen op and are never passed here."""
    if impl not in ELEMENTWISE_IMPLS:
        raise ValueError(f"elementwise {impl!r}; allowed values: {', '.join(ELEMENTWISE_IMPLS)}")
    if impl == "fused":
        return graph
    return replace(graph, layers=tuple(eager_layer(spec, layer) for layer in graph.layers))


__all__ = [
    "ELEMENTWISE_IMPLS",
    "RMSNORM",
    "ROPE",
    "SWIGLU",
    "EagerChain",
    "ElementwiseImpl",
    "eager_op",
    "with_elementwise",
]
