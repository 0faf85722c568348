"""Transformer Engine's userbuffers TP overlap (engines/userbuffers.py): hand-computed makespans of
one Llama-3 70B layer on H100 at tp 4, the layer's exposed seconds in both engines and the
planner, and the properties: more SMs for the communication never make it faster, a faster
fabric never makes it slower."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel.calibration.parameters import KNOBS
from perfmodel.calibration.profile import system_with_knobs
from perfmodel.compute.ops import gemm_cost
from perfmodel.engines.analytic import analytic_estimate
from perfmodel.engines.costs import comm_s, layer_time
from perfmodel.engines.des import des_estimate
from perfmodel.engines.userbuffers import (
    TE_DEFAULTS,
    UbConfig,
    bulk_s,
    overlapped_gemm_s,
    pipelined_rs_s,
    ring_exchange_s,
    tp_overlap_s,
    tp_pairs,
)
from perfmodel.errors import LayoutError
from perfmodel.hardware.system import resolve_system
from perfmodel.parallel.shard import shard
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import get_workload

H100 = resolve_system("h100-sxm5-80gb", None, 8)[0]
PLAN = perfmodel.ParallelPlan(tp=4, sequence_parallel=True, seq_len=8192)
OVER = PLAN.model_copy(update={"overlap_tp_comm": True})


def body(plan: perfmodel.ParallelPlan = PLAN, model: str = "llama3-70b", seq: int = 8192):
    graph = build_graph(get_workload(model), 1, seq, precision=plan.precision)
    return next(lay for lay in shard(graph, plan).layers if lay.kind == "transformer")


def tp_times(system=H100, plan=PLAN, layer=None) -> tuple[float, float]:
    layer = layer or body(plan)
    ag = next(c for c in layer.comms if c.name == "tp_allgather")
    rs = next(c for c in layer.comms if c.name == "tp_reducescatter")
    return comm_s(system, plan, ag), comm_s(system, plan, rs)


def test_te_defaults_are_transformer_engines():
    """TE pytorch/module/base.py:349-360 and :375-394 @ d0067d0."""
    for name in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"):
        cfg = TE_DEFAULTS[name]
        assert (cfg.method, cfg.num_sm, cfg.set_sm_margin, cfg.num_splits, cfg.use_ce) == ("ring_exchange", 1, False, 0, True)
        assert cfg.comm_sms() == 0  # copy-engine sends
    for name in ("proj_fprop", "fc2_fprop"):
        cfg = TE_DEFAULTS[name]
        assert (cfg.method, cfg.num_sm, cfg.set_sm_margin, cfg.num_splits) == ("pipeline", 16, True, 4)
    for name in ("qkv_dgrad", "fc1_dgrad", "qkv_wgrad", "fc1_wgrad"):
        cfg = TE_DEFAULTS[name]
        assert (cfg.method, cfg.num_sm, cfg.set_sm_margin, cfg.comm_sms()) == ("bulk", 16, True, 16)


def test_proj_fprop_on_h100_by_hand():
    """Llama-3 70B, tp 4, 8192 tokens: out_proj is [8192 x 2048] x [2048 x 8192]. Pipelined in 4
    column chunks of [8192 x 2048] x [2048 x 2048]:
        F = 2·8192·2048·2048 = 68.72 GFLOP at R 794.5 TFLOP/s          = 86.49 us
        bytes (8192·2048 + 2048·2048 + 8192·2048)·2 = 75.5 MB at 2.97 TB/s = 25.42 us
        sqrt(86.49² + 25.42²) + t0 3.44 us                           = 93.59 us
        at 116/132 SMs (16 left to the reduce-scatter)  93.59·132/116  = 106.50 us
    the reduce-scatter of 134 MB over 4 ranks is 281.2 us, a quarter per chunk 70.30 us < 106.50 us,
    so T = 4·106.50 + 70.30 = 496.3 us against the whole GEMM's 356.0 us: 140.3 us exposed."""
    acc = H100.accelerator
    chunk = gemm_cost(acc, 8192, 2048, 2048, "bf16").time_s
    assert chunk == pytest.approx(93.59e-6, rel=1e-3)
    _, t_rs = tp_times()
    assert t_rs == pytest.approx(281.2e-6, rel=1e-3)
    row = next(o for o in body().ops if o.name == "out_proj")
    span, alone = overlapped_gemm_s(acc, TE_DEFAULTS["proj_fprop"], (row,), "fwd", 4, t_rs)
    assert alone == pytest.approx(356.0e-6, rel=1e-3)
    assert span == pytest.approx(4 * chunk * 132 / 116 + t_rs / 4, rel=1e-12)  # the exposed tail t_rs / 4
    assert span == pytest.approx(496.3e-6, rel=1e-3)


