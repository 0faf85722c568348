"""Load workloads/*.yaml (one ModelSpec per file, stem == id).

Users add their own with `add_workloads_dir(DIR)` (CLI: `--workloads DIR`): its *.yaml files join
the built-in ones (an id already there is refused, not replaced). A workload argument may also
be the path of one YAML file. A file that cannot be read is left out and recorded (see
`workload_problems`); the others still load, and asking for its id raises its error.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from perfmodel.errors import SpecError, UnknownIdError, quote
from perfmodel.hardware.catalog import REPO_ROOT, parse_model, read_yaml
from perfmodel.workload.spec import ModelSpec

_EXTRA_DIRS: list[str] = []


def workloads_dir() -> Path:
    return Path(os.environ.get("PERFMODEL_WORKLOADS", REPO_ROOT / "workloads"))


@lru_cache(maxsize=4)
def _load(root: str, extra: tuple[str, ...] = ()) -> tuple[dict[str, ModelSpec], list[SpecError]]:
    out: dict[str, ModelSpec] = {}
    where: dict[str, str] = {}
    problems: list[SpecError] = []
    for d in (root, *extra):
        for path in sorted(Path(d).glob("*.yaml")):
            if path.stem in out:
                problems.append(SpecError("id", f"{path.stem!r} is already defined by {where[path.stem]}",
                                          "a new id (copy the workload under another name to change it)", str(path)))
                continue
            try:
                spec = load_workload_file(path)
                if spec.id != path.stem:
                    raise SpecError("id", f"{quote(spec.id)} differs from the file name", repr(path.stem), str(path))
            except SpecError as e:
                problems.append(e)
                continue
            out[spec.id] = spec
            where[spec.id] = str(path)
    return out, problems


def load_workload_file(path: Path | str) -> ModelSpec:
    path = Path(path)
    return parse_model(ModelSpec, read_yaml(path), path)


def add_workloads_dir(path: Path | str) -> list[SpecError]:
    """Add every *.yaml under `path` to the workloads later calls see; returns the problems of
    that directory's files (each bad file is left out, the rest load)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise SpecError("(directory)", "does not exist or is not a directory", "a directory of workload *.yaml files",
                        str(root))
    key = str(root.resolve())
    if key not in _EXTRA_DIRS:
        _EXTRA_DIRS.append(key)
    return [p for p in workload_problems() if p.file and Path(p.file).resolve().is_relative_to(key)]


def clear_added_workloads() -> None:
    """Forget every directory `add_workloads_dir` added (the built-in workloads stay)."""
    _EXTRA_DIRS.clear()


def load_workloads() -> dict[str, ModelSpec]:
    """Built-in workloads (PERFMODEL_WORKLOADS names another built-in directory) plus every
    directory `add_workloads_dir` added; files that failed are left out (`workload_problems`)."""
    return _load(str(workloads_dir()), tuple(_EXTRA_DIRS))[0]


def workload_problems() -> list[SpecError]:
    """The errors of the workload files `load_workloads` left out."""
    return _load(str(workloads_dir()), tuple(_EXTRA_DIRS))[1]


def is_workload_path(workload: str) -> bool:
    return workload.endswith((".yaml", ".yml")) or os.sep in workload


def get_workload(workload: str) -> ModelSpec:
    """A workload by id, or by the path of its YAML file (`my/model.yaml`)."""
    if is_workload_path(workload):
        return load_workload_file(workload)
    w = load_workloads()
    if workload not in w:
        problem = next((p for p in workload_problems() if p.file and Path(p.file).stem == workload), None)
        if problem is not None:
            raise problem
        raise UnknownIdError(f"unknown workload {quote(workload)}; known: {', '.join(sorted(w))} "
                             f"(or the path of a workload YAML file)")
    return w[workload]
