"""Per-layer and per-stage seconds both engines share: one layer instance's forward, backward
and recompute time on one rank, with the collectives each needs, and the host-side limit.

Host limit: an eager framework issues kernels from one CPU thread. When the GPU finishes a
kernel faster than the host issues the next, the host is the bottleneck, so a layer's time in
one direction is max(GPU seconds + exposed comm, kernels x host_op_overhead). The per-kernel
host cost is the accelerator's calibration `host_op_overhead` (PyTorch eager dispatch and
autograd bookkeeping, pytorch/pytorch#41383: about 7 us per op with autograd), 7 us when absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from perfmodel.comm.collectives import collective_time_s
from perfmodel.compute.ops import op_cost
from perfmodel.hardware.catalog import System
from perfmodel.hardware.specs import Accelerator
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.graph import Comm, Layer

DEFAULT_HOST_OP_S = 7e-6  # pytorch/pytorch#41383, see module docstring


@lru_cache(maxsize=4096)
def host_op_s(acc: Accelerator) -> float:
    cal = acc.calibration.host_op_overhead
    return cal.si("seconds") if cal else DEFAULT_HOST_OP_S


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds for one instance of a layer on one rank, one micro-batch."""

    fwd_gpu_s: float
    bwd_gpu_s: float
    recompute_gpu_s: float
    fwd_comm_s: float  # exposed collectives (tp, ep, cp) in the forward pass
    bwd_comm_s: float
    recompute_comm_s: float
    fwd_host_s: float
    bwd_host_s: float
    recompute_host_s: float
    wgrad_s: float  # the weight-gradient GEMMs inside bwd_gpu_s (zero-bubble schedules defer them)

    @property
    def fwd_s(self) -> float:
        return max(self.fwd_gpu_s + self.fwd_comm_s, self.fwd_host_s)

    @property
    def bwd_s(self) -> float:
        """Backward including recompute (recompute runs right before the layer's backward)."""
        gpu = self.bwd_gpu_s + self.bwd_comm_s + self.recompute_gpu_s + self.recompute_comm_s
        return max(gpu, self.bwd_host_s + self.recompute_host_s)

    @property
    def host_exposed_s(self) -> float:
        return (self.fwd_s - self.fwd_gpu_s - self.fwd_comm_s) + (
            self.bwd_s - self.bwd_gpu_s - self.bwd_comm_s - self.recompute_gpu_s - self.recompute_comm_s)


def group_stride(plan: ParallelPlan, group: str) -> tuple[int, int]:
    """(degree, stride) of a group in Megatron rank order tp, cp, dp (ep inside), pp."""
    if group == "tp":
        return plan.tp, 1
    if group == "cp":
        return plan.cp, plan.tp
    if group == "ep":
        return plan.ep, plan.tp * plan.cp
    if group == "dp":
        return plan.dp * plan.cp, plan.tp
    if group == "pp":
        return plan.pp, plan.tp * plan.cp * plan.dp
    raise ValueError(group)


def comm_s(system: System, plan: ParallelPlan, c: Comm) -> float:
    degree, stride = group_stride(plan, c.group)
    return collective_time_s(system, c.kind, c.bytes, degree, stride)


def layer_time(system: System, plan: ParallelPlan, layer: Layer) -> LayerTime:
    acc = system.accelerator
    fwd = bwd = core = wgrad = 0.0
    kf = kb = kcore = 0
    attn_compute = 0.0
    for op in layer.ops:
        f = op_cost(acc, op, "fwd").time_s
        b = op_cost(acc, op, "bwd").time_s
        fwd += f
        bwd += b
        kf += op.kernels
        kb += op.bwd_kernels
        if op.has_weight_grad and op.kind == "gemm":
            wgrad += b / 2
        if op.attn_core:
            core += f
            kcore += op.kernels
        if op.kind == "attention" or op.attn_core:
            attn_compute += f
    cf = cb = 0.0
    for c in layer.comms:
        t = comm_s(system, plan, c)
        if c.overlappable:
            # the CP ring passes K/V chunks while attention computes on the previous chunk
            t_f = max(0.0, t - attn_compute)
            t_b = max(0.0, t * c.bwd / max(c.fwd, 1) - 2.5 * attn_compute) if c.bwd else 0.0
            cf += t_f * (1 if c.fwd else 0)
            cb += t_b
            continue
        if c.group == "tp" and plan.overlap_tp_comm:
            continue
        cf += t * c.fwd
        cb += t * c.bwd
    h = host_op_s(acc)
    rec = plan.recompute if layer.recomputable else "none"
    if rec == "full":
        r_gpu, r_comm, r_host = fwd, cf, kf * h
    elif rec == "selective":
        r_gpu, r_comm, r_host = core, 0.0, kcore * h
    else:
        r_gpu = r_comm = r_host = 0.0
    return LayerTime(fwd, bwd, r_gpu, cf, cb, r_comm, kf * h, kb * h, r_host, wgrad)
