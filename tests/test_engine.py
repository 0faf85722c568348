"""The analytical engine against hand-computed closed forms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.engines.analytic import analytic_estimate, pipeline_time_s
from perfmodel.engines.costs import HOST_BWD_S_PER_KERNEL, HOST_FWD_S_PER_KERNEL, layer_time
from perfmodel.engines.stages import chunk_costs, model_flop_per_step
from perfmodel.memory import memory_per_rank
from perfmodel.parallel.shard import sharded_graph
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workload_file
from perfmodel.workload.graph import Graph, Layer, Op
from perfmodel.workload.spec import ModelSpec

GPT3 = "gpt3-175b"


def gpt3() -> ModelSpec:
    return perfmodel.get_workload(GPT3)


def test_model_flops_match_megatron_closed_form():
    """Narayanan et al. 2021 Eq. 3 without recompute: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    spec = gpt3()
    B, s, L, h, V = 1536, 2048, 96, 12288, 50257
    plan = ParallelPlan(dp=16, tp=8, pp=8, global_batch=B)
    model, _ = model_flop_per_step(spec, plan)
    closed = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model == pytest.approx(closed, rel=0.01)
    # and the 6·N·tokens rule of thumb, plus the attention term 12·l·h·s per token
    n_params = 174.6e9
    assert model == pytest.approx((6 * n_params + 12 * L * h * s) * B * s, rel=0.02)


def test_full_recompute_adds_one_forward():
    spec = gpt3()
    base = ParallelPlan(dp=16, tp=8, pp=8, global_batch=1536)
    model, hw = model_flop_per_step(spec, base.model_copy(update={"recompute": "full"}))
    _, hw0 = model_flop_per_step(spec, base)
    assert hw0 == pytest.approx(model, rel=0.03)  # no recompute: executed ~ model FLOPs
    assert hw / model == pytest.approx(4 / 3, rel=0.02)  # Megatron's 4x-forward HFU convention


def _uniform_graph(count: int) -> Graph:
    """`count` identical layers, one 8192^3 GEMM each, nothing else: closed forms are exact."""
    op = Op("g", "gemm", flop=2.0 * 8192**3, bytes=3 * 8192 * 8192 * 2, m=8192, n=8192, k=8192,
            weight_params=8192 * 8192, kernels=1, bwd_kernels=2)
    layer = Layer("layers", "transformer", count, (op,), params=8192 * 8192, params_full=8192 * 8192)
    return Graph("synthetic", (layer,), micro_batch=1, seq_len=8192, tokens=8192)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 4), (8, 8), (8, 32), (4, 16)])
def test_1f1b_bubble_fraction(a100_system, p, m):
    """Uniform stages: pipeline time (m + p - 1)·t, bubble fraction (p - 1)/(m + p - 1)."""
    sys_ = a100_system(p)
    plan = ParallelPlan(pp=p, global_batch=m)
    g = _uniform_graph(8 * p)
    st = chunk_costs(sys_, plan, g)
    t = st[0].fwd_s + st[0].bwd_s
    assert all(s.fwd_s + s.bwd_s == pytest.approx(t) for s in st)
    bubble = sum(s.fwd_s + s.bwd_s for s in st) - t
    total = m * t + bubble
    assert bubble / total == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (8, 16, 4), (2, 4, 2)])
def test_interleaved_bubble_closed_form(p, m, v):
    """Uniform stages of t per micro-batch: bubble (p - 1)·t/v, so its fraction of the
    pipeline is (p - 1)/(v·m + p - 1) (Narayanan et al. 2021 §2.2.2)."""
    t = 0.25
    pipe, bubble = pipeline_time_s([t] * p, m, v, "interleaved")
    assert bubble == pytest.approx((p - 1) * t / v)
    assert bubble / pipe == pytest.approx((p - 1) / (v * m + p - 1))
    pipe1, _bubble1 = pipeline_time_s([t] * p, m, 1, "1f1b")
    assert pipe1 == pytest.approx((m + p - 1) * t)


