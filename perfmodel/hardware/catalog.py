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

from perfmodel.errors import LayoutError, SpecError, UnknownIdError
from perfmodel.hardware.network import NetworkLevel, network_levels
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
        from dataclasses import replace

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
    measured) and HBM capacity are scaled."""
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


def resolve_system(accelerator: str | None, system: str | None, n_gpus: int, gpus_per_node: int | None = None) -> tuple[System, list[str]]:
    """Build the System for a run of `n_gpus`: (system, messages about the defaults taken).

    A fixed cluster holds at most num_nodes x gpus_per_node GPUs (more is a LayoutError naming
    its size); a node, or a cluster marked building_block, repeats as the run needs."""
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
    levels = network_levels(node, fabric, cluster, per_node)
    capacity: int | None = None
    if cluster and not cluster.building_block:
        capacity = cluster.num_nodes * per_node
        if n_gpus > capacity:
            raise _capacity_error(cluster, node, per_node, n_gpus)
    notes: list[str] = []
    if cluster and cluster.building_block:
        note = _blocks_note(cluster, levels, cluster.num_nodes * per_node, n_gpus)
        notes.extend([note] if note else [])
    if len(levels) == 1 and n_gpus > domain_gpus(levels, per_node):
        raise LayoutError(f"{cluster.id if cluster else node.id} has no scale-out NICs: one scale-up domain of "
                          f"{domain_gpus(levels, per_node)} {acc.id} at most; the run needs {n_gpus}")
    sysobj = System(
        accelerator=acc, node=node, fabric=fabric, num_nodes=max(1, math.ceil(n_gpus / per_node)),
        gpus_per_node=per_node, levels=levels, name=cluster.id if cluster else node.id,
        capacity_gpus=capacity, notes=tuple(notes),
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
        raise UnknownIdError(f"unknown hardware {hardware!r}: not an accelerator, node or cluster id; accelerators: "
                             f"{', '.join(sorted(cat.accelerators))}; systems: {', '.join(cat.system_ids())}")
    return resolve_system(None, hardware, n_gpus, gpus_per_node)
