"""A fused recurrence: one LSTM / GRU layer as cuDNN (cudnnRNNForward / Backward) and ATen's lstm /
gru op on a CPU run it, s dependent steps, each a fixed per-step latency plus one [b,H]x[H,gH] GEMM with its gate math. On a
GPU the latency is the algorithm's PyTorch picks (rnn_step_latency_s): for an LSTM / GRU of
hidden <= 192 forward / <= 128 backward, cuDNN's small-hidden persistent kernel, measured on
an H200 at 1.0 us forward and 1.9 us backward (LSTM h40: validation/device/h200-2026-12-04);
else the standard algorithm: on cuDNN 9 (Ampere and later) the H200's fastest standard step,
17.8 us each way; on Volta-era cuDNN 7 DeepBench's V100 fp16 LSTM, hidden 512, batch 16, 25
steps: forward 0.441 ms / 25 = 17.6 us per step, backward w.r.t. inputs 0.891 ms / 25 =
35.6 us (results/train/DeepBench_NV_V100.xlsx, baidu-research/DeepBench). A 17.6 us step for
every RNN had put the H200's hidden-40 and -128 LSTM / GRU 6-20x too slow. Latency and GEMM
add, they do not overlap: DeepBench's LSTM forward steps
at batch 16 take 49 / 88 / 223 us at hidden 1024 / 2048 / 4096, the 17.6 us plus the
8-134 MB of weights each step streams at 720 GB/s, where max(latency, GEMM) had left the
hidden-1024 and -1536 forwards 45-65 % fast. The backward's data gradient is one GEMM per
step (dh = dgates x W^T: the forward step's FLOPs and weight bytes; DeepBench's backward-data
steps are 0.9-1.2x its forward steps from hidden 1024 up, where a second GEMM per step
made the hidden-4096 backward 2.4x too slow), the weight gradient of all steps one GEMM
after the loop. On a CPU each step is a small GEMM plus its fused gate math, no host
dispatch per step (one ATen op per layer: oneDNN's RNN primitive, aten::mkldnn_rnn_layer and
mkldnn_rnn_layer_backward under torch 2.14). Its backward computes each step's weight
gradient inside the step loop (a rank-b update of the fp32 gradient), so a backward step
is two step GEMMs and twice the gate traffic, with no weight-gradient GEMM after the loop.
Measured on a 2-core Zen 4 VM (torch 2.14.1, 1 thread, bf16 autocast, one layer of input
= hidden H, s 32; one step's backward against its batch b): H 256 at b 8 / 32 / 128 costs
159 / 417 / 1871 us, H 1024 7.0 / 11.7 / 28.1 ms. The slope is the two GEMMs at the
chip's GEMM rate (2 x 2 x 4H x H FLOPs per row: 140-190 GFLOP/s); a merged weight-gradient
GEMM on top (the cuDNN form) overstates a 2 x 256 LSTM's backward by 25-30 %. The
intercept is the fp32 gradients' read and write in every step: inside the last-level
cache it is small against the GEMMs (H <= 512: 20-300 us), beyond it (H 768, 1024:
38-67 MB of gradients and weights) it streams from DRAM at the triad rate, 2.5 and 5.6 ms
per step, which this model does not charge: an LSTM that wide on a CPU comes out up to
2-4x optimistic in its backward (README, workload YAML: recurrent models).
"""

from __future__ import annotations

from perfmodel import precision as registry
from perfmodel.compute.ops import (
    OpCost,
    _bound,
    _gemm_bytes,
    _soft_roofline,
    gemm_cost,
    gemm_fixed_s,
    gemm_rate_flop_per_s,
)
from perfmodel.hardware.specs import Accelerator
from perfmodel.workload.graph import Op

