"""The discrete-event engine: one training step played out op by op with simpy.

Actors (one representative rank per pipeline stage, and `replicas` data-parallel copies of the
pipeline when variability asks for them):
    compute stream   one process per (replica, stage) running its schedule's order of work:
                     F (forward), B (backward incl. recompute; input-gradient only under ZB-H1)
                     and W (weight-gradient GEMMs, ZB-H1 only) per micro-batch and model chunk
    p2p links        a `Resource` per directed stage pair; a send holds it p2p_time_s, so two
                     sends down one link queue; the receiver's op waits for the arrival, and
                     the sender's stream waits too (Megatron's blocking p2p, which makes the
                     closed forms' 2·v·p2p per micro-batch exact) unless `overlap_p2p`
    DP stream        one process per stage: the gradient buckets (one per layer instance, its
                     share of the stage's collective by parameters) of the grad-final op (the
                     last micro-batch's B, or W under ZB-H1) reduced as backward produces them;
                     a bucket starts when every replica has produced it (without overlapped
                     reduction, when every replica's compute for the stage is done)
    FSDP units       ZeRO-3: every layer instance a unit with its own gather / reduce-scatter
                     (`des_costs.fsdp_unit_schedule`: a compute and a communication stream, one-unit-ahead
                     prefetch, re-gather in backward), played out once per chunk; the forward
                     waits before each F, the backward's before each B. With a pipeline the
                     units are gathered before the first micro-batch's F only and their
                     reduce-scatters are DP-stream buckets after the grad-final op
    optimizer        after the stage's DP sync, its own optimizer seconds (the analytic engine takes
                     the largest over candidate ranks of tail less drain lead: tail_candidates)
All durations come from the shared stage costs (`engines/stages.py`: per virtual stage, the p2p
send, the DP collectives, the contention fraction); the closed forms give only what is not
simulated (the ZeRO-1/2 parameter gather, the optimizer step).
The DES never runs or imports the analytic engine: it is the independent check.

Schedules (perfmodel/parallel/schedules/) emit each stage's order of F, B and W; the engine
resolves dependencies:
    gpipe        all forwards, then all backwards (reverse micro-batch order)
    1f1b         p-s-1 warm-up forwards, then one forward one backward (Narayanan et al. 2021)
    interleaved  Megatron's virtual-pipeline order: micro-batches in groups of g (p, or the
                 smallest larger group Megatron accepts when m is no multiple of p), chunk-major;
                 warm-up 2(p-s-1) + (v-1)g virtual forwards (all of them when m < p)
    zb-h1        1F1B's F/B order with B split from W; stage s runs W(j) after B(j + s), so it
                 holds at most p activations (1F1B's peak) and the deferred W's fill the drain
                 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism" §3.1)

DP exposure differs from the closed form where buckets are unequal: the last bucket reduced is
the one backward produces last (the embedding's on stage 0), not an average layer's share.

Variability: each op's (compute and p2p) duration times a lognormal factor of mean 1 (sigma `jitter_sigma`, numpy
seed `seed`), and a `straggler` (stage, factor) slows one rank's compute; the step time is the
latest finish over all simulated ranks. The timeline is a Chrome trace-event list (ph 'X', ts/dur
in microseconds, pid = replica·p + stage, tid = stream) that opens in Perfetto.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from perfmodel.engines import closed_forms as cf
from perfmodel.engines.des_costs import ChunkCost, chunk_costs
from perfmodel.engines.stages import (
    can_overlap,
    comm_contention_fraction,
    dp_collectives,
)
from perfmodel.engines.step import StepInputs, finish, prepare
from perfmodel.estimate import Estimate
from perfmodel.hardware.system import System
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import Work, get_schedule
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec

STREAMS = {"compute": 0, "p2p next": 1, "p2p prev": 2, "dp": 3}
US = 1e6  # trace times are microseconds


# ---- the simulation -------------------------------------------------------------------------

@dataclass
class RankResult:
    busy_s: float = 0.0  # compute-stream seconds of F, B, W
    fsdp_s: float = 0.0
    send_wait_s: float = 0.0  # compute stream blocked on its own sends
    compute_end_s: float = 0.0
    dp_tail_s: float = 0.0  # from compute end to the end of the DP sync, plus contention
    optimizer_s: float = 0.0
    finish_s: float = 0.0
    finished: bool = False


class PipelineSim:
    """One step of `replicas` copies of a p-stage pipeline; `run()` fills `result[r][s]`."""

    def __init__(self, plan: ParallelPlan, costs: list[list[ChunkCost]], p2p_s: float, optimizer_s: list[float],
                 param_s: tuple[float, float], contention: float, *, jitter_sigma: float = 0.0, seed: int = 0,
                 straggler: tuple[int, float] | None = None, replicas: int = 1, trace: bool = True,
                 overlap_p2p: bool = False, overlap_dp: bool = True) -> None:
        sched = self.sched = get_schedule(plan.schedule_name)
        self.p, self.m, self.v = plan.pp, plan.num_micro_batches, len(costs[0])
        self.m_chunk = sched.micro_batches_per_chunk(self.m) if self.p > 1 else self.m  # grads final after these
        self.depth = sched.depth(self.p, plan.vp) if self.p > 1 else 1
        self.zb = sched.defers_wgrad
        self.grad_kind = "W" if self.zb else "B"  # the op after which a chunk's gradients are final
        self.fsdp_once = plan.zero_stage == 3 and plan.pp > 1  # gathered once, reduce-scattered once
        self.costs, self.p2p_s, self.optimizer_s = costs, p2p_s, optimizer_s
        self.param_exposed_s, self.param_hidden_s = param_s
        self.contention = contention
        self.replicas, self.straggler, self.trace = replicas, straggler, trace
        self.overlap_p2p = overlap_p2p
        # without overlapped gradient reduction (Megatron's finalize_model_grads after the
        # schedule; DDP without its hooks) no bucket starts before the stage's compute is done,
        # though an earlier virtual stage's gradients are final sooner
        self.overlap_dp = overlap_dp
        self.env = simpy.Environment()
        self.events: dict[tuple[Any, ...], simpy.Event] = {}
        self.links = {(r, s, d): simpy.Resource(self.env, 1) for r in range(replicas) for s in range(self.p)
                      for d in {(s + 1) % self.p, (s - 1) % self.p}}
        self.orders = [sched.order(self.p, self.m, plan.vp, s) for s in range(self.p)]
        self.vp = plan.vp
        self.records: list[tuple[str, float, float, int, int]] = []
        self.result = [[RankResult() for _ in range(self.p)] for _ in range(replicas)]
        self.sync_end = [0.0] * self.p
        self.grad_total = [sum(b for c in row for _, b in c.buckets) for row in costs]
        seeds = np.random.SeedSequence(seed).spawn(replicas * self.p)
        self._noise = [[_noise(jitter_sigma, seeds[r * self.p + s]) for s in range(self.p)] for r in range(replicas)]

    def run(self) -> None:
        for s in range(self.p):
            if self.grad_total[s] > 0:
                self.env.process(self._dp(s))
            for r in range(self.replicas):
                self.env.process(self._stage(r, s))
        self.env.run()
        unfinished = [(r, s) for r in range(self.replicas) for s in range(self.p) if not self.result[r][s].finished]
        assert not unfinished, f"schedule deadlocked on ranks {unfinished}"

    # events ----------------------------------------------------------------------------
    def _ev(self, key: tuple[Any, ...]) -> simpy.Event:
        e = self.events.get(key)
        if e is None:
            e = self.events[key] = self.env.event()
        return e

    def _later(self, delay: float, ev: simpy.Event) -> None:
        t = self.env.timeout(delay)
        def fire(_t: simpy.Event) -> None:
            ev.succeed()

        t.callbacks.append(fire)

    def _dep(self, r: int, s: int, kind: str, mb: int, ch: int) -> simpy.Event | None:
        """The event this work waits for: the previous position's forward of the same
        micro-batch, or the next position's backward (schedules' place / depth)."""
        pipe, pos = self.sched.place(self.p, self.vp, s, ch)
        if kind == "F" and pos > 0:
            return self._ev((r, "F", mb, pipe, pos - 1))
        if kind == "B" and pos < self.depth - 1:
            return self._ev((r, "B", mb, pipe, pos + 1))
        return None

    def _record(self, name: str, start: float, dur: float, pid: int, stream: str) -> None:
        if self.trace and dur > 0:
            self.records.append((name, start, dur, pid, STREAMS[stream]))

    # actors ----------------------------------------------------------------------------
    def _stage(self, r: int, s: int) -> Generator[simpy.Event, Any, None]:
        done = [0] * self.v  # grad-producing ops done per chunk
        for work in self.orders[s]:
            dep = self._dep(r, s, *work)
            if dep is not None and not dep.triggered:
                yield dep
            yield from self._op(r, s, work, done)
        self.result[r][s].compute_end_s = self.env.now
        self._ev(("computed", r, s)).succeed()
        yield from self._finish(r, s)

    def _op(self, r: int, s: int, work: Work, done: list[int]) -> Generator[simpy.Event, Any, None]:
        kind, mb, ch = work
        env, c, pid = self.env, self.costs[s][ch], r * self.p + s
        res = self.result[r][s]
        if self.fsdp_once:  # first micro-batch's gathers; chunk_cat before the grad-final op
            last = kind == self.grad_kind and done[ch] == self.m_chunk - 1
            wait = c.fsdp_fwd_s if kind == "F" and mb == 0 else c.fsdp_bwd_s if last else 0.0
        else:
            wait = c.fsdp_fwd_s if kind == "F" else c.fsdp_bwd_s if kind == "B" else 0.0
        if wait:
            self._record("fsdp wait", env.now, wait, pid, "compute")
            res.fsdp_s += wait
            yield env.timeout(wait)
        nominal = c.fwd_s if kind == "F" else c.bwd_s if kind == "B" else c.wgrad_s
        d = nominal * next(self._noise[r][s])
        if self.straggler and r == 0 and s == self.straggler[0]:
            d *= self.straggler[1]
        start = env.now
        if kind == self.grad_kind:
            done[ch] += 1
            if done[ch] == self.m_chunk:  # this op produces the final gradients of chunk ch
                for k, (frac, _) in enumerate(c.buckets):
                    self._later(frac * d, self._ev((r, "grad", s, ch, k)))
        self._record(f"{kind}{mb}" + (f".{ch}" if self.v > 1 else ""), start, d, pid, "compute")
        res.busy_s += d
        yield env.timeout(d)
        pipe, pos = self.sched.place(self.p, self.vp, s, ch)
        if kind == "F" and pos < self.depth - 1:
            dst = self.sched.rank_at(self.p, self.vp, pipe, pos + 1)
            yield from self._send(r, s, dst, self._ev((r, "F", mb, pipe, pos)), f"act {mb}", self._stream(s, dst))
        elif kind == "B" and pos > 0:
            dst = self.sched.rank_at(self.p, self.vp, pipe, pos - 1)
            yield from self._send(r, s, dst, self._ev((r, "B", mb, pipe, pos)), f"grad {mb}", self._stream(s, dst))

    def _stream(self, s: int, dst: int) -> str:
        """The p2p stream a send to `dst` uses: the next rank's or the previous one's."""
        return "p2p next" if dst == (s + 1) % self.p else "p2p prev"

    def _send(self, r: int, s: int, dst: int, ev: simpy.Event, name: str, stream: str) -> Generator[simpy.Event, Any, None]:
        """Blocking (Megatron's default p2p: the stream waits for the transfer) or, with
        overlap_p2p, handed to the link while compute goes on."""
        if self.p2p_s <= 0:
            ev.succeed()
            return
        proc = self.env.process(self._transfer(r, s, dst, ev, name, stream))
        if not self.overlap_p2p:
            t0 = self.env.now
            yield proc
            self.result[r][s].send_wait_s += self.env.now - t0

    def _transfer(self, r: int, s: int, dst: int, ev: simpy.Event, name: str, stream: str) -> Generator[simpy.Event, Any, None]:
        with self.links[(r, s, dst)].request() as req:
            yield req
            d = self.p2p_s * next(self._noise[r][s])
            self._record(name, self.env.now, d, r * self.p + s, stream)
            yield self.env.timeout(d)
        ev.succeed()

    def _dp(self, s: int) -> Generator[simpy.Event, Any, None]:
        env = self.env
        if not self.overlap_dp:
            yield env.all_of([self._ev(("computed", r, s)) for r in range(self.replicas)])
        for ch in reversed(range(self.v)):
            for k, (_, dur) in enumerate(self.costs[s][ch].buckets):
                yield env.all_of([self._ev((r, "grad", s, ch, k)) for r in range(self.replicas)])
                for r in range(self.replicas):
                    self._record(f"dp bucket {ch}.{k}", env.now, dur, r * self.p + s, "dp")
                yield env.timeout(dur)
        self.sync_end[s] = env.now
        self._ev(("sync", s)).succeed()

    def _finish(self, r: int, s: int) -> Generator[simpy.Event, Any, None]:
        env, res, pid = self.env, self.result[r][s], r * self.p + s
        if self.grad_total[s] > 0:
            yield self._ev(("sync", s))
        exposed = max(0.0, env.now - res.compute_end_s)
        hidden = max(0.0, self.grad_total[s] - exposed) + self.param_hidden_s
        tail = hidden * self.contention + self.param_exposed_s
        self._record("dp contention + param gather", env.now, tail, pid, "compute")
        yield env.timeout(tail)
        res.dp_tail_s = env.now - res.compute_end_s
        opt = self.optimizer_s[s]  # each stage steps its own parameters
        self._record("optimizer", env.now, opt, pid, "compute")
        yield env.timeout(opt)
        res.optimizer_s = opt
        res.finish_s = env.now
        res.finished = True

    def timeline(self) -> list[dict[str, Any]]:
        meta: list[dict[str, Any]] = []
        for r in range(self.replicas):
            for s in range(self.p):
                pid = r * self.p + s
                label = f"stage {s}" if self.replicas == 1 else f"replica {r} stage {s}"
                meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}})
                meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": n}}
                         for n, t in STREAMS.items()]
        return meta + [{"name": n, "ph": "X", "ts": t0 * US, "dur": d * US, "pid": pid, "tid": tid}
                       for n, t0, d, pid, tid in self.records]


def _noise(sigma: float, seed: np.random.SeedSequence) -> Iterator[float]:
    """Lognormal factors of mean 1 (mu = -sigma²/2), drawn in blocks; exactly 1 when sigma is 0."""
    if sigma <= 0:
        while True:
            yield 1.0
    rng = np.random.default_rng(seed)
    while True:
        yield from rng.lognormal(-sigma * sigma / 2, sigma, 4096).tolist()


# ---- the estimate ----------------------------------------------------------------------------

def des_estimate(spec: ModelSpec | None, system: System, plan: ParallelPlan, messages: list[str] | None = None, *,
                 graph: Graph | None = None, jitter_sigma: float = 0.0, seed: int = 0,
                 straggler: tuple[int, float] | None = None, replicas: int = 1, trace: bool = True,
                 overlap_p2p: bool = False) -> Estimate:
    """Simulate one step; memory, FLOPs and messages come from the shared `step.finish`, the
    step time, breakdown and timeline from the simulation (see the module docstring)."""
    if not 1 <= replicas <= plan.dp:
        raise ValueError(f"replicas {replicas} must be between 1 and dp {plan.dp}")
    if straggler is not None and not (0 <= straggler[0] < plan.pp and straggler[1] > 0):
        raise ValueError(f"straggler (stage {straggler[0]}, factor {straggler[1]}): "
                         f"stage must be in 0..{plan.pp - 1}, factor > 0")
    if jitter_sigma < 0:
        raise ValueError(f"jitter_sigma {jitter_sigma} must be >= 0")
    inp = prepare(spec, system, plan, messages, graph)
    costs = chunk_costs(inp)
    param_s = _param_gather(inp, costs)
    optimizer_s = [inp.optimizer_s(r) for r in range(plan.pp)]
    sim = PipelineSim(plan, costs, inp.p2p_s, optimizer_s, param_s, comm_contention_fraction(system),
                      jitter_sigma=jitter_sigma, seed=seed, straggler=straggler, replicas=replicas, trace=trace,
                      overlap_p2p=overlap_p2p or plan.overlap_p2p_comm,
                      overlap_dp=bool(plan.overlap_dp_comm and can_overlap(system)))
    sim.run()
    r, s = max(((r, s) for r in range(replicas) for s in range(plan.pp)), key=lambda rs: sim.result[rs[0]][rs[1]].finish_s)
    res = sim.result[r][s]
    return finish(inp, "des", res.finish_s, _breakdown(res, costs[s]), sim.timeline() if trace else None)


def _param_gather(inp: StepInputs, costs: list[list[ChunkCost]]) -> tuple[float, float]:
    """ZeRO-1/2 all-gather of the updated weights, (exposed, hidden) on the slowest stage, by the
    closed form (`closed_forms.param_gather_exposed_s`)."""
    plan = inp.plan
    if plan.zero_stage not in (1, 2):
        return 0.0, 0.0
    overlap = bool(plan.overlap_dp_comm and can_overlap(inp.system))
    best = (0.0, 0.0)
    for row in costs:
        param = sum(dp_collectives(inp.system, plan, c.stage.dense_params, c.stage.expert_params).all_gather_s for c in row)
        fwd = sum(c.fwd_s for c in row)
        layers = sum(c.stage.layers for c in row)
        exposed = float(cf.param_gather_exposed_s(param, fwd, layers, overlap))
        best = max(best, (exposed, param - exposed))
    return best


def _breakdown(res: RankResult, row: list[ChunkCost]) -> dict[str, float]:
    """The analytic engine's keys; they add up to the rank's finish time."""
    tot = row[0].stage
    for c in row[1:]:
        tot = tot + c.stage
    run = sum(c.fwd_s + c.bwd_s + c.wgrad_s for c in row)  # as the schedule runs them (ZB-H1: B and W apart)
    share = res.busy_s / (run or 1.0)
    idle = max(0.0, res.compute_end_s - res.busy_s - res.fsdp_s - res.send_wait_s)
    return {
        "compute_fwd_s": share * tot.fwd_gpu_s,
        "compute_bwd_s": share * tot.bwd_gpu_s,
        "recompute_s": share * tot.recompute_s,
        "tp_ep_cp_comm_s": share * tot.comm_s,
        "host_overhead_s": share * (tot.host_s + run - tot.t_s),
        "activation_offload_s": share * tot.offload_s,
        "pp_bubble_s": idle,
        "pp_p2p_s": res.send_wait_s,
        "dp_comm_exposed_s": res.dp_tail_s + res.fsdp_s,
        "optimizer_s": res.optimizer_s,
    }


def stream_utilisation(timeline: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Busy fraction of each (pid, tid) stream over the step (the last event's end)."""
    xs = [e for e in timeline if e["ph"] == "X"]
    end = max((e["ts"] + e["dur"] for e in xs), default=0.0) or 1.0
    busy: dict[tuple[int, int], float] = {}
    for e in xs:
        busy[(e["pid"], e["tid"])] = busy.get((e["pid"], e["tid"]), 0.0) + e["dur"]
    return {k: b / end for k, b in busy.items()}


__all__ = ["PipelineSim", "des_estimate", "stream_utilisation"]
