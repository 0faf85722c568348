"""ZeRO-3 / FSDP per-unit schedule: each layer instance an FSDP unit with its own all-gather and
reduce-scatter, prefetched one unit ahead on one NCCL stream, re-gathered for the backward
except the unit whose backward comes first (engines/closed_forms.py, des_costs.fsdp_unit_schedule).
Hand-computed timelines, the closed form equal to the two-stream simulation for equal units,
analytic vs DES on real models, monotonicity, and the FSDP2 copy kernels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.compute.ops import memory_bound_cost
from perfmodel.engines import closed_forms as cf
from perfmodel.engines.analytic import analytic_estimate
from perfmodel.engines.des import des_estimate
from perfmodel.engines.des_costs import FsdpUnit, fsdp_unit_schedule
from perfmodel.engines.stages import dp_collectives

secs = st.one_of(st.just(0.0), st.floats(0.0, 5.0, allow_nan=False))


def test_two_unequal_units_by_hand() -> None:
    """Forward: gather 1 [0,1], unit 1 computes [1,2] while gather 2 runs [1,4], unit 2 [4,6]:
    6 s for 3 s of compute, wait 3. Backward (unit 2 first, still gathered): unit 2 [0,4] while
    gather 1 runs [0,1]; reduce-scatter 2 [4,6]; unit 1 [4,6]; reduce-scatter 1 [6,7]: 7 s for
    6 s of compute, wait 1. Collectives 2 + 6 + 3 - 3 (unit 2 not re-gathered) = 8 s."""
    units = [FsdpUnit(fwd_s=1, bwd_s=2, all_gather_s=1, reduce_scatter_s=1),
             FsdpUnit(fwd_s=2, bwd_s=4, all_gather_s=3, reduce_scatter_s=2)]
    assert fsdp_unit_schedule(units, prefetch=True) == pytest.approx((3.0, 1.0, 8.0, 0.0))
    # no prefetch: every gather waits for the unit before it; the backward's reduce-scatter of
    # unit 2 queues before unit 1's gather: forward 1 + 3, backward 2 + 1 + 1
    assert fsdp_unit_schedule(units, prefetch=False) == pytest.approx((4.0, 4.0, 8.0, 0.0))


def test_two_equal_units_closed_form_by_hand() -> None:
    """a = 3, r = 2, f = 1, b = 4 per unit, m = 2 micro-batches:
    forward  a + (L-1)·max(0, a - f) = 3 + 2 = 5
    backward max(0, a - b) + 0 + max(0, r - b) + r = 2      (L = 2)
    collectives m·(L·(2a + r) - a) = 2·(16 - 3) = 26."""
    wait, comm, copies, _ = cf.fsdp_exposed_s(2, 2.0, 8.0, 2, 3.0, 2.0, 0.0, 0.0, True)
    assert (wait, comm, copies) == pytest.approx((14.0, 26.0, 0.0))
    f, b, c, k = fsdp_unit_schedule([FsdpUnit(1, 4, 3, 2)] * 2, True)
    assert (2 * (f + b), 2 * c, k) == pytest.approx((14.0, 26.0, 0.0))


def test_n_units_communication_bound_by_hand() -> None:
    """L = 4, a = 2, r = 1, f = 1, b = 1.5:
    forward  2 + 3·(2 - 1) = 5
    backward max(0, 0.5) + 2·max(0, 1.5) + max(0, -0.5) + 1 = 4.5
    The exposed DP seconds with contention c = 0.1: 9.5 + (4·5 - 2 - 9.5)·0.1 = 10.35."""
    wait, comm, _, _ = cf.fsdp_exposed_s(1, 4.0, 6.0, 4, 2.0, 1.0, 0.0, 0.0, True)
    assert (wait, comm) == pytest.approx((9.5, 18.0))
    assert cf.dp_exposed_s(3, 1, 4.0, 6.0, 4, 0.0, 0.0, 0.0, True, True, True, 0.1, 2.0, 1.0) == pytest.approx(10.35)
    f, b, c, _ = fsdp_unit_schedule([FsdpUnit(1, 1.5, 2, 1)] * 4, True)
    assert (f, b, c) == pytest.approx((5.0, 4.5, 18.0))


def test_compute_bound_exposes_the_first_gather_and_last_reduce_scatter() -> None:
    """Collectives far below the compute per unit: per micro-batch one gather and one
    reduce-scatter stay exposed, whatever L."""
    for L in (2, 8, 80):
        wait, _, _, _ = cf.fsdp_exposed_s(3, 10.0 * L, 20.0 * L, L, 0.5, 0.25, 0.0, 0.0, True)
        assert wait == pytest.approx(3 * (0.5 + 0.25))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), secs, secs, secs, secs, secs, secs, st.booleans(), st.integers(1, 8))
def test_closed_form_equals_the_two_stream_schedule_for_equal_units(L: int, f: float, b: float, a: float, r: float,
                                                                    kf: float, kb: float, prefetch: bool, m: int) -> None:
    fw, bw, comm, copies = fsdp_unit_schedule([FsdpUnit(f, b, a, r, kf, kb)] * L, prefetch)
    wait, comm_cf, copies_cf, _ = cf.fsdp_exposed_s(m, f * L, b * L, L, a, r, kf, kb, prefetch)
    assert m * (fw + bw) == pytest.approx(wait + copies_cf, rel=1e-9, abs=1e-9)
    assert (m * comm, m * copies) == pytest.approx((comm_cf, copies_cf), rel=1e-9, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), secs, secs, secs, secs, secs, secs, st.booleans(), st.floats(0.0, 0.5))
def test_faster_collectives_never_slow_the_step(L: int, f: float, b: float, a: float, r: float, kf: float, kb: float,
                                                prefetch: bool, c: float) -> None:
    """Halving a unit's gather or reduce-scatter (more bandwidth) never adds exposed seconds."""
    def step(a_: float, r_: float) -> float:
        return float(cf.dp_exposed_s(3, 2, f * L, b * L, L, 0.0, 0.0, 0.0, True, prefetch, True, c, a_, r_, kf, kb))

    base = step(a, r)
    assert step(a / 2, r) <= base + 1e-9
    assert step(a, r / 2) <= base + 1e-9


