"""Resolve hardware ids into the `System` one job runs on: the accelerator, its node, the fabric
joining the nodes and the network levels the cost models read (SI units), with what-if scaling.

`resolve_system(accelerator, system, n_gpus)` takes ids from the catalogue (hardware/catalog.py);
`resolve_hardware(name, n_gpus)` takes whatever a user names (an accelerator, node or cluster id, or
a System already built). Every default taken comes back as a message; notes about how the run lays
out (racks spanned, what-if factors, which CPU `host-cpu` is) travel with the System.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from perfmodel.errors import LayoutError, UnknownIdError
from perfmodel.hardware.catalog import Catalog, load_catalog
from perfmodel.hardware.host_cpu import HOST_CPU, HOST_NODE
from perfmodel.hardware.network import NetworkLevel, network_levels
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system_specs import Cluster, Fabric, Node
from perfmodel.hardware.variability import SPEED_SPREAD
from perfmodel.names import spelling
from perfmodel.units import Dimension, parse_quantity

__all__ = ["SCALE_KEYS", "System", "check_scale_factor", "domain_gpus", "resolve_hardware", "resolve_system"]

SCALE_KEYS = ("flops", "hbm_bw", "intra_bw", "inter_bw", "latency", "hbm_capacity")
SCALE_RANGE = (1e-3, 1e3)  # what-if factors: a thousandfold either way is already far outside any real part


@dataclass(frozen=True)
class System:
    """Resolved hardware for one job: what the cost models read, all in SI units.

    `levels` is the network, innermost first (see perfmodel.hardware.network): level 0 is the
    scale-up domain (NVSwitch node, NVL72 rack, xGMI mesh, TPU torus), the levels above it the
    scale-out fabric. `capacity_gpus` is the fixed size of a cluster (None: a node or rack
    repeated as the run needs); `notes` say how the run lays out on it (racks spanned, what-if
    factors): information, not fallbacks, so they travel with the System into every estimate.
    """

    accelerator: Accelerator = field(repr=False)
    node: Node = field(repr=False)
    fabric: Fabric | None = field(repr=False)
    num_nodes: int
    gpus_per_node: int
    levels: tuple[NetworkLevel, ...] = field(repr=False)
    name: str
    capacity_gpus: int | None = None
    notes: tuple[str, ...] = ()
    # calibration (perfmodel/calibration/parameters.py), 1 = the physics as modelled:
    # the fraction of the modelled bandwidth a MoE dispatch / combine reaches (its seconds divide
    # by it), and a multiple of the modelled pipeline send/recv seconds
    ep_dispatch_efficiency: float = 1.0
    p2p_time_factor: float = 1.0
    # relative standard deviation of chip speed across the fleet: a step runs at its slowest
    # chip's pace (hardware/variability.py); the calibration parameter gpu_speed_spread scales it
    speed_spread: float = SPEED_SPREAD
    # `host-cpu` on a machine whose CPU no spec describes: another CPU's spec stands in for it
    # (hardware/host_cpu.py), and the prediction interval says how far CPUs differ
    host_stand_in: bool = False

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def domain_size(self) -> int:
        """Accelerators in one scale-up domain (level 0)."""
        return self.levels[0].span_gpus or self.num_gpus

    @property
    def intra_Bps(self) -> float:
        """One-way line rate per accelerator into the scale-up fabric."""
        return self.levels[0].bandwidth_Bps

    def scaled(self, flops: float = 1.0, hbm_bw: float = 1.0, intra_bw: float = 1.0, inter_bw: float = 1.0,
               latency: float = 1.0, hbm_capacity: float = 1.0) -> System:
        """What-if copy. Every figure a key feeds moves with it, measured ones included:
        flops: matrix and vector peaks, measured GEMM and attention rates;
        hbm_bw: HBM bandwidth, measured streaming and element-wise rates, the measured optimizer
          step (memory bound: its seconds divide by the factor);
        intra_bw / inter_bw: line rate of the scale-up level / every scale-out level, and the
          measured bus-bandwidth curves (their bandwidth part; see MeasuredCurve.scaled);
        latency: every network level's latency (and the latency part of the curves);
        hbm_capacity: HBM bytes per accelerator."""
        factors = {"flops": flops, "hbm_bw": hbm_bw, "intra_bw": intra_bw, "inter_bw": inter_bw,
                   "latency": latency, "hbm_capacity": hbm_capacity}
        for name, f in factors.items():
            check_scale_factor(name, f)
        if all(f == 1.0 for f in factors.values()):
            return self
        acc = self.accelerator
        if (flops, hbm_bw, hbm_capacity) != (1.0, 1.0, 1.0):
            acc = _scaled_accelerator(acc, flops, hbm_bw, hbm_capacity)
        levels = tuple(lv.scaled(intra_bw if i == 0 else inter_bw, latency) for i, lv in enumerate(self.levels))
        what = ", ".join(f"{k} x{f:g}" for k, f in factors.items() if f != 1.0)
        return replace(self, accelerator=acc, levels=levels, name=f"{self.name} (what-if)",
                       notes=(*self.notes, f"what-if hardware: {what}"))


def check_scale_factor(key: str, factor: float) -> None:
    """A what-if factor must be a known key and a finite number in SCALE_RANGE."""
    lo, hi = SCALE_RANGE
    if key not in SCALE_KEYS:
        raise ValueError(f"unknown scale key {key!r}; allowed: {', '.join(SCALE_KEYS)}")
    if not (isinstance(factor, int | float) and lo <= factor <= hi):
        raise ValueError(f"scale factor {key}={factor!r} is outside [{lo:g}, {hi:g}]; "
                         f"allowed keys: {', '.join(SCALE_KEYS)}")


def _scaled_accelerator(acc: Accelerator, flops: float, hbm_bw: float, hbm_capacity: float) -> Accelerator:
    """A rebuilt (re-validated) accelerator whose FLOP rates, HBM bandwidths (datasheet and
    measured) and HBM capacity are scaled. The GEMM fill/drain time stays the original's: it is
    fitted as measured minus ideal time on the measured shapes, and scaling the shapes' rates by
    the FLOP factor alone would move that fit (2x HBM would lengthen every kernel)."""
    from perfmodel.compute.ops import gemm_fixed_s  # ops -> comm -> this module: import at call

    fixed = gemm_fixed_s(acc)
    d = acc.model_dump()
    units = {"flop_per_s": "FLOP/s", "bytes_per_s": "B/s", "bytes": "B", "seconds": "s"}

    def sc(entry: dict[str, Any] | None, dim: Dimension, f: float, key: str = "value") -> None:
        if entry is None or f == 1.0:
            return
        v = parse_quantity(entry[key], dim, key)
        entry[key] = f"{v * f:.9e} {units[dim]}"

    for group in ("matrix_peak", "vector_peak"):
        for e in d[group].values():
            sc(e, "flop_per_s", flops)
    cal = d["calibration"]
    for e in cal["gemm_max_achievable"].values():
        sc(e, "flop_per_s", flops)
    for e in cal["gemm_shapes"]:
        sc(e, "flop_per_s", flops, "achieved")
    for e in cal["attention"]:
        sc(e, "flop_per_s", flops, "achieved")
    sc(d["hbm_bandwidth"], "bytes_per_s", hbm_bw)
    sc(cal.get("hbm_achieved"), "bytes_per_s", hbm_bw)
    sc(cal.get("elementwise_achieved"), "bytes_per_s", hbm_bw)
    sc(cal.get("optimizer_step_per_param"), "seconds", 1.0 / hbm_bw)
    sc(d["hbm_capacity"], "bytes", hbm_capacity)
    cal["gemm_fixed"] = {"value": f"{fixed!r} s", "source": f"what-if: {acc.id}'s own GEMM fill/drain time"}
    d["id"] = acc.id
    return Accelerator.model_validate(d)


def _capacity_error(cluster: Cluster, node: Node, per_node: int, n_gpus: int) -> LayoutError:
    cap = cluster.num_nodes * per_node
    return LayoutError(
        f"{cluster.id} has {cap} GPUs ({cluster.num_nodes} nodes x {per_node} {node.accelerator}); the run needs "
        f"{n_gpus}. Use at most {cap} GPUs, or name the node {node.id!r} as the system to repeat it as needed")


def _blocks_note(cluster: Cluster, levels: tuple[NetworkLevel, ...], block: int, n_gpus: int) -> str | None:
    """How a run lays out over a repeated building block (NVL72: racks of 72)."""
    unit = "rack" if levels[0].kind == "rack" and levels[0].span_gpus == block else "unit"
    count = math.ceil(n_gpus / block)
    last = n_gpus - (count - 1) * block
    if count == 1 and last == block:
        return None
    joined = f" joined by {levels[1].name}" if count > 1 and len(levels) > 1 else ""
    part = f"; the last {unit} is partial ({last} of {block} GPUs)" if last < block else ""
    return f"{cluster.id}: {n_gpus} GPUs span {count} {unit}{'s' if count > 1 else ''} of {block}{joined}{part}"


def _system_id(cat: Catalog, name: str) -> str | None:
    """The node or cluster id `name` is, exactly or up to case, spaces and '_' ('GB200 NVL72')."""
    return next((n for n in (name, spelling(name)) if n in cat.nodes or n in cat.clusters), None)


def resolve_system(accelerator: str | None, system: str | None, n_gpus: int, gpus_per_node: int | None = None) -> tuple[System, list[str]]:
    """Build the System for a run of `n_gpus`: (system, messages about the defaults taken).

    A fixed cluster holds at most num_nodes x gpus_per_node GPUs (more is a LayoutError naming
    its size); a node, or a cluster marked building_block, repeats as the run needs."""
    cat = load_catalog()
    msgs: list[str] = []
    cluster: Cluster | None = None
    node: Node | None = None
    if accelerator and not system and accelerator not in cat.accelerators and \
            (named := _system_id(cat, accelerator)) is not None:
        written, system, accelerator = accelerator, named, None
        as_id = "" if written == named else f" ({named})"
        msgs.append(f"accelerator {written!r}{as_id} is a system id: used that system and its accelerator")
    if system and system not in cat.nodes and system not in cat.clusters and \
            (named := _system_id(cat, system)) is not None:
        msgs.append(f"system {system!r} read as {named}")
        system = named
    if system:
        if system in cat.clusters:
            cluster = cat.clusters[system]
            node = cat.node(cluster.node_for(accelerator))
        elif system in cat.nodes:
            node = cat.nodes[system]
        elif (problem := cat.problem_for(system)) is not None:
            raise problem
        else:
            msgs.append(f"unknown system {system!r}: used the accelerator's reference node")
    acc_id = accelerator or (node.accelerator if node else None)
    if acc_id is None:
        raise UnknownIdError("no accelerator and no system given")
    acc = cat.accelerator_named(acc_id)
    # notes travel with the System and are information, not a fallback (planning/search.py refuses
    # fallbacks): how a written name was read, which CPU `host-cpu` is here, the racks a run spans
    host_notes: list[str] = []
    if acc.id != acc_id:
        host_notes.append(f"accelerator {acc_id!r} read as {acc.id} ({acc.name})")
    stand_in = False
    if HOST_CPU in (accelerator, system) or system == HOST_NODE:
        target, why, matched = cat.host_cpu
        if target is not None and acc.id == target:
            # which CPU `host-cpu` is here: information where this machine's own, a fallback where not
            (host_notes if matched else msgs).append(why)
            stand_in = not matched
    if node is None or node.accelerator != acc.id:
        if node is not None:
            msgs.append(f"system {system!r} holds {node.accelerator}, not {acc.id}: used {acc.id}'s reference node")
            cluster = None
        if not acc.reference_node:
            raise UnknownIdError(f"accelerator {acc.id!r} has no reference_node and no system was given")
        node = cat.node(acc.reference_node)
    fabric = cat.fabric(cluster.fabric) if cluster else (cat.fabric(node.default_fabric) if node.default_fabric else None)
    per_node = gpus_per_node or node.accelerators_per_node
    if per_node > node.accelerators_per_node:
        msgs.append(f"gpus_per_node {per_node} > {node.accelerators_per_node} of {node.id}: capped")
        per_node = node.accelerators_per_node
    levels = network_levels(node, fabric, cluster, per_node)
    capacity: int | None = None
    if cluster and not cluster.building_block:
        capacity = cluster.num_nodes * per_node
        if n_gpus > capacity:
            raise _capacity_error(cluster, node, per_node, n_gpus)
    notes: list[str] = host_notes
    if cluster and cluster.building_block:
        note = _blocks_note(cluster, levels, cluster.num_nodes * per_node, n_gpus)
        notes.extend([note] if note else [])
    if len(levels) == 1 and n_gpus > domain_gpus(levels, per_node):
        raise LayoutError(f"{cluster.id if cluster else node.id} has no scale-out NICs: one scale-up domain of "
                          f"{domain_gpus(levels, per_node)} {acc.id} at most; the run needs {n_gpus}")
    sysobj = System(
        accelerator=acc, node=node, fabric=fabric, num_nodes=max(1, math.ceil(n_gpus / per_node)),
        gpus_per_node=per_node, levels=levels, name=cluster.id if cluster else node.id,
        capacity_gpus=capacity, notes=tuple(notes), host_stand_in=stand_in,
    )
    return sysobj, msgs + notes


def domain_gpus(levels: tuple[NetworkLevel, ...], per_node: int) -> int:
    return levels[0].span_gpus or per_node


def resolve_hardware(hardware: str | System, n_gpus: int, gpus_per_node: int | None = None) -> tuple[System, list[str]]:
    """What a user names as hardware: an accelerator id (on its reference node), a node or
    cluster id, or an already resolved System (returned as is, with the notes it was built
    with). (System, messages)."""
    if isinstance(hardware, System):
        return hardware, list(hardware.notes)
    cat = load_catalog()
    if hardware in cat.accelerators:
        return resolve_system(hardware, None, n_gpus, gpus_per_node)
    if hardware not in cat.nodes and hardware not in cat.clusters:
        try:
            named = cat.accelerator_named(hardware)
        except UnknownIdError:
            named = None
        if named is not None:
            return resolve_system(hardware, None, n_gpus, gpus_per_node)
        problem = cat.problem_for(hardware)
        if problem is not None:
            raise problem
        raise UnknownIdError(f"unknown hardware {hardware!r}: not an accelerator, node or cluster id; accelerators: "
                             f"{', '.join(sorted(cat.accelerators))}; systems: {', '.join(cat.system_ids())}")
    return resolve_system(None, hardware, n_gpus, gpus_per_node)
