"""Sweeps: the layout search over workloads x hardware x GPU counts x global batches (x sequence
lengths x precisions), run on every local core or on a Ray cluster, written to Parquet.

    workloads: [llama3-8b, llama3-70b, configs/Qwen3-8B/config.json]   # ids, workload YAMLs or HF config.json
    hardware: [h100-sxm5-80gb, b200]
    n_gpus: [64, 256, 1024]
    global_batch: [512, 1024]
    seq_len: 8192            # optional, one value or a list (default: each workload's own)
    precision: bf16          # one value or a list
    objective: step_time     # step_time | cost | tokens_per_joule
    top: 10                  # best layouts kept per point
    space: {max_cp: 4}       # optional SearchSpace fields
    des: {seeds: [0, 1, 2, 3], jitter_sigma: 0.05, top: 3,   # optional DES Monte Carlo of the top layouts,
          straggler_factor: 1.2, straggler_stage: last}       # optionally with one slow pipeline stage

A point is one (workload, hardware, n_gpus, global_batch, seq_len, precision); it is scored by
`perfmodel.planning.search` (every valid layout of the point in one vectorised pass, 10^4-10^5
layouts) and keeps its `top` layouts. A task is a chunk of consecutive points, so that a Ray task
(about 1 ms of overhead) carries thousands of layouts. Both backends run the same `run_points` on
the same points and concatenate in point order, so their rows are identical.

Rows: workload, hardware, n_gpus, global_batch, seq_len, precision, objective, rank (0 = best),
status ("ok", or "no_layout_fits" in one row with rank -1 for a point where nothing fits),
n_layouts (valid layouts of the point), step_time_s, the layout columns of
`search.LAYOUT_COLUMNS`, memory_bytes, headroom_bytes, tokens_per_s, mfu, the objective's column,
params, active_params, and with `des`: des_step_time_mean_s / _min_s / _max_s over the seeds.
Re-running with the same --out skips the points already in the file; the file is rewritten every
`flush_s` seconds so that an interrupted sweep keeps what it finished.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from perfmodel.errors import PerfmodelError, SpecError
from perfmodel.hardware.catalog import read_yaml
from perfmodel.planning.search import LAYOUT_COLUMNS, search
from perfmodel.planning.space import SearchSpace
from perfmodel.precision import DEFAULT_PRECISION, PrecisionName
from perfmodel.workload.spec import ModelSpec

KEY = ["workload", "hardware", "n_gpus", "global_batch", "seq_len", "precision"]
Objective = Literal["step_time", "cost", "tokens_per_joule"]


def _list(v: Any) -> Any:
    return v if isinstance(v, (list, tuple)) else [v]


class DesStudy(BaseModel):
    """DES Monte Carlo of each point's best layouts: lognormal per-op jitter, one run per seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seeds: tuple[int, ...] = Field(min_length=1)
    jitter_sigma: float = Field(0.05, ge=0)
    top: int = Field(1, gt=0, description="layouts per point re-scored")
    straggler_factor: float | None = Field(None, gt=0, description="one pipeline stage's compute slowed by this factor")
    straggler_stage: Literal["first", "last"] = Field("last", description="which stage straggles (any pp has both)")