def _both(workload: str, acc: str, plan: ParallelPlan) -> tuple[float, float]:
    spec = perfmodel.get_workload(workload)
    system = perfmodel.resolve_system(acc, None, plan.world)[0]
    return analytic_estimate(spec, system, plan).step_time_s, des_estimate(spec, system, plan).step_time_s


@pytest.mark.parametrize("impl", ["flat", "per-param"])
@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize(("workload", "acc", "kw"), [
    ("gpt3-1.3b", "a100-sxm4-80gb", dict(dp=8, global_batch=32, micro_batch=2)),
    ("llama3-8b", "h100-sxm5-80gb", dict(dp=64, global_batch=64, micro_batch=1)),
])
def test_analytic_and_des_agree_on_zero3(workload: str, acc: str, kw: dict, impl: str, prefetch: bool) -> None:
    """The DES plays the real units out (the embedding and head units are larger than the mean
    block the closed form uses, so its first gather and last reduce-scatter are too); within 2 %."""
    a, d = _both(workload, acc, ParallelPlan(zero_stage=3, fsdp_impl=impl, overlap_fsdp_prefetch=prefetch, **kw))
    assert d == pytest.approx(a, rel=0.02)


def test_per_unit_collectives_pay_their_own_latency() -> None:
    """L unit-sized gathers take longer than one gather of the whole stage (latency per message
    and a lower busbw at the smaller size), and exactly as long as L collectives of that size."""
    plan = ParallelPlan(dp=8, zero_stage=3, global_batch=8)
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 8)[0]
    whole = dp_collectives(system, plan, 1.2e8, 0.0)
    per = dp_collectives(system, plan, 1.2e8, 0.0, units=12)
    one = dp_collectives(system, plan, 1e7, 0.0)
    assert per.unit_all_gather_s == pytest.approx(one.all_gather_s)
    assert per.unit_reduce_scatter_s == pytest.approx(one.reduce_scatter_s)
    assert 12 * per.unit_all_gather_s > whole.all_gather_s