def test_zero_bubble_h1_is_a_third_when_f_b_w_equal():
    """ZB-H1 (Qi et al. 2024): with f = b_input = w the bubble is 1/3 of 1F1B's."""
    f = 1.0
    _, b1 = pipeline_time_s([3 * f] * 8, 16, 1, "1f1b")
    _, bz = pipeline_time_s([3 * f] * 8, 16, 1, "zb-h1", wgrad_s=f)
    assert bz == pytest.approx(b1 / 3)


def test_real_model_schedules_order(a100_system):
    spec = gpt3()
    base = ParallelPlan(dp=1, tp=8, pp=8, global_batch=64, recompute="full")
    sys_ = a100_system(64)
    e1 = analytic_estimate(spec, sys_, base)
    e2 = analytic_estimate(spec, sys_, base.model_copy(update={"vp": 4}))
    ezb = analytic_estimate(spec, sys_, base.model_copy(update={"schedule": "zb-h1"}))
    eg = analytic_estimate(spec, sys_, base.model_copy(update={"schedule": "gpipe"}))
    assert e2.breakdown_s["pp_bubble_s"] < e1.breakdown_s["pp_bubble_s"] / 3
    assert ezb.breakdown_s["pp_bubble_s"] < e1.breakdown_s["pp_bubble_s"]
    assert eg.step_time_s == pytest.approx(e1.step_time_s)  # same time, more memory
    assert eg.memory.activations_bytes > e1.memory.activations_bytes


def test_breakdown_sums_to_step_time(a100_system):
    spec = gpt3()
    for plan in (ParallelPlan(dp=16, tp=8, pp=8, global_batch=1536, recompute="full"),
                 ParallelPlan(dp=8, tp=8, pp=1, global_batch=64, zero_stage=3, recompute="selective", sequence_parallel=True),
                 ParallelPlan(dp=32, tp=2, pp=1, global_batch=256, zero_stage=1, recompute="full")):
        e = analytic_estimate(spec, a100_system(plan.world), plan)
        assert sum(e.breakdown_s.values()) == pytest.approx(e.step_time_s, rel=1e-9)


def test_memory_closed_form(a100_system):
    """No ZeRO: 2 + 4 + 4 + 8 = 18 bytes per parameter; ZeRO-1 over dp 8: 2 + 4 + 12/8."""
    spec = gpt3()
    g = sharded_graph(spec, 1, 2048, tp=8)
    p0 = ParallelPlan(tp=8, pp=1, dp=1, global_batch=1)
    mem = memory_per_rank(g, p0)
    params = sum(layer.params * layer.count for layer in g.layers)
    assert mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes == pytest.approx(18 * params)
    p1 = ParallelPlan(tp=8, pp=1, dp=8, global_batch=8, zero_stage=1)
    mem1 = memory_per_rank(g, p1)
    assert mem1.weights_bytes + mem1.grads_bytes + mem1.optimizer_bytes == pytest.approx((2 + 4 + 12 / 8) * params)
    # full recompute keeps only layer inputs: far less than storing every activation
    full = memory_per_rank(g, p0.model_copy(update={"recompute": "full"}))
    assert full.activations_bytes < mem.activations_bytes / 5


def test_korthikanti_activation_bytes():
    """Per layer s·b·h·(34 + 5·a·s/h) bytes without parallelism and unfused attention
    (Korthikanti et al. 2022, Eq. 1); flash attention drops the 5·a·s/h term."""
    spec = gpt3()
    s, b, h, a = 2048, 1, 12288, 96
    g = build_graph(spec, b, s, attention_impl="unfused")
    body = next(layer for layer in g.layers if layer.kind == "transformer")
    assert body.saved_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=0.03)


def test_more_flops_or_bandwidth_never_slower(a100_system):
    spec = gpt3()
    plan = ParallelPlan(dp=4, tp=8, pp=4, global_batch=128, recompute="full")
    sys_ = a100_system(128)
    base = analytic_estimate(spec, sys_, plan).step_time_s
    for kw in ({"flops": 1.5}, {"hbm_bw": 1.5}, {"intra_bw": 2.0}, {"inter_bw": 2.0}, {"latency": 0.5}):
        assert analytic_estimate(spec, sys_.scaled(**kw), plan).step_time_s <= base * (1 + 1e-12), kw