def test_qkv_fprop_ring_exchange_by_hand():
    """qkv_proj [8192 x 8192] x [8192 x 2560] in 4 ring steps of 2048 rows: 115.37 us each on all
    132 SMs (the copy engines send); a step moves 1/4 of the 281.2 us all-gather, 93.7 us, so the
    GEMM never waits: T = 4 x 115.37 = 461.5 us against 442.1 us whole (the chunks' fill/drain and
    weight re-reads, 19.4 us). With 10x slower links it waits: T = t_ag + one chunk."""
    acc = H100.accelerator
    qkv = next(o for o in body().ops if o.name == "qkv_proj")
    g = gemm_cost(acc, 2048, 2560, 8192, "bf16").time_s
    assert g == pytest.approx(115.37e-6, rel=1e-3)
    t_ag, _ = tp_times()
    span, alone = overlapped_gemm_s(acc, TE_DEFAULTS["qkv_fprop"], (qkv,), "fwd", 4, t_ag)
    assert span == pytest.approx(4 * g, rel=1e-12) and span - alone == pytest.approx(19.4e-6, rel=1e-2)
    slow, _ = overlapped_gemm_s(acc, TE_DEFAULTS["qkv_fprop"], (qkv,), "fwd", 4, 10 * t_ag)
    assert slow == pytest.approx(10 * t_ag + g, rel=1e-12)


def test_bulk_with_and_without_a_margin():
    """TE default (16 SMs, margin): max(t_c, G·132/116). A Megatron-Bridge tuned row (e.g. fc1_dgrad
    num_sm 2 without a margin, training/comm_overlap.py:102): max(t_c, G + 2/132·t_c)."""
    assert bulk_s(1e-3, 0.5e-3, TE_DEFAULTS["fc1_dgrad"], 132) == pytest.approx(1e-3 * 132 / 116)
    assert bulk_s(1e-3, 2e-3, TE_DEFAULTS["fc1_dgrad"], 132) == pytest.approx(2e-3)
    tuned = UbConfig("bulk", 2, False)
    assert bulk_s(1e-3, 0.5e-3, tuned, 132) == pytest.approx(1e-3 + 2 / 132 * 0.5e-3)
    assert bulk_s(0.1e-3, 2e-3, tuned, 132) == pytest.approx(2e-3)  # the GEMM finishes under the collective


def test_schedules_closed_forms():
    assert ring_exchange_s(1.0, 0.5, 4) == 4.0 and ring_exchange_s(1.0, 2.0, 4) == 7.0
    assert pipelined_rs_s(1.0, 0.5, 4) == 4.5 and pipelined_rs_s(1.0, 2.0, 4) == 9.0


def test_layer_exposes_the_sum_of_its_overlaps():
    """A dense layer's exposed TP seconds are the userbuffers terms of its two pairs, per pass; more
    than nothing, less than the collectives alone."""
    layer = body()
    assert [(tuple(c.name for c in cols), row.name) for cols, row in tp_pairs(layer)] == [
        (("qkv_proj",), "out_proj"), (("mlp_fc1",), "mlp_fc2")]
    t_ag, t_rs = tp_times()
    acc = H100.accelerator
    ops = {o.name: o for o in layer.ops}
    terms_f = [("qkv_fprop", "qkv_proj", "fwd", t_ag), ("proj_fprop", "out_proj", "fwd", t_rs),
               ("fc1_fprop", "mlp_fc1", "fwd", t_ag), ("fc2_fprop", "mlp_fc2", "fwd", t_rs)]
    terms_b = [("proj_dgrad", "out_proj", "dgrad", t_ag), ("qkv_dgrad", "qkv_proj", "dgrad", t_ag),
               ("qkv_wgrad", "qkv_proj", "wgrad", t_rs), ("fc2_dgrad", "mlp_fc2", "dgrad", t_ag),
               ("fc1_dgrad", "mlp_fc1", "dgrad", t_ag), ("fc1_wgrad", "mlp_fc1", "wgrad", t_rs)]

    def exposed(terms):
        return sum(a - b for a, b in (overlapped_gemm_s(acc, TE_DEFAULTS[n], (ops[o],), p, 4, t) for n, o, p, t in terms))

    plain, over = layer_time(H100, PLAN, layer, world=1), layer_time(H100, OVER, layer, world=1)
    assert over.fwd_comm_s == pytest.approx(exposed(terms_f), rel=1e-12)
    assert over.bwd_comm_s == pytest.approx(exposed(terms_b), rel=1e-12)
    assert plain.fwd_comm_s == pytest.approx(2 * (t_ag + t_rs))
    assert 0 < over.fwd_comm_s < plain.fwd_comm_s and 0 < over.bwd_comm_s < plain.bwd_comm_s
    assert over.fwd_gpu_s == plain.fwd_gpu_s  # the cost is the comm's, the GEMMs' isolated seconds stay


