"""A system's network as a list of dimensions, innermost first, derived from the node, fabric and
cluster specs.

    level 0   the scale-up domain: NVLink/NVSwitch in a node (8 GPUs), a rack-scale NVLink domain
              (NVL72: 72 GPUs over 18 trays), a full xGMI mesh, or a TPU ICI torus (a whole pod)
    level 1.. scale-out: the NICs into a leaf (a rail of a rail-optimised fabric when the cluster
              says so), then a spine that may be oversubscribed; or one scale-out level when the
              cluster publishes no leaf size (every inter-node path then costs `hops` switches)

Every level carries the span (GPUs inside one unit of it; the top level is unbounded), the
per-GPU one-way line rate into it and the measured fraction of it collectives reach, the
per-step latency, whether the switches reduce in the network (NVLink SHARP / InfiniBand SHARP),
and, for level 0, the measured nccl-tests bus-bandwidth curves and, on PCIe nodes whose cards
are NVLink-bridged in pairs, the bridge's achieved rate and latency. Numbers are SI floats; every
one comes from a spec field that names its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from perfmodel.hardware.system_specs import Cluster, CollectiveCurve, Fabric, Node

LevelKind = Literal["scale-up", "rack", "torus", "leaf", "rail", "spine", "scale-out"]

DEFAULT_HOP_LATENCY_S = 1e-6  # a run with no fabric spec: one switch hop ~ 1 us (InfiniBand HDR: 0.6 us)
DEFAULT_HOPS = 3  # leaf - spine - leaf, the worst path of a two-tier fat tree (Cluster.hops default)


@dataclass(frozen=True, slots=True)
class MeasuredCurve:
    """nccl-tests bus bandwidth of one collective against message size: (bytes, busbw B/s)."""

    collective: str
    algorithm: str
    group_size: int
    points: tuple[tuple[float, float], ...]
    source: str

    @classmethod
    def from_spec(cls, c: CollectiveCurve) -> MeasuredCurve:
        return cls(c.collective, c.algorithm, c.group_size,
                   tuple(sorted((p.size_bytes, p.busbw_Bps) for p in c.points)), c.source)

    def scaled(self, bandwidth: float, latency: float, alpha_s: float) -> MeasuredCurve:
        """The curve on a fabric with `bandwidth` x the line rate and `latency` x the latency.

        Each measured time t(S) = F·S/busbw(S) (F the bus factor at the measured group size) is
        split into the level's per-collective latency alpha and the rest, which is bandwidth:
            t'(S) = latency·alpha + max(t(S) - alpha, 0) / bandwidth,   busbw'(S) = F·S / t'(S)
        so doubling NVLink halves the bandwidth-bound large messages and leaves the latency-bound
        small ones near their measured time."""
        f = bus_factor(self.collective, self.group_size)
        pts = []
        for size, busbw in self.points:
            t = f * size / busbw
            t_new = latency * min(alpha_s, t) + max(t - alpha_s, 0.0) / bandwidth
            pts.append((size, f * size / t_new))
        return MeasuredCurve(self.collective, self.algorithm, self.group_size, tuple(pts), self.source)


def bus_factor(kind: str, n: int) -> float:
    """Bytes each rank moves per byte of buffer (nccl-tests busbw convention): 2(n-1)/n for
    all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for send/recv."""
    if kind == "send_recv":
        return 1.0
    return (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n


@dataclass(frozen=True, slots=True)
class NetworkLevel:
    """One dimension of the network. `span_gpus`: GPUs inside one unit of this level (None: as
    many as the run needs). `bandwidth_Bps`: one-way line rate per GPU into this level;
    `achieved_Bps` what ring collectives reach (x efficiency / oversubscription)."""

    kind: LevelKind
    name: str
    span_gpus: int | None
    bandwidth_Bps: float
    efficiency: float
    latency_s: float
    in_network_reduction: bool
    oversubscription: float = 1.0
    curves: tuple[MeasuredCurve, ...] = ()
    pair_Bps: float = 0.0  # achieved one-way bandwidth per GPU into its NVLink bridges (0: none)
    pair_latency_s: float = 0.0
    pair_group: int = 2  # GPUs per bridged clique (GPUs g·k .. g·k + g - 1)
    # seconds one step of a ring collective adds across this level's links, beyond the bandwidth
    # (NCCL's tuning model, src/graph/tuning.cc hwLat, ring / Simple: NVLink 3.4 us, PCIe 5.7 us,
    # network 9.6 us); 0 where NCCL's model does not apply (TPU ICI, xGMI / RCCL, host loopback)
    step_latency_s: float = 0.0

    @property
    def achieved_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency / self.oversubscription

    def scaled(self, bandwidth: float = 1.0, latency: float = 1.0) -> NetworkLevel:
        """What-if copy: line rate x `bandwidth`, latency x `latency`, measured curves rescaled."""
        from dataclasses import replace

        if bandwidth == 1.0 and latency == 1.0:
            return self
        return replace(self, bandwidth_Bps=self.bandwidth_Bps * bandwidth, latency_s=self.latency_s * latency,
                       step_latency_s=self.step_latency_s * latency,
                       curves=tuple(c.scaled(bandwidth, latency, self.latency_s) for c in self.curves),
                       pair_Bps=self.pair_Bps * bandwidth, pair_latency_s=self.pair_latency_s * latency)


def _scale_up_level(node: Node, per_node: int) -> NetworkLevel:
    intra = node.intra_node
    multi_host = node.domain_size > node.accelerators_per_node
    kind: LevelKind = "torus" if intra.topology == "torus-3d" else "rack" if multi_host else "scale-up"
    bridge = intra.pair_bridge
    pair_Bps, pair_latency_s, pair_group = 0.0, 0.0, 2
    if bridge is not None:
        pair_group = bridge.group
        eff = bridge.collective_efficiency.si("dimensionless") if bridge.collective_efficiency else 1.0
        pair_Bps = bridge.bandwidth.one_way_Bps("intra_node.pair_bridge.bandwidth") * eff
        pair_latency_s = bridge.latency.si("seconds")
    return NetworkLevel(
        kind=kind, name=intra.fabric, span_gpus=node.domain_size if multi_host else per_node,
        bandwidth_Bps=intra.bandwidth.one_way_Bps("intra_node.bandwidth"),
        efficiency=intra.collective_efficiency.si("dimensionless") if intra.collective_efficiency else 1.0,
        latency_s=intra.latency.si("seconds"), in_network_reduction=intra.in_network_reduction,
        curves=tuple(MeasuredCurve.from_spec(c) for c in intra.curves),
        pair_Bps=pair_Bps, pair_latency_s=pair_latency_s, pair_group=pair_group,
        step_latency_s=NCCL_RING_STEP_S.get(intra.fabric.split("-")[0].rstrip("0123456789"), 0.0),
    )


# NCCL's per-step latency of a ring collective over each transport, protocol Simple (the one large
# messages use): NVIDIA/nccl src/graph/tuning.cc hwLat[NVLINK / PCI / NET][Ring][Simple] = 3.4, 5.7,
# 9.6 us, the same file whose ring Simple base latency (8.4 us) the node specs carry. NCCL's own cost
# model charges a ring of n ranks over N nodes baseLat + (n - N)·intra + (N - 1)·inter per collective.
NCCL_RING_STEP_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 9.6e-6}


@lru_cache(maxsize=256)
def network_levels(node: Node, fabric: Fabric | None, cluster: Cluster | None, per_node: int) -> tuple[NetworkLevel, ...]:
    """The dimensions of a system built from `node` (using `per_node` of its accelerators),
    joined by `fabric` as `cluster` describes (None: the node's default fabric, non-blocking).
    Cached: the specs are loaded once and hash by identity."""
    levels = [_scale_up_level(node, per_node)]
    nics = cluster.nics_per_node if cluster and cluster.nics_per_node else (node.nics.count if node.nics else 0)
    if cluster and cluster.nic_bandwidth:
        nic_Bps = cluster.nic_bandwidth.one_way_Bps("nic_bandwidth")
    elif node.nics:
        nic_Bps = node.nics.bandwidth.one_way_Bps("nics.bandwidth")
    else:
        return tuple(levels)
    if nics == 0:
        return tuple(levels)
    nic_eff = node.nics.collective_efficiency.si("dimensionless") if node.nics and node.nics.collective_efficiency else 1.0
    per_gpu_Bps = nics * nic_Bps / per_node
    hop_s = fabric.per_hop_latency.si("seconds") if fabric else DEFAULT_HOP_LATENCY_S
    name = fabric.id if fabric else (node.nics.kind if node.nics else "nics")
    inr = bool(cluster and cluster.in_network_reduction)
    oversub = cluster.oversubscription if cluster else 1.0
    hops = cluster.hops if cluster else DEFAULT_HOPS
    leaf_nodes = cluster.leaf_nodes.si("dimensionless", "leaf_nodes") if cluster and cluster.leaf_nodes else None
    topology = cluster.topology if cluster else None
    first: LevelKind = "rail" if topology == "rail-optimized" else "torus" if topology == "torus-3d" else "scale-out"
    if leaf_nodes is None:
        levels.append(NetworkLevel(first, name, None, per_gpu_Bps, nic_eff, hop_s * hops, inr, oversub,
                                   step_latency_s=NCCL_RING_STEP_S["net"]))
        return tuple(levels)
    leaf_span = int(leaf_nodes) * per_node
    inner = levels[0].span_gpus or 1
    if leaf_nodes != int(leaf_nodes) or leaf_span <= inner or leaf_span % inner:
        from perfmodel.errors import SpecError

        raise SpecError("leaf_nodes", f"{leaf_nodes:g} nodes x {per_node} GPUs = {leaf_span:g} GPUs under one leaf",
                        f"a whole number of nodes whose GPUs are a multiple of the {inner}-GPU scale-up domain "
                        f"(e.g. {2 * inner // per_node} nodes)", f"clusters/{cluster.id if cluster else '?'}.yaml")
    step = NCCL_RING_STEP_S["net"]
    levels.append(NetworkLevel(first if first != "scale-out" else "leaf", name, leaf_span, per_gpu_Bps, nic_eff, hop_s, inr,
                               step_latency_s=step))
    levels.append(NetworkLevel("spine", name, None, per_gpu_Bps, nic_eff, hop_s * hops, inr, oversub, step_latency_s=step))
    return tuple(levels)
