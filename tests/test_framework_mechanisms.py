"""Issue 15.5: a framework selects structural mechanisms (fused fp8 casts, fused cross-entropy,
TP and p2p overlap), each changing kernels, bytes or exposed communication, never a factor; and an
fp8 / fp4 GEMM's in-model efficiency does not charge the power limit its MAMF already paid."""

from __future__ import annotations

import itertools

import pytest

import perfmodel
from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework, framework
from perfmodel.calibration.parameters import KNOBS
from perfmodel.calibration.profile import system_with_knobs
from perfmodel.compute.fp8_recipes import RECIPES, gemm_cast_work
from perfmodel.compute.ops import gemm_rate_flop_per_s, low_precision_in_model_efficiency
from perfmodel.engines.closed_forms import pipeline_hops_s
from perfmodel.engines.costs import fused_classifier, fused_cross_entropy, host_op_s, layer_time
from perfmodel.errors import LayoutError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.derating import mamf_ratio
from perfmodel.hardware.system import resolve_system
from perfmodel.memory import op_saved_bytes
from perfmodel.parallel.shard import shard
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import get_workload as load_workload

N = 1024


@pytest.mark.parametrize("name", ["delayed", "current", "mxfp8", "nvfp4"])
def test_fused_cast_bytes_by_hand(name):
    """Transformer Engine's casts, per element (compute/fp8_recipes.py docstring): a cast writes the
    row- and column-wise copies in one pass, the weight is not cast per micro-batch, the norm writes
    a LayerNormLinear's input quantized, the backward casts only the output gradient."""
    r = RECIPES[name]
    el = r.element_bytes + r.scale_bytes_per_element
    amax = 2.0 if r.amax_pass else 0.0
    other_input = gemm_cast_work(r, N, N, N, 1, bwd=False, fused=True)
    assert other_input.bytes == pytest.approx((2 + 2 * el + amax) * N * N)  # input only, no weight
    assert other_input.kernels == (2 if r.amax_pass else 1)
    after_norm = gemm_cast_work(r, N, N, N, 1, bwd=False, fused=True, norm_input=True)
    assert after_norm.bytes == pytest.approx(el * N * N) and after_norm.kernels == 0
    bwd = gemm_cast_work(r, N, N, N, 1, bwd=True, fused=True)
    assert bwd.bytes == pytest.approx((2 + 2 * el + amax) * N * N)  # the output gradient once
    unfused = gemm_cast_work(r, N, N, N, 1, bwd=True)
    assert bwd.bytes < unfused.bytes
    assert bwd.flop == unfused.flop  # NVFP4's Hadamard transform is math, not a cast


def test_te_fusions_change_an_fp8_layer_but_not_a_bf16_one():
    spec = load_workload("llama3-8b")
    sys_ = resolve_system("h100-sxm5-80gb", None, 8)[0]
    for prec, faster in (("fp8", True), ("bf16", False)):
        g = build_graph(spec, 1, 8192, precision=prec)
        layer = next(lay for lay in g.layers if lay.kind == "transformer")
        assert {o.name for o in layer.ops if o.norm_input} == {"qkv_proj", "mlp_fc1"}
        plain = perfmodel.ParallelPlan(precision=prec)
        te = plain.model_copy(update={"fp8_fused_casts": True})
        a, b = layer_time(sys_, plain, layer), layer_time(sys_, te, layer)
        assert (b.fwd_gpu_s < a.fwd_gpu_s and b.bwd_gpu_s < a.bwd_gpu_s) if faster else (b == a)


def test_fused_cross_entropy_by_hand():
    """8 B per logit each way in 2 + 1 kernels, against the unfused 10 B in 3 + 2."""
    spec = load_workload("llama3-8b")
    g = shard(build_graph(spec, 1, 4096), perfmodel.ParallelPlan(tp=2))
    ce = next(o for lay in g.layers for o in lay.ops if o.name == "cross_entropy")
    logits = 4096 * spec.vocab / 2
    assert ce.bytes == pytest.approx(10 * logits)
    f = fused_cross_entropy(ce)
    assert f.bytes == pytest.approx(8 * logits) and f.bwd_bytes_factor == 1.0
    assert (f.kernels, f.bwd_kernels) == (2, 1) and f.saved_bytes == ce.saved_bytes and f.flop == ce.flop


