"""Load hardware_specs/ into strict models and resolve ids into a `System` the cost models use.

Layout: hardware_specs/accelerators/*.yaml, nodes/*.yaml, fabrics/*.yaml, clusters/*.yaml, one
object per file, the file's stem equal to its `id`. Errors name the file, the field and what was
expected.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from perfmodel.errors import SpecError, UnknownIdError
from perfmodel.hardware.specs import Accelerator, Cluster, Fabric, Node, Sourced
from perfmodel.units import Dimension, parse_quantity

T = TypeVar("T", bound=BaseModel)

REPO_ROOT = Path(__file__).resolve().parents[2]


def specs_dir() -> Path:
    return Path(os.environ.get("PERFMODEL_SPECS", REPO_ROOT / "hardware_specs"))


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        # libyaml's C loader when present: 5x faster than the pure-Python one on the catalogue
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise SpecError("(file)", f"not valid YAML: {e}", "a YAML mapping", str(path)) from None
    if not isinstance(data, dict):
        raise SpecError("(file)", f"top level is {type(data).__name__}", "a YAML mapping", str(path))
    return data


def parse_model(cls: type[T], data: dict[str, Any], path: Path | str) -> T:
    """Validate `data` as `cls`; turn pydantic's errors into one SpecError naming file and field."""
    try:
        return cls.model_validate(data)
    except SpecError as e:
        raise e.in_file(str(path)) from None
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        inner = err.get("ctx", {}).get("error")
        if isinstance(inner, SpecError):
            raise inner.in_file(str(path)) from None
        kind = err["type"]
        if kind == "extra_forbidden":
            allowed = ", ".join(_allowed_fields(cls, err["loc"][:-1]))
            raise SpecError(field, "unknown field", f"one of: {allowed}", str(path)) from None
        if kind == "missing":
            raise SpecError(field, "missing", "a value for this required field", str(path)) from None
        raise SpecError(field, f"{err['msg']} (got {err.get('input')!r})", _expected(err), str(path)) from None


def _expected(err: Any) -> str:
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return str(ctx["expected"])
    return err["type"].replace("_", " ")


