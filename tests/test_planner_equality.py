"""The planner's vectorised step time and memory equal `perfmodel.estimate` to 1e-9 on random
layouts of every accelerator kind (GPU, TPU, host CPU), every schedule, ZeRO stage, overlap flag,
recompute and precision, and a non-default gradient-reduction width: both read the same
closed forms (engines/closed_forms.py) and the same stage costs, so they can only differ by
floating-point summation order."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.hardware.system import resolve_system
from perfmodel.planning.evaluate import Evaluator
from perfmodel.planning.space import RECOMPUTES, SCHEDULE_LIST, SEARCHED_SCHEDULES, SearchSpace, layout_grid

REL = 1e-9
# (accelerator, workload, GPUs, global batch, precision): one of each accelerator kind, dense and MoE
CASES = [
    ("a100-sxm4-80gb", "llama3-8b", 64, 256, "bf16"),
    ("a100-sxm4-80gb", "gpt3-1.3b", 32, 128, "fp16"),
    ("h100-sxm5-80gb", "mixtral-8x7b", 64, 256, "fp8"),
    ("h100-sxm5-80gb", "gpt3-1.3b", 32, 64, "bf16"),
    ("tpu-v5p", "llama3-8b", 64, 128, "bf16"),
    ("host-cpu", "gpt2-124m", 2, 16, "bf16"),  # host-node: 2 ranks per machine, no NIC
    ("host-cpu", "gpt2-124m", 2, 8, "fp32"),
]


def _plan(g: dict[str, np.ndarray], i: int, gb: int, seq: int, precision: str, **kw: object) -> perfmodel.ParallelPlan:
    r = {k: int(v[i]) for k, v in g.items()}
    return perfmodel.ParallelPlan(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r["ep"], vp=r["vp"],
                                  sequence_parallel=bool(r["sp"]), zero_stage=r["zero"], micro_batch=r["mb"],
                                  global_batch=gb, seq_len=seq, recompute=RECOMPUTES[r["rec"]], precision=precision,
                                  schedule=SCHEDULE_LIST[r["sched"]] if r["pp"] > 1 else None, **kw)  # type: ignore[arg-type]


def _sample(g: dict[str, np.ndarray], rng: np.random.Generator, k: int) -> list[int]:
    """k rows, at least one of each schedule present in the grid when there is one."""
    rows = list(rng.choice(len(g["tp"]), size=min(k, len(g["tp"])), replace=False))
    for s in np.unique(g["sched"]):
        where = np.flatnonzero(g["sched"] == s)
        rows.append(int(rng.choice(where)))
    for z in np.unique(g["zero"]):
        rows.append(int(rng.choice(np.flatnonzero(g["zero"] == z))))
    return rows


@pytest.mark.parametrize(("acc", "workload", "n_gpus", "gb", "precision"), CASES)
@pytest.mark.parametrize(("overlap_dp", "overlap_fsdp"), [(True, True), (False, False), (True, False)])
def test_planner_equals_estimate(acc: str, workload: str, n_gpus: int, gb: int, precision: str, overlap_dp: bool,
                                 overlap_fsdp: bool) -> None:
    spec = perfmodel.get_workload(workload)
    system = resolve_system(acc, None, n_gpus)[0]
    seq = spec.seq_len
    g = layout_grid(spec, system, [n_gpus], gb, seq, SearchSpace())
    assert len(g["tp"]) > 0
    out = Evaluator(spec, system, seq, precision).evaluate(g, overlap_dp, overlap_fsdp)
    rng = np.random.default_rng(hash((acc, workload, overlap_dp, overlap_fsdp)) % 2**32)
    for i in _sample(g, rng, 12):
        plan = _plan(g, i, gb, seq, precision, overlap_dp_comm=overlap_dp, overlap_fsdp_prefetch=overlap_fsdp)
        est = perfmodel.estimate(spec, system, plan, calibration="none")
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), plan
        assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=REL), plan


def test_planner_honours_grad_reduce_bytes() -> None:
    """bf16 gradient reduction (grad_reduce_bytes 2) halves the DP bytes in both evaluators."""
    spec = perfmodel.get_workload("llama3-8b")
    system = resolve_system("a100-sxm4-80gb", None, 64)[0]
    g = layout_grid(spec, system, [64], 256, spec.seq_len, SearchSpace(zero_stage=(0, 1)))
    base = Evaluator(spec, system, spec.seq_len, "bf16").evaluate(g)
    out = Evaluator(spec, system, spec.seq_len, "bf16", grad_reduce_bytes=2).evaluate(g)
    assert (out["step_time_s"] <= base["step_time_s"]).all() and (out["step_time_s"] < base["step_time_s"]).any()
    for i in np.random.default_rng(3).choice(len(g["tp"]), size=10, replace=False):
        plan = _plan(g, i, 256, spec.seq_len, "bf16", grad_reduce_bytes=2)
        assert out["step_time_s"][i] == pytest.approx(perfmodel.estimate(spec, system, plan, calibration="none").step_time_s, rel=REL)


def test_cpu_dp_collectives_never_hide() -> None:
    """On a CPU (gloo on the computing cores) the overlap flag changes nothing, in both evaluators."""
    spec = perfmodel.get_workload("gpt2-124m")
    system = resolve_system("host-cpu", None, 2)[0]
    g = layout_grid(spec, system, [2], 16, spec.seq_len, SearchSpace())
    ev = Evaluator(spec, system, spec.seq_len, "bf16")
    on, off = ev.evaluate(g, True, True), ev.evaluate(g, False, False)
    np.testing.assert_array_equal(on["step_time_s"], off["step_time_s"])


@pytest.mark.parametrize("optimizer", ["adamw", "adam8bit", "sgd", "adafactor", "muon"])
def test_planner_equals_estimate_for_every_optimizer(optimizer: str) -> None:
    """The optimizer step (element-wise update per local parameter, and Muon's Newton-Schulz on
    the slowest rank's full 2-D weights with its gathers) is the same in both."""
    spec = perfmodel.get_workload("gpt3-1.3b")
    system = resolve_system("h100-sxm5-80gb", None, 32)[0]
    g = layout_grid(spec, system, [32], 64, spec.seq_len, SearchSpace())
    out = Evaluator(spec, system, spec.seq_len, "bf16", optimizer=optimizer).evaluate(g)
    for i in _sample(g, np.random.default_rng(11), 10):
        plan = _plan(g, i, 64, spec.seq_len, "bf16", optimizer=optimizer)
        est = perfmodel.estimate(spec, system, plan, calibration="none")
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), plan
        assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=REL), plan


