"""Load workloads/*.yaml (one ModelSpec per file, stem == id)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from perfmodel.errors import SpecError, UnknownIdError
from perfmodel.hardware.catalog import REPO_ROOT, parse_model, read_yaml
from perfmodel.workload.spec import ModelSpec


def workloads_dir() -> Path:
    return Path(os.environ.get("PERFMODEL_WORKLOADS", REPO_ROOT / "workloads"))


@lru_cache(maxsize=4)
def _load(root: str) -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for path in sorted(Path(root).glob("*.yaml")):
        spec = load_workload_file(path)
        if spec.id != path.stem:
            raise SpecError("id", f"{spec.id!r} differs from the file name", repr(path.stem), str(path))
        out[spec.id] = spec
    return out


def load_workload_file(path: Path | str) -> ModelSpec:
    path = Path(path)
    return parse_model(ModelSpec, read_yaml(path), path)


def load_workloads() -> dict[str, ModelSpec]:
    return _load(str(workloads_dir()))


def get_workload(workload_id: str) -> ModelSpec:
    w = load_workloads()
    if workload_id not in w:
        raise UnknownIdError(f"unknown workload {workload_id!r}; known: {', '.join(sorted(w))}")
    return w[workload_id]
