"""Load hardware_specs/ into strict models (hardware/system.py resolves their ids into the `System`
the cost models use).

Layout: hardware_specs/accelerators/*.yaml, nodes/*.yaml, fabrics/*.yaml, clusters/*.yaml, one
object per file, the file's stem equal to its `id`. Errors name the file, the field and what was
expected.

Users add their own specs with `add_specs_dir(DIR)` (CLI: `--specs DIR`), a directory with the same
sub-folders; its files join the built-in catalogue (an id already there is refused, not replaced).
A file that cannot be read is left out and recorded in `Catalog.problems`: every other spec
still loads, and asking for the id of the bad file raises its error.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from perfmodel.errors import SpecError, UnitWarning, UnknownIdError, quote
from perfmodel.hardware.host_cpu import HOST_CPU, HOST_NODE, host_cpu_alias, own_calibration
from perfmodel.hardware.limits import check_quantities
from perfmodel.hardware.reading import read_yaml
from perfmodel.hardware.specs import Accelerator, Sourced
from perfmodel.hardware.system_specs import Cluster, Fabric, Node
from perfmodel.names import spelling_without_notes

__all__ = ["Catalog", "add_specs_dir", "load_catalog", "parse_model", "read_yaml", "specs_dir"]

T = TypeVar("T", bound=BaseModel)

REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("accelerators", "nodes", "fabrics", "clusters")
_EXTRA_DIRS: list[str] = []


def specs_dir() -> Path:
    return Path(os.environ.get("PERFMODEL_SPECS", REPO_ROOT / "hardware_specs"))


def add_specs_dir(path: Path | str) -> list[SpecError]:
    """Add the specs under `path` (sub-folders accelerators/, nodes/, fabrics/, clusters/) to the
    catalogue every later call sees (again: re-read it). Returns the problems found in that directory's files (each
    bad file is left out; the rest load)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise SpecError("(directory)", "does not exist or is not a directory",
                        f"a directory with sub-folders {', '.join(KINDS)}", str(root))
    if not any((root / k).is_dir() for k in KINDS):
        raise SpecError("(directory)", "has none of the sub-folders the catalogue reads",
                        f"at least one of {', '.join(f'{k}/' for k in KINDS)} holding *.yaml files", str(root))
    key = str(root.resolve())
    if key not in _EXTRA_DIRS:
        _EXTRA_DIRS.append(key)
    _load.cache_clear()  # adding a directory again re-reads it (files added to it since)
    return [p for p in load_catalog().problems if p.file and Path(p.file).resolve().is_relative_to(key)]


def clear_added_specs() -> None:
    """Forget every directory `add_specs_dir` added (the built-in catalogue stays)."""
    _EXTRA_DIRS.clear()


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
        msg = err["msg"].removeprefix("Value error, ")
        raise SpecError(field, f"{msg} (got {quote(err.get('input'))})", _expected(err), str(path)) from None


def _expected(err: Any) -> str:
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return str(ctx["expected"])
    if err["type"] == "value_error":
        return "a value the message above allows"
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
                        f"{field}.source", f"{quote(src)} is neither a references key nor a citation",
                        f"one of {sorted(refs)} or a full citation", str(path),
                    )
            if isinstance(v, BaseModel):
                _check_sources(v, refs, path, field + ".")


def load_spec_file(cls: type[T], path: Path) -> T:
    """One spec file, fully checked: schema, id = file stem, sources, every number's unit and
    range. Ambiguous units ('80 Gb' of memory) are warned about (UnitWarning), naming the file."""
    obj: Any = parse_model(cls, read_yaml(path), path)
    if obj.id != path.stem:
        raise SpecError("id", f"{quote(obj.id)} differs from the file name", repr(path.stem), str(path))
    _check_sources(obj, getattr(obj, "references", {}), path)
    try:
        notes = check_quantities(obj)
    except SpecError as e:
        raise e.in_file(str(path)) from None
    for note in notes:
        warnings.warn(f"{path}: {note}", UnitWarning, stacklevel=2)
    return obj


