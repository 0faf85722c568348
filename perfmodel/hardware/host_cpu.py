"""`host-cpu`: the CPU of the machine perfmodel runs on (docs/DESIGN.md).

The committed host specs are calibrations of particular CPUs (Accelerator.host_cpu: vendor, family
and model as /proc/cpuinfo names them, written by `perfmodel calibrate`). The id `host-cpu` (and its
node `host-node`) resolves to the one whose CPU this machine has; where none has it, to
HOST_CPU_FALLBACK, the CPU validation/runs_cpu.csv and the shipped profile's first CPU rows were
measured on, and every prediction says so (hardware/system.resolve_system). A spec whose id is
`host-cpu` itself (what `perfmodel calibrate` writes, added with --specs) is used as it is.
PERFMODEL_HOST_CPU=ID pins the alias (to predict runs measured on another machine).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from perfmodel.errors import SpecError
from perfmodel.hardware.specs import Accelerator, HostCpu
from perfmodel.hardware.system_specs import Node

HOST_CPU, HOST_NODE = "host-cpu", "host-node"
HOST_CPU_FALLBACK = "host-cpu-zen4"


def user_specs_dir() -> Path:
    """Where `perfmodel calibrate` writes when no --out is given: the user's data directory
    ($XDG_DATA_HOME/perfmodel/hardware_specs, else ~/.local/share/perfmodel/hardware_specs), never
    the repository's committed specs."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "perfmodel" / "hardware_specs"


@lru_cache(maxsize=1)
def this_host_cpu() -> HostCpu | None:
    """This machine's CPU from /proc/cpuinfo (None where it cannot be read)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, val = (t.strip() for t in line.partition(":"))
        if key in ("vendor_id", "cpu family", "model") and key not in info:
            info[key] = val
    try:
        return HostCpu(vendor=info["vendor_id"], family=int(info["cpu family"]), model=int(info["model"]))
    except (KeyError, ValueError, ValidationError):
        return None


def describe(cpu: HostCpu | None) -> str:
    return "unreadable" if cpu is None else f"{cpu.vendor} family {cpu.family} model {cpu.model}"


def own_calibration(load: Callable[[Any, Path], Any]) -> tuple[Accelerator, Node, str] | None:
    """The accelerator and node specs `perfmodel calibrate` wrote to user_specs_dir, and why they
    stand for `host-cpu`, where they were measured on this machine's CPU and no PERFMODEL_HOST_CPU
    pins the alias; None otherwise. `load(cls, path)` reads a spec file (a bad one raises SpecError)."""
    root = user_specs_dir()
    acc_path, node_path = root / "accelerators" / f"{HOST_CPU}.yaml", root / "nodes" / f"{HOST_NODE}.yaml"
    if not (acc_path.is_file() and node_path.is_file()) or os.environ.get("PERFMODEL_HOST_CPU"):
        return None
    acc, node = load(Accelerator, acc_path), load(Node, node_path)
    me = this_host_cpu()
    if acc.host_cpu is None or acc.host_cpu != me or node.accelerator != acc.id:
        return None
    return acc, node, f"host-cpu: this machine's CPU ({describe(me)}), as `perfmodel calibrate` measured it in {root}"


def host_cpu_alias(accelerators: dict[str, Accelerator]) -> tuple[str | None, str, bool]:
    """(the spec id `host-cpu` stands for, why, whether it was calibrated on this machine's CPU)."""
    pinned = os.environ.get("PERFMODEL_HOST_CPU")
    if pinned:
        if pinned in accelerators and accelerators[pinned].kind == "cpu":
            return pinned, f"host-cpu: {pinned} (pinned by PERFMODEL_HOST_CPU)", True
        known = sorted(i for i, a in accelerators.items() if a.kind == "cpu")
        raise SpecError("PERFMODEL_HOST_CPU", f"{pinned!r} is not a CPU spec", f"one of {known}", "(environment)")
    me = this_host_cpu()
    match = sorted(i for i, a in accelerators.items() if a.kind == "cpu" and a.host_cpu is not None and a.host_cpu == me)
    if match:
        return match[0], f"host-cpu: this machine's CPU ({describe(me)}), calibrated as {match[0]}", True
    if HOST_CPU_FALLBACK not in accelerators:
        return None, "", False
    fb = accelerators[HOST_CPU_FALLBACK]
    return HOST_CPU_FALLBACK, (
        f"host-cpu: no spec is calibrated on this machine's CPU ({describe(me)}); used {HOST_CPU_FALLBACK} "
        f"({describe(fb.host_cpu)}), whose speed can differ several-fold: run `perfmodel calibrate` "
        f"(under a minute) and host-cpu is this machine from then on"), False
