"""torch.autocast over fp32 parameters: every matmul weight cast to bf16 each micro-batch.

Megatron-Core, DeepSpeed's bf16 mode, FSDP with a bf16 param dtype and llm.c hold the weights the
GEMMs read in 16 bits (the fp32 master copy lives in the optimizer), so a micro-batch's GEMMs read
them directly. A plain PyTorch loop (`model.float()` + `torch.autocast(dtype=bf16)`: nanoGPT, the
FlashAttention training scripts under Lightning's bf16-mixed, Hugging Face Trainer with DDP) keeps
the parameters in fp32 and lets autocast cast each weight inside its matmul, every forward: the
cast cache lives only as long as the autocast context, one micro-batch. Per weight element:

    forward   read fp32 4 + write bf16 2                                 = 6 B
    backward  the cast's backward: the bf16 weight gradient to fp32 2 + 4 = 6 B
    saved     the bf16 copy the matmul keeps for its backward             = 2 B

as one memory-bound op per layer over its matmul weights on the rank (embeddings are looked up
in fp32, not cast). Its host work, a cast dispatch inside each matmul's, is in the measured host
seconds per graph kernel (engines/costs.py), so it adds no graph kernel. With gradient
accumulation, every micro-batch after the first adds its fp32 gradient into each parameter's fp32
`.grad` (read 4 + 4, write 4 = 12 B per parameter the rank holds a gradient of, all of them, the
embedding too): charged once per step beside the optimizer (grad_accumulation_s_per_param), since
it depends on the micro-batch count, which the per-micro-batch graph does not know. A model held in
bf16 accumulates too (6 B per parameter); no other stack is charged for it.

Measured (validation/device/h200-2026-12-04/probe2.json, H200, torch 2.11, a four-layer
Llama-3-8B with its 128256-token vocabulary, 1.92 B parameters, 4 micro-batches of 4096 tokens):
the forward without grad takes 3.3 ms longer with fp32 parameters under autocast than with the
model held in bf16 (6 B x 1.92e9 / 3.3 ms = 3.5 TB/s, the part's element-wise rate); the four
micro-batches' forward+backward 33 ms longer (8.3 ms each); the casts predict 2.0 ms of the
forward and 4.0 per micro-batch, the accumulation 5.6 ms per micro-batch after the first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from perfmodel.workload.graph import Graph, Layer, Op

if TYPE_CHECKING:
    from perfmodel.parallel.plan import ParallelPlan

CAST_FWD_BYTES = 6.0  # per weight element: read fp32, write bf16
CAST_BWD_BYTES = 6.0  # per weight element: the bf16 weight gradient cast to fp32
CAST_SAVED_BYTES = 2.0  # per weight element: the bf16 copy kept for the matmul's backward
GRAD_ACCUMULATE_BYTES = 12.0  # per parameter and micro-batch after the first: fp32 .grad += fp32 grad
CAST_OP = "autocast_weight_cast"
AUTOCAST_PRECISIONS = ("bf16", "fp16")  # autocast's 16-bit dtypes; fp8 / fp4 recipes hold their own weight copies


def autocast_applies(asked: bool, precision: str) -> bool:
    """Whether a plan's weights are cast: asked for, on one of autocast's 16-bit precisions."""
    return asked and precision in AUTOCAST_PRECISIONS


def autocast_on(plan: ParallelPlan) -> bool:
    """Whether `plan`'s weights are cast: fp32 parameters under torch.autocast on a 16-bit plan."""
    return autocast_applies(plan.autocast_weights, plan.precision)


def matmul_weights(layer: Layer) -> float:
    """Matmul weight elements of one layer instance on this rank (GEMMs and grouped expert GEMMs)."""
    return sum(o.weight_params for o in layer.ops if o.kind == "gemm" and o.weight_params > 0)


def autocast_layer(layer: Layer) -> Layer:
    w = matmul_weights(layer)
    if w <= 0 or any(o.name == CAST_OP for o in layer.ops):
        return layer
    cast = Op(CAST_OP, "elementwise", flop=0.0, bytes=CAST_FWD_BYTES * w, saved_bytes=CAST_SAVED_BYTES * w,
              kernels=0, bwd_kernels=0, bwd_flop_factor=0.0, bwd_bytes_factor=CAST_BWD_BYTES / CAST_FWD_BYTES)
    return replace(layer, ops=(cast, *layer.ops))


def grad_accumulation_s_per_param(elementwise_Bps: float, on: bool) -> float:
    """Seconds per parameter (holding a gradient on the rank) and micro-batch after the first of
    the fp32 gradient accumulation under autocast; 0 when `on` is False."""
    return GRAD_ACCUMULATE_BYTES / elementwise_Bps if on else 0.0


def with_autocast(graph: Graph, on: bool) -> Graph:
    """`graph` with each layer's per-micro-batch weight casts when `on` (fp32 parameters under
    torch.autocast); unchanged otherwise."""
    if not on:
        return graph
    return replace(graph, layers=tuple(autocast_layer(layer) for layer in graph.layers))


__all__ = [
    "AUTOCAST_PRECISIONS",
    "CAST_BWD_BYTES",
    "CAST_FWD_BYTES",
    "CAST_OP",
    "CAST_SAVED_BYTES",
    "GRAD_ACCUMULATE_BYTES",
    "autocast_applies",
    "autocast_on",
    "grad_accumulation_s_per_param",
    "matmul_weights",
    "with_autocast",
]
