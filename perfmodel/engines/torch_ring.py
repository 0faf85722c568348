"""PyTorch's context-parallel ring attention on one rank: its merge passes and the part of its
K/V exchange that no attention hides (ParallelPlan.cp_ring `allgather` / `allgather-repeat-kv`).

What the ring does, from torch/distributed/tensor/experimental/_attention.py as torchtitan ran it
in Dec 2024 (the benchmark's torch 1963fc8 era: the version with set_rotate_method, which torchtitan
9dec370 torchtitan/utils.py:171-191 calls) and unchanged in torch 2.13's
_context_parallel/_attention.py:

  options    _ContextParallelOptions: convert_to_f32 True, enable_load_balance True, rotate_method
             ALL_GATHER; torchtitan sets only the rotate method ('allgather' by default,
             config_manager.py:364-376) and runs SDPA under sdpa_kernel([FLASH, EFFICIENT])
             (utils.py:209-217): the flash kernel for bf16.
  steps      cp steps per call. Round-robin load balancing gives rank r the sequence chunks r and
             2cp-1-r, so every step computes (s/cp)²/2 query-key pairs (step 0 causal on the local
             pair; then the full local queries against the first half of the keys received, or the
             second half of the queries against all of them): a step is 1/cp of the layer's
             attention, forward or backward. The chunk shapes (16k-32k rows at s/cp = 32k) sit on
             the flat top of the flash rate curve, so the attention op keeps its whole-sequence rate.
  forward    the local K, V are all-gathered once (_AllGatherRotater), issued before step 0 and
             waited before step 1: only step 0's attention hides it,
                 exposed_fwd = max(0, t_allgather - t_step_fwd).
             After each step _SDPAMerger folds the step's output into an fp32 accumulator,
             out - sigmoid(lse_i - lse)·(out - out_i); the lse tensors are 1/d of the output and left out.
  backward   K, V all-gathered again (the kv rotater is the same ALL_GATHER); per step a flash
             backward, its dQ, dK, dV added into fp32 accumulators (accum_dtype float32), and the
             dK/dV accumulator sent to the next rank (the dkv rotater is ALL_TO_ALL: permute_tensor,
             in fp32), waited after the next step's attention backward; the last one after the loop.
  recompute  full activation checkpointing reruns the forward call, all-gather and merges included
             (engines/costs.layer_time charges the forward's exposure again); torchtitan's per-op
             policy saves the SDPA output, so nothing of the ring reruns.

Merge traffic, counted as one fused pass per step (torch.compile traces the ring into the
compiled transformer block, as torchtitan compiles each block; eager runs the forward merge as
separate element-wise kernels, a cast, two subtractions and a multiply over O, 6 + 12 + 8 + 12 =
38 B instead of 10: this is a lower bound for an eager run), per element of the rank's
output O (b·s/cp·H_q·d_v), query gradient (b·s/cp·H_q·d_k) and K/V gradients (b·s/cp·H·(d_k+d_v)):
    forward   step 0: O bf16 -> fp32, 2 + 4 = 6 B; steps 1..cp-1: read the fp32 accumulator and the
              step's bf16 output, write fp32, 4 + 2 + 4 = 10 B; the result back to bf16, 4 + 2 = 6 B
              -> (12 + 10·(cp-1)) B per O element, cp + 1 kernels
    backward  per step 4 + 2 + 4 = 10 B per dQ and per dK/dV element (the dK/dV sum written
              straight into the buffer sent on); dQ and dK/dV back to bf16, 6 B
              -> (10·cp + 6) B per dQ and dK/dV element, 2·cp + 2 kernels
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.compute.ops import memory_bound_cost
from perfmodel.hardware.specs import Accelerator
from perfmodel.workload.graph import CpExchange, CpRing

MERGE_FWD_FIRST_LAST_BYTES = 6 + 6  # step 0's fp32 conversion and the final bf16 cast, per O element
MERGE_STEP_BYTES = 4 + 2 + 4  # read the fp32 accumulator and a bf16 step result, write fp32
GRAD_CAST_BYTES = 4 + 2  # an fp32 gradient accumulator back to bf16


@dataclass(frozen=True, slots=True)
class TorchRing:
    """One layer instance's ring on one rank, one micro-batch: merge seconds and kernels on the
    compute stream, and the exchange seconds no attention step hides (forward, backward)."""

    merge_fwd_s: float
    merge_bwd_s: float
    merge_fwd_kernels: int
    merge_bwd_kernels: int
    exposed_fwd_s: float
    exposed_bwd_s: float


def ring_forward_exposed_s(allgather_s: float, step_s: float) -> float:
    """The forward all-gather beyond step 0's attention, the only compute it runs beside."""
    return max(0.0, allgather_s - step_s)


