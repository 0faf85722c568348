"""Golden predictions the move of sharding out of the builder (into parallel/shard.py) must not
move: step time, memory per GPU and model / hardware FLOPs of eleven workloads (dense, GQA, MLA,
MoE, Mamba hybrid, sliding-window and chunked attention, encoder, patch transformer, multi-token
prediction) under tp 1/2/4/8, sp, cp, ep / etp, pp with vp, fp8, recompute and unfused attention,
on H100 and A100, both engines on a subset. Recorded by `benchmarks/shard_golden.py test-data` on
main before the refactor; equal to 1e-9 relative, and the layouts that were errors stay the same
errors. A change that moves the physics on purpose re-records the file and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import perfmodel
from perfmodel.errors import PerfmodelError
from perfmodel.workload.catalog import get_workload

REL = 1e-9
ROWS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "data" / "shard_golden.json").read_text())


def _plan(spec: perfmodel.ModelSpec, kw: dict[str, Any]) -> perfmodel.ParallelPlan:
    seq = min(spec.seq_len, 4096) if spec.is_transformer else spec.seq_len
    kw = {"micro_batch": 1, **kw}
    return perfmodel.ParallelPlan(global_batch=8 * kw.get("dp", 1) * kw["micro_batch"], seq_len=seq, **kw)


def _id(row: dict[str, Any]) -> str:
    return f"{row['workload']}-{row['accelerator'][:4]}-{row['engine']}-" + "-".join(f"{k}{v}" for k, v in row["plan"].items())


@pytest.mark.parametrize("row", ROWS, ids=[_id(r) for r in ROWS])
def test_golden_estimate_unchanged(row: dict[str, Any]) -> None:
    spec = get_workload(row["workload"])
    try:
        est = perfmodel.estimate(spec, row["accelerator"], _plan(spec, row["plan"]), engine=row["engine"])
    except PerfmodelError as e:
        assert str(e) == row.get("error"), "a layout that was predicted now fails"
        return
    assert "error" not in row, "a layout that was an error is now predicted"
    got = (est.step_time_s, est.memory.total_bytes, est.model_flop_per_step, est.hardware_flop_per_step)
    want = (row["step_time_s"], row["memory_bytes"], row["model_flop"], row["hardware_flop"])
    assert got == pytest.approx(want, rel=REL)