def test_llmc_fused_classifier_by_hand():
    """llm.c's fused classifier: 6 B per logit in 1 kernel and no backward kernel, keeping the bf16
    gradient (2 B per logit) where the unfused loss keeps fp32; llm.c selects it, the others do not."""
    spec = load_workload("gpt2-124m")
    g = build_graph(spec, 4, 1024)
    ce = next(o for lay in g.layers for o in lay.ops if o.name == "cross_entropy")
    logits = 4 * 1024 * spec.vocab
    f = fused_classifier(ce)
    assert f.bytes == pytest.approx(6 * logits) and (f.kernels, f.bwd_kernels) == (1, 0)
    acc = load_catalog().accelerators["h100-sxm5-80gb"]
    from perfmodel.compute.ops import op_cost
    assert op_cost(acc, f, "bwd").time_s == 0.0 and op_cost(acc, f, "fwd").time_s > 0
    llmc = apply_framework(perfmodel.ParallelPlan(), framework("llm.c"))
    assert llmc.cross_entropy_impl == "classifier"
    assert llmc.fp8_fused_casts  # LLMQ, llm.c's fp8 descendant, quantizes in the producing kernels
    assert op_saved_bytes(ce, llmc) == pytest.approx(2 * logits) == ce.saved_bytes / 2
    # a plan that names the kernels keeps them under any stack
    named = perfmodel.ParallelPlan(cross_entropy_impl="unfused")
    assert apply_framework(named, framework("llm.c")).cross_entropy_impl == "unfused"
    # the step saves what the bytes say: (20 - 6) B per logit at the memory-bound rate, less launches
    sys_ = resolve_system("h100-sxm5-80gb", None, 1)[0]
    plain = perfmodel.ParallelPlan(micro_batch=4, global_batch=4, seq_len=1024)
    a = perfmodel.estimate(spec, sys_, plain, calibration="none")
    b = perfmodel.estimate(spec, sys_, plain.model_copy(update={"cross_entropy_impl": "classifier"}), calibration="none")
    saved = a.step_time_s - b.step_time_s
    bw = acc.hbm_bandwidth.si("bytes_per_s")
    assert 0.5 * 14 * logits / bw < saved < 2.0 * 14 * logits / bw


def test_megatron_core_turns_on_only_what_its_recipes_can():
    mc = framework("megatron-core")
    base = perfmodel.ParallelPlan(tp=4, pp=4, vp=2, dp=2, sequence_parallel=True, global_batch=64, precision="fp8")
    p = apply_framework(base, mc)
    assert p.overlap_tp_comm and p.overlap_p2p_comm and p.fp8_fused_casts and p.cross_entropy_impl == "fused"
    assert p.fp8_recipe is None  # Megatron-Core's default (delayed) unless the plan names one
    # userbuffers needs sequence parallelism; p2p overlap needs the interleaved schedule
    q = apply_framework(base.model_copy(update={"sequence_parallel": False, "vp": 1}), mc)
    assert not q.overlap_tp_comm and not q.overlap_p2p_comm
    # NVFP4 runs without the tp overlap (Megatron-Bridge: fp4_param_gather is incompatible with it),
    # unless the plan turns it on itself
    fp4 = base.model_copy(update={"precision": "nvfp4"})
    assert not apply_framework(fp4, mc).overlap_tp_comm and apply_framework(fp4, mc).overlap_p2p_comm
    assert apply_framework(fp4.model_copy(update={"overlap_tp_comm": True}), mc).overlap_tp_comm
    assert apply_framework(base.model_copy(update={"precision": "mxfp8"}), mc).overlap_tp_comm
    # a stack without the mechanisms changes none of them; torchtitan's fp8 scales dynamically
    for name in ("megatron-lm", "pytorch", "composer", "deepspeed"):
        r = apply_framework(base, FRAMEWORKS[name])
        assert not (r.overlap_tp_comm or r.overlap_p2p_comm or r.fp8_fused_casts), name
        assert r.cross_entropy_impl == "unfused", name
    assert apply_framework(base, framework("torchtitan")).fp8_recipe == "current"
    assert apply_framework(base.model_copy(update={"fp8_recipe": "blockwise"}), framework("torchtitan")).fp8_recipe == "blockwise"
    assert apply_framework(base.model_copy(update={"precision": "mxfp8"}), framework("torchtitan")).fp8_recipe is None