def _allowed_fields(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    model: Any = cls
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        model = _inner_model(field.annotation) if field else None
    return sorted(model.model_fields) if model is not None and hasattr(model, "model_fields") else ["(see docs)"]


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _check_sources(obj: BaseModel, refs: dict[str, str], path: Path, prefix: str = "") -> None:
    """Every Sourced leaf must cite a `references` key or carry a citation of its own."""
    for name in type(obj).model_fields:
        value = getattr(obj, name)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else [(None, value)]
        for key, v in items:
            field = f"{prefix}{name}" + (f".{key}" if key is not None else "")
            if isinstance(v, Sourced) or (hasattr(v, "source") and isinstance(v.source, str)):
                src = v.source
                if src not in refs and " " not in src:
                    raise SpecError(
                        f"{field}.source", f"{src!r} is neither a references key nor a citation",
                        f"one of {sorted(refs)} or a full citation", str(path),
                    )
            if isinstance(v, BaseModel):
                _check_sources(v, refs, path, field + ".")


def _load_dir(cls: type[T], sub: str) -> dict[str, T]:
    out: dict[str, T] = {}
    for path in sorted((specs_dir() / sub).glob("*.yaml")):
        obj: Any = parse_model(cls, read_yaml(path), path)
        if obj.id != path.stem:
            raise SpecError("id", f"{obj.id!r} differs from the file name", repr(path.stem), str(path))
        _check_sources(obj, getattr(obj, "references", {}), path)
        out[path.stem] = obj
    return out


@dataclass(frozen=True)
class Catalog:
    accelerators: dict[str, Accelerator]
    nodes: dict[str, Node]
    fabrics: dict[str, Fabric]
    clusters: dict[str, Cluster]

    def accelerator(self, acc_id: str) -> Accelerator:
        try:
            return self.accelerators[acc_id]
        except KeyError:
            raise UnknownIdError(f"unknown accelerator {acc_id!r}; known: {', '.join(sorted(self.accelerators))}") from None

    def node(self, node_id: str) -> Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownIdError(f"unknown node {node_id!r}; known: {', '.join(sorted(self.nodes))}") from None

    def fabric(self, fabric_id: str) -> Fabric:
        try:
            return self.fabrics[fabric_id]
        except KeyError:
            raise UnknownIdError(f"unknown fabric {fabric_id!r}; known: {', '.join(sorted(self.fabrics))}") from None

    def system_ids(self) -> list[str]:
        return sorted(set(self.nodes) | set(self.clusters))


@lru_cache(maxsize=4)
def _load(root: str) -> Catalog:
    cat = Catalog(
        accelerators=_load_dir(Accelerator, "accelerators"),
        nodes=_load_dir(Node, "nodes"),
        fabrics=_load_dir(Fabric, "fabrics"),
        clusters=_load_dir(Cluster, "clusters"),
    )
    _check_links(cat)
    return cat


def load_catalog() -> Catalog:
    """The built-in catalogue (cached). Set PERFMODEL_SPECS to load another directory."""
    return _load(str(specs_dir()))


def _check_links(cat: Catalog) -> None:
    d = specs_dir()
    for a in cat.accelerators.values():
        if a.reference_node and a.reference_node not in cat.nodes:
            raise SpecError("reference_node", f"{a.reference_node!r} is not a node spec", f"one of {sorted(cat.nodes)}",
                            str(d / "accelerators" / f"{a.id}.yaml"))
    for n in cat.nodes.values():
        if n.accelerator not in cat.accelerators:
            raise SpecError("accelerator", f"{n.accelerator!r} unknown", f"one of {sorted(cat.accelerators)}",
                            str(d / "nodes" / f"{n.id}.yaml"))
        if n.default_fabric and n.default_fabric not in cat.fabrics:
            raise SpecError("default_fabric", f"{n.default_fabric!r} unknown", f"one of {sorted(cat.fabrics)}",
                            str(d / "nodes" / f"{n.id}.yaml"))
    for c in cat.clusters.values():
        if c.node not in cat.nodes:
            raise SpecError("node", f"{c.node!r} unknown", f"one of {sorted(cat.nodes)}", str(d / "clusters" / f"{c.id}.yaml"))
        if c.fabric not in cat.fabrics:
            raise SpecError("fabric", f"{c.fabric!r} unknown", f"one of {sorted(cat.fabrics)}", str(d / "clusters" / f"{c.id}.yaml"))
        for acc_id, node_id in c.nodes_by_accelerator.items():
            if node_id not in cat.nodes or cat.nodes[node_id].accelerator != acc_id:
                raise SpecError(f"nodes_by_accelerator.{acc_id}", f"{node_id!r} is not a node spec holding {acc_id}",
                                f"a node id from {sorted(n.id for n in cat.nodes.values() if n.accelerator == acc_id)}",
                                str(d / "clusters" / f"{c.id}.yaml"))


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    """Resolved hardware for one job: what the cost models read, all in SI units.

    `domain_size` accelerators share the scale-up fabric (NVLink/NVSwitch, xGMI, ICI); groups that
    span domains go over the NICs, `nics_per_domain` of them at `nic_Bps` each (one-way).
    """

    accelerator: Accelerator = field(repr=False)
    node: Node = field(repr=False)
    fabric: Fabric | None = field(repr=False)
    num_nodes: int
    gpus_per_node: int
    domain_size: int
    intra_Bps: float
    intra_latency_s: float
    intra_efficiency: float
    in_network_reduction: bool
    nic_Bps: float
    nics_per_node: int
    nic_efficiency: float
    inter_latency_s: float
    oversubscription: float
    name: str

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def scaled(self, flops: float = 1.0, hbm_bw: float = 1.0, intra_bw: float = 1.0, inter_bw: float = 1.0,
               latency: float = 1.0) -> System:
        """What-if copy with FLOP/s (peaks and measured rates), HBM bandwidth, scale-up and
        scale-out bandwidth, or latencies multiplied by the given factors."""
        from dataclasses import replace

        for name, f in (("flops", flops), ("hbm_bw", hbm_bw), ("intra_bw", intra_bw), ("inter_bw", inter_bw), ("latency", latency)):
            if not f > 0:
                raise ValueError(f"scaled({name}={f}): factors must be positive")
        s = self
        if flops != 1.0 or hbm_bw != 1.0:
            s = replace(s, accelerator=_scaled_accelerator(s.accelerator, flops, hbm_bw))
        return replace(
            s, intra_Bps=s.intra_Bps * intra_bw, nic_Bps=s.nic_Bps * inter_bw,
            intra_latency_s=s.intra_latency_s * latency, inter_latency_s=s.inter_latency_s * latency,
            name=s.name if (flops, hbm_bw, intra_bw, inter_bw, latency) == (1.0,) * 5 else f"{s.name} (what-if)",
        )


def _scaled_accelerator(acc: Accelerator, flops: float, hbm_bw: float) -> Accelerator:
    """A rebuilt (re-validated) accelerator whose FLOP rates and HBM bandwidths are scaled.
    Curves built from calibration drop out: the intra-node curves live on the Node."""
    d = acc.model_dump()

    def sc(entry: dict[str, Any], dim: Dimension, f: float, key: str = "value") -> None:
        v = parse_quantity(entry[key], dim, key)
        entry[key] = f"{v * f:.6e} {'FLOP/s' if dim == 'flop_per_s' else 'B/s'}"

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
    if cal.get("hbm_achieved"):
        sc(cal["hbm_achieved"], "bytes_per_s", hbm_bw)
    d["id"] = acc.id
    return Accelerator.model_validate(d)


def resolve_system(accelerator: str | None, system: str | None, n_gpus: int, gpus_per_node: int | None = None) -> tuple[System, list[str]]:
    """Build the System for a run: (system, messages about the defaults taken)."""
    cat = load_catalog()
    msgs: list[str] = []
    cluster: Cluster | None = None
    node: Node | None = None
    if system:
        if system in cat.clusters:
            cluster = cat.clusters[system]
            node = cat.node(cluster.node_for(accelerator))
        elif system in cat.nodes:
            node = cat.nodes[system]
        else:
            msgs.append(f"unknown system {system!r}: used the accelerator's reference node")
    acc_id = accelerator or (node.accelerator if node else None)
    if acc_id is None:
        raise UnknownIdError("no accelerator and no system given")
    acc = cat.accelerator(acc_id)
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
    num_nodes = max(1, math.ceil(n_gpus / per_node))
    domain = node.domain_size if node.domain_size > node.accelerators_per_node else per_node
    nics = (cluster.nics_per_node if cluster and cluster.nics_per_node else (node.nics.count if node.nics else 0))
    nic_bw = 0.0
    if cluster and cluster.nic_bandwidth:
        nic_bw = cluster.nic_bandwidth.one_way_Bps("nic_bandwidth")
    elif node.nics:
        nic_bw = node.nics.bandwidth.one_way_Bps("nics.bandwidth")
    nic_eff = node.nics.collective_efficiency.si("dimensionless") if node.nics and node.nics.collective_efficiency else 1.0
    intra = node.intra_node
    intra_eff = intra.collective_efficiency.si("dimensionless") if intra.collective_efficiency else 1.0
    hop = fabric.per_hop_latency.si("seconds") if fabric else 1e-6
    hops = cluster.hops if cluster else 3
    sysobj = System(
        accelerator=acc, node=node, fabric=fabric, num_nodes=num_nodes, gpus_per_node=per_node,
        domain_size=domain, intra_Bps=intra.bandwidth.one_way_Bps("intra_node.bandwidth"),
        intra_latency_s=intra.latency.si("seconds"), intra_efficiency=intra_eff,
        in_network_reduction=intra.in_network_reduction, nic_Bps=nic_bw, nics_per_node=max(nics, 0),
        nic_efficiency=nic_eff, inter_latency_s=hop * hops,
        oversubscription=cluster.oversubscription if cluster else 1.0,
        name=cluster.id if cluster else node.id,
    )
    return sysobj, msgs


def resolve_hardware(hardware: str | System, n_gpus: int, gpus_per_node: int | None = None) -> tuple[System, list[str]]:
    """What a user names as hardware: an accelerator id (on its reference node), a node or
    cluster id, or an already resolved System (returned as is). (System, messages)."""
    if isinstance(hardware, System):
        return hardware, []
    cat = load_catalog()
    if hardware in cat.accelerators:
        return resolve_system(hardware, None, n_gpus, gpus_per_node)
    if hardware not in cat.nodes and hardware not in cat.clusters:
        raise UnknownIdError(f"unknown hardware {hardware!r}: not an accelerator, node or cluster id; accelerators: "
                             f"{', '.join(sorted(cat.accelerators))}; systems: {', '.join(cat.system_ids())}")
    return resolve_system(None, hardware, n_gpus, gpus_per_node)