def _load_dir(cls: type[T], dirs: list[Path], taken: dict[str, str], problems: list[SpecError]) -> dict[str, T]:
    """Every *.yaml under each of `dirs` (built-in first); a file that fails is recorded in
    `problems` and left out; an id already loaded from an earlier directory is refused."""
    out: dict[str, T] = {}
    for d in dirs:
        for path in sorted(d.glob("*.yaml")):
            if path.stem in out:
                problems.append(SpecError("id", f"{path.stem!r} is already defined by {taken[path.stem]}",
                                          "a new id (copy the spec under another name to change it)", str(path)))
                continue
            try:
                out[path.stem] = load_spec_file(cls, path)
                taken[path.stem] = str(path)
            except SpecError as e:
                problems.append(e)
    return out


def _bare(name: str) -> str:
    """spelling() with bracketed notes and the vendor / brand (Tesla, Instinct, Habana) / DGX / HGX
    prefixes dropped, and Intel's device class (HPU, as PyTorch's `hpu` device and its tables name Gaudi)."""
    return re.sub(r"^((nvidia|amd|intel|google|dgx|hgx|tesla|instinct|habana|hpu)-)+", "", spelling_without_notes(name))


def name_key(name: str) -> str:
    """A hardware name reduced to what identifies it: lower case, no vendor or DGX / HGX prefix,
    no bracketed note, no separators ('TPUv4' = 'TPU v4', 'NVIDIA DGX B200' = 'b200',
    'B200 (DGX)' = 'b200')."""
    return _bare(name).replace("-", "")


# words a table adds to a chip's name that say nothing about which part it is: a GPU count ('8x'),
# the memory technology, 'GPU', the rack it sits in ('GB200 NVL72': NVL with a GPU count names the
# NVLink domain, not the chip) (form factor and capacity words do name the part: H800 PCIe is not
# H800 SXM, H100 NVL is not H100 SXM)
_FILLER = re.compile(r"\d+x|x\d+|hbm\d?e?|gpus?|tensor|core|nvl\d+")


def name_words(name: str) -> frozenset[str]:
    """The words of a hardware name in any order, without filler words ('A100 80GB SXM' =
    'a100-sxm-80gb', '8x H100 SXM5 80GB HBM3' = 'h100-sxm5-80gb'): the second try of
    accelerator_named, for tables that order or decorate the same words differently."""
    return frozenset(w for w in _bare(name).split("-") if w and not _FILLER.fullmatch(w))


@dataclass(frozen=True)
class Catalog:
    accelerators: dict[str, Accelerator]
    nodes: dict[str, Node]
    fabrics: dict[str, Fabric]
    clusters: dict[str, Cluster]
    problems: list[SpecError] = field(default_factory=list)
    # what `host-cpu` stands for on this machine (host_cpu_alias): (spec id or None, the note saying why, matched)
    host_cpu: tuple[str | None, str, bool] = (None, "", False)

    def problem_for(self, spec_id: str) -> SpecError | None:
        """The error of the file that would have defined `spec_id`, if one was left out."""
        return next((p for p in self.problems if p.file and Path(p.file).stem == spec_id), None)

    def strict(self) -> Catalog:
        """This catalogue, or the first problem raised: for checks that want every file good."""
        if self.problems:
            raise self.problems[0]
        return self

    def _get(self, table: dict[str, Any], kind: str, spec_id: str) -> Any:
        if spec_id in table:
            return table[spec_id]
        problem = self.problem_for(spec_id)
        if problem is not None:
            raise problem
        raise UnknownIdError(f"unknown {kind} {spec_id!r}; known: {', '.join(sorted(table))}")

    def accelerator(self, acc_id: str) -> Accelerator:
        return self._get(self.accelerators, "accelerator", acc_id)

    def accelerator_named(self, name: str) -> Accelerator:
        """The accelerator whose id is `name`, else the one whose id or an alias equals it up to
        case, spaces, '_' and a vendor prefix ('NVIDIA H100 80GB HBM3', 'H100' -> h100-sxm5-80gb).
        UnknownIdError when none or several do."""
        if name in self.accelerators or self.problem_for(name) is not None:
            return self.accelerator(name)
        key = name_key(name)
        hits = sorted({a.id for a in self.accelerators.values()
                       if key in (name_key(a.id), *(name_key(x) for x in a.aliases))})
        if not hits and (words := name_words(name)):
            hits = sorted({a.id for a in self.accelerators.values()
                           if words in (name_words(a.id), *(name_words(x) for x in a.aliases))})
        if len(hits) == 1:
            return self.accelerators[hits[0]]
        if hits:
            raise UnknownIdError(f"accelerator {name!r} could be any of {', '.join(hits)}: name one")
        return self.accelerator(name)

    def node(self, node_id: str) -> Node:
        return self._get(self.nodes, "node", node_id)

    def fabric(self, fabric_id: str) -> Fabric:
        return self._get(self.fabrics, "fabric", fabric_id)

    def system_ids(self) -> list[str]:
        return sorted(set(self.nodes) | set(self.clusters))