def test_host_overhead_constants_recomputed_from_graph():
    """The host seconds per graph kernel are 8.1 ms / 182 and (48.8 - 16.2) ms / 278 for
    Llama-3.2-1B at batch 1 x 512 (see perfmodel/engines/costs.py): the counts must hold."""
    spec = load_workload_file(Path(__file__).resolve().parents[1] / "workloads" / "llama3.2-1b.yaml")
    g = build_graph(spec, 1, 512)
    kf = sum(layer.count * sum(o.kernels for o in layer.ops) for layer in g.layers)
    kb = sum(layer.count * sum(o.bwd_kernels for o in layer.ops) for layer in g.layers)
    assert pytest.approx(8.1e-3 / kf, rel=0.03) == HOST_FWD_S_PER_KERNEL
    assert pytest.approx(32.6e-3 / kb, rel=0.03) == HOST_BWD_S_PER_KERNEL


def test_small_model_is_host_bound_large_is_not(a100_system):
    sys_ = a100_system(1)
    spec = gpt3()
    big = analytic_estimate(spec, a100_system(8), ParallelPlan(tp=8, global_batch=1, recompute="full"))
    assert big.breakdown_s["host_overhead_s"] == pytest.approx(0.0, abs=1e-9)
    small = ModelSpec(id="tiny", name="tiny", family="dense", source="test", num_layers=2, hidden=256, ffn_hidden=1024,
                      num_heads=4, vocab=1000, seq_len=128)
    e = analytic_estimate(small, sys_, ParallelPlan(global_batch=1))
    assert e.breakdown_s["host_overhead_s"] > 0.5 * e.step_time_s


def test_gemm_layer_time_is_roofline_plus_fixed(a100_system):
    """A 8192^3 bf16 GEMM: 1.0995e12 FLOP at MAMF 271.2 TFLOP/s = 4.054 ms (memory 0.24 ms
    adds 7 us under the p=2 soft roofline), plus the fixed fill time."""
    sys_ = a100_system(1)
    g = _uniform_graph(1)
    lt = layer_time(sys_, ParallelPlan(global_batch=1), g.layers[0])
    assert lt.fwd_gpu_s == pytest.approx(2 * 8192**3 / 271.2e12, rel=0.01)
    assert lt.bwd_gpu_s == pytest.approx(2 * lt.fwd_gpu_s, rel=0.01)


def test_repeated_estimates_are_identical():
    # speed is a benchmark (benchmarks/bench_estimate.py), not a timed test; the memoised path
    # must give the cold path's answer
    plan = ParallelPlan(dp=16, tp=8, pp=8, global_batch=1536, recompute="full")
    first = perfmodel.estimate(GPT3, "a100-sxm4-80gb", plan)
    for _ in range(3):
        assert perfmodel.estimate(GPT3, "a100-sxm4-80gb", plan) == first


def test_layout_errors_name_the_values():
    with pytest.raises(perfmodel.LayoutError, match="tp 7 does not divide num_heads 96"):
        perfmodel.estimate(GPT3, "a100-sxm4-80gb", ParallelPlan(tp=7, global_batch=1))
    with pytest.raises(perfmodel.LayoutError, match="global_batch 10 is not divisible"):
        ParallelPlan(dp=4, global_batch=10)


def test_doubling_global_batch_scales_all_but_fixed_costs(a100_system):
    """At fixed micro-batch and layout, step(2B) < 2·step(B) only by the per-step fixed costs
    (bubble, DP collectives, optimizer): step(2B) - 2·step(B) = -(fixed costs of one step)."""
    spec = gpt3()
    sys_ = a100_system(128)
    p1 = ParallelPlan(dp=2, tp=8, pp=8, global_batch=32, recompute="full")
    p2 = p1.model_copy(update={"global_batch": 64})
    e1, e2 = analytic_estimate(spec, sys_, p1), analytic_estimate(spec, sys_, p2)
    assert e1.step_time_s < e2.step_time_s < 2 * e1.step_time_s
    fixed = sum(e1.breakdown_s[k] for k in ("pp_bubble_s", "dp_comm_exposed_s", "optimizer_s"))
    assert 2 * e1.step_time_s - e2.step_time_s == pytest.approx(fixed, rel=1e-6)


