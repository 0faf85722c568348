"""The input pipeline: storage reads, CPU decode / preprocess, host-to-device copies, feeding compute.

A pipeline spec (YAML, every figure per the unit written next to it):

    storage_read_bandwidth: 2 GB/s     per node, shared by the node's GPUs
    sample_bytes: 600 kB               bytes read from storage per sample
    device_sample_bytes: 1.2 MB        bytes copied to the device per sample (decoded); default sample_bytes
    cpu_time_per_sample: 4 ms          decode + preprocess, one worker (see `measure_dataset`)
    workers_per_gpu: 8                 DataLoader worker processes per GPU
    h2d_bandwidth: 25 GB/s             host-to-device copy, per GPU (pinned memory)
    prefetch: 2                        batches a GPU holds ready ahead of compute (0 = none)

Each GPU loads the samples of its data-parallel replica's micro-batches, n = global_batch / dp per
step (every rank of a replica runs its own loader, as torchtitan and plain DDP / FSDP do; Megatron
reads on one tensor-parallel rank and broadcasts, which this overstates when tp > 1). Per step:

    t_storage = n · sample_bytes / (storage_read_bandwidth / GPUs per node)
    t_cpu     = n · cpu_time_per_sample / workers_per_gpu
    t_h2d     = n · device_sample_bytes / h2d_bandwidth

The stages run concurrently with compute and with each other, so in steady state (prefetch >= 1)
the step is max(T_compute, t_storage, t_cpu, t_h2d) and the input pipeline is the bottleneck when
its slowest stage exceeds the compute step (`input_bound`); `data_wait_s` is the difference. With
prefetch 0 the loader starts a batch only when compute asks for it: the step is T_compute plus the
whole pipeline latency t_storage + t_cpu + t_h2d. The discrete-event version (`simulate`) runs the
same stages as simpy processes and stores (per-stage servers, a bounded prefetch queue) and agrees
with these forms in steady state.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simpy
from pydantic import BaseModel, ConfigDict, Field

from perfmodel.errors import PerfmodelError, SpecError
from perfmodel.estimate import Estimate
from perfmodel.units import parse_quantity


class InputPipelineSpec(BaseModel):
    """A data-loading pipeline with SI values (see the module docstring for the YAML)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    storage_read_Bps: float = Field(gt=0, description="per node, shared by its GPUs")
    sample_bytes: float = Field(gt=0)
    device_sample_bytes: float | None = Field(None, gt=0, description="decoded bytes copied per sample")
    cpu_s_per_sample: float = Field(ge=0, description="one worker")
    workers_per_gpu: int = Field(gt=0)
    h2d_Bps: float = Field(gt=0, description="per GPU")
    prefetch: int = Field(2, ge=0, description="batches held ready ahead of compute")

    @property
    def copy_bytes(self) -> float:
        return self.device_sample_bytes or self.sample_bytes


_FIELDS: dict[str, tuple[str, str]] = {  # yaml key -> (model field, dimension)
    "storage_read_bandwidth": ("storage_read_Bps", "bytes_per_s"),
    "sample_bytes": ("sample_bytes", "bytes"),
    "device_sample_bytes": ("device_sample_bytes", "bytes"),
    "cpu_time_per_sample": ("cpu_s_per_sample", "seconds"),
    "h2d_bandwidth": ("h2d_Bps", "bytes_per_s"),
}