RNN_STEP_FWD_S = 0.441e-3 / 25  # DeepBench V100 fp16 LSTM h512 b16 t25 forward, per step (module docstring)
RNN_STEP_BWD_S = 0.891e-3 / 25  # the same, backward w.r.t. inputs, per step
# the standard algorithm's per-step latency on cuDNN 9 (H200, torch 2.11, cuDNN 9.19; fp32 two-layer
# nn.LSTM, validation/device/h200-2026-12-04/gpu_measurements.json `rnn`): the fastest measured step,
# forward h1024 b64 17.76 us, backward h512 b32 17.79 us (fwd+bwd 39.16 less fwd 21.37 us)
RNN_STEP_FWD_CUDNN9_S = 17.76e-6
RNN_STEP_BWD_CUDNN9_S = 17.79e-6
# PyTorch runs an LSTM / GRU of hidden <= 192 (forward) / <= 128 (backward) with cuDNN's
# CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H (cuDNN >= 8.2.1, sm >= 6.0: aten/src/ATen/native/cudnn/RNN.cpp
# use_rnn_persist_small_h): one persistent kernel keeps the recurrent weights on chip. Its per-step
# latency on the same H200: LSTM h40 b64 forward 1.006 us, backward 1.930 us (fwd+bwd 2.936 us)
RNN_SMALL_H_MAX = {False: 192, True: 128}  # hidden limit by direction (bwd = True)
RNN_STEP_FWD_SMALL_H_S = 1.006e-6
RNN_STEP_BWD_SMALL_H_S = 1.930e-6
# generations whose cuDNN era the DeepBench V100 figures describe (cuDNN 7); later NVIDIA parts take
# the H200's cuDNN 9 figures
RNN_CUDNN7_GENERATIONS = frozenset({"volta", "pascal", "turing"})

def rnn_step_latency_s(acc: Accelerator, hidden: int, bwd: bool) -> float:
    """A GPU's fixed per-step latency of a fused recurrence (module docstring): PyTorch's
    small-hidden persistent cuDNN kernel where it picks it (NVIDIA, hidden within
    RNN_SMALL_H_MAX), else the standard algorithm's, at its cuDNN era's measured figure."""
    nvidia = acc.vendor == "nvidia"
    if nvidia and hidden <= RNN_SMALL_H_MAX[bwd]:
        return RNN_STEP_BWD_SMALL_H_S if bwd else RNN_STEP_FWD_SMALL_H_S
    if nvidia and acc.generation not in RNN_CUDNN7_GENERATIONS:
        return RNN_STEP_BWD_CUDNN9_S if bwd else RNN_STEP_FWD_CUDNN9_S
    return RNN_STEP_BWD_S if bwd else RNN_STEP_FWD_S


def recurrence_cost(acc: Accelerator, op: Op, bwd: bool = False) -> OpCost:
    """A fused RNN layer of op.repeat = s steps of [m, k] x [k, n] (m batch, k hidden, n gates x
    hidden), in seconds:
        forward   s x (floor_f + t_step)
        backward  s x (floor_b + t_step) + one wgrad GEMM [k, s·m] x [s·m, n]   (GPU, cuDNN)
                  s x (t0 + 2 t_step)                                         (CPU, oneDNN)
    t_step: one step's GEMM (soft roofline, weights read once per step) plus its gate math
    (memory-bound, no launch: fused). floor: rnn_step_latency_s on a GPU; on a CPU the GEMM's fixed
    per-call time t0 (no host dispatch per step: the step loop runs inside one ATen op), and the
    weight gradient is the second of the backward's two step GEMMs (module docstring)."""
    s = max(1, op.repeat)
    R = gemm_rate_flop_per_s(acc, op.precision)
    el = registry.get(op.precision).gemm_operand_bytes
    tc = 2.0 * op.m * op.n * op.k / R
    tm = _gemm_bytes(op.m, op.n, op.k, el) / acc.hbm_achieved_Bps
    gates = (op.bytes - op.k * op.n * el) / s / acc.elementwise_achieved_Bps
    t_step = _soft_roofline(tc, tm) + gates
    cpu = acc.kind == "cpu"
    floor = gemm_fixed_s(acc) if cpu else rnn_step_latency_s(acc, op.k, bwd)
    # a backward step is the data-gradient GEMM; on a CPU (oneDNN's RNN backward, which ATen's
    # mkldnn_rnn_layer_backward runs) also that step's weight-gradient GEMM, accumulated in fp32
    # inside the loop (module docstring)
    gemms = 2.0 if bwd and cpu else 1.0
    total = s * (floor + gemms * t_step)
    compute = s * tc * gemms
    memory = s * (tm + gates) * gemms
    if bwd and not cpu:
        # cuDNN: the weight gradient of all steps as one GEMM after the data-gradient loop
        w = gemm_cost(acc, op.k, op.n, s * op.m, op.precision)
        total += w.time_s
        compute += w.compute_s
        memory += w.memory_s
    fixed = max(0.0, total - max(compute, memory))
    return OpCost(compute, memory, fixed, total, _bound(compute, memory, fixed))


__all__ = ["RNN_STEP_BWD_S", "RNN_STEP_FWD_S", "recurrence_cost", "rnn_step_latency_s"]
