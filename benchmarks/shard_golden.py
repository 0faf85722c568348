"""Golden numbers for the sharding refactor: every workload in workloads/ under a set of layouts
(tp 1/2/4/8, sp, cp, ep / etp for MoE, pp, fp8) on two accelerators, plus the per-rank graph of
each (tp, cp, ep, etp, sp) shard, op by op. `record OUT.json` writes them; `check OUT.json`
recomputes and fails on any relative difference above 1e-9 (errors must stay the same errors).

    PYTHONPATH=$PWD python benchmarks/shard_golden.py record /tmp/golden.json   # before
    PYTHONPATH=$PWD python benchmarks/shard_golden.py check /tmp/golden.json    # after
    PYTHONPATH=$PWD python benchmarks/shard_golden.py test-data tests/data/shard_golden.json

`test-data` writes the subset tests/test_shard_golden.py holds (eleven workloads' estimates): a
change that moves the physics on purpose re-records it and says so in its commit message.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from typing import Any

import perfmodel
from perfmodel.engines.stages import moe_options, plan_graph
from perfmodel.errors import PerfmodelError
from perfmodel.workload.catalog import load_workloads

REL = 1e-9
# the Op fields as they were before the refactor (fields added since, e.g. `split`, are not compared)
OP_FIELDS = ("name", "kind", "flop", "bytes", "m", "n", "k", "batch", "repeat", "model_flop", "precision", "weight_params",
             "saved_bytes", "kernels", "bwd_kernels", "bwd_flop_factor", "bwd_bytes_factor", "attn_core", "causal", "heads",
             "head_dim", "seq_q", "seq_kv", "grouped", "wgrad_flop_factor", "wgrad_kernels")
ACCELERATORS = ("h100-sxm5-80gb", "a100-sxm4-80gb")
CPU = ("lstm", "gru", "tcn", "mlp")


def layouts(spec: perfmodel.ModelSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if spec.family in CPU:
        return [dict(dp=2), dict(dp=1, pp=2), dict(dp=2, precision="fp8"), dict(dp=1, tp=2)]
    for tp in (1, 2, 4, 8):
        out.append(dict(dp=2, tp=tp))
    out += [dict(dp=2, tp=4, sequence_parallel=True), dict(dp=2, tp=2, cp=2), dict(dp=1, tp=2, cp=4, sequence_parallel=True),
            dict(dp=2, tp=2, pp=2), dict(dp=2, tp=8, pp=4, vp=2, sequence_parallel=True), dict(dp=2, tp=4, precision="fp8"),
            dict(dp=2, tp=2, recompute="selective", attention_impl="unfused"), dict(dp=4, tp=2, recompute="full", micro_batch=2)]
    if spec.family == "moe" or spec.num_experts:
        out += [dict(dp=8, tp=1, ep=8), dict(dp=4, tp=2, ep=4, sequence_parallel=True),
                dict(dp=4, tp=2, ep=4, etp=2, sequence_parallel=True),
                dict(dp=4, tp=2, ep=4, precision="fp8", moe_fp8_dispatch=True, moe_shared_expert_overlap=True, sequence_parallel=True),
                dict(dp=2, tp=4, cp=2, ep=8, sequence_parallel=True, moe_imbalance=1.0)]
    return out


def _plan(spec: perfmodel.ModelSpec, kw: dict[str, Any]) -> perfmodel.ParallelPlan:
    seq = min(spec.seq_len, 4096) if spec.is_transformer else spec.seq_len
    kw = dict(kw)
    kw.setdefault("micro_batch", 1)
    dp = kw.get("dp", 1)
    return perfmodel.ParallelPlan(global_batch=8 * dp * kw["micro_batch"], seq_len=seq, **kw)


def _graph_row(graph: perfmodel.Graph) -> list[Any]:
    row: list[Any] = [graph.tokens, graph.micro_batch, graph.seq_len]
    for layer in graph.layers:
        row += [layer.name, layer.kind, layer.count, layer.params, layer.params_full, layer.expert_params,
                layer.input_bytes, layer.recomputable, layer.active_params_full]
        for op in layer.ops:
            row += [getattr(op, f) for f in OP_FIELDS]
        for c in layer.comms:
            row += [getattr(c, f.name) for f in fields(c)]
    return row


def compute() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for wid, spec in sorted(load_workloads().items()):
        for i, kw in enumerate(layouts(spec)):
            try:
                plan = _plan(spec, kw)
            except PerfmodelError as e:
                out[f"{wid}|{i}|plan"] = ["error", str(e)]
                continue
            try:
                out[f"{wid}|{i}|graph"] = _graph_row(plan_graph(spec, plan))
            except PerfmodelError as e:
                out[f"{wid}|{i}|graph"] = ["error", str(e)]
            accs = ("host-cpu-zen4",) if spec.family in CPU else ACCELERATORS  # a fixed CPU: not this machine's
            for acc in accs:
                for engine in ("analytic", "des") if i % 4 == 0 else ("analytic",):
                    key = f"{wid}|{i}|{acc}|{engine}"
                    try:
                        e = perfmodel.estimate(spec, acc, plan, engine=engine)
                        out[key] = [e.step_time_s, e.memory.total_bytes, e.model_flop_per_step, e.hardware_flop_per_step,
                                    *sorted(e.breakdown_s.items()), list(e.messages)]
                    except PerfmodelError as ex:
                        out[key] = ["error", str(ex)]
    _ = moe_options
    return out


TEST_WORKLOADS = ("llama3-8b", "gpt3-1.3b", "mixtral-8x7b", "deepseek-v3", "nemotron-h-8b", "gpt-oss-20b", "llama4-scout",
                  "bert-large", "patchtst-electricity", "nemotron3-nano", "qwen3-30b-a3b")


def test_rows(gold: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of tests/data/shard_golden.json: estimates of TEST_WORKLOADS (hardware errors left out)."""
    rows: list[dict[str, Any]] = []
    specs = load_workloads()
    for wid in TEST_WORKLOADS:
        for i, kw in enumerate(layouts(specs[wid])):
            for acc in ACCELERATORS:
                for engine in ("analytic", "des"):
                    v = gold.get(f"{wid}|{i}|{acc}|{engine}")
                    if v is None or (v[0] == "error" and "matrix format" in v[1]):
                        continue
                    row: dict[str, Any] = dict(workload=wid, accelerator=acc, engine=engine, plan=kw)
                    if v[0] == "error":
                        row["error"] = v[1]
                    else:
                        row.update(step_time_s=v[0], memory_bytes=v[1], model_flop=v[2], hardware_flop=v[3])
                    rows.append(row)
    return rows


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or abs(a - b) <= REL * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def main() -> int:
    mode, path = sys.argv[1], sys.argv[2]
    now = json.loads(json.dumps(compute()))
    if mode == "test-data":
        with open(path, "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in test_rows(now)) + "\n]\n")
        return 0
    if mode == "record":
        with open(path, "w") as f:
            json.dump(now, f)
        print(f"{len(now)} entries")
        return 0
    with open(path) as f:
        gold = json.load(f)
    bad = [k for k in gold if k not in now or not same(gold[k], now[k])] + [k for k in now if k not in gold]
    for k in bad[:20]:
        g, n = gold.get(k), now.get(k)
        diffs = [(i, x, y) for i, (x, y) in enumerate(zip(g or [], n or [], strict=False)) if not same(x, y)][:4]
        print("DIFF", k, diffs if diffs else (g, n))
    print(f"{len(gold)} entries, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