def test_more_memory_never_slower(a100_system):
    """HBM capacity decides fit, not speed: the 80 GB and 40 GB A100 with the same clocks and
    bandwidth scaled alike would differ only through bandwidth; capacity alone changes nothing."""
    import dataclasses

    spec = gpt3()
    sys_ = a100_system(64)
    plan = ParallelPlan(dp=1, tp=8, pp=8, global_batch=16, recompute="full")
    acc = sys_.accelerator
    bigger = acc.model_validate({**acc.model_dump(), "hbm_capacity": {"value": "160 GB", "source": "datasheet"}})
    e_small = analytic_estimate(spec, sys_, plan)
    e_big = analytic_estimate(spec, dataclasses.replace(sys_, accelerator=bigger), plan)
    assert e_big.step_time_s <= e_small.step_time_s
    assert e_big.fits and e_big.hbm_bytes == 160e9


def test_b200_in_model_efficiency_recomputed():
    """b200.yaml's in_model_efficiency is the factor on the isolated GEMM rates at which
    perfmodel's `pytorch` stack reproduces the measured eager Hugging Face training step of
    Llama-3.1-8B on one B200 (batch 1 x 8192, gradient checkpointing, bf16 weights, no optimizer):
    590.7 ms, with attention at its own measured in-step fraction of the FA4 curve (0.82)."""
    from scipy.optimize import brentq

    from perfmodel.calibration.frameworks import apply_framework, framework

    sys_ = perfmodel.resolve_system("b200", None, 1)[0]
    acc = sys_.accelerator
    spec = perfmodel.get_workload("llama3-8b")
    plan = apply_framework(ParallelPlan(micro_batch=1, global_batch=1, seq_len=8192, recompute="full",
                                        optimizer="sgd", autocast_weights=False), framework("pytorch"))

    def estimate(e: float):
        cal = {**acc.calibration.model_dump(), "in_model_efficiency": {"value": e, "source": "test"}}
        part = acc.model_validate({**acc.model_dump(), "calibration": cal})
        return analytic_estimate(spec, dataclasses.replace(sys_, accelerator=part), plan)

    def step_s(e: float) -> float:
        est = estimate(e)
        return est.step_time_s - est.breakdown_s["optimizer_s"]

    assert acc.attention_in_step == pytest.approx(834 * 7 / 6 / (3.5 / (1 / 1418.1 + 2.5 / 1117.9)), abs=0.005)
    eff = brentq(lambda e: step_s(e) - 0.5907, 0.3, 1.0)
    assert acc.in_model_efficiency == pytest.approx(eff, abs=0.01)
    # cross-check: the training forward (with its loss) at that efficiency sits within 5 % below the
    # measured inference forward, 152.4 ms
    assert 0.95 * 0.1524 < estimate(eff).breakdown_s["compute_fwd_s"] < 0.1524


def test_fp8_gemm_pays_its_quantize_casts():
    """An fp8 GEMM adds the casts of its bf16 operands: forward (m·k + k·n) elements at 3 B each
    through HBM (read bf16, write fp8), on top of the GEMM itself."""
    from perfmodel.compute.ops import gemm_cost, op_cost

    sys_ = perfmodel.resolve_system("h100-sxm5-80gb", None, 1)[0]
    acc = sys_.accelerator
    m, n, k = 8192, 8192, 8192
    op = Op("g", "gemm", flop=2.0 * m * n * k, bytes=0.0, m=m, n=n, k=k, precision="fp8", weight_params=k * n)
    bare = gemm_cost(acc, m, n, k, "fp8")
    with_cast = op_cost(acc, op, "fwd")
    extra = 3.0 * (m * k + k * n) / acc.elementwise_achieved_Bps
    assert with_cast.time_s - bare.time_s == pytest.approx(extra + 2 * acc.calibration.kernel_launch.si("seconds"), rel=1e-6)
    bf16 = op_cost(acc, Op("g", "gemm", flop=2.0 * m * n * k, bytes=0.0, m=m, n=n, k=k, precision="bf16", weight_params=k * n), "fwd")
    assert with_cast.time_s < bf16.time_s  # still faster than bf16 at this size