def load_input_pipeline(path: str | Path) -> InputPipelineSpec:
    """Read a pipeline YAML; errors name the file, the field and what is allowed."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise SpecError("file", f"cannot read ({str(e)[:200]})", "a UTF-8 YAML mapping", str(p)) from None
    if not isinstance(data, dict):
        raise SpecError("file", "is not a mapping", "a YAML mapping of the fields in the docs", str(p))
    allowed = [*_FIELDS, "workers_per_gpu", "prefetch", "source", "notes"]
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("source", "notes"):
            continue
        if key in _FIELDS:
            field, dim = _FIELDS[key]
            try:
                out[field] = parse_quantity(value, dim, key)  # type: ignore[arg-type]
            except (ValueError, SpecError) as e:
                raise SpecError(key, f"{str(value)[:60]!r}: {str(e)[:200]}", f"a quantity in {dim}", str(p)) from None
        elif key in ("workers_per_gpu", "prefetch"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise SpecError(key, f"{str(value)[:60]!r} is not an integer", "an integer", str(p))
            out[key] = value
        else:
            raise SpecError(key, "unknown field", f"one of {allowed}", str(p))
    try:
        return InputPipelineSpec(**out)
    except ValueError as e:
        raise SpecError("file", str(e).splitlines()[0][:300], "the fields in perfmodel/planning/input_pipeline.py", str(p)) from None


@dataclass(frozen=True)
class InputStageTimes:
    """Seconds per optimizer step each stage needs for one GPU's samples."""

    samples_per_gpu: float
    storage_s: float
    cpu_s: float
    h2d_s: float

    @property
    def slowest_s(self) -> float:
        return max(self.storage_s, self.cpu_s, self.h2d_s)

    @property
    def latency_s(self) -> float:
        return self.storage_s + self.cpu_s + self.h2d_s

    @property
    def bottleneck(self) -> str:
        return max((("storage", self.storage_s), ("cpu", self.cpu_s), ("h2d", self.h2d_s)), key=lambda kv: kv[1])[0]


def stage_times(spec: InputPipelineSpec, global_batch: int, dp: int, gpus_per_node: int) -> InputStageTimes:
    n = global_batch / dp
    return InputStageTimes(
        samples_per_gpu=n,
        storage_s=n * spec.sample_bytes / (spec.storage_read_Bps / max(1, gpus_per_node)),
        cpu_s=n * spec.cpu_s_per_sample / spec.workers_per_gpu,
        h2d_s=n * spec.copy_bytes / spec.h2d_Bps,
    )


def bounded_step_s(compute_step_s: float, st: InputStageTimes, prefetch: int) -> float:
    """Steady-state step seconds (module docstring)."""
    if prefetch <= 0:
        return compute_step_s + st.latency_s
    return max(compute_step_s, st.slowest_s)


def apply_input_pipeline(est: Estimate, spec: InputPipelineSpec, gpus_per_node: int) -> Estimate:
    """The estimate with its step bounded by the input pipeline: `data_wait_s` joins the breakdown,
    `input_bound` says whether the loader is the bottleneck, and a message names the slowest stage."""
    st = stage_times(spec, est.plan.global_batch, est.plan.dp, gpus_per_node)
    step = bounded_step_s(est.step_time_s, st, spec.prefetch)
    wait = step - est.step_time_s
    bound = wait > 0 and spec.prefetch > 0
    msg = (f"input pipeline per step: storage {st.storage_s:.3g} s, cpu {st.cpu_s:.3g} s, h2d {st.h2d_s:.3g} s "
           f"(slowest: {st.bottleneck}) against compute {est.step_time_s:.3g} s"
           + ("; the loader is the bottleneck" if bound else "")
           + ("; prefetch 0: the loader latency adds to every step" if spec.prefetch <= 0 else ""))
    breakdown = {**est.breakdown_s, "data_wait_s": wait}
    return dataclasses.replace(est, step_time_s=step, breakdown_s=breakdown, input_bound=bound,
                               messages=(*est.messages, msg))


# ---- the discrete-event version -----------------------------------------------------------------

@dataclass(frozen=True)
class SimResult:
    steps: int
    step_time_s: float  # mean over the steady-state steps (the first `warmup` steps dropped)
    data_wait_s: float  # mean time compute waited for a batch per steady-state step
    end_s: float