def ring_backward_exposed_s(allgather_s: float, step_s: float, rotate_s: float, cp: int) -> float:
    """Seconds the backward ring takes beyond its cp attention steps. One compute and one
    communication stream (NCCL runs a process group's collectives in order):
        A  the K/V all-gather, from 0 to a = allgather_s
        S_i  step i's attention backward, t = step_s: S_0 from 0, S_1 after S_0 and A, S_i (i >= 2)
             after the add of step i-1, which waits for R_{i-2}
        R_i  step i's dK/dV sent on, r = rotate_s, after the add that follows S_i and after R_{i-1}
             (and A, ahead of it on the stream); the add of step i waits for R_{i-1}
    The call ends when R_{cp-1} arrives. Closed form when nothing is late (a <= t, r <= t): r."""
    t, a, r = step_s, allgather_s, rotate_s
    add = t  # end of step 0 (its add needs no rotation)
    sent = max(add, a) + r  # R_0
    for i in range(1, cp):
        end = (max(add, a) if i == 1 else add) + t  # S_i
        add = max(end, sent)  # the add waits for R_{i-1}
        sent = max(add, sent) + r  # R_i
    return max(0.0, sent - cp * t)


def merge_bytes(x: CpExchange, cp: int, ring: CpRing) -> tuple[float, float]:
    """(forward, backward) bytes of the ring's fp32 merges and gradient accumulation on a rank
    (module docstring)."""
    rows = x.micro_batch * x.seq_len / cp
    heads = x.q_heads if ring == "allgather-repeat-kv" else x.kv_heads
    out_el = rows * x.q_heads * x.v_head_dim
    grad_el = rows * x.q_heads * x.qk_head_dim + rows * heads * (x.qk_head_dim + x.v_head_dim)
    fwd = (MERGE_FWD_FIRST_LAST_BYTES + MERGE_STEP_BYTES * (cp - 1)) * out_el
    bwd = (MERGE_STEP_BYTES * cp + GRAD_CAST_BYTES) * grad_el
    return fwd, bwd


def torch_ring(acc: Accelerator, x: CpExchange, cp: int, ring: CpRing, attn_fwd_s: float, attn_bwd_s: float,
               allgather_s: float, rotate_s: float) -> TorchRing:
    """The ring of one attention layer whose attention takes `attn_fwd_s` / `attn_bwd_s` on the rank
    (all cp steps), whose K/V all-gather takes `allgather_s` and each dK/dV send `rotate_s`."""
    fwd_b, bwd_b = merge_bytes(x, cp, ring)
    kf, kb = cp + 1, 2 * cp + 2
    return TorchRing(merge_fwd_s=memory_bound_cost(acc, 0.0, fwd_b, kf).time_s,
                     merge_bwd_s=memory_bound_cost(acc, 0.0, bwd_b, kb).time_s,
                     merge_fwd_kernels=kf, merge_bwd_kernels=kb,
                     exposed_fwd_s=ring_forward_exposed_s(allgather_s, attn_fwd_s / cp),
                     exposed_bwd_s=ring_backward_exposed_s(allgather_s, attn_bwd_s / cp, rotate_s, cp))


__all__ = ["TorchRing", "merge_bytes", "ring_backward_exposed_s", "ring_forward_exposed_s", "torch_ring"]