def test_p2p_overlap_hides_the_pipeline_sends_in_both_engines():
    spec = load_workload("llama3-8b")
    kw = dict(pp=4, vp=2, dp=2, tp=1, global_batch=64, micro_batch=1, seq_len=4096)
    hw = "h100-sxm5-80gb"
    for engine in ("analytic", "des"):
        blocking = perfmodel.estimate(spec, hw, perfmodel.ParallelPlan(**kw), engine=engine, calibration="none")
        overlap = perfmodel.estimate(spec, hw, perfmodel.ParallelPlan(**kw, overlap_p2p_comm=True), engine=engine,
                                     calibration="none")
        assert blocking.breakdown_s["pp_p2p_s"] > 0
        assert overlap.breakdown_s["pp_p2p_s"] < blocking.breakdown_s["pp_p2p_s"]
        assert overlap.step_time_s < blocking.step_time_s


def test_p2p_overlap_covers_one_send_with_a_forward_chunk_and_one_with_a_backward():
    """vp 2, one transfer 1 ms, a rank's forward 1 ms and backward 3 ms per micro-batch (0.5 and
    1.5 ms per chunk): per chunk the activation send is exposed 1 - 0.5 = 0.5 ms, the gradient
    send max(0, 1 - 1.5) = 0; two chunks: 1 ms. Blocking: 2 x 2 x 1 ms = 4 ms."""
    assert pipeline_hops_s(2, 1e-3, 1e-3, 3e-3, True) == pytest.approx(1e-3, rel=1e-12)
    assert pipeline_hops_s(2, 1e-3, 1e-3, 3e-3, False) == pytest.approx(4e-3, rel=1e-12)
    assert pipeline_hops_s(2, 1e-3, 4e-3, 6e-3, True) == 0.0


@pytest.mark.parametrize("engine", ["analytic", "des"])
def test_faster_scale_up_never_slows_an_overlapped_pipeline(engine: str):
    """PatchTST on B200, tp 2 pp 2 dp 4, one micro-batch, p2p overlapped, the pipeline send on
    the NICs: a faster NVLink shortens the tp collectives, hence the chunk windows that hide the
    sends. It used to make the step up to 1.5 % slower (both sends charged against the forward,
    every rank charged the slowest rank's exposure)."""
    plan = perfmodel.ParallelPlan(dp=4, tp=2, pp=2, micro_batch=32, global_batch=128, overlap_p2p_comm=True)
    system = resolve_system("b200", None, plan.world)[0]
    steps = [perfmodel.estimate("patchtst-electricity", system.scaled(intra_bw=f), plan, engine=engine).step_time_s
             for f in (0.5, 1, 2, 4, 8, 16)]
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(steps)), steps


