"""Activation offloading: the saved tensors of the first N transformer layers go to pinned host
memory during the forward and come back before their backward (Megatron-Core cpu_offloading with
cpu_offloading_num_layers N, which hands the layers to Transformer Engine's default offload
scheduler; NVIDIA/TransformerEngine transformer_engine/pytorch/cpu_offload.py @ d0067d0,
DefaultOffloadSynchronizer, and docs/features/other_optimizations/cpu_offloading).

Of L layers on the rank, layers 0 .. N-1 are offloaded and K = L - N sets of saved activations
may be on the GPU at once:

    forward   layer i's copies (one offload stream, in order) start as its tensors are saved and
              must end before layer K + i starts (finish_offload_map[L - N + i]): the compute
              stream waits for them there.
    backward  layer i's reload starts before the backward of layer K - 1 + i, after the work
              already queued on the compute stream (start_reload_map[L - 1 - N + i];
              offload_stream.wait_stream), on the same stream after earlier copies; the backward of
              layer i waits for it.

So a copy hides behind the K - 1 layers that follow it (none when K = 1, as the documentation
warns), and the GPU holds at most K layers' activations. A copy moves a layer's saved bytes at
the node's measured host-link rate (Node.host_link, nvbandwidth one GPU at a time: GPUs that share
a host uplink and copy together get less, which is not modelled). A copy is taken to end no
earlier than its layer's forward (its last saved tensor). The copies' own HBM traffic (TE's
documentation: they compete with memory-bound kernels) is not charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.parallel.plan import check_offload
from perfmodel.workload.graph import Layer

if TYPE_CHECKING:
    from perfmodel.hardware.system import System


@dataclass(frozen=True, slots=True)
class OffloadStall:
    """Seconds one micro-batch waits for offload copies, in the forward and in the backward."""

    fwd_s: float
    bwd_s: float

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s


def can_offload(system: System) -> bool:
    """A GPU whose node has a measured host link: where activation offloading can be costed."""
    return system.accelerator.kind == "gpu" and system.node.host_link is not None


def body_instances(layers: Sequence[tuple[Layer, float]]) -> list[Layer]:
    """The transformer-layer instances of `layers` ((layer, instances) pairs) in model order: what
    activation offloading counts and offloads, first to last."""
    return [layer for layer, n in layers if layer.recomputable for _ in range(int(n))]


def offload_stall(fwd_s: Sequence[float], bwd_s: Sequence[float], saved_bytes: Sequence[float], n_offload: int,
                  d2h_Bps: float, h2d_Bps: float) -> OffloadStall:
    """The waits of one micro-batch under the default schedule (module docstring) for layers
    taking `fwd_s` / `bwd_s` seconds and saving `saved_bytes` each, in model order."""
    n_layers = len(fwd_s)
    check_offload(n_offload, n_layers)
    if n_offload == 0:
        return OffloadStall(0.0, 0.0)
    keep = n_layers - n_offload
    clock = copy = 0.0
    offloaded = [0.0] * n_offload
    for j in range(n_layers):
        if 0 <= j - keep < n_offload:
            clock = max(clock, offloaded[j - keep])
        start, clock = clock, clock + fwd_s[j]
        if j < n_offload:
            copy = max(max(copy, start) + saved_bytes[j] / d2h_Bps, clock)
            offloaded[j] = copy
    fwd_wait = clock - sum(fwd_s)
    clock = copy = 0.0  # every copy out ended before the last layer's forward began
    reloaded = [0.0] * n_offload
    for j in range(n_layers - 1, -1, -1):
        i = j - keep + 1
        if 0 <= i < n_offload:
            copy = max(copy, clock) + saved_bytes[i] / h2d_Bps
            reloaded[i] = copy
        if j < n_offload:
            clock = max(clock, reloaded[j])
        clock += bwd_s[j]
    return OffloadStall(max(0.0, fwd_wait), max(0.0, clock - sum(bwd_s)))


def resident_bytes(saved_bytes: Sequence[float], n_offload: int) -> float:
    """The most saved activations on the GPU at once: any K = L - N consecutive layers (the
    scheduler's bound; the last K, never offloaded, are one such window)."""
    keep = len(saved_bytes) - n_offload
    if n_offload == 0 or keep <= 0:
        return float(sum(saved_bytes))
    window = best = sum(saved_bytes[:keep])
    for j in range(keep, len(saved_bytes)):
        window += saved_bytes[j] - saved_bytes[j - keep]
        best = max(best, window)
    return float(best)


__all__ = ["OffloadStall", "body_instances", "can_offload", "offload_stall", "resident_bytes"]
