"""Full recompute of some layers (Megatron-Core recompute_method block / uniform with
recompute_num_layers, parallel/partial_recompute.py) against closed forms on Llama-3 8B (32
identical transformer layers): block N reruns N/L of full recompute's forward and keeps N layer
inputs plus L - N layers' saved tensors; uniform N reruns every layer and keeps ceil(L/N) run
inputs plus one run's saved tensors while it rebuilds."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import perfmodel
from perfmodel.engines.stages import model_flop_per_step, plan_graph
from perfmodel.errors import LayoutError
from perfmodel.hardware.system import resolve_system
from perfmodel.memory import block_that_fits, layer_saved_bytes, peak_memory
from perfmodel.parallel.partial_recompute import recomputed_instances
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.megatron_args import parse_megatron_args

SPEC = perfmodel.get_workload("llama3-8b")
L = SPEC.num_layers  # 32
SYSTEM = resolve_system("h100-sxm5-80gb", None, 8)[0]


def _plan(**kw: object) -> ParallelPlan:
    base: dict[str, object] = dict(dp=8, micro_batch=1, global_batch=16, seq_len=4096, precision="bf16")
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _block(n: int, **kw: object) -> ParallelPlan:
    return _plan(recompute="full", recompute_method="block", recompute_num_layers=n, **kw)


def _est(plan: ParallelPlan, engine: str = "analytic") -> perfmodel.Estimate:
    return perfmodel.estimate(SPEC, SYSTEM, plan, engine=engine, calibration="none")  # type: ignore[arg-type]


def _body(plan: ParallelPlan):  # type: ignore[no-untyped-def]
    return next(layer for layer in plan_graph(SPEC, plan).layers if layer.recomputable)


def test_block_over_every_layer_is_full_recompute() -> None:
    full, block = _est(_plan(recompute="full")), _est(_block(L))
    assert block.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    assert block.memory.total_bytes == pytest.approx(full.memory.total_bytes, rel=1e-12)
    assert any("block recompute reruns every layer" in m for m in block.messages)


@pytest.mark.parametrize("n", [1, 8, 20])
def test_block_reruns_n_of_l_layers(n: int) -> None:
    full, none, block = _est(_plan(recompute="full")), _est(_plan()), _est(_block(n))
    assert block.breakdown_s["recompute_s"] == pytest.approx(full.breakdown_s["recompute_s"] * n / L, rel=1e-9)
    # the step lies between no recompute and full recompute, in proportion to the layers rerun
    extra = full.step_time_s - none.step_time_s
    assert block.step_time_s - none.step_time_s == pytest.approx(extra * n / L, rel=1e-6)


@pytest.mark.parametrize("n", [1, 8, 20])
def test_block_memory_closed_form(n: int) -> None:
    """pp 1: one micro-batch in flight, so activations(block N) - activations(full) = (L - N)(S - I),
    S the bytes a layer saves, I its input (the only thing a recomputed layer keeps)."""
    layer = _body(_plan())
    s, i = layer_saved_bytes(layer, _plan()), layer.input_bytes
    full, block = _est(_plan(recompute="full")), _est(_block(n))
    assert block.memory.activations_bytes - full.memory.activations_bytes == pytest.approx((L - n) * (s - i), rel=1e-9)


@pytest.mark.parametrize("n", [2, 5, 32])
def test_uniform_keeps_run_inputs_and_rebuilds_a_run(n: int) -> None:
    layer = _body(_plan())
    s, i = layer_saved_bytes(layer, _plan()), layer.input_bytes
    full, uni = _est(_plan(recompute="full")), _est(_plan(recompute="full", recompute_num_layers=n))
    assert uni.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)  # every layer reruns either way
    # full: L inputs + one layer rebuilt; uniform N: ceil(L/N) run inputs + N layers rebuilt
    assert uni.memory.activations_bytes - full.memory.activations_bytes == pytest.approx(
        (math.ceil(L / n) - L) * i + (n - 1) * s, rel=1e-9)


def test_hardware_flops_count_the_window_per_chunk() -> None:
    """Interleaved pp 2 x vp 2: 4 model chunks of 8 layers, block 3 reruns 3 in each: 12 of 32."""
    kw = dict(dp=2, pp=2, vp=2, global_batch=16)
    model, hw_full = model_flop_per_step(SPEC, _plan(recompute="full", **kw))
    _, hw_block = model_flop_per_step(SPEC, _block(3, **kw))
    assert hw_block - model == pytest.approx((hw_full - model) * 12 / 32, rel=1e-12)
    graph = plan_graph(SPEC, _block(3, **kw))
    assert sum(recomputed_instances(graph, _block(3, **kw)).values()) == 3 * 2 * 2


def test_more_layers_recomputed_is_slower_and_smaller() -> None:
    ests = [_est(_block(n, dp=4, pp=2, global_batch=16)) for n in range(1, L // 2 + 1)]
    times = [e.step_time_s for e in ests]
    mem = [e.memory.total_bytes for e in ests]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert mem == sorted(mem, reverse=True) and len(set(mem)) == len(mem)


@pytest.mark.parametrize("pp,vp", [(1, 1), (2, 1), (2, 2)])
def test_discrete_event_engine_agrees(pp: int, vp: int) -> None:
    plan = _block(5, dp=8 // pp, pp=pp, vp=vp, global_batch=16)
    assert _est(plan, "des").step_time_s == pytest.approx(_est(plan).step_time_s, rel=0.01)


def test_no_fit_names_the_fewest_block_layers_that_fit() -> None:
    """Llama-3 8B, micro-batch 2 at 8k on 8 H100 80 GB under ZeRO-2: too big without recompute
    (119 GB); the note names the smallest block window that fits, and one layer fewer does not."""
    kw: dict[str, object] = dict(micro_batch=2, global_batch=16, seq_len=8192, zero_stage=2)
    plan = _plan(**kw)
    est = _est(plan)
    hbm = est.hbm_bytes
    assert not est.fits
    graph = plan_graph(SPEC, plan)
    found = block_that_fits(graph, plan, hbm)
    assert found is not None
    n, peak = found
    assert 1 < n < L
    assert peak <= hbm < peak_memory(graph, _block(n - 1, **kw)).total_bytes
    assert f"block recompute of the first {n} layers per model chunk" in " ".join(est.messages)


def test_refusals_name_the_rule() -> None:
    with pytest.raises(LayoutError, match="needs recompute full"):
        _plan(recompute="selective", recompute_num_layers=2)
    with pytest.raises(LayoutError, match="needs recompute full"):
        _plan(recompute_method="block")
    with pytest.raises(LayoutError, match="block needs recompute_num_layers"):
        _plan(recompute="full", recompute_method="block")
    with pytest.raises(LayoutError):
        _plan(recompute="full", recompute_num_layers=0)


def test_megatron_arguments_and_dense_etp() -> None:
    args = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
            "--num-query-groups 8 --group-query-attention --swiglu --seq-length 8192 --vocab-size 128256 "
            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --bf16 "
            "--recompute-granularity full --recompute-method block --recompute-num-layers 4")
    lay = parse_megatron_args(args).layout
    assert (lay["recompute"], lay["recompute_method"], lay["recompute_num_layers"]) == ("full", "block", 4)
    assert lay["etp"] == 1  # Megatron's etp = tp default has no expert layers to split in a dense model
    bridge = parse_megatron_args(args.replace("--recompute-method block --recompute-num-layers 4",
                                              "model.recompute_method=uniform model.recompute_num_layers=2")).layout
    assert (bridge["recompute_method"], bridge["recompute_num_layers"]) == ("uniform", 2)
    sel = parse_megatron_args(args.replace("full", "selective")).layout
    assert (sel["recompute_method"], sel["recompute_num_layers"]) == (None, None)


def test_cli_layout_line_and_usage_error() -> None:
    cmd = [sys.executable, "-m", "perfmodel", "estimate", "llama3-8b", "--hardware", "dgx-h100", "--n-gpus", "8",
           "--pp", "2", "--micro-batch", "1", "--global-batch", "16", "--recompute", "full",
           "--recompute-num-layers", "3", "--calibration", "none"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "recompute full (first 3 layers per chunk)" in out
    bad = subprocess.run([*cmd[:-6], "--recompute-num-layers", "3"], capture_output=True, text=True)
    assert bad.returncode != 0 and "needs --recompute full" in bad.stderr


def test_runs_file_block_is_read_as_full_and_said() -> None:
    """A runs-file row cannot carry recompute_num_layers: 'block' is charged every layer's rerun, and
    the row's notes say it is an upper bound."""
    from perfmodel.validation.runs import spelled

    notes: list[str] = []
    assert spelled({"recompute": "block"}, "recompute", notes) == "full"
    assert "upper bound" in notes[0] and "recompute_num_layers" in notes[0]
    notes.clear()
    assert spelled({"recompute": "uniform"}, "recompute", notes) == "full"
    assert notes == ["recompute 'uniform' read as full"]


