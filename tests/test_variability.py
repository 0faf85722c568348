"""A synchronous step runs at its slowest chip's pace (hardware/variability.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scipy import integrate, stats

import perfmodel
from perfmodel.calibration.parameters import BY_NAME, TIME_KNOBS
from perfmodel.calibration.profile import NONE, calibrated_system, load_profile, system_with_knobs
from perfmodel.engines.costs import layer_time
from perfmodel.engines.stages import plan_graph
from perfmodel.hardware.system import resolve_system
from perfmodel.hardware.variability import SPEED_SPREAD, slowest_of, slowest_unit_factor
from perfmodel.parallel.plan import ParallelPlan


def _exact_max(n: int) -> float:
    """E[max of n standard normals] by quadrature."""
    return integrate.quad(lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1), -12, 12, limit=200)[0]


def test_one_chip_has_no_slower_peer() -> None:
    assert slowest_of(1) == 0.0
    assert slowest_unit_factor(0.05, 1) == 1.0


@pytest.mark.parametrize("n", [8, 64, 1024, 16384])
def test_blom_is_within_one_percent_of_the_order_statistic(n: int) -> None:
    assert slowest_of(n) == pytest.approx(_exact_max(n), rel=0.01)


def test_the_slowest_chip_grows_slower_with_the_job() -> None:
    xs = [slowest_of(n) for n in (2, 8, 64, 512, 4096)]
    assert xs == sorted(xs)
    # by hand: PhiInv((8 - 0.375) / 8.25) = PhiInv(0.92424) = 1.4342; PhiInv(127.625 / 128.25) = 2.5847
    assert slowest_of(8) == pytest.approx(1.4342, abs=1e-4)
    assert slowest_of(128) == pytest.approx(2.5847, abs=1e-4)
    # a weak-scaled job slows by (1 + 0.013·2.5847) / (1 + 0.013·1.4342) - 1 = 1.47 % from 8 to 128 chips
    assert slowest_unit_factor(SPEED_SPREAD, 128) / slowest_unit_factor(SPEED_SPREAD, 8) == pytest.approx(1.01468, abs=1e-5)


def _block(plan: ParallelPlan):  # type: ignore[no-untyped-def]
    return next(layer for layer in plan_graph(perfmodel.get_workload("llama3-8b"), plan).layers if layer.recomputable)


def test_kernels_take_the_slowest_chips_seconds_and_collectives_do_not() -> None:
    system = calibrated_system(resolve_system("h100-sxm5-80gb", None, 64)[0], NONE)
    plan = ParallelPlan(tp=8, dp=8, sequence_parallel=True, micro_batch=1, global_batch=8, seq_len=4096, recompute="full")
    block = _block(plan)
    one, many = layer_time(system, plan, block, world=1), layer_time(system, plan, block)  # plan.world = 64
    pace = slowest_unit_factor(system.speed_spread, 64)
    for f in ("fwd_gpu_s", "bwd_gpu_s", "recompute_gpu_s", "wgrad_gpu_s"):
        assert getattr(many, f) == pytest.approx(getattr(one, f) * pace, rel=1e-12), f
    for f in ("fwd_comm_s", "bwd_comm_s", "fwd_host_s", "bwd_host_s"):
        assert getattr(many, f) == pytest.approx(getattr(one, f), rel=1e-12), f
    # no spread: every chip the same, the job's size changes nothing
    flat = replace(system, speed_spread=0.0)
    assert layer_time(flat, plan, block) == layer_time(flat, plan, block, world=1)


def test_more_spread_never_makes_a_step_faster() -> None:
    spec = perfmodel.get_workload("llama3-8b")
    base = resolve_system("h100-sxm5-80gb", None, 64)[0]
    plan = ParallelPlan(tp=2, pp=2, dp=16, micro_batch=1, global_batch=128, seq_len=4096)
    steps = [perfmodel.estimate(spec, replace(base, speed_spread=s), plan, calibration="none").step_time_s
             for s in (0.0, 0.01, 0.02, 0.05)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    # one GPU: nothing to wait for
    single = ParallelPlan(micro_batch=1, global_batch=4, seq_len=1024)
    small = perfmodel.get_workload("llama3.2-1b")
    one = resolve_system("h100-sxm5-80gb", None, 1)[0]
    assert (perfmodel.estimate(small, one, single, calibration="none").step_time_s
            == perfmodel.estimate(small, replace(one, speed_spread=0.05), single, calibration="none").step_time_s)


def test_the_calibration_parameter_scales_the_spread() -> None:
    p = BY_NAME["gpu_speed_spread"]
    assert (p.knob, p.prior) == ("speed_spread", 1.0) and "speed_spread" in TIME_KNOBS
    system = resolve_system("h100-sxm5-80gb", None, 8)[0]
    assert system.speed_spread == SPEED_SPREAD
    assert calibrated_system(system, NONE).speed_spread == SPEED_SPREAD  # physics only: the measured spread
    knobs = NONE.knobs(system.accelerator) | {"speed_spread": 2.0}
    assert system_with_knobs(system, knobs).speed_spread == pytest.approx(2 * SPEED_SPREAD)
    prof = load_profile("default")
    assert calibrated_system(system, prof).speed_spread == pytest.approx(SPEED_SPREAD * prof.value("gpu_speed_spread"))
    # a CPU run is one process: the parameter does not apply to it
    assert "cpu" not in p.kinds


def test_an_estimate_says_how_much_the_slowest_chip_costs() -> None:
    spec = perfmodel.get_workload("llama3-8b")
    system = resolve_system("h100-sxm5-80gb", None, 64)[0]
    plan = ParallelPlan(tp=2, pp=2, dp=16, micro_batch=1, global_batch=128, seq_len=4096)
    physics = perfmodel.estimate(spec, system, plan, calibration="none")
    assert "x1.0304 (chip-speed spread 1.30%" in physics.provenance["slowest_chip"]  # 1 + 0.013 x 2.3367
    fitted = perfmodel.estimate(spec, system, plan)
    spread = SPEED_SPREAD * load_profile("default").value("gpu_speed_spread")
    assert f"x{slowest_unit_factor(spread, 64):.4f}" in fitted.provenance["slowest_chip"]


def test_userbuffers_gemms_run_at_the_slowest_chips_pace():
    """Megatron-Core's TP overlap runs GEMMs beside the collectives: the overlap's makespans are sums
    and maxima of GEMM and collective seconds, so with every GEMM p times slower the exposed seconds
    are p x those with the collectives' seconds divided by p."""
    from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework
    from perfmodel.engines.costs import comm_s
    from perfmodel.engines.userbuffers import pipelined_rs_s, ring_exchange_s, tp_overlap_s

    # the makespans are homogeneous of degree 1 in their seconds (bulk_s too: a max of sums)
    assert ring_exchange_s(3.0, 5.0, 8) == 3 * ring_exchange_s(1.0, 5.0 / 3, 8)
    assert pipelined_rs_s(3.0, 5.0, 4) == pytest.approx(3 * pipelined_rs_s(1.0, 5.0 / 3, 4))
    system = calibrated_system(resolve_system("h100-sxm5-80gb", None, 64)[0], NONE)
    plan = apply_framework(ParallelPlan(tp=8, dp=8, sequence_parallel=True, micro_batch=1, global_batch=8,
                                        seq_len=4096), FRAMEWORKS["megatron-core"])
    assert plan.overlap_tp_comm
    block = _block(plan)
    ag = next(c for c in block.comms if c.kind == "all_gather")
    rs = next(c for c in block.comms if c.kind == "reduce_scatter")
    t_ag, t_rs = comm_s(system, plan, ag), comm_s(system, plan, rs)
    pairs = sum(c.fwd for c in block.comms if c.kind == "all_gather")
    pace = slowest_unit_factor(system.speed_spread, 64)
    one, many = layer_time(system, plan, block, world=1), layer_time(system, plan, block)
    at_one = tp_overlap_s(system.accelerator, block, 8, t_ag, t_rs, pairs)
    at_pace = tp_overlap_s(system.accelerator, block, 8, t_ag / pace, t_rs / pace, pairs)
    assert many.fwd_comm_s - one.fwd_comm_s == pytest.approx(pace * at_pace.fwd_s - at_one.fwd_s, rel=1e-9)
    assert many.bwd_comm_s - one.bwd_comm_s == pytest.approx(pace * at_pace.bwd_s - at_one.bwd_s, rel=1e-9)