def test_low_precision_in_model_efficiency_divides_out_the_mamf_gap():
    """H100: e x r_bf16 / r_fp8 (0.803 / 0.709 from the ml-eng MAMF tables); e = 1 stays 1."""
    s = resolve_system("h100-sxm5-80gb", None, 8)[0]
    acc = s.accelerator
    r16, r8 = mamf_ratio(acc, "bf16").value, mamf_ratio(acc, "fp8").value
    assert r16 / r8 == pytest.approx(0.803 / 0.709, rel=0.01)
    assert low_precision_in_model_efficiency(acc, "fp8") == 1.0
    g = system_with_knobs(s, {**dict.fromkeys(KNOBS, 1.0), "gemm": 0.7}).accelerator
    assert low_precision_in_model_efficiency(g, "bf16") == pytest.approx(0.7)
    assert low_precision_in_model_efficiency(g, "fp8") == pytest.approx(0.7 * r16 / r8)
    assert gemm_rate_flop_per_s(g, "fp8") == pytest.approx(gemm_rate_flop_per_s(acc, "fp8") * 0.7 * r16 / r8)
    # the rate as a fraction of each format's peak is the same in the model: e x r16
    assert gemm_rate_flop_per_s(g, "fp8") / acc.matrix_peak_flop_per_s("fp8") == pytest.approx(
        gemm_rate_flop_per_s(g, "bf16") / acc.matrix_peak_flop_per_s("bf16"))
    # never above the isolated MAMF
    hi = system_with_knobs(s, {**dict.fromkeys(KNOBS, 1.0), "gemm": 0.99}).accelerator
    assert gemm_rate_flop_per_s(hi, "fp8") <= gemm_rate_flop_per_s(acc, "fp8") * (1 + 1e-12)
    assert load_catalog().accelerator("b200").in_model_efficiency == pytest.approx(0.68)


def test_cuda_graphs_issue_one_host_launch_per_captured_layer():
    spec = load_workload("llama3-8b")
    sys_ = resolve_system("h100-sxm5-80gb", None, 8)[0]
    g = build_graph(spec, 1, 1024)
    body = next(lay for lay in g.layers if lay.kind == "transformer")
    head = next(lay for lay in g.layers if lay.kind == "head")
    eager = perfmodel.ParallelPlan()
    graphs = eager.model_copy(update={"cuda_graphs": True})
    hf, hb = host_op_s(sys_.accelerator)
    a, b = layer_time(sys_, eager, body), layer_time(sys_, graphs, body)
    assert a.fwd_host_s == pytest.approx(sum(o.kernels for o in body.ops) * hf)
    assert (b.fwd_host_s, b.bwd_host_s) == pytest.approx((hf, hb))
    assert b.fwd_gpu_s == a.fwd_gpu_s  # the GPU still runs every kernel
    assert layer_time(sys_, graphs, head) == layer_time(sys_, eager, head)  # embedding / loss not captured


def test_overlapped_tp_collectives_cost_what_userbuffers_expose():
    """With overlap the layer exposes the userbuffers terms of its pairs (engines/userbuffers.py):
    never less than what exceeds its GEMMs (a collective cannot hide behind less compute than
    itself), never as much as the collectives alone on NVLink; checked on Llama-3 70B, tp 8, and on a
    scale-down of the links where the collectives exceed the GEMMs."""
    from perfmodel.compute.ops import op_cost
    from perfmodel.engines.costs import comm_s
    from perfmodel.engines.userbuffers import tp_overlap_s

    spec = load_workload("llama3-70b")
    sys_ = resolve_system("h100-sxm5-80gb", None, 8)[0]
    plain = perfmodel.ParallelPlan(tp=8, sequence_parallel=True, seq_len=4096)
    over = plain.model_copy(update={"overlap_tp_comm": True})
    layer = next(lay for lay in shard(build_graph(spec, 1, 4096), plain).layers if lay.kind == "transformer")
    gemm_f = sum(op_cost(sys_.accelerator, o, "fwd").time_s for o in layer.ops if o.kind == "gemm")
    from perfmodel.calibration.profile import system_with_knobs as knobs

    slow = knobs(sys_, {**dict.fromkeys(KNOBS, 1.0), "scale_up": 0.001})
    for system in (sys_, slow):
        tp = {c.name: comm_s(system, plain, c) for c in layer.comms if c.group == "tp"}
        tp_f = sum(tp[c.name] * c.fwd for c in layer.comms if c.group == "tp")
        a, b = layer_time(system, plain, layer, world=1), layer_time(system, over, layer, world=1)
        assert a.fwd_comm_s == pytest.approx(tp_f)
        ov = tp_overlap_s(system.accelerator, layer, 8, tp["tp_allgather"], tp["tp_reducescatter"], 2)
        assert ov.pairs == 2
        assert b.fwd_comm_s == pytest.approx(ov.fwd_s, rel=1e-12)
        assert b.bwd_comm_s == pytest.approx(ov.bwd_s, rel=1e-12)
        assert b.fwd_comm_s >= max(0.0, tp_f - gemm_f)
    assert layer_time(sys_, over, layer).fwd_comm_s < layer_time(sys_, plain, layer).fwd_comm_s
    tp_slow = sum(comm_s(slow, plain, c) * c.fwd for c in layer.comms if c.group == "tp")
    assert tp_slow > gemm_f