def test_fsdp2_copy_kernels_by_hand() -> None:
    """per-param (FSDP2): copy-out of the gathered bf16 weights, read + write 2 x 2 B/param, after
    each gather; chunk_cat of the bf16 gradients into the fp32 reduce-scatter input, 2 + 4 B/param;
    each one memory-bound kernel. flat: none."""
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 8)[0]
    acc = system.accelerator
    flat = dp_collectives(system, ParallelPlan(dp=8, zero_stage=3, global_batch=8), 1e9, 0.0, units=10)
    per = dp_collectives(system, ParallelPlan(dp=8, zero_stage=3, global_batch=8, fsdp_impl="per-param"), 1e9, 0.0,
                         units=10)
    copy_out = 4 * 1e8 / acc.elementwise_achieved_Bps + memory_bound_cost(acc, 0.0, 0.0, 1).time_s
    chunk_cat = 6 * 1e8 / acc.elementwise_achieved_Bps + memory_bound_cost(acc, 0.0, 0.0, 1).time_s
    assert (flat.unit_copy_fwd_s, flat.unit_copy_bwd_s) == (0.0, 0.0)
    assert per.unit_copy_fwd_s == pytest.approx(copy_out)
    assert per.unit_copy_bwd_s == pytest.approx(copy_out + chunk_cat)
    assert per.unit_all_gather_s == flat.unit_all_gather_s


def test_per_param_layout_costs_its_copies_in_both_engines() -> None:
    kw = dict(dp=8, zero_stage=3, global_batch=32, micro_batch=2)
    a_flat, d_flat = _both("gpt3-1.3b", "a100-sxm4-80gb", ParallelPlan(**kw))
    a_per, d_per = _both("gpt3-1.3b", "a100-sxm4-80gb", ParallelPlan(fsdp_impl="per-param", **kw))
    assert a_per > a_flat and d_per > d_flat


def test_frameworks_select_the_fsdp_layout() -> None:
    """torchtitan runs FSDP2 (per-param); llm-foundry / Composer FSDP1 (flat); no fitted factor."""
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = ParallelPlan(dp=8, zero_stage=3, global_batch=8)
    assert apply_framework(plan, framework("torchtitan")).fsdp_impl == "per-param"
    assert apply_framework(plan, framework("composer")).fsdp_impl == "flat"
    assert apply_framework(plan.model_copy(update={"fsdp_impl": "per-param"}), framework("composer")).fsdp_impl == "flat"


def test_pipelined_fsdp_gathers_and_reduce_scatters_once_per_step() -> None:
    """pp 2 (torch.distributed.pipelining + FSDP2): L = 4, a = 2, r = 1, f = 1 per unit,
    m = 8 micro-batches: a stage's first micro-batch's forward waits 2 + 3·max(0, 2 - 1) = 5, and
    the fill crosses both stages' waits (each gathers lazily once its activation arrives): 10;
    the four reduce-scatters after the last stage's last backward 4 — 14 s whatever m;
    collectives per rank 4·(2 + 1) = 12. pp 4: 4·5 + 4 = 24, with vp 2 too: the first
    micro-batch's forward is the first use of all eight chunks, half a rank's units each."""
    for m in (1, 8):
        wait, comm, copies, _ = cf.fsdp_exposed_s(m, 4.0, 8.0, 4, 2.0, 1.0, 0.0, 0.0, True, cf.fsdp_fill(2))
        assert (wait, comm, copies) == pytest.approx((14.0, 12.0, 0.0))
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.0, 0.0, True, cf.fsdp_fill(4))[0] == pytest.approx(24.0)
    # the gathers' hidden part (8 - 5 per stage) runs beside each stage's first forward, on the fill
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.0, 0.0, True, cf.fsdp_fill(2))[3] == pytest.approx(6.0)
    # no prefetch: every gather exposed on each stage in turn (2·4·2), the reduce-scatters once
    # (4·1); copies as the simulation plays them: each stage's first forward holds its copy-outs
    # (2·4·0.5), each stage's last backward, which the drain crosses, the copy-ins less those
    # (2·4·(1.5 - 0.5)); with vp 2 the drain crosses the later stage's in half (1.5·4·1)
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.5, 1.5, False, cf.fsdp_fill(2)) == pytest.approx(
        (20.0, 12.0, 12.0, 0.0))
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.5, 1.5, False, cf.fsdp_fill(2), chunks=2)[2] == pytest.approx(10.0)


