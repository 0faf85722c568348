"""The library face: `perfmodel.estimate(workload, cluster, plan)`.

    >>> import perfmodel
    >>> est = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb",
    ...                          perfmodel.ParallelPlan(tp=8, pp=8, dp=16, global_batch=1536))
    >>> est.step_time_s, est.mfu
"""

from __future__ import annotations

from perfmodel.calibration.frameworks import apply_framework
from perfmodel.calibration.frameworks import framework as get_framework
from perfmodel.calibration.profile import Profile, calibrated_system, load_profile, with_interval
from perfmodel.engines.registry import DEFAULT_ENGINE, run_engine
from perfmodel.errors import LayoutError
from perfmodel.estimate import Estimate
from perfmodel.hardware.system import System, resolve_hardware
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec

Engine = str  # a name in perfmodel.engines.registry.ENGINES


def resolve(workload: str | ModelSpec, cluster: str | System, plan: ParallelPlan,
            gpus_per_node: int | None = None) -> tuple[ModelSpec, System, list[str]]:
    spec = get_workload(workload) if isinstance(workload, str) else workload
    system, msgs = resolve_hardware(cluster, plan.world, gpus_per_node)
    return spec, system, msgs


def check_argument_types(workload: object, cluster: object, plan: object) -> None:
    """A library call with an argument of the wrong kind is a TypeError saying what it takes
    (not an AttributeError from deep inside); `workload` None is not checked."""
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"plan must be a perfmodel.ParallelPlan, e.g. ParallelPlan(dp=8, global_batch=64); "
                        f"got {type(plan).__name__}")
    if workload is not None and not isinstance(workload, str | ModelSpec):
        raise TypeError(f"workload must be a workload id, a YAML path or a ModelSpec; got {type(workload).__name__}")
    if not isinstance(cluster, str | System):
        raise TypeError(f"cluster must be an accelerator, node or cluster id or a System; got {type(cluster).__name__}")


def estimate(workload: str | ModelSpec, cluster: str | System, plan: ParallelPlan,
             engine: Engine = DEFAULT_ENGINE, gpus_per_node: int | None = None,
             calibration: str | Profile | None = "default", framework: str | None = None) -> Estimate:
    """Predict one training step of `workload` on `cluster` (an accelerator id, a node or
    cluster id, or a resolved System) under `plan`.

    `calibration`: 'default' (the shipped profile), 'none' (physics only), a profile YAML path
    (`perfmodel fit`) or a Profile. `framework`: the training stack (megatron-lm, megatron-core,
    deepspeed, torchtitan, composer, pytorch, llm.c, jax), which selects mechanisms (attention
    kernel, host dispatch); None leaves the plan as given with eager dispatch."""
    check_argument_types(workload, cluster, plan)
    prof = load_profile(calibration)
    fw = get_framework(framework) if framework else None
    spec, system, msgs = resolve(workload, cluster, plan, gpus_per_node)
    if fw is not None:
        plan = apply_framework(plan, fw, spec)
    if plan.world > system.num_gpus:
        raise LayoutError(f"plan needs {plan.world} GPUs (dp {plan.dp} x tp {plan.tp} x pp {plan.pp} x cp {plan.cp}) "
                          f"but {system.name} has {system.num_gpus}")
    est = run_engine(engine, spec, calibrated_system(system, prof, fw), plan, msgs)
    return with_interval(est, prof, system, spec, fw.name if fw is not None else None)


def estimate_graph(graph: Graph, cluster: str | System, plan: ParallelPlan, gpus_per_node: int | None = None,
                   engine: Engine = DEFAULT_ENGINE, calibration: str | Profile | None = "default") -> Estimate:
    """Predict a step of an already-built graph (e.g. `from_torch(module, inputs)`): dp, pp and
    tp, which splits the Linear pairs the import recognised (parallel/shard.py)."""
    check_argument_types(None, cluster, plan)
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a perfmodel Graph (from perfmodel.from_torch or build_graph); "
                        f"got {type(graph).__name__}")
    prof = load_profile(calibration)
    system, msgs = resolve_hardware(cluster, plan.world, gpus_per_node)
    est = run_engine(engine, None, calibrated_system(system, prof), plan, msgs, graph=graph)
    return with_interval(est, prof, system, None)