def test_estimate_names_the_mechanisms_its_stack_turned_on():
    plan = perfmodel.ParallelPlan(tp=8, sequence_parallel=True, dp=1, global_batch=1, seq_len=2048, precision="fp8")
    est = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, framework="megatron-core", calibration="none")
    layout = est.summary().splitlines()[1]
    assert layout.endswith("fp8; tp overlap, fused fp8 casts, fused loss")  # pp 1: no p2p overlap
    plain = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, calibration="none")
    assert plain.summary().splitlines()[1].endswith("recompute none fp8")
    assert est.step_time_s < plain.step_time_s


def test_flash1_attention_runs_the_triton_kernel_curve_and_changes_nothing_else():
    """The FA2 README's A100 chart, causal hd 128 at 2k: FlashAttention Triton 68 against
    FlashAttention-2 155 TFLOP/s; the kernel's FLOPs, bytes, saved activations and every other op
    stay the same. On H100 (FA2 only measured) the A100 ratio carries: 265 x 68 / 155."""
    from perfmodel.compute.ops import op_cost

    acc = load_catalog().accelerators["a100-sxm4-80gb"]
    spec = load_workload("llama3-8b")
    g2 = build_graph(spec, 2, 2048, "bf16", "flash")
    g1 = build_graph(spec, 2, 2048, "bf16", "flash1")
    ops2 = [op for layer in g2.layers for op in layer.ops]
    ops1 = [op for layer in g1.layers for op in layer.ops]
    assert [o.name for o in ops1] == [o.name for o in ops2]
    for a, b in zip(ops1, ops2, strict=True):
        assert (a.flop, a.bytes, a.saved_bytes) == (b.flop, b.bytes, b.saved_bytes)
        if a.kind == "attention":
            assert (a.attention_kernel, b.attention_kernel) == ("flash1", "flash")
            c1, c2 = op_cost(acc, a), op_cost(acc, b)
            assert c1.compute_s == pytest.approx(c2.compute_s * 155 / 68, rel=1e-12)
        else:
            assert op_cost(acc, a).time_s == op_cost(acc, b).time_s
    plan = perfmodel.ParallelPlan(global_batch=8, micro_batch=2, dp=4, seq_len=2048, attention_impl="flash1")
    est = perfmodel.estimate("llama3-8b", "a100-sxm4-80gb", plan, calibration="none")
    base = perfmodel.estimate("llama3-8b", "a100-sxm4-80gb", plan.model_copy(update={"attention_impl": "flash"}),
                              calibration="none")
    assert est.step_time_s > base.step_time_s
    assert "FlashAttention-1-era attention" in est.summary()
    from perfmodel.compute.ops import attention_rate_flop_per_s

    h100 = load_catalog().accelerators["h100-sxm5-80gb"]
    assert attention_rate_flop_per_s(h100, 128, 2048, True, "bf16", "flash1") == pytest.approx(265e12 * 68 / 155)