@pytest.mark.parametrize("impl", ["flat", "per-param"])
@pytest.mark.parametrize("kw", [dict(dp=8, pp=2, global_batch=64), dict(dp=8, pp=4, vp=2, global_batch=64),
                                dict(dp=4, pp=2, global_batch=32, schedule="zb-h1")])
def test_analytic_and_des_agree_on_pipelined_zero3(kw: dict, impl: str) -> None:
    a, d = _both("llama3-8b", "h100-sxm5-80gb", ParallelPlan(zero_stage=3, fsdp_impl=impl, **kw))
    assert d == pytest.approx(a, rel=0.02)


def test_dualpipe_fill_waits_for_one_stage_of_gathers_per_rank() -> None:
    """DualPipe's two directions fill at once, each through one of a rank's two stages: each fill
    step waits for run_share = 1/2 of the rank's units. Equal units as in the pipelined test above
    (L = 4, a = 2, r = 1, f = 1): fill pp = 4 at share 1/2 waits 2 rank-units of the forward's
    a + 3·max(0, a - f) = 5 (10 s) plus the reduce-scatters once (4): 14 s, against 24 s charged
    at share 1 (each fill step waiting for both stages). The DES agreed with the half: DeepSeek-V3
    on B200 with DualPipe and ZeRO-3 was 29 % apart, now within 6 %."""
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.0, 0.0, True, cf.fsdp_fill(4), run_share=0.5)[0] == \
        pytest.approx(14.0)
    assert cf.fsdp_exposed_s(8, 4.0, 8.0, 4, 2.0, 1.0, 0.0, 0.0, True, cf.fsdp_fill(4))[0] == pytest.approx(24.0)
    plan = ParallelPlan(pp=4, dp=4, cp=4, micro_batch=1, seq_len=4096, schedule="dualpipe", global_batch=32,
                        zero_stage=3, recompute="full")
    a, d = _both("deepseek-v3", "b200", plan)
    assert d == pytest.approx(a, rel=0.08)


def test_pipelined_zero3_holds_the_stage_gathered() -> None:
    """With pp > 1 the stage's bf16 weights stay gathered and its gradients accumulate unsharded
    at the reduce dtype (4 B) until the one reduce-scatter: 2 + 4 B per stage parameter on top of
    the shards."""
    from perfmodel.engines.stages import plan_graph
    from perfmodel.memory import memory_per_rank
    from perfmodel.parallel.split import stage_layers

    spec = perfmodel.get_workload("llama3-8b")
    z2 = ParallelPlan(dp=8, pp=2, zero_stage=2, global_batch=64)
    z3 = z2.model_copy(update={"zero_stage": 3})
    graph = plan_graph(spec, z3)
    params = sum(layer.params * n for layer, n in stage_layers(graph, 2, 0, 1))
    m2, m3 = memory_per_rank(graph, z2, 0), memory_per_rank(graph, z3, 0)
    assert m3.weights_bytes == pytest.approx(2 * params / 8 + 2 * params)
    assert m3.grads_bytes == pytest.approx(m2.grads_bytes + 4 * params)