def test_planner_equals_estimate_with_the_stacks_moe_dispatcher() -> None:
    """Under megatron-core the planner scores MoE layouts with the flex dispatcher, as estimate does."""
    res = perfmodel.search("mixtral-8x7b", "h100-sxm5-80gb", 32, 64, seq_len=2048, calibration="none",
                           framework="megatron-core")
    assert res.plan(0).moe_dispatcher == "flex"
    checked = 0
    for i in range(len(res.table)):
        plan = res.plan(i)
        if plan.ep == 1:
            continue
        est = perfmodel.estimate(res.spec, res.system, plan, calibration="none", framework="megatron-core")
        assert res.table["step_time_s"].iloc[i] == pytest.approx(est.step_time_s, rel=REL), plan
        checked += 1
        if checked == 5:
            break
    assert checked == 5


@pytest.mark.parametrize("fw_name", ["megatron-core", "torchtitan", "llm.c", "pytorch"])
@pytest.mark.parametrize(("acc", "workload", "n_gpus", "gb", "precision"), [
    ("h100-sxm5-80gb", "llama3-8b", 64, 256, "fp8"), ("a100-sxm4-80gb", "gpt3-1.3b", 32, 128, "bf16")])
def test_planner_equals_estimate_under_a_framework(fw_name: str, acc: str, workload: str, n_gpus: int, gb: int,
                                                   precision: str) -> None:
    """A stack's layer mechanisms (TP overlap where tp > 1 with sp, p2p overlap where vp > 1, fused
    fp8 casts and loss, an fp8 recipe, host dispatch) reach the planner's scores as they reach the engine."""
    from perfmodel.calibration.frameworks import framework
    from perfmodel.calibration.profile import NONE, calibrated_system

    fw = framework(fw_name)
    spec = perfmodel.get_workload(workload)
    system = resolve_system(acc, None, n_gpus)[0]
    seq = spec.seq_len
    from perfmodel.planning.search import space_for_stack

    g = layout_grid(spec, system, [n_gpus], gb, seq, space_for_stack(SearchSpace(), fw))
    out = Evaluator(spec, calibrated_system(system, NONE, fw), seq, precision, framework=fw).evaluate(g)
    rng = np.random.default_rng(7)
    rows = _sample(g, rng, 10)
    rows += [int(rng.choice(np.flatnonzero((g["vp"] > 1) & (g["tp"] > 1) & (g["sp"] > 0))))]
    for i in rows:
        plan = _plan(g, i, gb, seq, precision)
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework=fw_name)
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), plan
    if fw_name == "megatron-core":  # the mechanisms change the interleaved, tp + sp row
        # (either way: userbuffers at TE's defaults hold 16 SMs from the bulk GEMMs and split the
        # row-parallel GEMMs in 4, which on GPT-3 1.3B at tp 2 costs more than its small
        # collectives, engines/userbuffers.py)
        plain = perfmodel.estimate(spec, system, _plan(g, rows[-1], gb, seq, precision), calibration="none")
        assert out["step_time_s"][rows[-1]] != pytest.approx(plain.step_time_s, rel=1e-4)