# ---------------------------------------------------------------- the layout search
def test_search_finds_the_block_window_that_fits() -> None:
    """Llama-3 70B on 32 H100, tp 8 pp 4 mb 2 at 8k tokens: without recompute it needs 89.6 GB, full
    recompute fits at 45 GB but reruns all 80 layers; the search answers block recompute of the first 5
    layers per chunk (4 fail, memory.block_that_fits), the same step and memory `perfmodel.estimate`
    gives that plan, and faster than full. With block_recompute off it answers full."""
    from perfmodel.planning.search import SearchSpace, layout_label, search

    space = SearchSpace(tp=(8,), pp=(4,), micro_batch=(2,), zero_stage=(1,), vp=(1,), recompute=("none", "full"),
                        sequence_parallel=(True,), schedules=("1f1b",))
    res = search("llama3-70b", "h100-sxm5-80gb", 32, 64, seq_len=8192, space=space, calibration="none")
    top = res.table.iloc[0]
    assert (top["recompute"], top["recompute_num_layers"]) == ("full", 5)
    assert layout_label(top) == "dp 1 tp 8 pp 4 sp zero 1 mb 2 recompute full (first 5 per chunk) 1f1b"
    plan = res.plan(0)
    assert (plan.recompute_method, plan.recompute_num_layers) == ("block", 5)
    est = perfmodel.estimate("llama3-70b", "h100-sxm5-80gb", plan, calibration="none")
    assert top["step_time_s"] == pytest.approx(est.step_time_s, rel=1e-9)
    assert top["memory_bytes"] == pytest.approx(est.memory_per_gpu_bytes, rel=1e-9) and est.fits
    off = search("llama3-70b", "h100-sxm5-80gb", 32, 64, seq_len=8192, calibration="none",
                 space=space.model_copy(update={"block_recompute": False}))
    assert off.table.iloc[0]["recompute_num_layers"] == 0 and off.table.iloc[0]["step_time_s"] > 1.2 * top["step_time_s"]


