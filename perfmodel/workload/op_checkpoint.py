"""Per-op selective activation checkpointing (torchtitan's `selective_ac_option = "op"`) on a layer.

Two stacks mean different things by "selective" recompute (ParallelPlan.selective_recompute):

  modules    Megatron's: the recompute modules it names (workload/module_recompute.py), by default
             core_attn, only the attention core (the unfused kernel's softmax / dropout and its two
             batched matmuls, or the fused kernel), which the op flag `attn_core` marks
             (Korthikanti et al. 2022 §4.2; engines/costs.layer_time, memory.selective_dropped_bytes).
  op         torchtitan's: every transformer block is wrapped in a non-reentrant checkpoint whose
             policy saves the outputs of a list of ops and recomputes everything else in the
             backward (pytorch/torchtitan @ b5bcd76c torchtitan/distributed/activation_checkpoint.py
             :31-94 the save list, :243-274 the policy; the same rule in Dec 2024 at 6b03ffa3
             torchtitan/parallelisms/parallelize_llama.py:214-223 and :250-270 (which also saved
             aten.abs, left out here: see below), in Jun 2025 at e7c0cae
             torchtitan/models/llama3/parallelize_llama.py:218-227 and :254-274):

             - saved: matmuls (aten.mm / aten.linear) EXCEPT every second one, counted per block
               forward (a fresh counter per checkpoint call: the context_fn builds it, :244 /
               Dec 2024 :268-270); the SDPA kernels (flash, efficient, cuDNN), aten.bmm / addmm
               (torch's compute-intensive op list), the tensor-parallel reduce-scatter and the
               all-to-alls (functional collectives), max (an fp8 amax: a scalar, not counted here),
               topk;
             - recomputed: the even-numbered matmuls, every element-wise op, norm, RoPE, and the
               collectives not listed (the sequence-parallel all-gather, a tp all-reduce), and
               the MoE router GEMM whatever its number (force_recompute_mm_shapes_by_fqns
               ["moe.router.gate"], :196-198, :265-266, not counted); grouped expert GEMMs
               (aten._grouped_mm, not in the list) are recomputed too.

             What a block keeps is its input (the checkpoint's argument) plus the saved ops'
             outputs; the tensors autograd saves inside it are rebuilt in the backward.

             Not modelled: the Dec 2024 list's aten.abs (removed in torchtitan #820, Feb 2025, for
             raising float8 peak memory: torchao's tensorwise amax is max(abs(x)), so each cast kept
             |x|); the scalar max outputs. An fp8 GEMM counts as one matmul, as in eager mode, where
             the policy's dispatch mode sees aten.mm on torchao's Float8Tensor before the subclass
             lowers it to aten._scaled_mm; under torch.compile the traced graph holds _scaled_mm,
             which the 2024-25 lists did not save (HEAD's does, without the every-other rule).

A Llama block runs its matmuls as separate Linear modules, in this order (torchtitan @ 6b03ffa3
models/llama/model.py:189 wq, wk, wv; :209 SDPA; wo; :253 w2(silu(w1(x)) * w3(x)), evaluated w1,
w3, w2): 1 wq saved, 2 wk recomputed, 3 wv saved, 4 wo recomputed, 5 w1 saved, 6 w3 recomputed,
7 w2 saved. The builder fuses wq|wk|wv into one QKV GEMM and w1|w3 into one FC1 GEMM; their
`Op.mm_parts` give the separate widths, and each recomputed projection is costed as a GEMM of its
own shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from perfmodel import precision as registry
from perfmodel.workload.graph import ACT_BYTES, Comm, Layer, Op

ROUTER_OP = "router"  # the MoE router GEMM (workload/moe.py), force-recomputed
SAVED_KINDS = ("attention", "bmm")  # SDPA / fused attention kernels, aten.bmm (unfused attention)
SAVED_COMMS = ("reduce_scatter", "all_to_all")  # _c10d_functional reduce_scatter_tensor, all_to_all_single
RERUN_COMMS = ("all_gather", "all_reduce")


@dataclass(frozen=True, slots=True)
class OpCheckpoint:
    """What the op policy does to one layer instance (one micro-batch on one rank)."""

    recomputed: tuple[Op, ...]  # forward work rerun in the backward (whole ops, or one projection of a GEMM)
    comms: tuple[Comm, ...]  # forward collectives rerun in the backward
    saved_bytes: float  # the layer's input plus the saved ops' outputs


def output_bytes(op: Op) -> float:
    """Bytes of the op's forward output: `out_bytes` when the graph gives it, a GEMM's m·n·batch·repeat
    at 2 B, else the op's saved bytes (an upper bound: a fused attention kernel keeps Q, K, V and
    its log-sum-exp, about its output's size for multi-head attention)."""
    if op.out_bytes >= 0:
        return op.out_bytes
    if op.kind in ("gemm", "bmm"):
        return float(op.m * op.n * op.batch * op.repeat * ACT_BYTES)
    return op.saved_bytes


def gemm_call(op: Op, width: int) -> Op:
    """One call of a GEMM op that stands for `repeat` calls of `mm_parts` separate matmuls: the
    matmul of N = `width`, run once, with its FLOPs and bytes (input read once per call, output and
    weights in proportion to the width: workload/builder._gemm's bytes = batch·repeat·(m·k·in +
    m·n·2) + k·n·el·batch·repeat)."""
    out = op.m * op.n * op.batch * op.repeat * ACT_BYTES
    weights = op.k * op.n * registry.get(op.precision).weight_bytes * op.batch * op.repeat
    inputs = max(0.0, op.bytes - out - weights) / op.repeat
    share = width / (op.n * op.repeat)
    return replace(op, n=width, repeat=1, kernels=1, bwd_kernels=2, flop=op.flop * share,
                   model_flop=op.model_flop * share if op.model_flop >= 0 else op.model_flop,
                   bytes=inputs + (out + weights) * share, weight_params=op.weight_params * width / op.n,
                   saved_bytes=0.0, mm_parts=(), out_bytes=-1.0)


@lru_cache(maxsize=4096)
def op_checkpoint(layer: Layer, tp: int = 1, etp: int = 1) -> OpCheckpoint:
    """torchtitan's op policy on `layer` (module docstring); `tp` and `etp` size the reduce-scatter
    outputs it keeps (a rank keeps 1/group of the reduced buffer)."""
    count = 0
    rerun: list[Op] = []
    saved = layer.input_bytes
    for op in layer.ops:
        if op.kind == "gemm" and not op.grouped and op.name != ROUTER_OP:
            parts = op.mm_parts or (op.n,)
            whole = len(parts) == 1 and op.repeat == 1
            for _ in range(op.repeat):
                for width in parts:
                    count += 1
                    if count % 2:
                        saved += op.m * width * op.batch * ACT_BYTES
                    else:
                        rerun.append(op if whole else gemm_call(op, width))
        elif op.kind in SAVED_KINDS:
            saved += output_bytes(op)
        else:
            rerun.append(op)
    group = {"tp": tp, "etp": etp}
    comms: list[Comm] = []
    for c in layer.comms:
        if c.kind in SAVED_COMMS:
            saved += c.bytes / (group.get(c.group, 1) if c.kind == "reduce_scatter" else 1) * c.fwd
        elif c.kind in RERUN_COMMS and c.fwd and not (c.group == "cp" and c.overlappable):
            comms.append(c)  # the context-parallel K/V exchange runs inside the saved attention op
    return OpCheckpoint(tuple(rerun), tuple(comms), saved)


__all__ = ["OpCheckpoint", "gemm_call", "op_checkpoint", "output_bytes"]
