"""`perfmodel converge`, `noise-scale`, `goodput` and `rl`: the whole training run
(subcommands registered by perfmodel/cli.py through `add_parsers`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from perfmodel.cliargs import (
    add_precision_arg,
    positive_float,
    positive_float_at_most,
    positive_int,
    positive_int_at_most,
)
from perfmodel.errors import PerfmodelError

# The largest values the options take: beyond them a result is a number no one can read (a
# 300-digit day count) or, for the RL simulation (one simpy process per actor), a run that never ends.
MOST_TOKENS = 1e18  # tokens: a thousand times the largest pretraining corpora
MOST_SECONDS = 1e9  # about 32 years
MOST_ACTORS = 65_536


def _days(s: float) -> str:
    return f"{s / 86400:.2f} d" if s >= 86400 else f"{s / 3600:.2f} h"


def cmd_converge(a: argparse.Namespace) -> int:
    from perfmodel.planning.converge import CHINCHILLA, fit_loss_curve, time_to_target

    law = fit_loss_curve(a.loss_curve) if a.loss_curve else CHINCHILLA
    if a.loss_curve and a.curve_batch_tokens is None:
        raise PerfmodelError("--loss-curve needs --curve-batch-tokens (the batch, in tokens, the curve was logged at)")
    res = time_to_target(a.workload, a.hardware, a.n_gpus, a.target_loss, e_min_tokens=a.e_min,
                         noise_scale_tokens=a.noise_scale, loss_law=law, curve_batch_tokens=a.curve_batch_tokens,
                         global_batches=a.global_batch, seq_len=a.seq_len, precision=a.precision)
    if a.json:
        print(json.dumps(res.to_dict(), indent=2, default=str))
        return 0
    target = f"to loss {res.target_loss:g}" if res.target_loss is not None else "to the given E_min"
    print(f"{res.workload} on {res.n_gpus} GPUs of {res.hardware} {target}: E_min {res.e_min_tokens:.3g} tokens, "
          f"B_noise {res.b_noise_tokens:.3g} tokens, {res.params / 1e9:.3g}B parameters")
    print(f"{'global batch':>12} {'steps':>10} {'tokens':>10} {'step':>9} {'time':>10} {'GPU-h':>10}  layout")
    for p in res.curve:
        lay = p.layout
        mark = " <- fastest" if p is res.best else ""
        print(f"{p.global_batch:12d} {p.steps:10.4g} {p.tokens:10.3g} {p.step_time_s:8.3g}s {_days(p.time_s):>10} "
              f"{p.gpu_hours:10.4g}  dp{lay['dp']} tp{lay['tp']} pp{lay['pp']} cp{lay['cp']} mb{lay['micro_batch']}{mark}")
    for n in res.notes:
        print(f"note: {n}")
    return 0


def cmd_noise_scale(a: argparse.Namespace) -> int:
    from perfmodel.planning.converge import noise_scale_from_log

    r = noise_scale_from_log(a.log)
    out = {"b_noise": r.b_noise, "grad_sq": r.grad_sq, "trace_sigma": r.trace_sigma, "b_small": r.b_small,
           "b_big": r.b_big, "n_small": r.n_small, "n_big": r.n_big}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"B_noise = tr(Sigma)/|G|^2 = {r.trace_sigma:.4g} / {r.grad_sq:.4g} = {r.b_noise:.4g} "
              f"(batch units of the log; {r.n_small} steps at {r.b_small:g}, {r.n_big} at {r.b_big:g})")
    return 0


def cmd_goodput(a: argparse.Namespace, plan_from_args: Callable[[argparse.Namespace, int], Any]) -> int:
    from perfmodel.engines.registry import DEFAULT_ENGINE, run_engine
    from perfmodel.hardware.system import resolve_hardware
    from perfmodel.planning.checkpoint import goodput_from_model, load_storage
    from perfmodel.workload.builder import build_graph
    from perfmodel.workload.catalog import get_workload

    spec = get_workload(a.workload)
    plan = plan_from_args(a, a.n_gpus)
    system, msgs = resolve_hardware(a.hardware, plan.world)
    est = run_engine(DEFAULT_ENGINE, spec, system, plan)
    params = build_graph(spec, 1, plan.seq_len or spec.seq_len, plan.precision, "flash").total_params_full()
    storage = load_storage(a.storage)
    mtbf = a.gpu_mtbf_hours * 3600.0 if a.gpu_mtbf_hours else None
    kw = {"gpu_mtbf_s": mtbf} if mtbf else {}
    rows = goodput_from_model(est, system, storage, params, asynchronous=a.asynchronous, intervals_s=a.interval, **kw)
    ck = rows[0].checkpoint
    table = [{"interval_s": r.interval_s, "goodput": r.result.fraction, "stall_s": r.checkpoint.stall_s,
              "write_s": r.checkpoint.write_s, "restart_s": r.restart_s, "job_mtbf_s": r.result.mtbf_s,
              "young_daly": i == 0} for i, r in enumerate(rows)]
    if a.json:
        print(json.dumps({"workload": spec.id, "n_gpus": plan.world, "storage": storage.id, "step_time_s": est.step_time_s,
                          "checkpoint_bytes": ck.total_bytes, "per_rank_state_bytes": ck.per_rank_state_bytes,
                          "asynchronous": ck.asynchronous, "rows": table, "messages": [*msgs, *est.messages]}, indent=2))
        return 0
    print(f"{spec.id} on {plan.world} x {system.accelerator.id}, step {est.step_time_s:.3g} s; checkpoint "
          f"{ck.total_bytes / 1e12:.3g} TB to {storage.name}: write {ck.write_s:.3g} s, read {ck.read_s:.3g} s, "
          f"snapshot {ck.snapshot_s:.3g} s ({'asynchronous' if ck.asynchronous else 'synchronous'}); "
          f"job MTBF {rows[0].result.mtbf_s / 3600:.2f} h")
    print(f"{'interval':>10} {'goodput':>8} {'stall':>8} {'restart':>9}")
    for r in table:
        tag = "  (Young/Daly)" if r["young_daly"] else ""
        print(f"{r['interval_s']:9.0f}s {r['goodput']:8.2%} {r['stall_s']:7.3g}s {r['restart_s']:8.3g}s{tag}")
    return 0


def cmd_rl(a: argparse.Namespace) -> int:
    from perfmodel.planning.rl import RLPipelineSpec, policy_timings, simulate_rl

    spec = RLPipelineSpec(actor_workers=a.actor_workers, envs_per_worker=a.envs_per_worker, env_step_s=a.env_step_ms / 1e3,
                          inference_servers=a.inference_servers, inference_max_batch=a.inference_max_batch,
                          unroll_length=a.unroll_length, learner_batch=a.learner_batch, learner_gpus=a.learner_gpus)
    inference_s, learn_s = policy_timings(a.workload, a.hardware, spec, calibration=a.calibration)
    r = simulate_rl(spec, inference_s, learn_s)
    if a.json:
        print(json.dumps({"spec": spec.model_dump(), **r.to_dict()}, indent=2))
        return 0
    print(f"{a.workload} on {a.hardware}: {r.env_steps_per_s:,.0f} environment steps/s, bottleneck: {r.bottleneck}")
    print(f"  actors {r.actor_busy:.0%} busy, inference {r.inference_busy:.0%} busy (mean batch {r.mean_inference_batch:.1f}), "
          f"learner {r.learner_busy:.0%} busy ({r.learner_step_s * 1e3:.3g} ms per step)")
    return 0


def add_parsers(sub: Any, plan_args: Callable[[argparse.ArgumentParser], None],
                plan_from_args: Callable[[argparse.Namespace, int], Any]) -> None:
    c = sub.add_parser("converge", help="time, GPU-hours, cost and energy to a target loss, per global batch")
    c.add_argument("workload")
    c.add_argument("--hardware", required=True, help="accelerator, node or cluster id")
    c.add_argument("--n-gpus", "--gpus", dest="n_gpus", type=positive_int, required=True)
    c.add_argument("--target-loss", type=positive_float, default=None, help="nats per token")
    c.add_argument("--noise-scale", type=positive_float_at_most(MOST_TOKENS), default=None,
                   help="B_noise in tokens (default: Kaplan B_crit(L))")
    c.add_argument("--e-min", type=positive_float_at_most(MOST_TOKENS), default=None, help="tokens to the target in the small-batch limit")
    c.add_argument("--loss-curve", default=None, help="CSV with columns tokens, loss from your own run")
    c.add_argument("--curve-batch-tokens", type=positive_float_at_most(MOST_TOKENS), default=None,
                   help="the batch (tokens) of --loss-curve")
    c.add_argument("--global-batch", type=positive_int, nargs="+", default=None, help="batches to try (sequences)")
    c.add_argument("--seq-len", type=positive_int, default=None)
    add_precision_arg(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_converge)

    n = sub.add_parser("noise-scale", help="gradient noise scale from gradient norms logged at two batch sizes")
    n.add_argument("log", help="CSV with columns batch_size and grad_norm (or grad_norm_sq)")
    n.add_argument("--json", action="store_true")
    n.set_defaults(func=cmd_noise_scale)

    g = sub.add_parser("goodput", help="checkpoint cost and goodput from the model and a storage spec")
    g.add_argument("workload")
    g.add_argument("--hardware", required=True)
    g.add_argument("--n-gpus", "--gpus", dest="n_gpus", type=positive_int, required=True)
    g.add_argument("--storage", default="tectonic-llama3", help="storage spec id (hardware_specs/storage/) or YAML path")
    g.add_argument("--async", dest="asynchronous", action="store_true", help="asynchronous checkpointing")
    g.add_argument("--interval", type=positive_float_at_most(MOST_SECONDS), nargs="*", default=[600.0, 1800.0, 3600.0, 7200.0],
                   help="checkpoint intervals to tabulate (seconds), besides Young/Daly's")
    g.add_argument("--gpu-mtbf-hours", type=positive_float_at_most(MOST_SECONDS / 3600), default=None,
                   help="mean time between failures of one GPU (default: the Llama 3 report's)")
    g.add_argument("--json", action="store_true")
    plan_args(g)
    g.set_defaults(func=lambda a: cmd_goodput(a, plan_from_args))

    r = sub.add_parser("rl", help="actor-learner RL pipeline: samples per second and the bottleneck (simpy)")
    r.add_argument("workload", help="the policy workload id (e.g. ppo-mlp-humanoid)")
    r.add_argument("--hardware", required=True, help="accelerator of the inference servers and the learner")
    r.add_argument("--actor-workers", type=positive_int_at_most(MOST_ACTORS), required=True)
    r.add_argument("--envs-per-worker", type=positive_int, default=1)
    r.add_argument("--env-step-ms", type=positive_float, required=True, help="CPU milliseconds per environment step")
    r.add_argument("--inference-servers", type=positive_int, default=1)
    r.add_argument("--inference-max-batch", type=positive_int, default=256)
    r.add_argument("--unroll-length", type=positive_int, default=128)
    r.add_argument("--learner-batch", type=positive_int, default=32, help="trajectories per learner step")
    r.add_argument("--learner-gpus", type=positive_int, default=1)
    r.add_argument("--calibration", default="default", metavar="PROFILE|none",
                   help="calibration profile of the policy timings: 'default' (shipped), 'none' (physics only) or a YAML "
                   "written by `perfmodel fit`")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_rl)


__all__ = ["add_parsers"]
