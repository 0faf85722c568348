"""Checkpoints from the model: how many bytes, how long they take to write, and what that does to
goodput.

Bytes. A checkpoint keeps, per parameter, the model weights, the fp32 master weights and the
optimizer moments (memory.per_param_state_bytes; in pure fp32 the weights are the master), not
the gradients: 2 + 4 + 8 = 14 B per parameter for mixed-precision Adam (Rajbhandari et al. 2020,
§3.1). Distributed checkpointing (PyTorch DCP, Megatron-Core dist_checkpointing) writes each
unique shard once, spread over the ranks, so the job writes

    B_total = params · (weight + master + optimizer states) bytes

whatever the layout, and each node writes B_total / nodes.

Write time. The storage spec (hardware_specs/storage/*.yaml) bounds the write by the file system's
aggregate bandwidth and by a per-node limit where one is published:

    t_write = max(B_total / aggregate_write_Bps, (B_total / nodes) / per_node_write_Bps)

where the per-node limit, when the storage spec publishes none, is the node's scale-out NICs
(count x one-way bandwidth): an upper bound, since storage often has NICs of its own.

Synchronous checkpointing stalls training for t_write. Asynchronous checkpointing (Megatron-Core
async save, PyTorch DCP async_save) stalls only for the copy of the rank's share of the unique
state to pinned host memory, t_snapshot = (B_total / GPUs) / D2H bandwidth (each rank saves 1/dp
of its replica's shard, Megatron-Core's fully parallel save); the write runs behind training.
D2H bandwidth is the node's `pcie` figure when its spec gives one, else PCIe 5.0 x16 at 63 GB/s
per direction (32 GT/s · 16 lanes · 128/130 / 8, PCI-SIG PCIe 5.0 base specification), an upper
bound on what a copy achieves.

Restart. After a failure a job is rescheduled (`reschedule_s`, an assumption: default 5 minutes),
reads the last checkpoint (B_total at the read bandwidth, the same two bounds) and runs
`warmup_steps` steps before it is back at speed (default 10, an assumption covering compilation,
allocator and NCCL warm-up), then replays on average half a checkpoint interval. Young / Daly and
goodput (planning/goodput.py) take these instead of fixed figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from perfmodel.errors import SpecError, UnknownIdError
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import parse_model, read_yaml, specs_dir
from perfmodel.hardware.specs import Sourced, _Strict
from perfmodel.hardware.system import System
from perfmodel.memory import per_param_state_bytes
from perfmodel.planning.goodput import LLAMA3_GPU_MTBF_S, Goodput, goodput

PCIE5_X16_ONE_WAY_BPS = 32e9 * 16 * 128 / 130 / 8  # 63.0 GB/s, PCI-SIG PCIe 5.0 base specification
DEFAULT_RESCHEDULE_S = 300.0  # assumption: job requeue, node replacement, process start
DEFAULT_WARMUP_STEPS = 10  # assumption: compilation, allocator and NCCL warm-up


class StorageSpec(_Strict):
    """A checkpoint target: aggregate (file-system-wide) and per-node bandwidths, each optional
    and sourced; at least one write bound is required."""

    id: str
    name: str
    references: dict[str, str] = Field(default_factory=dict)
    aggregate_write_bandwidth: Sourced | None = None
    aggregate_read_bandwidth: Sourced | None = None
    per_node_write_bandwidth: Sourced | None = None
    per_node_read_bandwidth: Sourced | None = None
    notes: str | None = None

    def _bw(self, field: str) -> float | None:
        s: Sourced | None = getattr(self, field)
        if s is None:
            return None
        v = s.si("bytes_per_s", field)
        if v <= 0:
            raise SpecError(field, f"{s.value!r} is not positive", "a positive bandwidth", self.id)
        return v

    def transfer_s(self, total_bytes: float, nodes: int, kind: str, node_link_Bps: float | None = None) -> float:
        """Seconds to move `total_bytes` spread over `nodes` nodes (kind 'write' or 'read');
        reads fall back on the write bounds when the spec gives none; `node_link_Bps` bounds a
        node when the spec has no per-node figure."""
        agg = self._bw(f"aggregate_{kind}_bandwidth") or (self._bw("aggregate_write_bandwidth") if kind == "read" else None)
        node = self._bw(f"per_node_{kind}_bandwidth") or (self._bw("per_node_write_bandwidth") if kind == "read" else None)
        if agg is None and node is None:
            raise SpecError(f"aggregate_{kind}_bandwidth", "no write bandwidth given",
                            "aggregate_write_bandwidth and/or per_node_write_bandwidth", self.id)
        t = 0.0
        if agg is not None:
            t = max(t, total_bytes / agg)
        if node is None:
            node = node_link_Bps
        if node is not None:
            t = max(t, total_bytes / max(1, nodes) / node)
        return t


def storage_ids(directory: Path | None = None) -> list[str]:
    d = (directory or specs_dir()) / "storage"
    return sorted(p.stem for p in d.glob("*.yaml"))


def load_storage(ident: str | Path, directory: Path | None = None) -> StorageSpec:
    """A storage spec by id (hardware_specs/storage/ID.yaml) or by path."""
    p = Path(ident)
    if not (p.suffix in (".yaml", ".yml") and p.exists()):
        p = (directory or specs_dir()) / "storage" / f"{ident}.yaml"
        if not p.exists():
            raise UnknownIdError(f"storage {ident!r} is not a spec: one of {storage_ids(directory)}, or a YAML path")
    spec = parse_model(StorageSpec, read_yaml(p), p)
    for field in ("aggregate_write_bandwidth", "aggregate_read_bandwidth", "per_node_write_bandwidth", "per_node_read_bandwidth"):
        s = getattr(spec, field)
        if s is not None and s.source not in spec.references and len(s.source) < 12:
            raise SpecError(f"{field}.source", f"{s.source!r} is not a key of references", f"one of {sorted(spec.references)}", str(p))
    return spec


@dataclass(frozen=True)
class CheckpointCost:
    total_bytes: float  # unique bytes the job writes
    per_rank_state_bytes: float  # what one rank snapshots for an asynchronous save
    nodes: int
    write_s: float
    read_s: float
    snapshot_s: float  # device-to-host copy of the rank's state
    d2h_Bps: float
    asynchronous: bool

    @property
    def stall_s(self) -> float:
        """Training time lost per checkpoint."""
        return self.snapshot_s if self.asynchronous else self.write_s


def checkpoint_cost(est: Estimate, system: System, storage: StorageSpec, params: float, *,
                    asynchronous: bool = False) -> CheckpointCost:
    """Bytes and seconds of one checkpoint of the job `est` describes (module docstring)."""
    plan = est.plan
    copy_bytes, opt_bytes = per_param_state_bytes(plan)
    per_param = copy_bytes + opt_bytes  # model copy + master copy + the optimizer's state
    total = params * per_param
    nodes = max(1, math.ceil(est.n_gpus / system.node.accelerators_per_node))
    rank_state = total / est.n_gpus
    pcie = system.node.pcie
    d2h = pcie.one_way_Bps("pcie") if pcie is not None and pcie.direction else PCIE5_X16_ONE_WAY_BPS
    nics = system.node.nics
    link = nics.count * nics.bandwidth.one_way_Bps("nics.bandwidth") if nics is not None else None
    return CheckpointCost(total, rank_state, nodes, storage.transfer_s(total, nodes, "write", link),
                          storage.transfer_s(total, nodes, "read", link), rank_state / d2h, d2h, asynchronous)


@dataclass(frozen=True)
class GoodputRow:
    interval_s: float
    checkpoint: CheckpointCost
    restart_s: float
    result: Goodput


def restart_s(est: Estimate, ck: CheckpointCost, reschedule_s: float = DEFAULT_RESCHEDULE_S,
              warmup_steps: int = DEFAULT_WARMUP_STEPS) -> float:
    return reschedule_s + ck.read_s + warmup_steps * est.step_time_s


def goodput_from_model(est: Estimate, system: System, storage: StorageSpec, params: float, *,
                       asynchronous: bool = False, intervals_s: list[float] | None = None,
                       gpu_mtbf_s: float = LLAMA3_GPU_MTBF_S, reschedule_s: float = DEFAULT_RESCHEDULE_S,
                       warmup_steps: int = DEFAULT_WARMUP_STEPS) -> list[GoodputRow]:
    """Goodput at the Young / Daly interval (first row) and at each of `intervals_s`, with the
    checkpoint stall, write and restart taken from the model instead of fixed assumptions."""
    ck = checkpoint_cost(est, system, storage, params, asynchronous=asynchronous)
    r = restart_s(est, ck, reschedule_s, warmup_steps)
    total_bytes = ck.total_bytes
    bw = total_bytes / ck.write_s if ck.write_s > 0 else math.inf
    rows = []
    for tau in [None, *(intervals_s or [])]:
        g = goodput(est.n_gpus, total_bytes, bw, gpu_mtbf_s=gpu_mtbf_s, restart_s=r,
                    async_snapshot_s=ck.snapshot_s if asynchronous else None, interval_s=tau)
        rows.append(GoodputRow(g.interval_s, ck, r, g))
    return rows


__all__ = [
    "CheckpointCost",
    "GoodputRow",
    "StorageSpec",
    "checkpoint_cost",
    "goodput_from_model",
    "load_storage",
    "restart_s",
    "storage_ids",
]