def simulate(compute_step_s: float, st: InputStageTimes, prefetch: int, steps: int = 40, warmup: int = 8) -> SimResult:
    """One GPU's loader and compute as simpy processes: storage, a CPU worker pool and the copy
    engine each serve one step's samples in turn; the prefetch queue (a simpy Store of capacity
    `prefetch`) holds ready batches; compute takes one per step. With prefetch 0 the loader
    starts a batch only when compute requests it."""
    if steps <= warmup:
        raise PerfmodelError(f"steps {steps} must exceed warmup {warmup}")
    env = simpy.Environment()
    ready: simpy.Store = simpy.Store(env, capacity=max(1, prefetch))
    requests: simpy.Store = simpy.Store(env)
    starts: list[float] = []
    waits: list[float] = []

    def stage(delay: float, inbox: simpy.Store, outbox: simpy.Store) -> Any:
        while True:
            item = yield inbox.get()
            yield env.timeout(delay)
            yield outbox.put(item)

    storage_out: simpy.Store = simpy.Store(env, capacity=1)
    cpu_out: simpy.Store = simpy.Store(env, capacity=1)
    source: simpy.Store = simpy.Store(env, capacity=1)
    env.process(stage(st.storage_s, source, storage_out))
    env.process(stage(st.cpu_s, storage_out, cpu_out))
    env.process(stage(st.h2d_s, cpu_out, ready))

    def feeder() -> Any:
        for i in range(steps):
            if prefetch <= 0:
                yield requests.get()
            yield source.put(i)

    def compute() -> Any:
        for _ in range(steps):
            t0 = env.now
            if prefetch <= 0:
                yield requests.put(1)
            yield ready.get()
            waits.append(env.now - t0)
            starts.append(env.now)
            yield env.timeout(compute_step_s)

    env.process(feeder())
    proc = env.process(compute())
    env.run(until=proc)
    steady = [b - a for a, b in zip(starts[warmup:], starts[warmup + 1:], strict=False)]
    return SimResult(steps, statistics.fmean(steady), statistics.fmean(waits[warmup:]), env.now)


# ---- measuring a user's dataset ---------------------------------------------------------------

@dataclass(frozen=True)
class DatasetMeasurement:
    samples: int
    cpu_s_per_sample: float  # median of per-sample __getitem__ times, this process, one worker
    device_sample_bytes: float  # bytes of the tensors one sample yields

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "cpu_time_per_sample": f"{self.cpu_s_per_sample * 1e3:.4g} ms",
                "device_sample_bytes": f"{self.device_sample_bytes / 1e3:.4g} kB"}


def _tensor_bytes(obj: Any) -> float:
    if hasattr(obj, "element_size") and hasattr(obj, "nelement"):
        return float(obj.element_size() * obj.nelement())
    if hasattr(obj, "nbytes"):
        return float(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0.0


def measure_dataset(target: str, samples: int = 64) -> DatasetMeasurement:
    """Time `samples` reads of the torch Dataset that `target` ("pkg.module:factory" or
    "file.py:factory", the factory returning the dataset) yields, on this machine, in this
    process (one worker): decode + transforms per sample, and the bytes a sample puts on the device."""
    from perfmodel.user_code import call_factory, load_factory

    factory = load_factory(target, "--dataset")
    ds = call_factory(factory, f"--dataset {target}")
    n = min(samples, len(ds)) if hasattr(ds, "__len__") else samples
    if n <= 0:
        raise PerfmodelError(f"--dataset {target!r}: the dataset is empty")
    times, size = [], 0.0
    ds[0]  # warm-up: lazy file handles, caches
    for i in range(n):
        t0 = time.perf_counter()
        item = ds[i % (len(ds) if hasattr(ds, "__len__") else n)]
        times.append(time.perf_counter() - t0)
        size = _tensor_bytes(item)
    return DatasetMeasurement(n, statistics.median(times), size)


__all__ = [
    "DatasetMeasurement",
    "InputPipelineSpec",
    "InputStageTimes",
    "SimResult",
    "apply_input_pipeline",
    "bounded_step_s",
    "load_input_pipeline",
    "measure_dataset",
    "simulate",
    "stage_times",
]