class Sweep(BaseModel):
    """A SWEEP.yaml (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    workloads: tuple[str, ...] = Field(min_length=1)
    hardware: tuple[str, ...] = Field(min_length=1)
    n_gpus: tuple[int, ...] = Field(min_length=1)
    global_batch: tuple[int, ...] = Field(min_length=1)
    seq_len: tuple[int | None, ...] = (None,)
    precision: tuple[PrecisionName, ...] = (DEFAULT_PRECISION,)
    objective: Objective = "step_time"
    top: int = Field(10, gt=0)
    space: SearchSpace = SearchSpace()
    des: DesStudy | None = None
    calibration: str = Field("default", description="calibration profile: default, none or a `perfmodel fit` YAML")

    _as_list = field_validator("workloads", "hardware", "precision", mode="before")(_list)

    @field_validator("n_gpus", "global_batch", "seq_len", mode="before")
    @classmethod
    def _positive(cls, v: Any, info: ValidationInfo) -> list[Any]:
        """Integers > 0 (seq_len also null: the workload's own). A boolean is not an integer
        (pydantic would read true as 1), and seq_len 0 is not 'the default'."""
        vals = _list(v)
        if any(isinstance(x, bool) or (x is not None and not isinstance(x, int)) or (x is not None and x <= 0)
               for x in vals):
            raise SpecError(info.field_name or "?", f"{vals}", "integers > 0" + (", or null: the workload's own"
                                                                              if info.field_name == "seq_len" else ""))
        return vals


@dataclass(frozen=True)
class Point:
    spec: ModelSpec
    hardware: str
    n_gpus: int
    global_batch: int
    seq_len: int
    precision: str

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.spec.id, self.hardware, self.n_gpus, self.global_batch, self.seq_len, self.precision)


def load_sweep(path: str | Path) -> Sweep:
    from perfmodel.calibration.profile import load_profile
    from perfmodel.hardware.catalog import parse_model

    p = Path(path)
    sweep = parse_model(Sweep, read_yaml(p), p)
    try:
        load_profile(sweep.calibration)  # a profile that cannot be read fails here, not in every row
    except (PerfmodelError, OSError, ValueError) as e:
        raise SpecError("calibration", f"{sweep.calibration!r}: {e}",
                        "'default', 'none' or a profile YAML written by perfmodel fit", str(p)) from None
    # relative workload files are relative to the sweep file
    fixed = tuple(str(p.parent / w) if not Path(w).is_absolute() and (p.parent / w).is_file() else w
                  for w in sweep.workloads)
    return sweep.model_copy(update={"workloads": fixed})


def resolve_workload(name: str) -> ModelSpec:
    """A workload id, a workload YAML or a Hugging Face config.json."""
    from perfmodel.workload.catalog import get_workload, load_workload_file
    from perfmodel.workload.hf_config import is_hf_config, load_hf_config

    if is_hf_config(name):
        return load_hf_config(name)
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return load_workload_file(name)
    return get_workload(name)


def points(sweep: Sweep) -> list[Point]:
    from perfmodel.hardware.catalog import load_catalog

    cat = load_catalog()
    known = {*cat.accelerators, *cat.nodes, *cat.clusters}
    for hw in sweep.hardware:
        if hw not in known:
            raise SpecError("hardware", f"unknown id {hw!r}", f"one of: {', '.join(sorted(known))}")
    specs = [resolve_workload(w) for w in sweep.workloads]
    ids = [s.id for s in specs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SpecError("workloads", f"two workloads share the id(s) {sorted(dup)}", "distinct workload ids")
    out = []
    for spec, hw, n, gb, seq, prec in itertools.product(specs, sweep.hardware, sweep.n_gpus, sweep.global_batch,
                                                        sweep.seq_len, sweep.precision):
        out.append(Point(spec, hw, n, gb, seq or spec.seq_len, prec))
    return out


def run_point(pt: Point, sweep: Sweep) -> pd.DataFrame:
    """The kept layouts of one point as rows (see the module docstring)."""
    from perfmodel.workload.hf_config import param_counts

    base = dict(zip(KEY, pt.key, strict=True)) | {"objective": sweep.objective}
    try:
        res = search(pt.spec, pt.hardware, pt.n_gpus, pt.global_batch, seq_len=pt.seq_len, precision=pt.precision,
                     space=sweep.space, objective=sweep.objective, calibration=sweep.calibration)
    except (PerfmodelError, ValueError) as e:
        return pd.DataFrame([base | {"rank": -1, "status": f"error: {e}", "n_layouts": 0}])
    top = res.table.head(sweep.top).reset_index(drop=True)
    if top.empty:
        return pd.DataFrame([base | {"rank": -1, "status": "no_layout_fits", "n_layouts": res.n_layouts}])
    total, active = param_counts(pt.spec)
    df = top.copy()
    for k, v in reversed(list((base | {"rank": 0, "status": "ok", "n_layouts": res.n_layouts}).items())):
        df.insert(0, k, v)
    df["rank"] = range(len(df))
    df["params"], df["active_params"] = total, active
    if sweep.des is not None:
        _des_columns(df, res, sweep.des)
    return df


def _des_columns(df: pd.DataFrame, res: Any, des: DesStudy) -> None:
    from perfmodel.calibration.profile import calibrated_system
    from perfmodel.engines.registry import run_engine  # the DES with its jitter, seed and straggler options

    calibrated = calibrated_system(res.system, res.profile)  # the profile the layouts were ranked with
    means, mins, maxs = [], [], []
    for i in range(len(df)):
        if i >= des.top:
            means.append(float("nan"))
            mins.append(float("nan"))
            maxs.append(float("nan"))
            continue
        plan = res.plan(i)
        straggler = None
        if des.straggler_factor is not None:
            straggler = (0 if des.straggler_stage == "first" else plan.pp - 1, des.straggler_factor)
        times = [run_engine("des", res.spec, calibrated, plan, jitter_sigma=des.jitter_sigma, seed=s,
                            straggler=straggler, trace=False).step_time_s for s in des.seeds]
        means.append(sum(times) / len(times))
        mins.append(min(times))
        maxs.append(max(times))
    df["des_step_time_mean_s"], df["des_step_time_min_s"], df["des_step_time_max_s"] = means, mins, maxs


def run_points(chunk: Sequence[Point], sweep: Sweep) -> list[pd.DataFrame]:
    return [run_point(p, sweep) for p in chunk]


def chunks(pts: Sequence[Point], workers: int, per_worker: int = 4) -> list[list[Point]]:
    """Consecutive runs of points, about `per_worker` chunks per worker (a chunk is one task)."""
    if not pts:
        return []
    size = max(1, -(-len(pts) // (max(1, workers) * per_worker)))
    return [list(pts[i:i + size]) for i in range(0, len(pts), size)]


@dataclass
class Progress:
    total: int
    enabled: bool = True
    done: int = 0
    layouts: int = 0
    t0: float = field(default_factory=time.perf_counter)

    def update(self, frames: list[pd.DataFrame]) -> None:
        self.done += len(frames)
        self.layouts += sum(int(f["n_layouts"].iloc[0]) for f in frames)
        if self.enabled:
            dt = time.perf_counter() - self.t0
            eta = dt / self.done * (self.total - self.done) if self.done else 0.0
            print(f"\rsweep: {self.done}/{self.total} points, {self.layouts:,} layouts, "
                  f"{self.layouts / dt if dt else 0:,.0f} layouts/s, ETA {eta:,.0f} s   ", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled:
            print(file=sys.stderr)


def run_sweep(sweep: Sweep, out: Path, *, backend: Literal["local", "ray"] = "local", ray_address: str | None = None,
              workers: int | None = None, progress: bool = True, flush_s: float = 30.0) -> str:
    """Run every point not already in `out`; write `out`; return a one-line summary."""
    pts = points(sweep)
    old = read_results(out) if out.exists() else None
    done = set() if old is None else set(map(tuple, old[KEY].itertuples(index=False, name=None)))
    todo = [p for p in pts if p.key not in done]
    bar = Progress(len(todo), progress)
    t0 = time.perf_counter()
    frames: list[pd.DataFrame] = [] if old is None else [old]
    last = time.perf_counter()
    runner = _ray_chunks if backend == "ray" else _local_chunks
    for got in runner(todo, sweep, workers, ray_address):
        frames.extend(got)
        bar.update(got)
        if time.perf_counter() - last > flush_s:
            write_results(frames, out)
            last = time.perf_counter()
    bar.close()
    table = write_results(frames, out)
    dt = time.perf_counter() - t0
    return (f"{len(todo)} points run ({len(pts) - len(todo)} already in {out}), {bar.layouts:,} layouts in {dt:.1f} s "
            f"({bar.layouts / dt if dt else 0:,.0f}/s) on {backend}; {len(table)} rows -> {out}")


def _local_chunks(todo: list[Point], sweep: Sweep, workers: int | None, _addr: str | None) -> Iterator[list[pd.DataFrame]]:
    n = workers or os.cpu_count() or 1
    if n == 1 or len(todo) <= 1:
        for c in chunks(todo, 1):
            yield run_points(c, sweep)
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    parts = chunks(todo, n)
    # spawn, not fork: the parent may hold threads (Ray, BLAS) that fork would copy mid-lock
    with ProcessPoolExecutor(n, mp_context=get_context("spawn")) as ex:
        yield from ex.map(run_points, parts, itertools.repeat(sweep))


def _ray_chunks(todo: list[Point], sweep: Sweep, workers: int | None, address: str | None) -> Iterator[list[pd.DataFrame]]:
    try:
        import ray
    except ImportError:
        raise PerfmodelError("--backend ray needs Ray: pip install 'perfmodel[sweep]' (or pip install ray)") from None
    started = not ray.is_initialized()
    if started:
        if address:
            from perfmodel.hardware.catalog import REPO_ROOT

            # workers on other machines get this checkout (code, hardware_specs/, workloads/)
            ray.init(address=address, runtime_env={"working_dir": str(REPO_ROOT), "excludes": _RAY_EXCLUDES},
                     log_to_driver=False)
        else:
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(run_points)
        n = int(ray.cluster_resources().get("CPU", 1))
        sweep_ref = ray.put(sweep)
        refs = [remote.remote(c, sweep_ref) for c in chunks(todo, n)]
        # results in submission order, whatever order the tasks finish in: rows identical to local
        for ref in refs:
            yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()


_RAY_EXCLUDES = [".git", ".venv", "*.parquet", "__pycache__", ".mypy_cache", ".pytest_cache", "benchmarks/out"]


def write_results(frames: list[pd.DataFrame], out: Path) -> pd.DataFrame:
    table = pd.concat([f for f in frames if not f.empty], ignore_index=True) if frames else pd.DataFrame()
    tmp = out.with_suffix(out.suffix + ".tmp")
    table.to_parquet(tmp, index=False)
    tmp.replace(out)
    return table


def read_results(path: str | Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise SpecError("(file)", f"not a readable Parquet file: {e}", "the output of `perfmodel sweep`", str(path)) from None
    missing = [c for c in [*KEY, "rank", "status", "step_time_s"] if c not in df.columns]
    if missing:
        raise SpecError(missing[0], "missing column", f"a `perfmodel sweep` results file with {', '.join(KEY)}", str(path))
    return df


__all__ = ["KEY", "LAYOUT_COLUMNS", "DesStudy", "Point", "Sweep", "load_sweep", "points", "read_results", "run_point",
           "run_sweep"]