@pytest.mark.parametrize("pp", [(4,), (2, 4)])
def test_search_block_bound_loses_nothing(pp: tuple[int, ...]) -> None:
    """The branch and bound refines only rows whose no-recompute twin beats the best so far; refining
    every full-recompute row whose twin does not fit (brute force) finds no better layout. With pp 4
    only, block recompute wins (tp 4, mb 2, the first 11 layers per chunk); with pp 2 too, a layout
    without recompute does."""
    from perfmodel.memory import block_that_fits
    from perfmodel.planning.search import SearchSpace, search

    space = SearchSpace(tp=(4, 8), pp=pp, micro_batch=(2, 4), zero_stage=(1,), vp=(1,),
                        recompute=("none", "full"), sequence_parallel=(True,), schedules=("1f1b",))
    res = search("llama3-70b", "h100-sxm5-80gb", 32, 64, seq_len=8192, space=space, calibration="none")
    plain = search("llama3-70b", "h100-sxm5-80gb", 32, 64, seq_len=8192, calibration="none",
                   space=space.model_copy(update={"block_recompute": False}))
    system = resolve_system("h100-sxm5-80gb", None, 32)[0]
    fitting = set(map(tuple, plain.table[["tp", "pp", "micro_batch", "recompute"]].to_numpy().tolist()))
    best = plain.table["step_time_s"].min()
    for row in plain.table[plain.table["recompute"] == "full"].itertuples():
        if (row.tp, row.pp, row.micro_batch, "none") in fitting:
            continue
        plan = plain.plan(int(row.Index))
        got = block_that_fits(plan_graph(perfmodel.get_workload("llama3-70b").with_(seq_len=8192), plan),
                              plan, system.accelerator.hbm_bytes)
        if got is not None:
            est = perfmodel.estimate("llama3-70b", system, plan.model_copy(
                update={"recompute_method": "block", "recompute_num_layers": got[0]}), calibration="none")
            best = min(best, est.step_time_s)
    assert res.table["step_time_s"].iloc[0] == pytest.approx(best, rel=1e-9)
    won = res.table.iloc[0]["recompute_num_layers"]
    assert (won, best < plain.table["step_time_s"].iloc[0]) == ((11, True) if pp == (4,) else (0, False))
