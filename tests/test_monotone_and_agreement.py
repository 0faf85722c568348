"""Property tests over every schedule: doubling a resource (FLOP/s, HBM bandwidth, scale-up or
scale-out bandwidth) never slows a step, in either engine; the two engines accept the same plans
and agree where the closed forms are exact (uniform stages, no p2p bytes)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.engines.registry import run_engine
from perfmodel.errors import LayoutError
from perfmodel.parallel.schedules import SCHEDULE_NAMES, get_schedule
from perfmodel.workload.graph import Graph, Layer, Op

RESOURCES = ("flops", "hbm_bw", "intra_bw", "inter_bw")


@st.composite
def plans(draw: st.DrawFn) -> tuple[str, str, ParallelPlan]:
    workload = draw(st.sampled_from(["gpt2-124m", "llama3.2-1b", "gpt3-1.3b"]))
    acc = draw(st.sampled_from(["a100-sxm4-80gb", "h100-sxm5-80gb", "tpu-v5p"]))
    schedule = draw(st.sampled_from(SCHEDULE_NAMES))
    pp = draw(st.sampled_from([1, 2, 4, 8]))
    vp = draw(st.sampled_from([2, 3])) if get_schedule(schedule).chunked else 1
    if pp == 1:
        schedule, vp = "1f1b", 1
    dp = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([1, 2]))
    mb = draw(st.sampled_from([1, 2, 4]))
    m = draw(st.integers(1, 24))
    if schedule == "dualpipe":  # even micro-batch counts, at least 2 x pp (DualPipe.step's asserts)
        m = 2 * pp + 2 * (m % 9)
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, vp=vp, micro_batch=mb, global_batch=m * mb * dp,
                        schedule=schedule if pp > 1 else None, zero_stage=draw(st.sampled_from([0, 1, 2, 3])),
                        recompute=draw(st.sampled_from(["none", "selective", "full"])),
                        overlap_dp_comm=draw(st.booleans()))
    return workload, acc, plan


def _step(workload: str, acc: str, plan: ParallelPlan, engine: str, **scale: float) -> float:
    system = perfmodel.resolve_system(acc, None, plan.world)[0]
    if scale:
        system = system.scaled(**scale)
    return run_engine(engine, perfmodel.get_workload(workload), system, plan).step_time_s


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans(), st.sampled_from(RESOURCES))
def test_doubling_a_resource_never_slows_the_analytic_step(case: tuple[str, str, ParallelPlan], resource: str) -> None:
    workload, acc, plan = case
    try:
        base = _step(workload, acc, plan, "analytic")
    except LayoutError:
        return  # a layout this model cannot take (e.g. more chunks than layers); the DES agrees below
    faster = _step(workload, acc, plan, "analytic", **{resource: 2.0})
    assert faster <= base * (1 + 1e-12), (plan, resource, base, faster)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans(), st.sampled_from(RESOURCES))
def test_doubling_a_resource_never_slows_the_des_step(case: tuple[str, str, ParallelPlan], resource: str) -> None:
    workload, acc, plan = case
    try:
        base = _step(workload, acc, plan, "des")
    except LayoutError:
        return
    faster = _step(workload, acc, plan, "des", **{resource: 2.0})
    assert faster <= base * (1 + 1e-9), (plan, resource, base, faster)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_engines_accept_the_same_plans(case: tuple[str, str, ParallelPlan]) -> None:
    workload, acc, plan = case
    outcome = []
    for engine in ("analytic", "des"):
        try:
            outcome.append(_step(workload, acc, plan, engine) > 0)
        except LayoutError as e:
            outcome.append(str(e))
    assert outcome[0] == outcome[1]


def _uniform_graph(count: int) -> Graph:
    """`count` identical GEMM layers and nothing else: equal stages, no p2p bytes."""
    op = Op("g", "gemm", flop=2.0 * 4096**3, bytes=3 * 4096 * 4096 * 2, m=4096, n=4096, k=4096,
            weight_params=4096 * 4096, kernels=1, bwd_kernels=2)
    layer = Layer("layers", "transformer", count, (op,), params=4096 * 4096, params_full=4096 * 4096)
    return Graph("synthetic", (layer,), micro_batch=1, seq_len=4096, tokens=4096)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SCHEDULE_NAMES), st.sampled_from([2, 3, 4, 8]), st.integers(1, 20), st.sampled_from([2, 4]))
def test_engines_agree_where_the_closed_form_is_exact(schedule: str, p: int, m: int, v: int) -> None:
    """Uniform stages: every schedule's closed form equals the simulation for every m (also
    fewer micro-batches than stages); interleaved needs m <= p or a multiple of p (Megatron)."""
    chunked = get_schedule(schedule).chunked
    vp = v if chunked else 1
    if chunked and m > p and m % p:
        return
    if schedule == "dualpipe":  # even pp, even m >= 2p (DualPipe.step's asserts)
        if p % 2:
            return
        m = 2 * p + 2 * (m % 9)
    plan = ParallelPlan(pp=p, vp=vp, global_batch=m, schedule=schedule)
    system = perfmodel.resolve_system("a100-sxm4-80gb", None, p)[0]
    g = _uniform_graph(p * vp * 2)
    a = run_engine("analytic", None, system, plan, graph=g)
    d = run_engine("des", None, system, plan, graph=g)
    assert d.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)