def test_outside_the_pairs_and_off_gpu_nothing_is_overlapped():
    """The embedding's reduce-scatter and the output layer's all-gather are not TE userbuffers GEMMs
    (Megatron-Core's output layer is tensor_parallel.ColumnParallelLinear): exposed as without the
    overlap. On a TPU there are no userbuffers at all."""
    g = shard(build_graph(get_workload("llama3-70b"), 1, 8192), PLAN)
    for layer in g.layers:
        if layer.kind != "transformer":
            assert layer_time(H100, OVER, layer) == layer_time(H100, PLAN, layer)
    tpu = resolve_system("tpu-v5p", None, 8)[0]
    assert layer_time(tpu, OVER, body()) == layer_time(tpu, PLAN, body())


def test_overlap_needs_sequence_parallelism():
    """Megatron-LM arguments.py:1441-1442 asserts it; a plan that asks otherwise cannot run."""
    with pytest.raises(LayoutError, match="needs sequence_parallel"):
        perfmodel.ParallelPlan(tp=4, overlap_tp_comm=True)
    perfmodel.ParallelPlan(tp=1, overlap_tp_comm=True)  # nothing to overlap on one rank


def test_analytic_des_and_planner_agree_under_the_overlap():
    """The three read the same layer seconds: the planner equals the analytic engine to 1e-9 on
    megatron-core tp + sp layouts, the DES agrees within 1% (stages differ by the embedding and
    head), and the overlap's cost is the same in both engines."""
    from perfmodel.calibration.frameworks import framework
    from perfmodel.calibration.profile import NONE, calibrated_system
    from perfmodel.planning.evaluate import Evaluator
    from perfmodel.planning.space import RECOMPUTES, SCHEDULE_LIST, SearchSpace, layout_grid

    spec = get_workload("llama3-8b")
    system = resolve_system("h100-sxm5-80gb", None, 16)[0]
    fw = framework("megatron-core")
    g = layout_grid(spec, system, [16], 32, 4096, SearchSpace(tp=(4,), sequence_parallel=(True,)))
    out = Evaluator(spec, calibrated_system(system, NONE, fw), 4096, "bf16", framework=fw).evaluate(g)
    for i in range(0, len(g["tp"]), max(1, len(g["tp"]) // 8)):
        kw = {k: int(v[i]) for k, v in g.items()}
        plan = perfmodel.ParallelPlan(dp=kw["dp"], tp=4, pp=kw["pp"], cp=kw["cp"], vp=kw["vp"], sequence_parallel=True,
                                      zero_stage=kw["zero"], micro_batch=kw["mb"], global_batch=32, seq_len=4096,
                                      recompute=RECOMPUTES[kw["rec"]],
                                      schedule=SCHEDULE_LIST[kw["sched"]] if kw["pp"] > 1 else None)
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework="megatron-core")
        assert est.plan.overlap_tp_comm
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=1e-9), plan
    plan = perfmodel.ParallelPlan(tp=4, pp=2, dp=2, sequence_parallel=True, global_batch=16, seq_len=4096)
    over = plan.model_copy(update={"overlap_tp_comm": True})
    a0, d0 = analytic_estimate(spec, system, plan), des_estimate(spec, system, plan)
    a1, d1 = analytic_estimate(spec, system, over), des_estimate(spec, system, over)
    assert d1.step_time_s == pytest.approx(a1.step_time_s, rel=0.01)
    assert (a0.step_time_s - a1.step_time_s) == pytest.approx(d0.step_time_s - d1.step_time_s, rel=0.02)
    assert a1.step_time_s < a0.step_time_s


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 48), min_size=6, max_size=6), st.integers(1, 24), st.sampled_from([True, False]),
       st.floats(0.05, 20.0))