def test_planner_equals_estimate_where_the_stack_overlaps_the_moe_all_to_alls() -> None:
    """megatron-core runs MXFP8 MoE layouts under the combined 1F1B where Megatron-Core accepts it
    (frameworks.apply_framework); its exposed all-to-all share depends on pp, vp and the micro-
    batches, and the planner scores each layout with its own, as estimate does."""
    from perfmodel.calibration.frameworks import framework
    from perfmodel.calibration.profile import NONE, calibrated_system

    fw = framework("megatron-core")
    spec = perfmodel.get_workload("mixtral-8x7b")
    system = resolve_system("b200", None, 32)[0]
    seq, gb = 2048, 128
    g = layout_grid(spec, system, [32], gb, seq, SearchSpace())
    out = Evaluator(spec, calibrated_system(system, NONE, fw), seq, "mxfp8", framework=fw).evaluate(g)
    rng = np.random.default_rng(3)
    full = RECOMPUTES.index("full")
    kinds = {"pp 1": (g["ep"] > 1) & (g["pp"] == 1) & (g["rec"] != full),
             "interleaved": (g["ep"] > 1) & (g["pp"] > 1) & (g["vp"] > 1) & (g["rec"] != full),
             "refused: pp without vp": (g["ep"] > 1) & (g["pp"] > 1) & (g["vp"] == 1),
             "refused: full recompute": (g["ep"] > 1) & (g["rec"] == full)}
    overlapped = 0
    for what, mask in kinds.items():
        for i in rng.choice(np.flatnonzero(mask), size=3, replace=False):
            plan = _plan(g, int(i), gb, seq, "mxfp8")
            est = perfmodel.estimate(spec, system, plan, calibration="none", framework="megatron-core")
            assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), (what, plan)
            assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=REL), (what, plan)
            off = perfmodel.estimate(spec, system, plan.model_copy(update={"moe_a2a_overlap": False}),
                                     calibration="none", framework="megatron-core")
            if what.startswith("refused"):
                assert est.step_time_s == off.step_time_s, (what, plan)
            else:
                assert est.step_time_s <= off.step_time_s, (what, plan)
                overlapped += est.step_time_s < off.step_time_s
    assert overlapped >= 2  # hidden all-to-all seconds wherever micro-batches pair up