def test_megatron_core_reduces_gradients_in_bf16():
    """Megatron-Bridge's performance recipes set ddp.grad_reduce_in_fp32 = False: megatron-core
    holds and reduces 2 B gradients (the DP bytes halve); a plan that names a width keeps it; other
    stacks keep fp32 main grads (4 B)."""
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    assert apply_framework(plan, framework("megatron-core")).grad_bytes == 2
    assert apply_framework(plan.model_copy(update={"grad_reduce_bytes": 4}), framework("megatron-core")).grad_bytes == 4
    assert apply_framework(plan, framework("torchtitan")).grad_bytes == 4
    mc = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, calibration="none", framework="megatron-core")
    fp32 = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan.model_copy(update={"grad_reduce_bytes": 4}),
                              calibration="none", framework="megatron-core")
    assert fp32.memory.grads_bytes == pytest.approx(2 * mc.memory.grads_bytes, rel=1e-9)


def test_a_plan_that_names_its_attention_kernel_keeps_it_under_a_stack():
    """A stack picks the attention kernel only where the plan names none (`--attention` on the CLI
    used to be overridden by `--framework`)."""
    from perfmodel.calibration.frameworks import apply_framework, framework
    from perfmodel.cli import main

    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    assert apply_framework(plan, framework("deepspeed")).attention_impl == "flash"
    named = perfmodel.ParallelPlan(dp=8, global_batch=8, attention_impl="fused")
    assert apply_framework(named, framework("deepspeed")).attention_impl == "fused"
    assert apply_framework(named, framework("megatron-lm")).attention_impl == "fused"
    args = ["estimate", "llama3-8b", "--hardware", "h200-sxm-141gb", "--dp", "8", "--global-batch", "8",
            "--framework", "deepspeed", "--json"]
    import contextlib
    import io
    import json

    out = {}
    for att in ("flash", "fused"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*args, "--attention", att]) == 0
        out[att] = json.loads(buf.getvalue())["step_time_s"]
    assert out["fused"] < out["flash"]  # FA3 on Hopper is faster than FA2


def test_torchtitan_float8_runs_compiled_so_its_casts_are_fused():
    """torchtitan's float8 path is run under torch.compile, which 'fuses the float8 scaling/casting
    kernels' (components/quantization/float8.md): an fp8 plan under torchtitan gets fused casts and
    is faster than the same plan with the casts as separate kernels; bf16 is untouched."""
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = perfmodel.ParallelPlan(dp=8, global_batch=16, micro_batch=2, precision="fp8")
    assert apply_framework(plan, framework("torchtitan")).fp8_fused_casts
    fused = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, calibration="none", framework="torchtitan")
    eager = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, calibration="none", framework="pytorch")
    assert fused.plan.fp8_fused_casts and not eager.plan.fp8_fused_casts
    bf16 = plan.model_copy(update={"precision": "bf16"})
    assert apply_framework(bf16, framework("torchtitan")).fp8_fused_casts  # a flag; bf16 has no casts to fuse
    a = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", bf16, calibration="none", framework="torchtitan")
    b = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb",
                           bf16.model_copy(update={"fp8_fused_casts": False, "elementwise": "fused",
                                                   "autocast_weights": False}),
                           calibration="none", framework="pytorch")  # pytorch's eager norms and casts named away
    assert a.breakdown_s["compute_fwd_s"] == pytest.approx(b.breakdown_s["compute_fwd_s"], rel=1e-12)


def test_layout_line_names_fp8_casts_only_under_fp8():
    """torchtitan sets the fused-casts flag on every plan; a bf16 plan has no casts, and the
    layout line does not claim them."""
    plan = perfmodel.ParallelPlan(dp=8, global_batch=16, micro_batch=2, seq_len=4096)
    bf16 = perfmodel.estimate("llama3-8b", "dgx-h100", plan, calibration="none", framework="torchtitan")
    fp8 = perfmodel.estimate("llama3-8b", "dgx-h100", plan.model_copy(update={"precision": "fp8"}),
                             calibration="none", framework="torchtitan")
    assert bf16.plan.fp8_fused_casts and "fused fp8 casts" not in bf16.summary()
    assert "fused fp8 casts" in fp8.summary()


