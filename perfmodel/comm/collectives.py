"""Collective(kind, bytes, group) -> seconds on a resolved `System`.

Bus-bandwidth convention of nccl-tests (S = the full buffer size, n ranks):
    all_reduce      t = 2(n-1)/n · S / busbw          (ring; Patarasuk & Yuan 2009)
    all_gather,
    reduce_scatter  t = (n-1)/n · S / busbw
    all_to_all      t = (n-1)/n · S / busbw
    send_recv       t = S / bw
busbw at a message size comes from the node's measured curve (log-log interpolation) when one
exists, otherwise from line rate x the measured large-message efficiency plus a latency term.

A group whose ranks span scale-up domains runs a hierarchical ring: its bottleneck is the
slower of the scale-up fabric and the NICs. The `g` ranks of one group inside a domain drive
`g` NICs' worth of bandwidth when every group in the domain communicates at once (each GPU has
nics_per_node·nic_bw/gpus_per_node of NIC bandwidth), so busbw_inter = g · nic_bw_per_gpu · eff.
With one rank per node (tp fills the node) a DP ring gets one NIC; with eight it gets eight.

Rank order follows Megatron-LM: tp fastest, then cp, then dp (ep inside dp), then pp; a group's
`stride` is the product of the degrees faster than it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from perfmodel.hardware.catalog import System
from perfmodel.hardware.specs import CollectiveCurve

FACTORS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "send_recv": 1.0}


def bus_factor(kind: str, n: int) -> float:
    """Bytes each rank moves per byte of buffer: 2(n-1)/n for all-reduce, (n-1)/n for the rest."""
    if kind == "send_recv":
        return 1.0
    return FACTORS[kind] * (n - 1) / n


@dataclass(frozen=True, slots=True)
class Placement:
    degree: int
    per_domain: int  # ranks of this group inside one scale-up domain
    domains: int  # scale-up domains the group spans

    @property
    def intra_only(self) -> bool:
        return self.domains == 1


def placement(system: System, degree: int, stride: int) -> Placement:
    """Where a group of `degree` ranks, `stride` apart in rank order, lands on the nodes."""
    domain = system.domain_size
    if degree * stride <= domain:
        return Placement(degree, degree, 1)
    per = max(1, domain // stride) if stride < domain else 1
    per = min(per, degree)
    return Placement(degree, per, math.ceil(degree / per))


def _curve_for(system: System, kind: str) -> CollectiveCurve | None:
    curves = system.node.intra_node.curves
    for c in curves:
        if c.collective == kind:
            return c
    if kind in ("all_gather", "reduce_scatter"):
        # ring all-gather / reduce-scatter run the same ring steps as half an all-reduce: the
        # all-reduce curve's busbw is their busbw (nccl-tests reports them within ~10 %)
        for c in curves:
            if c.collective == "all_reduce" and c.algorithm == "ring":
                return c
    return None


@lru_cache(maxsize=64)
def _curve_points(curve: CollectiveCurve) -> tuple[tuple[float, float], ...]:
    return tuple(sorted((p.size_bytes, p.busbw_Bps) for p in curve.points))


def _interp_busbw(points: tuple[tuple[float, float], ...], size: float) -> float:
    if size <= points[0][0]:
        # below the smallest measured size the collective is latency bound: t is flat, busbw ~ S
        return points[0][1] * size / points[0][0]
    if size >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= size <= x1:
            f = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return points[-1][1]


def intra_time_s(system: System, kind: str, size: float, n: int) -> float:
    """One collective inside a scale-up domain."""
    if n <= 1 or size <= 0:
        return 0.0
    factor = bus_factor(kind, n)
    curve = _curve_for(system, kind) if kind != "send_recv" else None
    if curve is not None:
        return factor * size / _interp_busbw(_curve_points(curve), size)
    if kind == "all_reduce" and system.in_network_reduction:
        factor = 1.0  # NVLS / SHARP: each rank sends and receives its buffer once
    bw = system.intra_Bps * system.intra_efficiency
    # alpha-beta model: one base latency per collective (NCCL's tuning model charges a base
    # latency per algorithm plus small per-hop terms that NVSwitch keeps to one hop)
    return system.intra_latency_s + factor * size / bw


def nic_Bps_per_gpu(system: System) -> float:
    if system.nics_per_node == 0 or system.nic_Bps == 0:
        return 0.0
    return system.nics_per_node * system.nic_Bps * system.nic_efficiency / system.gpus_per_node / system.oversubscription


def collective_time_s(system: System, kind: str, size: float, degree: int, stride: int = 1) -> float:
    """Seconds for one collective of `size` bytes (nccl-tests size) over `degree` ranks."""
    if degree <= 1 or size <= 0:
        return 0.0
    place = placement(system, degree, stride)
    if place.intra_only:
        return intra_time_s(system, kind, size, degree)
    nic = nic_Bps_per_gpu(system)
    if nic <= 0:
        raise ValueError(f"{system.name}: a group of {degree} ranks spans {place.domains} nodes but the node has no NICs")
    inter_lat = system.inter_latency_s + system.intra_latency_s
    if kind == "send_recv":
        return inter_lat + size / nic
    if kind == "all_to_all":
        g, n = place.per_domain, degree
        t_inter = size * (n - g) / n / nic
        t_intra = intra_time_s(system, kind, size * g / n, g) if g > 1 else 0.0
        return inter_lat + max(t_inter, t_intra)
    busbw_inter = place.per_domain * nic
    factor = bus_factor(kind, degree)
    t_inter = factor * size / busbw_inter
    t_intra = intra_time_s(system, kind, size, place.per_domain) * (degree - 1) / degree if place.per_domain > 1 else 0.0
    # latency: a tree across domains for all-reduce, a ring for the others
    hops = 2 * math.ceil(math.log2(place.domains)) if kind == "all_reduce" else place.domains - 1
    return max(t_inter, t_intra) + hops * system.inter_latency_s + system.intra_latency_s
