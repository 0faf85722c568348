"""Reinforcement-learning pipelines: CPU actors, batched policy inference, a learner.

An actor-learner system (IMPALA, Espeholt et al. 2018; with inference moved to accelerators as in
SEED RL, Espeholt et al. 2020) has three sides that run at once:

* actors: `actor_workers` CPU processes, each stepping `envs_per_worker` environments; one
  environment step costs `env_step_s` of CPU. A worker steps its environments, sends their
  observations for inference and waits for the actions.
* inference: `inference_servers` accelerators each take every pending observation (up to
  `inference_max_batch`) and run the policy forward on them: t_inf(b) seconds for a batch of b,
  from perfmodel's own cost models of the policy workload (forward ops on the accelerator, or the
  host's kernel-issue time, whichever is longer: small policies are launch bound).
* learner: every `learner_batch` trajectories of `unroll_length` steps, one training step of the
  policy whose time comes from perfmodel's engine (`perfmodel.estimate` of the workload with
  learner_batch x unroll_length samples per step on `learner_gpus` data-parallel GPUs).

The simulation (simpy) runs them for `duration_s` and reports environment steps per second, the
busy fraction of each side and the bottleneck: the side closest to fully busy. Bounds that hold
in steady state (and that the tests check):

    actors only      rate <= actor_workers · envs_per_worker / (envs_per_worker · env_step_s)
    learner          rate <= learner_batch · unroll_length / t_learn
    inference        rate <= inference_servers · b / t_inf(b) at the batch the servers reach

Trajectories beyond `queue_trajectories` waiting for the learner make actors wait (back-pressure;
IMPALA's queue is bounded the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy
from pydantic import BaseModel, ConfigDict, Field

from perfmodel.errors import PerfmodelError

if TYPE_CHECKING:
    from perfmodel.calibration.profile import Profile


class RLPipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    actor_workers: int = Field(gt=0, le=65_536, description="CPU actor processes (the simulation runs one each)")
    envs_per_worker: int = Field(1, gt=0)
    env_step_s: float = Field(gt=0, description="CPU seconds per environment step")
    inference_servers: int = Field(1, gt=0, description="accelerators serving the policy")
    inference_max_batch: int = Field(256, gt=0)
    unroll_length: int = Field(gt=0, description="environment steps per trajectory")
    learner_batch: int = Field(gt=0, description="trajectories per learner step")
    learner_gpus: int = Field(1, gt=0)
    queue_trajectories: int | None = Field(None, gt=0, description="default: 2 learner batches")


@dataclass(frozen=True)
class RLResult:
    env_steps_per_s: float
    learner_steps_per_s: float
    actor_busy: float  # fraction of actor CPU time stepping environments
    inference_busy: float
    learner_busy: float
    mean_inference_batch: float
    bottleneck: str  # actors | inference | learner
    learner_step_s: float
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def simulate_rl(spec: RLPipelineSpec, inference_s: Any, learner_step_s: float, duration_s: float | None = None) -> RLResult:
    """Run the pipeline; `inference_s(b)` gives seconds for a forward on b observations."""
    env = simpy.Environment()
    cap = spec.queue_trajectories or 2 * spec.learner_batch
    trajectories: simpy.Container = simpy.Container(env, capacity=cap + spec.actor_workers * spec.envs_per_worker, init=0)
    space: simpy.Container = simpy.Container(env, capacity=cap, init=cap)  # back-pressure tokens
    pending: list[tuple[int, simpy.Event]] = []
    wake = [env.event() for _ in range(spec.inference_servers)]
    idle: list[int] = []  # servers waiting for work
    stats = {"env_steps": 0.0, "actor_busy": 0.0, "inf_busy": 0.0, "inf_batches": 0.0, "inf_obs": 0.0,
             "learn_busy": 0.0, "learn_steps": 0.0}
    t_env = spec.envs_per_worker * spec.env_step_s
    if duration_s is None:
        cycle = t_env + inference_s(min(spec.inference_max_batch, spec.actor_workers * spec.envs_per_worker))
        duration_s = max(10 * cycle * spec.unroll_length, 60 * learner_step_s)
    warm = 0.2 * duration_s

    def busy(key: str, dt: float) -> None:
        """Count the part of a just-finished `dt` that lies after the warm-up."""
        stats[key] += max(0.0, min(dt, env.now - warm))

    def actor() -> Any:
        while True:
            for _ in range(spec.unroll_length):
                yield env.timeout(t_env)
                busy("actor_busy", t_env)
                done = env.event()
                pending.append((spec.envs_per_worker, done))
                if idle:
                    wake[idle.pop(0)].succeed()
                yield done
                if env.now >= warm:
                    stats["env_steps"] += spec.envs_per_worker
            yield space.get(spec.envs_per_worker)
            yield trajectories.put(spec.envs_per_worker)

    def server(i: int) -> Any:
        while True:
            if not pending:
                wake[i] = env.event()
                idle.append(i)
                yield wake[i]
                continue
            events: list[simpy.Event] = []
            n = 0
            while pending and n + pending[0][0] <= spec.inference_max_batch:
                k, ev = pending.pop(0)
                n += k
                events.append(ev)
            if not events:  # one request larger than the max batch runs alone
                k, ev = pending.pop(0)
                n, events = k, [ev]
            dt = inference_s(n)
            yield env.timeout(dt)
            busy("inf_busy", dt)
            if env.now >= warm:
                stats["inf_batches"] += 1
                stats["inf_obs"] += n
            for ev in events:
                ev.succeed()

    def learner() -> Any:
        while True:
            yield trajectories.get(spec.learner_batch)
            yield env.timeout(learner_step_s)
            busy("learn_busy", learner_step_s)
            if env.now >= warm:
                stats["learn_steps"] += 1
            yield space.put(spec.learner_batch)

    for _ in range(spec.actor_workers):
        env.process(actor())
    for i in range(spec.inference_servers):
        env.process(server(i))
    env.process(learner())
    env.run(until=duration_s)
    span = duration_s - warm
    actor_busy = stats["actor_busy"] / (span * spec.actor_workers)
    inf_busy = stats["inf_busy"] / (span * spec.inference_servers)
    learn_busy = stats["learn_busy"] / span
    sides = {"actors": actor_busy, "inference": inf_busy, "learner": learn_busy}
    return RLResult(stats["env_steps"] / span, stats["learn_steps"] / span, actor_busy, inf_busy, learn_busy,
                    stats["inf_obs"] / max(1.0, stats["inf_batches"]), max(sides, key=sides.__getitem__),
                    learner_step_s, duration_s)


def policy_timings(workload: str, hardware: str, spec: RLPipelineSpec,
                   calibration: str | Profile | None = "default") -> tuple[Any, float]:
    """(t_inf(b), learner step seconds) of a policy workload on an accelerator, from perfmodel's
    cost models: the forward of one micro-batch of b observations, and a training step of
    learner_batch x unroll_length samples over learner_gpus. `calibration` as in
    `perfmodel.estimate` ('default', 'none', a profile path or a Profile): both timings read the
    calibrated accelerator."""
    from functools import lru_cache

    from perfmodel.calibration.profile import calibrated_system, load_profile
    from perfmodel.compute.ops import op_cost
    from perfmodel.engines.costs import host_op_s
    from perfmodel.engines.registry import DEFAULT_ENGINE, run_engine
    from perfmodel.hardware.system import resolve_hardware
    from perfmodel.parallel.plan import ParallelPlan
    from perfmodel.workload.builder import build_graph
    from perfmodel.workload.catalog import get_workload

    model = get_workload(workload)
    raw, _ = resolve_hardware(hardware, spec.learner_gpus)
    system = calibrated_system(raw, load_profile(calibration))
    acc = system.accelerator
    host_fwd, _ = host_op_s(acc)

    @lru_cache(maxsize=1024)
    def inference_s(b: int) -> float:
        g = build_graph(model, b, model.seq_len, "bf16", "flash")
        gpu = sum(op_cost(acc, op, "fwd").time_s * layer.count for layer in g.layers for op in layer.ops)
        kernels = sum(op.kernels * layer.count for layer in g.layers for op in layer.ops)
        return max(gpu, kernels * host_fwd) if acc.kind != "cpu" else gpu + kernels * host_fwd

    samples = spec.learner_batch * spec.unroll_length
    if samples % spec.learner_gpus:
        raise PerfmodelError(f"learner batch {spec.learner_batch} x unroll {spec.unroll_length} = {samples} samples "
                             f"do not divide over learner_gpus {spec.learner_gpus}")
    plan = ParallelPlan(dp=spec.learner_gpus, global_batch=samples, micro_batch=samples // spec.learner_gpus)
    learn = run_engine(DEFAULT_ENGINE, model, system, plan).step_time_s
    return inference_s, learn


__all__ = ["RLPipelineSpec", "RLResult", "policy_timings", "simulate_rl"]
