"""Train small models on this host's CPU and write measured step times as a runs file.

    python validation/cpu/harness.py                 # ~28 rows, < 10 min -> validation/runs_cpu.csv
    python validation/cpu/harness.py --quick         # 4 rows, < 60 s (CI) -> validation/cpu/runs_cpu_quick.csv
    python validation/cpu/harness.py --only gpt-l4   # rows whose run_id contains a string

This is the judging side: the step times written here are never read by perfmodel's cost models
(the calibration side is `perfmodel calibrate`, which only runs microbenchmarks).

Mapping: one process running one torch thread, pinned to one core, is one CPU "accelerator". A
row names the catalogued spec of the CPU it ran on (`host-cpu-zen3` / `-zen4` / `-zen5`, the one
`host-cpu` resolves to here, with its node), so the file keeps meaning that CPU wherever it is
validated; `host-cpu` / `host-node` only where no built-in spec matches this CPU. A
single-process row is n_gpus 1; a 2-process gloo job (DDP data parallel, or a 2-stage GPipe
pipeline with send/recv of activations) is n_gpus 2 on that node.

Precision: the runs contract allows bf16/fp16/fp8/..., meaning the GEMM precision with fp32 master
weights and optimizer states. The default here is exactly that: torch.autocast("cpu", bf16) over
the forward, fp32 parameters and AdamW. `--precision fp32` trains without autocast and writes
`fp32` in the precision column (outside the contract's list; for a separate file).

A step = zero_grad + forward + backward (+ DDP all-reduce) + AdamW step; the row's step_time_s is
the median over the timed steps after warm-up steps.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from models import MLP, TCN, Decoder, LSTMForecaster  # noqa: E402

from perfmodel.calibration.host import wait_for_quiet  # noqa: E402
from perfmodel.validation.runs import COLUMNS  # noqa: E402  (the DESIGN.md runs-file columns)


@dataclass(frozen=True)
class Run:
    """One measured configuration. `arch` gpt/llama builds a Decoder from the size fields;
    otherwise `model` names a workloads/*.yaml (family lstm, tcn or mlp)."""

    run_id: str
    arch: str = ""
    model: str = ""
    n_layers: int = 0
    hidden: int = 0
    ffn_hidden: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    vocab: int = 8192
    seq_len: int = 0  # 0: the workload's own
    micro_batch: int = 8
    global_batch: int = 8
    dp: int = 1
    pp: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_procs(self) -> int:
        return self.dp * self.pp


def _gpt(rid: str, L: int, h: int, heads: int, s: int, b: int, **kw: Any) -> Run:
    return Run(rid, arch="gpt", n_layers=L, hidden=h, ffn_hidden=4 * h, n_heads=heads, n_kv_heads=heads,
               seq_len=s, micro_batch=b, global_batch=b, **kw)


def _llama(rid: str, L: int, h: int, heads: int, kv: int, ffn: int, s: int, b: int, **kw: Any) -> Run:
    return Run(rid, arch="llama", n_layers=L, hidden=h, ffn_hidden=ffn, n_heads=heads, n_kv_heads=kv,
               seq_len=s, micro_batch=b, global_batch=b, **kw)


def _wl(rid: str, model: str, s: int, b: int, **kw: Any) -> Run:
    return Run(rid, model=model, seq_len=s, micro_batch=b, global_batch=b, **kw)


RUNS: list[Run] = [
    _gpt("cpu-gpt-l2-h128-s64-b4", 2, 128, 4, 64, 4),
    _gpt("cpu-gpt-l2-h128-s128-b8", 2, 128, 4, 128, 8),
    _gpt("cpu-gpt-l4-h256-s256-b8", 4, 256, 4, 256, 8),
    _gpt("cpu-gpt-l4-h256-s256-b16", 4, 256, 4, 256, 16),
    _gpt("cpu-gpt-l4-h256-s512-b8", 4, 256, 4, 512, 8),
    _gpt("cpu-gpt-l6-h384-s256-b8", 6, 384, 6, 256, 8),
    _gpt("cpu-gpt-l4-h512-s128-b8", 4, 512, 8, 128, 8),
    _llama("cpu-llama-l2-h128-kv1-s128-b8", 2, 128, 4, 1, 344, 128, 8),
    _llama("cpu-llama-l4-h256-kv2-s256-b8", 4, 256, 8, 2, 688, 256, 8),
    _llama("cpu-llama-l4-h256-kv2-s512-b4", 4, 256, 8, 2, 688, 512, 4),
    _llama("cpu-llama-l6-h384-kv2-s256-b8", 6, 384, 6, 2, 1024, 256, 8),
    _llama("cpu-llama-l2-h512-kv4-s128-b16", 2, 512, 8, 4, 1376, 128, 16),
    _wl("cpu-lstm-s64-b32", "cpu-lstm", 64, 32),
    _wl("cpu-lstm-s128-b32", "cpu-lstm", 128, 32),
    _wl("cpu-lstm-s128-b128", "cpu-lstm", 128, 128),
    _wl("cpu-tcn-s256-b32", "cpu-tcn", 256, 32),
    _wl("cpu-tcn-s512-b32", "cpu-tcn", 512, 32),
    _wl("cpu-tcn-s256-b128", "cpu-tcn", 256, 128),
    _wl("cpu-mlp-b64", "cpu-mlp", 1, 64),
    _wl("cpu-mlp-b256", "cpu-mlp", 1, 256),
    _wl("cpu-mlp-b1024", "cpu-mlp", 1, 1024),
    _wl("cpu-mlp-small-b64", "cpu-mlp-small", 1, 64),
    # 2-process gloo data parallel (DDP): micro_batch per rank, global = 2 x micro
    replace(_gpt("cpu-gpt-l4-h256-s256-dp2", 4, 256, 4, 256, 8), global_batch=16, dp=2),
    replace(_llama("cpu-llama-l4-h256-kv2-s256-dp2", 4, 256, 8, 2, 688, 256, 8), global_batch=16, dp=2),
    replace(_wl("cpu-mlp-b256-dp2", "cpu-mlp", 1, 256), global_batch=512, dp=2),
    replace(_wl("cpu-lstm-s128-b32-dp2", "cpu-lstm", 128, 32), global_batch=64, dp=2),
    # 2-stage GPipe pipeline: global / micro micro-batches, all forwards then all backwards
    replace(_gpt("cpu-gpt-l4-h256-s256-pp2-m4", 4, 256, 4, 256, 2), global_batch=8, pp=2),
    replace(_llama("cpu-llama-l4-h256-kv2-s256-pp2-m8", 4, 256, 8, 2, 688, 256, 2), global_batch=16, pp=2),
]

QUICK = ["cpu-gpt-l2-h128-s64-b4", "cpu-llama-l2-h128-kv1-s128-b8", "cpu-mlp-small-b64"]
QUICK_DP = replace(_gpt("cpu-gpt-l2-h128-s64-dp2", 2, 128, 4, 64, 4), global_batch=8, dp=2)


# --- building models and batches ----------------------------------------------------------------
def _workload(model_id: str) -> Any:
    from perfmodel.workload.catalog import load_workload_file

    return load_workload_file(REPO / "workloads" / f"{model_id}.yaml")


def seq_of(run: Run) -> int:
    return run.seq_len or _workload(run.model).seq_len


def build(run: Run, stage: int | None = None) -> tuple[torch.nn.Module, Callable[[int], tuple[Any, Any]]]:
    """(module, batch(b) -> (inputs, targets)). `stage` 0/1 builds half of a 2-stage pipeline."""
    s = seq_of(run)
    if run.arch:
        kw: dict[str, Any] = {}
        if stage is not None:
            half = run.n_layers // 2
            kw = {"first": stage == 0, "last": stage == 1,
                  "layer_range": range(0, half) if stage == 0 else range(half, run.n_layers)}
        m = Decoder(run.arch, run.n_layers, run.hidden, run.ffn_hidden, run.n_heads, run.n_kv_heads, run.vocab, s, **kw)
        return m, lambda b: (torch.randint(0, run.vocab, (b, s)), torch.randint(0, run.vocab, (b, s)))
    spec = _workload(run.model)
    out = spec.output_size or 1
    if spec.family == "lstm":
        m = LSTMForecaster(spec.input_size, spec.hidden, spec.num_layers, out)
        return m, lambda b: (torch.randn(b, s, spec.input_size), torch.randn(b, out))
    if spec.family == "tcn":
        m = TCN(spec.input_size, spec.hidden, spec.num_layers, spec.kernel_size or 3, out)
        return m, lambda b: (torch.randn(b, s, spec.input_size), torch.randn(b, out))
    if spec.family == "mlp":
        m = MLP(spec.input_size, spec.hidden, spec.num_layers, out)
        return m, lambda b: (torch.randn(b, spec.input_size), torch.randint(0, out, (b,)))
    raise ValueError(f"run {run.run_id}: workload {run.model!r} has family {spec.family!r}; the harness trains lstm, tcn, mlp")


def _autocast(precision: str) -> Any:
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _pin(rank: int, cores: list[int]) -> None:
    """One torch thread on one core: the host-cpu 'accelerator'."""
    torch.set_num_threads(1)
    if cores:
        os.sched_setaffinity(0, {cores[rank % len(cores)]})


def _n_steps(first_step_s: float, budget_s: float, lo: int = 3, hi: int = 10) -> int:
    return max(lo, min(hi, int(budget_s / max(first_step_s, 1e-6))))


# --- the three ways of training -----------------------------------------------------------------
def train_single(run: Run, precision: str, warmup: int, budget_s: float, rank: int = 0,
                 ddp: bool = False) -> list[float]:
    torch.manual_seed(rank)
    model, batch = build(run)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = batch(run.micro_batch)

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with _autocast(precision):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    first = [step() for _ in range(warmup)][-1]
    n = _n_steps(first, budget_s)
    if ddp:  # every rank must run the same number of steps
        t = torch.tensor([n])
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        n = int(t.item())
        dist.barrier()
    return [step() for _ in range(n)]


def train_pipeline(run: Run, precision: str, warmup: int, budget_s: float, rank: int) -> list[float]:
    """GPipe on 2 ranks: m micro-batch forwards (rank 0 sends activations to rank 1), then m
    backwards in reverse (rank 1 sends activation gradients back), then AdamW on each stage."""
    torch.manual_seed(rank)
    model, batch = build(run, stage=rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    m = run.global_batch // run.micro_batch
    s = seq_of(run)
    x, y = batch(run.micro_batch)
    act_shape = (run.micro_batch, s, run.hidden)

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        saved = []
        for _ in range(m):
            if rank == 0:
                with _autocast(precision):
                    out = model(x)
                dist.send(out.detach().float().contiguous(), 1)
                saved.append(out)
            else:
                inp = torch.empty(act_shape)
                dist.recv(inp, 0)
                inp.requires_grad_(True)
                with _autocast(precision):
                    loss = model(inp, y) / m
                saved.append((inp, loss))
        for item in reversed(saved):
            if rank == 0:
                g = torch.empty(act_shape)
                dist.recv(g, 1)
                item.backward(g.to(item.dtype))
            else:
                inp, loss = item
                loss.backward()
                dist.send(inp.grad.contiguous(), 0)
        opt.step()
        return time.perf_counter() - t0

    first = [step() for _ in range(warmup)][-1]
    t = torch.tensor([_n_steps(first, budget_s)])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return [step() for _ in range(int(t.item()))]


def _worker(rank: int, run: Run, precision: str, warmup: int, budget_s: float, port: int, out: str,
            cores: list[int]) -> None:
    _pin(rank, cores)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=run.n_procs)
    if run.pp > 1:
        times = train_pipeline(run, precision, warmup, budget_s, rank)
    else:
        times = train_single(run, precision, warmup, budget_s, rank, ddp=True)
    Path(f"{out}.{rank}").write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


def measure(run: Run, precision: str, warmup: int = 3, budget_s: float = 6.0) -> list[float]:
    """Step times in seconds. Multi-process: the slowest rank's time per step."""
    cores = _cores()
    if run.n_procs == 1:
        try:
            _pin(0, cores)
            return train_single(run, precision, warmup, budget_s)
        finally:
            if cores:
                os.sched_setaffinity(0, set(cores))  # spawned ranks must not inherit one core
    if 0 < len(cores) < run.n_procs:
        raise ValueError(f"run {run.run_id}: {run.n_procs} processes need {run.n_procs} cores, this host has {len(cores)}")
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp, "times"))
            try:
                mp.spawn(_worker, args=(run, precision, warmup, budget_s, _free_port(), out, cores), nprocs=run.n_procs,
                         join=True)
            except mp.ProcessExitedException as e:
                # torch 2.14's gloo once aborted a rank at teardown ('terminate called without an active
                # exception', after the times were written): keep the times if every rank wrote them,
                # else run the row again once
                if not all(Path(f"{out}.{r}").exists() for r in range(run.n_procs)):
                    if attempt == 2:
                        raise
                    print(f"{run.run_id}: {e}; running it again", file=sys.stderr)
                    continue
            per_rank = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(run.n_procs)]
        return [max(ts) for ts in zip(*per_rank, strict=False)]
    raise AssertionError("unreachable")


# --- rows ---------------------------------------------------------------------------------------
def host_ids() -> tuple[str, str, str]:
    """(accelerator, system, note) a row names: the catalogued spec `host-cpu` stands for on this
    machine and its node, so the file means the CPU it was measured on wherever it is validated
    (`host-cpu` is whatever CPU runs `perfmodel validate`); `host-cpu` / `host-node` only where no
    built-in spec matches this CPU (a `perfmodel calibrate` spec or the fallback), said in the note."""
    from perfmodel.hardware.catalog import load_catalog

    cat = load_catalog()
    target, why, matched = cat.host_cpu
    if matched and target and target != "host-cpu":
        acc = cat.accelerators[target]
        if acc.reference_node and acc.reference_node in cat.nodes:
            return target, acc.reference_node, ""
    return "host-cpu", "host-node", f"; accelerator host-cpu: {why or 'this machine'} (validate this file on the same CPU)"


def row(run: Run, precision: str, times: list[float], warmup: int) -> dict[str, Any]:
    s = seq_of(run)
    med = statistics.median(times)
    spec = None if run.arch else _workload(run.model)
    tokens = run.global_batch * (1 if spec is not None and spec.family == "mlp" else s)
    how = {1: "1 process", 2: "2 processes x 1 thread, gloo"}[run.n_procs]
    if run.dp > 1:
        how += ", DDP (default 25 MiB buckets)"
    if run.pp > 1:
        how += f", GPipe {run.global_batch // run.micro_batch} micro-batches, blocking send/recv of fp32 activations"
    arch_note = {"gpt": "learned pos, LayerNorm, GELU, biases, untied head, SDPA causal",
                 "llama": "RoPE, RMSNorm, SwiGLU, no biases, untied head, SDPA causal GQA"}.get(run.arch, spec.family if spec else "")
    amp = "bf16 autocast, fp32 master + AdamW" if precision == "bf16" else "fp32 throughout, AdamW"
    notes = (f"{arch_note}; {amp}; {how}; torch.set_num_threads(1) per process, pinned; median of {len(times)} steps "
             f"after {warmup} warm-up (min {min(times):.4g} s, max {max(times):.4g} s)")
    accelerator, system, host_note = host_ids()
    r: dict[str, Any] = {c: "" for c in COLUMNS}
    r.update({
        "run_id": run.run_id + ("" if precision == "bf16" else "-fp32"),
        "source": "perfmodel validation/cpu/harness.py",
        "source_detail": f"measured {dt.date.today().isoformat()} on this host, torch {torch.__version__}",
        "model": run.model, "arch": run.arch, "seq_len": s, "global_batch": run.global_batch,
        "micro_batch": run.micro_batch, "tp": 1, "pp": run.pp, "dp": run.dp, "cp": 1, "ep": 1, "vp": 1,
        "sequence_parallel": "false", "zero_stage": 0, "recompute": "none", "precision": precision,
        "accelerator": accelerator, "n_gpus": run.n_procs, "gpus_per_node": run.n_procs, "system": system,
        "step_time_s": f"{med:.6g}", "tokens_per_s": f"{tokens / med:.6g}", "notes": notes + host_note,
    })
    if run.arch:
        r.update({"n_layers": run.n_layers, "hidden": run.hidden, "ffn_hidden": run.ffn_hidden,
                  "n_heads": run.n_heads, "n_kv_heads": run.n_kv_heads, "vocab": run.vocab})
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="default validation/runs_cpu.csv; with --quick, validation/cpu/runs_cpu_quick.csv")
    p.add_argument("--quick", action="store_true", help="4 small rows, < 60 s")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--only", default="", help="run only rows whose run_id contains this")
    p.add_argument("--budget", type=float, default=6.0, help="seconds of timed steps per row (3-10 steps)")
    a = p.parse_args(argv)
    runs = [r for r in RUNS if r.run_id in QUICK] + [QUICK_DP] if a.quick else [r for r in RUNS if a.only in r.run_id]
    warmup, budget = (2, 1.0) if a.quick else (3, a.budget)
    if a.out is None:
        a.out = HERE / "runs_cpu_quick.csv" if a.quick else REPO / "validation" / "runs_cpu.csv"
    a.out.parent.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    with a.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for run in runs:
            busy = wait_for_quiet(10.0 if a.quick else 120.0)  # another tenant on these 2 cores would slow the row
            t0 = time.perf_counter()
            times = measure(run, a.precision, warmup, budget)
            r = row(run, a.precision, times, warmup)
            r["notes"] += f"; CPUs {100 * busy:.0f}% busy with other work just before"
            w.writerow(r)
            fh.flush()
            print(f"{run.run_id:42s} {statistics.median(times):9.4f} s/step  ({len(times)} steps, "
                  f"{time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"{len(runs)} rows -> {a.out} in {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