def test_the_first_unit_is_exposed_at_its_own_size() -> None:
    """Three units, the first (the embedding) 4x the others' gather (a1 = 4, a = 1) and 3x their
    reduce-scatter (r1 = 3, r = 1), 2 s of compute per unit each way, 2 micro-batches:
    forward 4 + 2·max(0, 1 - 2) = 4 (the first gather has nothing to hide behind);
    backward max(0, 1 - 2) + 0·(...) + max(0, 4 + 1 - 2) + max(0, 1 - 2) + 3 = 6 (the first unit's
    re-gather beside the second unit's reduce-scatter, then its own reduce-scatter): 2·10 = 20 s;
    collectives 2·(2·(4 + 2) + (3 + 2) - 1) = 32 s. With a1 = a, r1 = r the equal-unit form."""
    wait, comm, copies, _ = cf.fsdp_exposed_s(2, 6.0, 6.0, 3, 1.0, 1.0, 0.0, 0.0, True, 1.0, 4.0, 3.0)
    assert (wait, comm, copies) == pytest.approx((20.0, 32.0, 0.0))
    assert cf.fsdp_exposed_s(2, 6.0, 6.0, 3, 1.0, 1.0, 0.0, 0.0, True, 1.0, 1.0, 1.0) == pytest.approx(
        cf.fsdp_exposed_s(2, 6.0, 6.0, 3, 1.0, 1.0, 0.0, 0.0, True))


def test_small_model_zero3_agrees_with_the_des() -> None:
    """llama3.2-1b (its tied 262.7M-parameter embedding is 4.3x a layer) under ZeRO-3 on 8 H100s:
    with the embedding's unit at the mean size the analytic engine was 8.8 % below the DES."""
    a, d = _both("llama3.2-1b", "h100-sxm5-80gb",
                 ParallelPlan(dp=8, zero_stage=3, micro_batch=2, global_batch=16, seq_len=1024))
    assert d == pytest.approx(a, rel=0.03)


def test_interleaved_zero3_fill_meets_every_chunks_gathers() -> None:
    """Mixtral 8x7B, tp 4 (its experts data-parallel over the 4 TP ranks, ZeRO-3 sharded there),
    pp 4 x vp 2, 4 micro-batches, gathers not prefetched: the first micro-batch's forward is the
    first use of all eight chunks' units, so the fill waits for pp ranks' worth of gathers. The
    closed form once counted the earlier ranks' first chunks only (1 + 3/2 ranks) and was 13 %
    below the simulation."""
    plan = ParallelPlan(tp=4, pp=4, vp=2, dp=1, global_batch=4, seq_len=4096, zero_stage=3, recompute="selective",
                        overlap_dp_comm=False, overlap_fsdp_prefetch=False, sequence_parallel=True)
    a, d = _both("mixtral-8x7b", "h100-sxm5-80gb", plan)
    assert d == pytest.approx(a, rel=0.01)


@pytest.mark.parametrize("vp, gb", [(1, 8), (1, 64), (2, 16)])
def test_pipelined_per_param_fsdp_copies_cross_the_fill_and_the_drain(vp: int, gb: int) -> None:
    """FSDP2 (per-param) copies each unit out after its gather and in before its reduce-scatter.
    Gathered once per step under a pipeline, the copy-outs sit in every rank's first forward (the
    fill crosses them rank after rank) and the copy-ins in every rank's last backward (the drain
    does). Mixtral 8x7B, tp 4 pp 4 dp 4, its experts' large units: the closed form charged the
    copies once and the hidden gathers' contention once, and was 11-14 % below the simulation."""
    plan = ParallelPlan(tp=4, pp=4, vp=vp, dp=4, global_batch=gb, seq_len=4096, zero_stage=3, recompute="selective",
                        fsdp_impl="per-param")
    a, d = _both("mixtral-8x7b", "h100-sxm5-80gb", plan)
    assert d == pytest.approx(a, rel=0.02)