def test_more_sms_for_the_comm_never_make_it_faster(sms, extra, margin, comm_scale):
    """A table with every communication kernel on more SMs never exposes fewer seconds."""
    t_ag, t_rs = tp_times()
    t_ag, t_rs = t_ag * comm_scale, t_rs * comm_scale
    names = ("proj_fprop", "fc2_fprop", "qkv_dgrad", "fc1_dgrad", "qkv_wgrad", "fc1_wgrad")
    low, high = dict(TE_DEFAULTS), dict(TE_DEFAULTS)
    for name, n in zip(names, sms, strict=True):
        low[name] = dataclasses.replace(TE_DEFAULTS[name], num_sm=n, set_sm_margin=margin)
        high[name] = dataclasses.replace(TE_DEFAULTS[name], num_sm=n + extra, set_sm_margin=margin)
    a = tp_overlap_s(H100.accelerator, body(), 4, t_ag, t_rs, 2, low)
    b = tp_overlap_s(H100.accelerator, body(), 4, t_ag, t_rs, 2, high)
    assert b.fwd_s >= a.fwd_s - 1e-15 and b.bwd_s >= a.bwd_s - 1e-15


@settings(max_examples=15, deadline=None)
@given(st.floats(0.02, 1.0), st.floats(1.0, 4.0))
def test_a_faster_fabric_never_makes_the_step_slower(scale_up, faster):
    """The step under megatron-core (tp 4 + sp, userbuffers) never slows when NVLink gets faster."""
    spec = get_workload("llama3-8b")
    base = resolve_system("h100-sxm5-80gb", None, 8)[0]
    ones = dict.fromkeys(KNOBS, 1.0)
    slow = system_with_knobs(base, {**ones, "scale_up": scale_up})
    fast = system_with_knobs(base, {**ones, "scale_up": scale_up * faster})
    plan = perfmodel.ParallelPlan(tp=4, dp=2, sequence_parallel=True, global_batch=8, seq_len=4096,
                                  overlap_tp_comm=True)
    assert analytic_estimate(spec, fast, plan).step_time_s <= analytic_estimate(spec, slow, plan).step_time_s + 1e-12


def test_fp8_all_gathers_move_the_quantized_tensor():
    """Under fp8 (delayed scaling: 1 B per element, no scales) the userbuffers all-gathers move half
    the bf16 bytes (TE base.py:334-345, :391 fp8_buf); the reduce-scatters stay bf16."""
    from dataclasses import replace

    from perfmodel.engines.userbuffers import all_gather_bytes_per_element

    plan = PLAN.model_copy(update={"precision": "fp8"})
    over = plan.model_copy(update={"overlap_tp_comm": True})
    layer = body(plan)
    assert all_gather_bytes_per_element(layer, plan.fp8_recipe_name) == 1.0
    assert all_gather_bytes_per_element(body(), None) == 2.0
    ag = next(c for c in layer.comms if c.name == "tp_allgather")
    t_ag_fp8 = comm_s(H100, plan, replace(ag, bytes=ag.bytes / 2))
    _, t_rs = tp_times(plan=plan, layer=layer)
    ov = tp_overlap_s(H100.accelerator, layer, 4, t_ag_fp8, t_rs, 2)
    got = layer_time(H100, over, layer, world=1)  # delayed scaling: no per-gather amax all-reduce in the layer
    assert (got.fwd_comm_s, got.bwd_comm_s) == pytest.approx((ov.fwd_s, ov.bwd_s), rel=1e-12)
    assert t_ag_fp8 < comm_s(H100, plan, ag)


def test_collectives_without_a_gemm_pair_stay_exposed():
    """A layer whose pair collectives have no column -> row GEMMs to run beside (an imported layer
    without split GEMMs) exposes them as without the overlap, the all-gather and the reduce-scatter alone."""
    from perfmodel.workload.graph import Comm, Layer, Op

    op = Op("g", "gemm", flop=2.0 * 4096**3, bytes=3 * 4096 * 4096 * 2, m=4096, n=4096, k=4096, weight_params=4096**2)
    for comms in ((Comm("tp_allgather", "all_gather", "tp", 2**26, 1, 1),
                   Comm("tp_reducescatter", "reduce_scatter", "tp", 2**26, 1, 1)),
                  (Comm("tp_reducescatter", "reduce_scatter", "tp", 2**26, 1, 1),)):
        layer = Layer("x", "transformer", 1, (op,), comms, params=4096**2, params_full=4096**2)
        plain, over = layer_time(H100, PLAN, layer), layer_time(H100, OVER, layer)
        assert (over.fwd_comm_s, over.bwd_comm_s) == pytest.approx((plain.fwd_comm_s, plain.bwd_comm_s), rel=1e-12)
        assert over.fwd_comm_s > 0
