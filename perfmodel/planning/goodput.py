"""Goodput under failures: the optimal checkpoint interval and the work lost to interruptions.

First-order model (Young 1974, "A first order approximation to the optimum checkpoint interval";
Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps"):
with a checkpoint taking δ seconds of stalled training every τ seconds of work, a system mean time
between failures M and a restart (reschedule, reload, warm-up) of R seconds, each failure costs
R plus on average half an interval of recomputation, so the fraction of time doing new work is

    goodput(τ) = 1 − δ/τ − (R + τ/2)/M
    τ*         = √(2·δ·M)                       (Young / Daly's first-order optimum)
    goodput(τ*) = 1 − √(2δ/M) − R/M

Asynchronous checkpointing stalls training only for the snapshot to host memory (δ_block); the
write to storage (δ_write) runs behind it, so the last durable checkpoint is δ_write older:
goodput = 1 − δ_block/τ − (R + δ_write + τ/2)/M with τ* = √(2·δ_block·M).

Failure rate. M = MTBF per GPU / GPUs (independent failures). The default per-GPU MTBF comes from
the Llama 3 report (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4 and Table 5): 419
unexpected interruptions in a 54-day snapshot of pre-training on 16,384 H100 GPUs, so
    MTBF per GPU = 54 d · 86400 s/d · 16384 / 419 = 1.824e8 s  (≈ 50,700 GPU-hours, 5.8 years)
and a 16,384-GPU job fails every 3.1 hours.

Checkpoint size: bf16 weights (2 B) + fp32 master weights (4 B) + Adam moments (8 B) = 14 B per
parameter (the ZeRO paper's mixed-precision states, Rajbhandari et al. 2020 §3.1, less the
gradients, which a checkpoint does not keep). Storage bandwidth: the Llama 3 report's Tectonic
file system sustains 2 TB/s for the 16K-GPU job (§3.3.1); `LLAMA3_WRITE_BPS_PER_GPU` is that
figure's share per GPU, an assumption that storage is sized with the cluster. The restart time
default (10 minutes) is an assumption, not a published figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_SNAPSHOT_S = 54 * 86400.0
LLAMA3_GPUS = 16384
LLAMA3_GPU_MTBF_S = LLAMA3_SNAPSHOT_S * LLAMA3_GPUS / LLAMA3_UNEXPECTED_INTERRUPTIONS
LLAMA3_STORAGE_WRITE_BPS = 2e12  # Tectonic sustained throughput, Llama 3 report §3.3.1
LLAMA3_WRITE_BPS_PER_GPU = LLAMA3_STORAGE_WRITE_BPS / LLAMA3_GPUS
CHECKPOINT_BYTES_PER_PARAM = 14.0  # bf16 weights 2 + fp32 master 4 + Adam m, v 8
DEFAULT_RESTART_S = 600.0  # assumption: reschedule + reload + warm-up


def system_mtbf_s(n_gpus: int, gpu_mtbf_s: float = LLAMA3_GPU_MTBF_S) -> float:
    """Mean time between failures of a job on `n_gpus` GPUs that fail independently."""
    if n_gpus <= 0 or gpu_mtbf_s <= 0:
        raise ValueError(f"n_gpus {n_gpus} and gpu_mtbf_s {gpu_mtbf_s} must be positive")
    return gpu_mtbf_s / n_gpus


def young_daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """τ* = √(2 δ M), seconds of work between checkpoints."""
    if checkpoint_s < 0 or mtbf_s <= 0:
        raise ValueError(f"checkpoint_s {checkpoint_s} must be >= 0 and mtbf_s {mtbf_s} > 0")
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def checkpoint_bytes(total_params: float, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM) -> float:
    return total_params * bytes_per_param


@dataclass(frozen=True)
class Goodput:
    n_gpus: int
    mtbf_s: float  # the job's
    checkpoint_s: float  # stall per checkpoint (δ, or δ_block when asynchronous)
    write_s: float  # time to make a checkpoint durable
    restart_s: float
    interval_s: float  # τ
    fraction: float  # goodput: new work per wall-clock second
    asynchronous: bool = False
    ideal_wall_s: float | None = None

    @property
    def effective_wall_s(self) -> float | None:
        """Expected wall-clock time of the run including checkpoints and failures."""
        if self.ideal_wall_s is None:
            return None
        return self.ideal_wall_s / self.fraction if self.fraction > 0 else math.inf

    @property
    def expected_failures(self) -> float | None:
        w = self.effective_wall_s
        return None if w is None else w / self.mtbf_s

    @property
    def lost_per_failure_s(self) -> float:
        return self.restart_s + self.interval_s / 2 + (self.write_s if self.asynchronous else 0.0)


def goodput(n_gpus: int, checkpoint_bytes_total: float, write_Bps: float | None = None, *,
            gpu_mtbf_s: float = LLAMA3_GPU_MTBF_S, restart_s: float = DEFAULT_RESTART_S,
            async_snapshot_s: float | None = None, interval_s: float | None = None,
            ideal_wall_s: float | None = None) -> Goodput:
    """Goodput of a job of `n_gpus` saving `checkpoint_bytes_total` at `write_Bps` (aggregate;
    default the Llama 3 storage share per GPU times the GPUs). `async_snapshot_s` turns on
    asynchronous checkpointing with that stall; `interval_s` overrides the Young/Daly optimum."""
    bw = write_Bps if write_Bps is not None else LLAMA3_WRITE_BPS_PER_GPU * n_gpus
    if bw <= 0:
        raise ValueError(f"write_Bps {bw} must be positive")
    mtbf = system_mtbf_s(n_gpus, gpu_mtbf_s)
    write = checkpoint_bytes_total / bw
    stall = write if async_snapshot_s is None else async_snapshot_s
    extra_loss = 0.0 if async_snapshot_s is None else write
    tau = interval_s if interval_s is not None else young_daly_interval_s(stall, mtbf)
    if tau <= 0:
        frac = 0.0 if stall > 0 else 1.0 - (restart_s + extra_loss) / mtbf
    else:
        frac = 1.0 - stall / tau - (restart_s + extra_loss + tau / 2.0) / mtbf
    return Goodput(n_gpus, mtbf, stall, write, restart_s, tau, max(0.0, frac), async_snapshot_s is not None, ideal_wall_s)


__all__ = [
    "CHECKPOINT_BYTES_PER_PARAM",
    "LLAMA3_GPU_MTBF_S",
    "LLAMA3_WRITE_BPS_PER_GPU",
    "Goodput",
    "checkpoint_bytes",
    "goodput",
    "system_mtbf_s",
    "young_daly_interval_s",
]