@pytest.mark.parametrize(("acc", "workload", "n_gpus", "gb", "precision", "stack"), [
    ("h100-sxm5-80gb", "mixtral-8x7b", 64, 256, "fp8", None),
    ("a100-sxm4-80gb", "llama3-8b", 64, 256, "bf16", None),
    ("gb200", "qwen3-30b-a3b", 64, 512, "mxfp8", "megatron-core"),  # the combined 1F1B overlap under DualPipe
])
def test_planner_equals_estimate_under_dualpipe(acc: str, workload: str, n_gpus: int, gb: int, precision: str,
                                                stack: str | None) -> None:
    """DualPipe, searched on request: two stages per rank (twice the weights), half of their time per
    micro-batch, and the pipeline as the largest over ranks of m·t_r + the bubble of the rank's own
    phases, from the order's piecewise-linear form (schedules/dualpipe.py bubble_pieces)."""
    from perfmodel.calibration.frameworks import framework

    spec = perfmodel.get_workload(workload)
    system = resolve_system(acc, None, n_gpus)[0]
    g = layout_grid(spec, system, [n_gpus], gb, spec.seq_len, SearchSpace(schedules=SEARCHED_SCHEDULES))
    rows = np.flatnonzero(g["sched"] == SCHEDULE_LIST.index("dualpipe"))
    assert len(rows) > 0 and set(g["pp"][rows].tolist()) >= {2, 4, 8}
    assert (g["pp"][rows] % 2 == 0).all() and (g["m"][rows] >= 2 * g["pp"][rows]).all() and (g["m"][rows] % 2 == 0).all()
    out = Evaluator(spec, system, spec.seq_len, precision, framework=framework(stack) if stack else None).evaluate(g)
    rng = np.random.default_rng(7)
    for i in rng.choice(rows, size=10, replace=False):
        plan = _plan(g, int(i), gb, spec.seq_len, precision)
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework=stack)
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), plan
        assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=REL), plan
        assert out["pp_bubble_s"][i] == pytest.approx(est.breakdown_s["pp_bubble_s"], rel=1e-6, abs=1e-12), plan


def test_dualpipe_is_searched_on_request_only() -> None:
    spec = perfmodel.get_workload("llama3-8b")
    system = resolve_system("a100-sxm4-80gb", None, 64)[0]
    g = layout_grid(spec, system, [64], 256, spec.seq_len, SearchSpace())
    assert SCHEDULE_LIST.index("dualpipe") not in set(g["sched"].tolist())


def test_a_named_attention_kernel_outranks_the_stack_in_the_planner() -> None:
    """The planner runs the kernel a search names (FA3 on H100) over the stack's (torchtitan: flash),
    every layout equal to its estimate with the same plan; without a name the stack's kernel; a
    generation the chip never measured (FA4 on H100) is refused before any layout is scored."""
    from perfmodel.calibration.frameworks import framework
    from perfmodel.errors import LayoutError

    spec = perfmodel.get_workload("llama3-8b")
    system = resolve_system("h100-sxm5-80gb", None, 16)[0]
    g = layout_grid(spec, system, [16], 64, spec.seq_len, SearchSpace())
    fw = framework("torchtitan")
    fa3 = Evaluator(spec, system, spec.seq_len, "bf16", "flash3", framework=fw)
    assert fa3.attention_impl == "flash3"
    assert Evaluator(spec, system, spec.seq_len, "bf16", framework=fw).attention_impl == "flash"
    out = fa3.evaluate(g)
    flash = Evaluator(spec, system, spec.seq_len, "bf16", framework=fw).evaluate(g)
    assert (out["step_time_s"] < flash["step_time_s"]).all()
    for i in _sample(g, np.random.default_rng(3), 8):
        plan = _plan(g, i, 64, spec.seq_len, "bf16", attention_impl="flash3")
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework="torchtitan")
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=REL), plan
    with pytest.raises(LayoutError, match="attention flash4: no flash4 rate"):
        Evaluator(spec, system, spec.seq_len, "bf16", "flash4", framework=fw)