@lru_cache(maxsize=4)
def _load(root: str, extra: tuple[str, ...] = ()) -> Catalog:
    problems: list[SpecError] = []
    tables: list[dict[str, Any]] = []
    for kind, cls in zip(KINDS, (Accelerator, Node, Fabric, Cluster), strict=True):
        tables.append(_load_dir(cls, [Path(root) / kind, *(Path(e) / kind for e in extra)], {}, problems))
    accelerators, nodes, fabrics, clusters = tables
    cat = Catalog(accelerators, nodes, fabrics, clusters, problems)
    _check_links(cat)
    return _with_host_cpu(cat)


def _with_host_cpu(cat: Catalog) -> Catalog:
    """The catalogue with `host-cpu` / `host-node` pointing at this machine's CPU spec and its node,
    unless a spec defines `host-cpu` itself."""
    if HOST_CPU in cat.accelerators:
        return cat
    try:
        own = own_calibration(load_spec_file)
    except SpecError as e:
        cat.problems.append(e)
        own = None
    if own is not None:
        cat.accelerators[HOST_CPU], cat.nodes[HOST_NODE], why = own
        return replace(cat, host_cpu=(HOST_CPU, why, True))
    target, why, matched = host_cpu_alias(cat.accelerators)
    if target is None:
        return cat
    acc = cat.accelerators[target]
    cat.accelerators[HOST_CPU] = acc
    if acc.reference_node in cat.nodes and HOST_NODE not in cat.nodes:
        cat.nodes[HOST_NODE] = cat.nodes[acc.reference_node]
    return replace(cat, host_cpu=(target, why, matched))


def load_catalog() -> Catalog:
    """The catalogue (cached): the built-in specs (PERFMODEL_SPECS names another built-in
    directory) plus every directory `add_specs_dir` added."""
    return _load(str(specs_dir()), tuple(_EXTRA_DIRS))


def _check_links(cat: Catalog) -> None:
    """Drop nodes and clusters that name a spec the catalogue lacks, recording why; an
    accelerator whose reference node is missing stays (usable with an explicit system)."""
    def link(kind: str, obj: Any, field: str, target: str, what: str, known: dict[str, Any]) -> bool:
        if target in known:
            return True
        why = cat.problem_for(target)
        problem = f"{target!r} is not a loaded {what} spec" + (f" (its file was left out: {why})" if why else "")
        cat.problems.append(SpecError(field, problem, f"one of {sorted(known)}", _file_of(kind, obj.id)))
        return False

    for a in list(cat.accelerators.values()):
        if a.reference_node:
            link("accelerators", a, "reference_node", a.reference_node, "node", cat.nodes)
    for n in list(cat.nodes.values()):
        if not (link("nodes", n, "accelerator", n.accelerator, "accelerator", cat.accelerators)
                and (not n.default_fabric or link("nodes", n, "default_fabric", n.default_fabric, "fabric", cat.fabrics))):
            del cat.nodes[n.id]
    for c in list(cat.clusters.values()):
        ok = (link("clusters", c, "node", c.node, "node", cat.nodes)
              and link("clusters", c, "fabric", c.fabric, "fabric", cat.fabrics))
        for acc_id, node_id in c.nodes_by_accelerator.items():
            if ok and (node_id not in cat.nodes or cat.nodes[node_id].accelerator != acc_id):
                cat.problems.append(SpecError(
                    f"nodes_by_accelerator.{acc_id}", f"{node_id!r} is not a node spec holding {acc_id}",
                    f"a node id from {sorted(n.id for n in cat.nodes.values() if n.accelerator == acc_id)}",
                    _file_of("clusters", c.id)))
                ok = False
        if not ok:
            del cat.clusters[c.id]


def _file_of(kind: str, spec_id: str) -> str:
    for root in (str(specs_dir()), *_EXTRA_DIRS):
        path = Path(root) / kind / f"{spec_id}.yaml"
        if path.exists():
            return str(path)
    return str(specs_dir() / kind / f"{spec_id}.yaml")
