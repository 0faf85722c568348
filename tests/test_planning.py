"""Planner: the vectorised search against the analytic engine and brute force, time-to-train and
cost arithmetic, the Young/Daly failure model by hand, monotonicity, comparison reports."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

import perfmodel
from perfmodel.errors import LayoutError, UnknownIdError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.system import resolve_system
from perfmodel.planning.compare import compare, sensitivity, write_report
from perfmodel.planning.evaluate import Evaluator
from perfmodel.planning.goodput import LLAMA3_GPU_MTBF_S, goodput, system_mtbf_s, young_daly_interval_s
from perfmodel.planning.scaling import scaling_curve
from perfmodel.planning.search import SearchSpace, row_plan, search
from perfmodel.planning.space import RECOMPUTES, SCHEDULES, layout_grid
from perfmodel.planning.train import NoPriceError, gpu_power_w, power_basis_w, time_to_train

A100 = "a100-sxm4-80gb"


def _system(acc: str, n: int):
    return resolve_system(acc, None, n)[0]


def _grid_plan(g: dict[str, np.ndarray], i: int, gb: int, seq: int) -> perfmodel.ParallelPlan:
    r = {k: int(v[i]) for k, v in g.items()}
    sched = SCHEDULES[r["sched"]]
    return perfmodel.ParallelPlan(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r["ep"], vp=r["vp"],
                                  sequence_parallel=bool(r["sp"]), zero_stage=r["zero"], micro_batch=r["mb"],
                                  global_batch=gb, seq_len=seq, recompute=RECOMPUTES[r["rec"]],
                                  schedule=sched if r["pp"] > 1 else None)


@pytest.mark.parametrize(("workload", "n_gpus", "gb"),
                         [("llama3-8b", 64, 256), ("gpt3-1.3b", 32, 128), ("mixtral-8x7b", 64, 256)])
def test_vectorised_equals_analytic_engine(workload: str, n_gpus: int, gb: int) -> None:
    """Random layouts: the search's step time and memory equal perfmodel.estimate's to 0.1 %, both
    under the shipped calibration profile (the planner scores the calibrated System estimate builds)."""
    from perfmodel.calibration.profile import calibrated_system, load_profile

    spec = perfmodel.get_workload(workload)
    system = _system(A100, n_gpus)
    seq = spec.seq_len
    g = layout_grid(spec, system, [n_gpus], gb, seq, SearchSpace())
    out = Evaluator(spec, calibrated_system(system, load_profile("default")), seq, "bf16").evaluate(g)
    rng = np.random.default_rng(7)
    for i in rng.choice(len(g["tp"]), size=min(40, len(g["tp"])), replace=False):
        est = perfmodel.estimate(spec, system, _grid_plan(g, i, gb, seq), engine="analytic")
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=1e-3), est.plan
        assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=1e-3), est.plan


def _brute_force_best(spec, system, n: int, gb: int, space: SearchSpace):
    """Every plan of the small space through ParallelPlan + perfmodel.estimate, one at a time."""
    best = None
    L = spec.num_layers
    for tp, pp, cp, mb, zero, rec, vp, sched, sp in itertools.product(
            space.tp, space.pp, space.cp, space.micro_batch, space.zero_stage, space.recompute, space.vp,
            space.schedules, space.sequence_parallel):
        if n % (tp * pp * cp) or (sp and tp == 1):
            continue
        dp = n // (tp * pp * cp)
        if pp == 1 and (vp > 1 or sched != "1f1b"):
            continue
        if pp > 1 and ((vp > 1) != (sched == "interleaved")):
            continue
        if sched == "interleaved" and ((gb // (mb * dp)) % pp or pp * vp > L):
            continue
        try:
            plan = perfmodel.ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, vp=vp, sequence_parallel=sp, zero_stage=zero,
                                          micro_batch=mb, global_batch=gb, recompute=rec,
                                          schedule=sched if pp > 1 else None)
            est = perfmodel.estimate(spec, system, plan)
        except LayoutError:
            continue
        if est.fits and (best is None or est.step_time_s < best.step_time_s):
            best = est
    return best


def test_search_best_equals_brute_force() -> None:
    spec = perfmodel.get_workload("llama3.2-1b")
    system = _system(A100, 16)
    space = SearchSpace(tp=(1, 2, 4), pp=(1, 2, 4), cp=(1, 2), micro_batch=(1, 2), zero_stage=(0, 1, 3),
                        recompute=("none", "full"), vp=(1, 2), schedules=("1f1b", "interleaved", "zb-h1"))
    res = search(spec, system, 16, 32, space=space)
    brute = _brute_force_best(spec, system, 16, 32, space)
    assert brute is not None
    assert res.table["step_time_s"].iloc[0] == pytest.approx(brute.step_time_s, rel=1e-9)
    assert res.best().step_time_s == pytest.approx(brute.step_time_s, rel=1e-9)


def test_every_returned_layout_is_valid_and_fits() -> None:
    spec = perfmodel.get_workload("llama3-8b")
    headroom = 4 * 2**30
    res = search(spec, A100, 32, 128, space=SearchSpace(min_headroom_bytes=headroom))
    assert res.n_layouts > len(res.table) > 0
    assert (res.table["headroom_bytes"] >= headroom).all()
    for i in np.linspace(0, len(res.table) - 1, 12).astype(int):
        plan = res.plan(int(i))
        plan.validate_for(spec, plan.world)
        est = perfmodel.estimate(spec, res.system, plan)
        assert est.fits and est.hbm_bytes - est.memory.total_bytes >= headroom * (1 - 1e-9)
        assert est.step_time_s == pytest.approx(res.table["step_time_s"].iloc[i], rel=1e-3)
    assert res.table["step_time_s"].is_monotonic_increasing


def test_pareto_fronts_are_non_dominated() -> None:
    res = search("llama3-8b", A100, 64, 256, gpu_counts=[16, 32, 64])
    front = res.pareto_memory()
    assert front["step_time_s"].is_monotonic_increasing and front["headroom_bytes"].is_monotonic_increasing
    assert front["step_time_s"].iloc[0] == res.table["step_time_s"].min()
    gpus = res.pareto_gpus()
    assert gpus["step_time_s"].is_monotonic_increasing and gpus["world"].is_monotonic_decreasing
    assert set(res.table["world"]) == {16, 32, 64}


def test_fixed_degrees_and_tp_within_node() -> None:
    res = search("llama3-8b", A100, 64, 256, space=SearchSpace(tp=(4,), pp=(2,)))
    assert set(res.table["tp"]) == {4} and set(res.table["pp"]) == {2}
    res = search("llama3-70b", A100, 128, 256)
    assert res.table["tp"].max() <= 8  # DGX A100: 8 GPUs per NVLink domain


# --- time to train, cost, energy ---------------------------------------------------------------
def test_cost_and_energy_arithmetic() -> None:
    system = _system(A100, 64)
    plan = perfmodel.ParallelPlan(dp=64, micro_batch=2, global_batch=256, zero_stage=1)
    est = perfmodel.estimate("llama3-8b", system, plan)
    tokens = 1e11
    run = time_to_train(est, system, tokens=tokens)
    steps = tokens / (256 * 8192)
    assert run.steps == pytest.approx(steps)
    assert run.wall_s == pytest.approx(steps * est.step_time_s)
    assert run.gpu_hours == pytest.approx(64 * steps * est.step_time_s / 3600)
    assert run.cost_usd == pytest.approx(run.gpu_hours * 5.12)  # a100-sxm4-80gb: 5.12 USD/h per GPU in its spec
    watts, _ = power_basis_w(system)
    assert run.energy_j == pytest.approx(64 * watts * run.wall_s)
    assert run.tokens_per_usd == pytest.approx(tokens / run.cost_usd)
    # DGX A100 80GB: 6.5 kW / 8 GPUs = 812.5 W per GPU
    assert watts == 812.5
    # without a node power the basis is TDP x the overhead of the part's published nodes:
    # 400 W x (6500 / 8 / 400) = 812.5 W; the utilisation model scales it, PUE multiplies it
    bare = dataclasses.replace(system, node=system.node.model_copy(update={"power": None}))
    assert power_basis_w(bare)[0] == pytest.approx(812.5)
    assert "TDP 400 W x 2.03" in power_basis_w(bare)[1]
    assert gpu_power_w(bare, mfu=0.5, power_model="utilisation", idle_fraction=0.3) == pytest.approx(812.5 * (0.3 + 0.7 * 0.5))
    assert gpu_power_w(bare, pue=1.1) == pytest.approx(893.75)
    # the energy cost: GPUs x W x s x PUE -> kWh x price
    priced = time_to_train(est, system, tokens=tokens, pue=1.2, electricity_usd_per_kwh=0.1)
    assert priced.energy_j == pytest.approx(1.2 * run.energy_j)
    assert priced.energy_cost_usd == pytest.approx(priced.energy_j / 3.6e6 * 0.1)
    with pytest.raises(ValueError, match=r"pue 0\.9"):
        time_to_train(est, system, tokens=tokens, pue=0.9)
    with pytest.raises(ValueError, match="electricity_usd_per_kwh -1"):
        time_to_train(est, system, tokens=tokens, electricity_usd_per_kwh=-1)


def test_a_part_without_published_power_still_gets_its_time_and_cost() -> None:
    """A pre-release chip without a published TDP or node power (VR200): its time and cost stand,
    its energy columns are NaN (blank in the tables) and the message says which field is missing;
    the comparison keeps the candidate instead of an error row."""
    system = _system("vr200", 64)
    plan = perfmodel.ParallelPlan(dp=64, micro_batch=2, global_batch=256, zero_stage=1)
    est = perfmodel.estimate("llama3-8b", system, plan)
    run = time_to_train(est, system, tokens=1e11, electricity_usd_per_kwh=0.1)
    assert run.wall_s == pytest.approx(1e11 / (256 * 8192) * est.step_time_s)
    assert run.cost_usd is None  # no published price either: both say so, in that order
    assert math.isnan(run.energy_j) and math.isnan(run.power_per_gpu_w) and math.isnan(run.tokens_per_joule)
    assert run.message.index("hourly price") < run.message.index("no energy estimate") and "'tdp'" in run.message
    row = compare("llama3-8b", ["vr200"], 64, 256).iloc[0]
    assert row["days"] > 0 and math.isnan(row["energy_mwh"]) and "tdp" in row["message"]


@pytest.mark.parametrize(("hardware", "watts", "basis"), [
    ("h100-sxm5-80gb", 10200 / 8, "dgx-h100 wall power"),  # 1275 W
    ("h200-sxm-141gb", 10200 / 8, "dgx-h200 wall power"),  # was the 700 W TDP (issue 13.5)
    ("a100-sxm4-80gb", 6500 / 8, "dgx-a100-80gb wall power"),  # was the 400 W TDP
    ("b200", 14300 / 8, "hgx-b200 wall power"),
    ("gb200", 120000 / 72, "gb200-nvl72 wall power"),  # the rack's 120 kW over its 72 GPUs
    # no published MI300X node: 750 W TDP x the median overhead of the GPU nodes that publish one
    # (per part: A100 2.031 x2, H100 1.821, H200 1.821, V100 1.458 x2 (16 and 32 GB DGX-1), B200
    # 1.7875, GB200 1.389): the mean of the middle two, (1.7875 + 1.821) / 2 = 1.804
    ("mi300x", 750 * (14300 / 8 / 1000 + 10200 / 8 / 700) / 2, "mi300x TDP 750 W x 1.8"),
])
def test_energy_has_one_basis(hardware: str, watts: float, basis: str) -> None:
    system = _system(hardware, 8)
    w, how = power_basis_w(system)
    assert w == pytest.approx(watts)
    assert how.startswith(basis)


def test_missing_price_is_an_error_with_the_fix() -> None:
    system = _system(A100, 8)
    acc = system.accelerator.model_copy(update={"price": None})
    noprice = dataclasses.replace(system, accelerator=acc, node=system.node.model_copy(update={"price": None}))
    est = perfmodel.estimate("llama3.2-1b", noprice, perfmodel.ParallelPlan(dp=8, global_batch=64))
    run = time_to_train(est, noprice, steps=1000)
    assert run.cost_usd is None and "no hourly price" in run.message
    with pytest.raises(NoPriceError, match="price"):
        time_to_train(est, noprice, steps=1000, require_price=True)
    with pytest.raises(NoPriceError, match="purchase"):
        time_to_train(est, noprice, steps=1000, price="purchase", require_price=True)


# --- goodput -----------------------------------------------------------------------------------
def test_young_daly_by_hand() -> None:
    # delta = 60 s, M = 4 h = 14400 s: tau = sqrt(2 * 60 * 14400) = sqrt(1,728,000) = 1314.534 s
    assert young_daly_interval_s(60.0, 14400.0) == pytest.approx(1314.534, abs=1e-3)
    # 1 TB checkpoint at 1e9 B/s -> delta = 1000 s; 100 GPUs with 1e6 s MTBF each -> M = 1e4 s
    g = goodput(100, 1e12, 1e9, gpu_mtbf_s=1e6, restart_s=300.0, ideal_wall_s=86400.0)
    tau = math.sqrt(2 * 1000 * 1e4)  # 4472.136 s
    assert g.mtbf_s == 1e4 and g.interval_s == pytest.approx(tau)
    assert g.fraction == pytest.approx(1 - 1000 / tau - (300 + tau / 2) / 1e4)  # 0.5228
    assert g.fraction == pytest.approx(1 - math.sqrt(2 * 1000 / 1e4) - 300 / 1e4)
    assert g.effective_wall_s == pytest.approx(86400 / g.fraction)
    # asynchronous: 10 s stall, the 1000 s write adds to the lost work
    a = goodput(100, 1e12, 1e9, gpu_mtbf_s=1e6, restart_s=300.0, async_snapshot_s=10.0)
    assert a.interval_s == pytest.approx(math.sqrt(2 * 10 * 1e4))
    assert a.fraction == pytest.approx(1 - 10 / a.interval_s - (300 + 1000 + a.interval_s / 2) / 1e4)
    assert a.fraction > g.fraction


def test_llama3_failure_rate() -> None:
    # 419 unexpected interruptions in 54 days on 16,384 GPUs: 54 * 86400 * 16384 / 419 s per GPU
    assert pytest.approx(182_437_208.6, rel=1e-6) == LLAMA3_GPU_MTBF_S
    assert system_mtbf_s(16384) / 3600 == pytest.approx(3.093, abs=1e-3)  # one failure every ~3.1 h


# --- monotonicity ------------------------------------------------------------------------------
def test_more_gpus_never_slower_to_train() -> None:
    df = scaling_curve("llama3-70b", A100, [256, 512, 1024], mode="strong", global_batch=1024)
    steps = df["step_time_s"].to_numpy()
    assert np.all(np.isfinite(steps))
    assert np.all(steps[1:] <= steps[:-1] * 1.01)
    assert df["scaling_efficiency"].iloc[0] == pytest.approx(1.0)


@pytest.mark.parametrize("knob", ["inter_bw", "intra_bw", "hbm_bw"])
def test_more_bandwidth_never_slower(knob: str) -> None:
    system = _system(A100, 128)
    base = search("llama3-8b", system, 128, 512).table["step_time_s"].iloc[0]
    fast = search("llama3-8b", system.scaled(**{knob: 2.0}), 128, 512).table["step_time_s"].iloc[0]
    assert fast <= base * (1 + 1e-9)


# --- comparison and CLI ------------------------------------------------------------------------
def test_compare_report(tmp_path) -> None:
    cands = [A100]
    if "h100-sxm5-80gb" in load_catalog().accelerators:
        cands.append("h100-sxm5-80gb")
    # an id the catalogue does not know is a typo, not a row of the table
    with pytest.raises(UnknownIdError, match="unknown hardware 'no-such-gpu'"):
        compare("llama3-8b", [*cands, "no-such-gpu"], 64, 256, tokens=1e11)
    # a candidate that cannot run this job is a row saying why
    df = compare("llama3-8b", ["jean-zay-a100-80gb"], 1024, 256, tokens=1e11)
    assert "jean-zay-a100-80gb has 384 GPUs" in df.iloc[0]["message"]
    df = compare("llama3-8b", cands, 64, 256, tokens=1e11)
    a100 = df[df["candidate"] == A100].iloc[0]
    assert a100["cost_usd"] == pytest.approx(a100["gpu_hours"] * 5.12)
    assert a100["tokens_per_usd"] == pytest.approx(1e11 / a100["cost_usd"])
    assert 0 < a100["goodput"] < 1 and a100["days_with_failures"] > a100["days"]
    sens = sensitivity("llama3-8b", [A100], 64, 256, tokens=1e11, pct=20)
    up = sens[(sens["knob"] == "scale-out bandwidth") & (sens["change_pct"] > 0)].iloc[0]
    assert up["days_ratio"] <= 1 + 1e-9
    price = sens[(sens["knob"] == "price") & (sens["change_pct"] > 0)].iloc[0]
    assert price["cost_ratio"] == pytest.approx(1.2) and price["days_ratio"] == pytest.approx(1.0)
    paths = write_report(df, tmp_path, "llama3-8b on 64 GPUs", sens)
    names = {p.name for p in paths}
    assert {"report.md", "compare.csv"} <= names
    md = (tmp_path / "report.md").read_text()
    assert A100 in md and "Sensitivity" in md
    if "report.html" in names:
        assert "vegaEmbed" in (tmp_path / "report.html").read_text()


def test_compare_and_search_take_an_accelerator_as_people_write_it() -> None:
    """'H100' is read as h100-sxm5-80gb: information, not a fallback the search must refuse (it
    did: 'LayoutError: hardware 'h100': accelerator 'h100' read as ...'); an unknown system
    for an accelerator still is one."""
    df = compare("llama3-8b", ["H100", "h100-sxm5-80gb"], 8, 64)
    rows = df.set_index("candidate")
    assert rows.loc["H100", "step_time_s"] == pytest.approx(rows.loc["h100-sxm5-80gb", "step_time_s"])
    assert not rows.loc["H100", "message"] or "read as" not in str(rows.loc["H100", "message"])
    assert search("llama3-8b", "H100", 8, 64).table["step_time_s"].iloc[0] > 0


def test_cli_search_and_compare(capsys, tmp_path) -> None:
    from perfmodel.cli import main

    assert main(["search", "llama3.2-1b", "--hardware", A100, "--n-gpus", "8", "--global-batch", "64", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "layouts" in out and " 1. " in out
    assert main(["compare", "llama3.2-1b", "--hardware", A100, "--n-gpus", "8", "--global-batch", "64",
                 "--tokens", "1e10"]) == 0
    assert A100 in capsys.readouterr().out
    # --json: each row's plan as its fields (not the model class's attributes)
    assert main(["compare", "llama3.2-1b", "--hardware", A100, "--n-gpus", "8", "--global-batch", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["plan"]["dp"] * rows[0]["plan"]["tp"] * rows[0]["plan"]["pp"] * rows[0]["plan"]["cp"] == 8
    assert "model_fields" not in rows[0]["plan"]


def test_cli_search_tries_dualpipe_when_asked(capsys) -> None:
    """--schedules names what the search tries; DualPipe rows come back as plans that estimate
    gives the same step time for (their schedule travels in the row)."""
    from perfmodel.cli import main
    from perfmodel.planning.search import row_plan

    assert main(["search", "llama3.2-1b", "--hardware", A100, "--n-gpus", "8", "--global-batch", "64", "--top", "400",
                 "--schedules", "dualpipe", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["top"]
    dual = [r for r in rows if r["schedule"] == "dualpipe"]
    assert dual and all(r["pp"] % 2 == 0 and r["num_micro_batches"] >= 2 * r["pp"] for r in dual)
    assert {r["schedule"] for r in rows} <= {"dualpipe", "1f1b"}  # pp 1 runs "1f1b" whatever is allowed
    plan = row_plan(pd.Series(dual[0]), 64, perfmodel.get_workload("llama3.2-1b").seq_len, "bf16")
    assert plan.schedule == "dualpipe"
    est = perfmodel.estimate("llama3.2-1b", A100, plan)
    assert est.step_time_s == pytest.approx(dual[0]["step_time_s"], rel=1e-9)


def test_row_plan_round_trip() -> None:
    res = search("llama3.2-1b", A100, 8, 64)
    r = res.table.iloc[0]
    plan = row_plan(r, 64, res.seq_len, "bf16")
    assert (plan.world == r["world"] and plan.schedule_name == r["schedule"]) or plan.pp == 1


def test_search_and_compare_carry_the_optimizer() -> None:
    """The layout search scores every layout with the named optimizer: its plans carry it, their
    step and memory are what perfmodel.estimate gives for them, bf16 moments keep 4 B per
    parameter less than AdamW's (ZeRO shards it) so at least as many layouts fit, and compare's
    rows carry it through."""
    from perfmodel.planning.compare import compare
    from perfmodel.planning.search import search

    kw = dict(seq_len=2048, space=SearchSpace(tp=(1, 2), pp=(1, 2), micro_batch=(1,)))
    adam = search("llama3-8b", "h100-sxm5-80gb", 8, 64, **kw)
    bf16 = search("llama3-8b", "h100-sxm5-80gb", 8, 64, optimizer="adamw-bf16", **kw)
    assert len(bf16.table) >= len(adam.table) > 0
    plan = bf16.plan(0)
    assert plan.optimizer == "adamw-bf16"
    est = perfmodel.estimate(bf16.spec, bf16.system, plan, engine="analytic")
    assert bf16.table.iloc[0]["step_time_s"] == pytest.approx(est.step_time_s, rel=1e-3)
    assert bf16.table.iloc[0]["memory_bytes"] == pytest.approx(est.memory.total_bytes, rel=1e-3)
    twin = perfmodel.estimate(bf16.spec, bf16.system, plan.model_copy(update={"optimizer": "adam"}), engine="analytic")
    params = twin.memory.optimizer_bytes / 12.0  # AdamW's 12 B per parameter (this rank's share)
    assert twin.memory.optimizer_bytes - est.memory.optimizer_bytes == pytest.approx(4.0 * params)
    row = compare("llama3-8b", ["h100-sxm5-80gb"], 8, 64, optimizer="adamw-bf16", seq_len=2048)
    assert row["plan"].iloc[0].optimizer == "adamw-bf16"
