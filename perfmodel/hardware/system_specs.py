"""Strict pydantic models of the node, fabric and cluster specs (hardware_specs/nodes, fabrics,
clusters): the links between accelerators and what hardware/network.py builds a system's network
levels from. Numbers are ``Sourced`` leaves, as in hardware/specs.py (the accelerator models)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from perfmodel.hardware.specs import Price, Sourced, _Strict
from perfmodel.units import parse_quantity


class BusBwPoint(_Strict):
    """nccl-tests bus bandwidth at one message size."""

    size: str
    busbw: str

    @property
    def size_bytes(self) -> float:
        return parse_quantity(self.size, "bytes", "busbw_curve.size")

    @property
    def busbw_Bps(self) -> float:
        return parse_quantity(self.busbw, "bytes_per_s", "busbw_curve.busbw")


class CollectiveCurve(_Strict):
    """Measured bus bandwidth of one collective against message size, with its provenance."""

    collective: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
    algorithm: str = "ring"
    group_size: int = Field(gt=1)
    points: list[BusBwPoint] = Field(min_length=1)
    source: str


class PairBridge(_Strict):
    """NVLink bridges joining a node's accelerators in cliques of `group` (PCIe cards: 2-way bridges
    pair GPU 2k with 2k + 1; H200 NVL's 4-way bridges join GPUs 4k..4k + 3 every one to every
    other). A group of ranks inside one clique runs over the bridges; any group that leaves its
    clique crosses the node fabric (comm/collectives.py)."""

    group: int = Field(2, ge=2, description="accelerators per bridged clique (2: pairs; 4: a 4-way bridge)")
    bandwidth: Sourced = Field(description="per accelerator, into all its bridges (split evenly over its group - 1 peers)")
    latency: Sourced = Field(description="one collective across the whole clique (NCCL's ring model for `group` ranks)")
    collective_efficiency: Sourced | None = Field(
        None, description="large-message busbw of an all-reduce over the bridges / line rate (nccl-tests)")


class IntraNode(_Strict):
    fabric: str = Field(description="e.g. nvlink4-nvswitch, xgmi, ici-3d-torus, pcie4")
    topology: Literal["switch", "full-mesh", "torus-3d", "ring", "shared-memory"]
    bandwidth: Sourced = Field(description="per accelerator, into the fabric")
    latency: Sourced
    in_network_reduction: bool = False
    in_network_reduction_source: str | None = None
    collective_efficiency: Sourced | None = Field(
        None, description="large-message busbw / line rate for ring collectives (nccl-tests)"
    )
    curves: list[CollectiveCurve] = Field(default_factory=list)
    pair_bridge: PairBridge | None = Field(
        None, description="NVLink bridges joining PCIe cards in pairs or cliques of `group` (PairBridge)")


class Nics(_Strict):
    count: int = Field(gt=0, description="scale-out NICs per node")
    kind: str
    bandwidth: Sourced = Field(description="per NIC")
    collective_efficiency: Sourced | None = Field(None, description="achieved busbw / line rate")


class HostLink(_Strict):
    """Copies between one accelerator's memory and pinned host memory (nvbandwidth host_to_device /
    device_to_host, one GPU at a time): what activation offloading moves its tensors over."""

    h2d: Sourced = Field(description="host to device, per accelerator")
    d2h: Sourced = Field(description="device to host, per accelerator")


class Node(_Strict):
    id: str
    name: str
    accelerator: str
    accelerators_per_node: int = Field(gt=0, description="accelerators per host (server or tray)")
    scale_up_domain: int | None = Field(
        None, gt=0, description="accelerators sharing the intra-node fabric (72 for NVL72)"
    )
    references: dict[str, str] = Field(default_factory=dict)
    intra_node: IntraNode
    nics: Nics | None = None
    default_fabric: str | None = Field(None, description="fabric id used when a run names no cluster")
    host_memory: Sourced | None = None
    pcie: Sourced | None = None
    host_link: HostLink | None = Field(None, description="measured copy bandwidth between an accelerator and host memory")
    price: Price | None = None
    power: Sourced | None = Field(None, description="wall power of the node (or rack) at full load, if published")
    power_accelerators: int | None = Field(
        None, gt=0, description="accelerators the `power` figure feeds (a whole NVL72 rack: 72); default accelerators_per_node")
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Node:
        from perfmodel.errors import SpecError

        links: list[tuple[str, IntraNode | PairBridge]] = [("intra_node", self.intra_node)]
        if (bridge := self.intra_node.pair_bridge) is not None:
            links.append(("intra_node.pair_bridge", bridge))
        for name, link in links:
            if link.bandwidth.one_way_Bps(f"{name}.bandwidth") <= 0:
                raise SpecError(f"{name}.bandwidth", f"{link.bandwidth.value!r} is not positive", "a positive bandwidth")
            if link.latency.si("seconds", f"{name}.latency") <= 0:
                raise SpecError(f"{name}.latency", "not positive", "a positive time")
        if bridge is not None and self.accelerators_per_node % bridge.group:
            what = "an even number" if bridge.group == 2 else f"a multiple of {bridge.group}"
            raise SpecError("intra_node.pair_bridge", f"{self.accelerators_per_node} accelerators per node",
                            f"{what} of accelerators (the bridges join them in cliques of {bridge.group})")
        if self.nics and self.nics.bandwidth.one_way_Bps("nics.bandwidth") <= 0:
            raise SpecError("nics.bandwidth", "not positive", "a positive bandwidth")
        if self.host_link is not None:
            for field, s in (("host_link.h2d", self.host_link.h2d), ("host_link.d2h", self.host_link.d2h)):
                if s.one_way_Bps(field) <= 0:
                    raise SpecError(field, f"{s.value!r} is not positive", "a positive bandwidth")
        if self.power is not None and self.power.si("watts", "power") <= 0:
            raise SpecError("power", f"{self.power.value!r} is not positive", "a positive power such as 10.2 kW")
        return self

    @property
    def domain_size(self) -> int:
        return self.scale_up_domain or self.accelerators_per_node


class Fabric(_Strict):
    """A scale-out network: InfiniBand HDR/NDR/XDR, RoCE, Omni-Path, ICI."""

    id: str
    name: str
    kind: Literal["infiniband", "roce", "omnipath", "ici", "ethernet"]
    references: dict[str, str] = Field(default_factory=dict)
    link_bandwidth: Sourced = Field(description="per port")
    per_hop_latency: Sourced
    in_network_reduction: bool = False
    notes: str | None = None


class Cluster(_Strict):
    """Nodes joined by a scale-out fabric. Either a fixed machine (`num_nodes` is all it has: a run
    needing more GPUs is an error) or, with `building_block`, one unit repeated as a run needs
    (an NVL72 rack: `num_nodes` trays per rack, racks joined by `fabric`)."""

    id: str
    name: str
    node: str
    num_nodes: int = Field(gt=0, description="nodes in the cluster, or in one unit when building_block")
    building_block: bool = Field(False, description="the cluster is one unit (e.g. a rack) repeated as needed")
    fabric: str
    topology: Literal["fat-tree", "rail-optimized", "torus-3d", "dragonfly", "hypercube", "single-node"] = Field(
        description="scale-out shape: rail-optimized makes the first scale-out level a rail (GPU k of every node "
                    "on leaf k); single-node allows no scale-out (capacity one node)")
    oversubscription: float = Field(1.0, ge=1.0, description="bisection taper, 1 = non-blocking; applies above "
                                    "the leaf when leaf_nodes is given, else to every inter-node path")
    hops: int = Field(3, gt=0, description="switch hops between two nodes on the worst path")
    leaf_nodes: Sourced | None = Field(None, description="nodes under one leaf (one scalable unit of a rail-"
                                       "optimised fabric): one switch hop and no oversubscription inside it")
    in_network_reduction: bool = Field(False, description="the collective library reduces in the switches "
                                       "(InfiniBand SHARP via the NCCL plugin); needs a source")
    in_network_reduction_source: str | None = None
    nics_per_node: int | None = Field(None, gt=0, description="overrides the node's NIC count")
    nic_bandwidth: Sourced | None = Field(None, description="overrides the node's NIC speed")
    nodes_by_accelerator: dict[str, str] = Field(
        default_factory=dict,
        description="accelerator id -> node id, for a cluster id shared by several builds (nvl72: gb200 or gb300)",
    )
    references: dict[str, str] = Field(default_factory=dict)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        from perfmodel.errors import SpecError

        if self.in_network_reduction and not self.in_network_reduction_source:
            raise SpecError("in_network_reduction_source", "missing while in_network_reduction is true",
                            "a citation that the collective library uses in-network reduction on this cluster")
        if self.leaf_nodes is not None and self.leaf_nodes.si("dimensionless", "leaf_nodes") <= 0:
            raise SpecError("leaf_nodes", f"{self.leaf_nodes.value!r} is not positive", "a positive node count")
        if self.topology == "single-node" and self.num_nodes != 1:
            raise SpecError("num_nodes", f"{self.num_nodes} with topology single-node", "1, or another topology")
        return self

    def node_for(self, accelerator: str | None) -> str:
        """The node spec this cluster is built from when it holds `accelerator`."""
        if accelerator is None:
            return self.node
        return self.nodes_by_accelerator.get(accelerator, self.node)