@pytest.mark.parametrize(("update", "on"), [
    ({}, True),                                           # MXFP8, ep 8, pp 1: the recipes' full-iteration helpers
    ({"precision": "bf16"}, False),                       # BF16 / FP8-CS: a per-recipe choice, not selected
    ({"precision": "fp8"}, False),
    ({"ep": 1}, False),                                   # Megatron-Core refuses it without expert parallelism,
    ({"recompute": "full"}, False),                       # under full recompute,
    ({"pp": 2, "ep": 4, "dp": 4}, False),                 # and with pp > 1 outside the interleaved schedule
    ({"pp": 2, "vp": 2, "ep": 4, "dp": 4}, True),
    ({"moe_shared_expert_overlap": True}, False),
    ({"moe_a2a_overlap": False}, False),                  # a plan that says stays as it says
])
def test_megatron_core_overlaps_mxfp8_moe_all_to_alls_where_megatron_core_accepts_it(update: dict, on: bool) -> None:
    from perfmodel.parallel.plan import ParallelPlan

    base = {"dp": 8, "ep": 8, "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "precision": "mxfp8"}
    plan = ParallelPlan(**{**base, **update})
    assert apply_framework(plan, framework("megatron-core")).moe_a2a_overlap is on
    assert apply_framework(plan, framework("torchtitan")).moe_a2a_overlap is bool(update.get("moe_a2a_overlap"))


def test_megatron_core_never_overlaps_a_hybrids_all_to_alls() -> None:
    """The combined 1F1B schedule needs the model's build_schedule_plan, which only GPTModel has:
    a Nemotron 3 (Mamba + MoE) MXFP8 plan keeps its all-to-alls exposed under the stack, a plan
    that asks for the overlap there is refused, and the same layout of a GPT MoE gets it."""
    from perfmodel.parallel.plan import ParallelPlan

    nano, qwen = load_workload("nemotron3-nano"), load_workload("qwen3-30b-a3b")
    plan = ParallelPlan(dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=8192, precision="mxfp8")
    assert not apply_framework(plan, framework("megatron-core"), nano).moe_a2a_overlap
    assert apply_framework(plan, framework("megatron-core"), qwen).moe_a2a_overlap
    with pytest.raises(LayoutError, match="hybrid") as e:
        plan.model_copy(update={"moe_a2a_overlap": True}).validate_for(nano, 8)
    assert "turn the overlap off" in str(e.value)
    est = perfmodel.estimate("nemotron3-nano", "dgx-b200", plan, calibration="none", framework="megatron-core")
    assert not est.plan.moe_a2a_overlap


def test_fused_per_tensor_casts_write_one_copy_where_fp8_gemms_take_any_layout():
    """Blackwell runs fp8 GEMMs in any layout, so Transformer Engine's per-tensor quantizers skip
    the transposed copy (csrc/quantizer.cpp): per element the input cast reads 2 B and writes 1 B
    (not 2), a norm-fused input costs nothing beyond the norm, the output gradient 2 + 1 B. A
    block-scaled recipe (mxfp8) still writes both copies."""
    N = 1024
    delayed, current, mx = RECIPES["delayed"], RECIPES["current"], RECIPES["mxfp8"]
    assert gemm_cast_work(delayed, N, N, N, 1, bwd=False, fused=True, any_layout=True).bytes == 3 * N * N
    assert gemm_cast_work(delayed, N, N, N, 1, bwd=False, fused=True).bytes == 4 * N * N
    assert gemm_cast_work(delayed, N, N, N, 1, bwd=False, fused=True, norm_input=True, any_layout=True).bytes == 0
    assert gemm_cast_work(delayed, N, N, N, 1, bwd=True, fused=True, any_layout=True).bytes == 3 * N * N
    # current scaling keeps its amax pass: 2 B more per element and a second kernel
    cur = gemm_cast_work(current, N, N, N, 1, bwd=True, fused=True, any_layout=True)
    assert (cur.bytes, cur.kernels) == (5 * N * N, 2)
    assert gemm_cast_work(mx, N, N, N, 1, bwd=True, fused=True, any_layout=True).bytes == \
        gemm_cast_work(mx, N, N, N, 1, bwd=True, fused=True).bytes == (2 + 2 * (1 + 1 / 32)) * N * N


def test_blackwell_specs_take_fp8_in_any_layout():
    from perfmodel.hardware.catalog import load_catalog

    cat = load_catalog()
    assert all(cat.accelerator(a).fp8_any_layout for a in ("b200", "b300", "gb200", "gb300"))
    assert not any(cat.accelerator(a).fp8_any_layout for a in ("h100-sxm5-80gb", "h200-sxm-141gb"))


@pytest.mark.parametrize(("written", "stack"), [
    ("JAX/MaxText", "jax"), ("NeMo/Megatron-Core", "megatron-core"), ("torchtune", "pytorch"),
    ("Colossal-AI", "pytorch"), ("veScale", "pytorch"), ("Hugging Face Transformers", "pytorch"),
    # parts that name different stacks, or a name of several stacks' front ends, stay unknown
    ("DeepSpeed/Megatron-LM", None), ("Primus", None),
])
def test_framework_names_other_teams_write(written: str, stack: str | None) -> None:
    """A runs file's framework cell names the stack whose code ran; a name that could be two stacks
    (AMD's Primus runs Megatron or torchtitan) is no stack's, and validate says so."""
    from perfmodel.calibration.frameworks import framework_id

    assert framework_id(written) == stack


def test_stacks_without_ring_context_parallelism_refuse_cp():
    """DeepSpeed (Ulysses), pre-Core Megatron-LM and llm.c do not run the ring context parallelism
    perfmodel models: a cp > 1 plan under them is an error naming the stack, not a ring's cost."""
    from perfmodel.calibration.frameworks import NO_CONTEXT_PARALLEL

    spec = load_workload("llama3-8b")
    plan = perfmodel.ParallelPlan(dp=4, cp=2, global_batch=8, seq_len=8192)
    for name, fw in FRAMEWORKS.items():
        if fw.context_parallel:
            assert apply_framework(plan, fw, spec).cp == 2, name
        else:
            with pytest.raises(LayoutError, match=f"cp 2 under the {name} stack"):
                apply_framework(plan, fw, spec)
    assert set(NO_CONTEXT_PARALLEL) == {"deepspeed", "megatron-lm", "llm.c"}
    assert "Ulysses" in NO_CONTEXT_PARALLEL["deepspeed"]
    # cp 1 is every stack's
    assert apply_framework(plan.model_copy(update={"cp": 1, "dp": 8}), FRAMEWORKS["deepspeed"], spec).cp == 1


def test_the_search_keeps_cp_1_for_a_stack_without_it():
    from perfmodel.planning.space import SearchSpace

    res = perfmodel.search("llama3-8b", "h100-sxm5-80gb", n_gpus=16, global_batch=32, framework="deepspeed",
                           space=SearchSpace(tp=(1, 2), pp=(1, 2), micro_batch=(1,)))
    assert len(res.table) and set(res.table["cp"]) == {1}
    mega = perfmodel.search("llama3-8b", "h100-sxm5-80gb", n_gpus=16, global_batch=32, framework="megatron-core",
                            space=SearchSpace(tp=(1, 2), pp=(1, 2), micro_batch=(1,)))
    assert mega.table["cp"].max() > 1
    with pytest.raises(LayoutError, match="cp 4 under the deepspeed stack"):
        perfmodel.search("llama3-8b", "h100-sxm5-80gb", n_gpus=16, global_batch=32, framework="deepspeed",
                         space=SearchSpace(cp=(1, 4)))
