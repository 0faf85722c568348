"""The fused-attention rate of a part without attention points of its own: its generation's curve
scaled by the 16-bit MAMF ratio (hardware/derating.attention_curve), forward and backward points
combined, smaller heads, and the calibration knob reaching carried curves and the ratio fallback."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.calibration.parameters import KNOBS
from perfmodel.calibration.profile import system_with_knobs
from perfmodel.compute.ops import FLASH_FALLBACK_RATIO, attention_rate_flop_per_s, gemm_rate_flop_per_s
from perfmodel.hardware.attention import attention_curve, mamf16_flop_per_s
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.derating import accelerator_provenance
from perfmodel.hardware.system import resolve_system

ONE = dict.fromkeys(KNOBS, 1.0)


def _acc(acc_id: str):
    return load_catalog().accelerators[acc_id]


def test_power_capped_h100_and_h200_run_the_h100_fa2_curve():
    """Before: no points, 0.60 x the GEMM rate (341 TFLOP/s on the 500 W board against H100 SXM5's
    measured 308 at causal hd 128, 8k). Now H100 SXM5's FA2 curve x the 16-bit MAMF ratio."""
    h100 = _acc("h100-sxm5-80gb")
    for acc_id in ("h100-hbm2e-96gb-500w", "h200-sxm-141gb"):
        acc = _acc(acc_id)
        scale = mamf16_flop_per_s(acc) / mamf16_flop_per_s(h100)
        assert attention_rate_flop_per_s(acc, 128, 8192, True, "bf16") == pytest.approx(308e12 * scale, rel=1e-9)
        assert attention_rate_flop_per_s(acc, 64, 2048, False, "bf16") == pytest.approx(274e12 * scale, rel=1e-9)
        prov = accelerator_provenance(acc, "bf16")["attention_rate"]
        assert prov.startswith("fallback: h100-sxm5-80gb's fused-attention curve"), prov


def test_forward_and_backward_points_combine_at_the_flash_flop_convention():
    """B200 publishes FA4 forward (1418.1) and backward (1117.9 TFLOP/s) at causal hd 128, 8k:
    3.5 / (1/1418.1 + 2.5/1117.9) = 1189.9 TFLOP/s fwd+bwd, times the measured in-step 0.82 (FA4's
    rate inside an 8k training step over this curve; the GEMMs take the whole-model 0.68)."""
    b200 = _acc("b200")
    combined = 3.5 / (1 / 1418.1e12 + 2.5 / 1117.9e12)
    assert combined == pytest.approx(1189.9e12, rel=1e-4)
    assert attention_rate_flop_per_s(b200, 128, 8192, True, "bf16") == pytest.approx(combined * 0.82, rel=1e-9)
    noncausal = 3.5 / (1 / 1534.8e12 + 2.5 / 1247.5e12)
    assert attention_rate_flop_per_s(b200, 128, 8192, False, "bf16") == pytest.approx(noncausal * 0.82, rel=1e-9)
    # GB300 has no points: B200's, times the 16-bit MAMF ratio 2106.8 / 1745.0 (both measured)
    gb300 = _acc("gb300")
    scale = mamf16_flop_per_s(gb300) / mamf16_flop_per_s(b200)
    assert scale == pytest.approx(2106.8 / 1745.0)
    assert attention_rate_flop_per_s(gb300, 128, 8192, True, "bf16") == pytest.approx(
        combined * scale * gb300.attention_in_step, rel=1e-9)
    assert gb300.attention_in_step == 0.82 and gb300.in_model_efficiency == 0.68


def test_a_smaller_head_than_measured_pays_the_softmax_share():
    """B200 measured hd 128 only: hd 64 runs (64/84)/(128/148) = 0.881 of it (the FA2 charts'
    64-vs-128 ratio), hd 16 (16/36)/(128/148) = 0.514; a larger head keeps the measured rate."""
    b200 = _acc("b200")
    r128 = attention_rate_flop_per_s(b200, 128, 8192, True, "bf16")
    assert attention_rate_flop_per_s(b200, 64, 8192, True, "bf16") / r128 == pytest.approx((64 / 84) / (128 / 148))
    assert attention_rate_flop_per_s(b200, 16, 8192, True, "bf16") / r128 == pytest.approx((16 / 36) / (128 / 148))
    assert attention_rate_flop_per_s(b200, 192, 8192, True, "bf16") == pytest.approx(r128)


def test_no_attention_measurement_in_the_generation_keeps_the_ratio_fallback():
    mi300x = _acc("mi300x")
    assert attention_curve(mi300x) is None
    assert attention_rate_flop_per_s(mi300x, 128, 4096, True, "bf16") == pytest.approx(
        FLASH_FALLBACK_RATIO * gemm_rate_flop_per_s(mi300x, "bf16"), rel=1e-9)


@pytest.mark.parametrize("acc_id", ["h100-hbm2e-96gb-500w", "h200-sxm-141gb", "mi300x", "h100-sxm5-80gb"])
def test_the_attention_knob_reaches_carried_curves_and_the_fallback(acc_id):
    """A profile's attention factor scales the attention rate by itself on every part without a
    whole-model measurement, whether its curve is measured, carried or the ratio fallback; the
    gemm factor never leaks into attention."""
    s = resolve_system(acc_id, None, 8)[0]
    base = attention_rate_flop_per_s(s.accelerator, 128, 4096, True, "bf16")
    both = system_with_knobs(s, {**ONE, "gemm": 0.8, "attention": 0.5}).accelerator
    assert attention_rate_flop_per_s(both, 128, 4096, True, "bf16") == pytest.approx(0.5 * base, rel=1e-6)
    gemm_only = system_with_knobs(s, {**ONE, "gemm": 0.8}).accelerator
    assert attention_rate_flop_per_s(gemm_only, 128, 4096, True, "bf16") == pytest.approx(base, rel=1e-6)


@pytest.mark.parametrize("acc_id", ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"])
def test_the_flash1_knob_scales_the_triton_kernel_only(acc_id):
    """flash1_kernel multiplies the Triton kernel's rate and nothing else: on A100 80GB its own
    chart points (causal hd 128 at 2k: 68 TFLOP/s -> 102 at 1.5), elsewhere the FA2-class curve x
    the A100 Triton / FA2 ratio written out as the part's Triton points; FA2 and the newest kernel
    keep their rates."""
    s = resolve_system(acc_id, None, 8)[0]
    fast = system_with_knobs(s, {**ONE, "flash1": 1.5}).accelerator
    for n in (2048, 8192):
        base = attention_rate_flop_per_s(s.accelerator, 128, n, True, "bf16", "flash1")
        assert attention_rate_flop_per_s(fast, 128, n, True, "bf16", "flash1") == pytest.approx(1.5 * base, rel=0.03)
        for kernel in ("flash", "fused"):
            assert attention_rate_flop_per_s(fast, 128, n, True, "bf16", kernel) == pytest.approx(
                attention_rate_flop_per_s(s.accelerator, 128, n, True, "bf16", kernel), rel=1e-6)
    if acc_id == "a100-sxm4-80gb":
        assert attention_rate_flop_per_s(fast, 128, 2048, True, "bf16", "flash1") == pytest.approx(102e12, rel=1e-6)


def test_composer_runs_the_triton_kernel_its_benchmarks_ran():
    """llm-foundry's benchmark sweep ran MPT with attn_impl 'triton' (submit_benchmarks.py default):
    the composer stack selects `flash1`, and a plan that names its kernel keeps it."""
    from perfmodel.calibration.frameworks import apply_framework, framework
    from perfmodel.parallel.plan import ParallelPlan

    plan = ParallelPlan(dp=8, global_batch=64, micro_batch=1, seq_len=2048)
    assert apply_framework(plan, framework("composer")).attention_impl == "flash1"
    named = ParallelPlan(dp=8, global_batch=64, micro_batch=1, seq_len=2048, attention_impl="flash")
    assert apply_framework(named, framework("composer")).attention_impl == "flash"


def test_fa3_on_h100_combines_tritonbench_forward_and_backward():
    """flash_v3 non-causal hd 128 at 8k: forward 638.6, backward 561.4 TFLOP/s ->
    3.5 / (1/638.6 + 2.5/561.4) = 581.5; causal takes FA3's own forward causal / non-causal ratio
    from the FA3 paper chart at 8k, 602 / 646: 541.9 TFLOP/s. The `flash` implementation (FA2)
    keeps the FA2 chart's 308."""
    from perfmodel.hardware.attention import attention_curve

    h100 = _acc("h100-sxm5-80gb")
    noncausal = 3.5 / (1 / 638.6e12 + 2.5 / 561.4e12)
    assert noncausal == pytest.approx(581.5e12, rel=1e-4)
    curve = attention_curve(h100)
    assert curve is not None
    fa3 = {(c, d, n): r for k, c, d, n, r in curve.points if k == "flash3"}
    assert fa3[(False, 128, 8192)] == pytest.approx(noncausal, rel=1e-9)
    assert fa3[(True, 128, 8192)] == pytest.approx(noncausal * 602 / 646, rel=1e-9)
    assert attention_rate_flop_per_s(h100, 128, 8192, True, "bf16", "flash") == pytest.approx(308e12, rel=1e-9)


def test_fused_runs_cudnn_where_its_generation_measured_it():
    """Transformer Engine prefers cuDNN's FusedAttention on Hopper and later; the FA3 paper's cuDNN
    bars on H100 at 8k, hd 128: forward 600 (non-causal) / 529 (causal), backward 518 (non-causal)
    -> 3.5 / (1/600 + 2.5/518) = 539.5 non-causal, x 529 / 600 causal = 475.7, 0.88 of FA3's 541.9.
    H200 reads H100's curve (same MAMF). Ampere measured FA2 only and Blackwell FA4 only, and no
    cuDNN rate: fused reads their newest FlashAttention (an upper bound for cuDNN)."""
    h100, h200 = _acc("h100-sxm5-80gb"), _acc("h200-sxm-141gb")
    noncausal = 3.5 / (1 / 600e12 + 2.5 / 518e12)
    assert attention_rate_flop_per_s(h100, 128, 8192, False, "bf16", "fused") == pytest.approx(noncausal, rel=1e-9)
    causal = attention_rate_flop_per_s(h100, 128, 8192, True, "bf16", "fused")
    assert causal == pytest.approx(noncausal * 529 / 600, rel=1e-9)
    fa3_causal = 3.5 / (1 / 638.6e12 + 2.5 / 561.4e12) * 602 / 646
    assert causal / fa3_causal == pytest.approx(0.878, abs=0.002)
    assert attention_rate_flop_per_s(h200, 128, 8192, True, "bf16", "fused") > 1.5 * attention_rate_flop_per_s(
        h200, 128, 8192, True, "bf16", "flash")
    for acc_id in ("a100-sxm4-80gb", "b200", "gb200"):
        acc = _acc(acc_id)
        assert attention_rate_flop_per_s(acc, 128, 4096, True, "bf16", "fused") == pytest.approx(
            attention_rate_flop_per_s(acc, 128, 4096, True, "bf16", "flash"), rel=1e-12)


def test_named_flash_generations_read_their_own_curve():
    """flash3 / flash4 read that generation's points and nothing else. FA3 on H100 at causal hd
    128, 8k: forward 602 causal / 646 non-causal, fwd+bwd non-causal 3.5 / (1/638.6 + 2.5/561.4)
    = 581.5 -> 581.5 x 602 / 646 = 541.9 TFLOP/s, 1.76x the FA2 curve's 308. H200 reads H100's
    curve (same MAMF). FA4 on B200 is the `flash` rate there (no FA2 measured on Blackwell)."""
    h100, h200, b200 = _acc("h100-sxm5-80gb"), _acc("h200-sxm-141gb"), _acc("b200")
    fa3 = 3.5 / (1 / 638.6e12 + 2.5 / 561.4e12) * 602 / 646
    for acc in (h100, h200):
        assert attention_rate_flop_per_s(acc, 128, 8192, True, "bf16", "flash3") == pytest.approx(fa3, rel=1e-9)
        assert attention_rate_flop_per_s(acc, 128, 8192, True, "bf16", "flash") == pytest.approx(308e12, rel=1e-9)
    assert attention_rate_flop_per_s(b200, 128, 8192, True, "bf16", "flash4") == pytest.approx(
        attention_rate_flop_per_s(b200, 128, 8192, True, "bf16", "flash"), rel=1e-12)


@pytest.mark.parametrize(("acc_id", "impl", "allowed"), [
    ("a100-sxm4-80gb", "flash3", "flash, fused, flash1, unfused"),
    ("h100-sxm5-80gb", "flash4", "flash, fused, flash1, unfused, flash3"),
    ("b200", "flash3", "flash, fused, flash1, unfused, flash4"),
    ("host-cpu", "flash4", "flash, fused, flash1, unfused"),
])
def test_a_generation_never_measured_is_refused(acc_id: str, impl: str, allowed: str):
    """FA3 is Hopper's kernel and FA4 Blackwell's: on a part whose generation has no such points the
    estimate is refused with what the part allows, never costed at another kernel's rate."""
    from perfmodel.errors import LayoutError

    acc = _acc(acc_id)
    with pytest.raises(LayoutError, match=f"attention {impl}: no {impl} rate is measured on .*Allowed on this part: {allowed}$"):
        attention_rate_flop_per_s(acc, 128, 8192, True, "bf16", impl)
    system = resolve_system(acc_id, None, 1, None)[0]
    plan = perfmodel.ParallelPlan(global_batch=8, attention_impl=impl)
    with pytest.raises(LayoutError, match=f"attention {impl}"):
        perfmodel.estimate("llama3-8b", system, plan)


def test_stacks_select_their_attention_kernel():
    from perfmodel.calibration.frameworks import framework

    assert framework("megatron-core").attention == "fused"  # TE: cuDNN's FusedAttention on Hopper+
    assert framework("torchtitan").attention == "flash"  # torch SDPA: FA2 backend first
    assert framework("megatron-lm").attention == "unfused"


GPUS_WITH_FP32 = sorted(a.id for a in load_catalog().accelerators.values()
                        if a.kind != "cpu" and "fp32" in a.supported_precisions and attention_curve(a) is not None)


@pytest.mark.parametrize("acc_id", GPUS_WITH_FP32)
def test_fp32_attention_runs_on_the_fp32_matrix_path(acc_id: str):
    """FlashAttention takes 16-bit inputs only; an fp32 run's attention is at most the fallback
    ratio of the fp32 (TF32) GEMM rate. It used to read the bf16 FA2 curve, so llama3.2-1b at
    seq 131072 in fp32 on A100 80GB reported MFU 1.335 against the TF32 peak."""
    acc = _acc(acc_id)
    fp32 = attention_rate_flop_per_s(acc, 128, 8192, True, "fp32")
    assert fp32 == pytest.approx(FLASH_FALLBACK_RATIO * gemm_rate_flop_per_s(acc, "fp32"), rel=1e-12)
    assert fp32 < attention_rate_flop_per_s(acc, 128, 8192, True, "bf16")


def test_fp32_long_sequence_mfu_stays_below_one():
    plan = perfmodel.ParallelPlan(micro_batch=1, global_batch=1, seq_len=131072, precision="fp32")
    r = perfmodel.estimate("llama3.2-1b", "a100-sxm4-80gb", plan)
    assert 0.3 < r.mfu < 1.0


def test_a_one_length_curve_takes_its_length_dependence_from_h100_fa2():
    """B200 measured FA4 at 8K only; at other lengths it runs its 8K rate times H100 SXM5's FA2
    rate ratio at the same causality and head (causal hd 128: 265 / 308 TFLOP/s at 2K, 163 / 308
    at 512, linear below 512), so a 128-token sliding window is not costed at the 8K rate; longer
    sequences keep the 8K rate. H100's own multi-length curve is untouched."""
    b200, h100 = _acc("b200"), _acc("h100-sxm5-80gb")
    at8k = attention_rate_flop_per_s(b200, 128, 8192, True, "bf16")
    assert attention_rate_flop_per_s(b200, 128, 2048, True, "bf16") == pytest.approx(at8k * 265 / 308, rel=1e-9)
    assert attention_rate_flop_per_s(b200, 128, 512, True, "bf16") == pytest.approx(at8k * 163 / 308, rel=1e-9)
    assert attention_rate_flop_per_s(b200, 128, 128, True, "bf16") == pytest.approx(at8k * 163 / 308 / 4, rel=1e-9)
    # non-causal FA2 hd 128: 294 / 335 at 1K
    at8k_nc = attention_rate_flop_per_s(b200, 128, 8192, False, "bf16")
    assert attention_rate_flop_per_s(b200, 128, 1024, False, "bf16") == pytest.approx(at8k_nc * 294 / 335, rel=1e-9)
    # above its measured length the kernel keeps its rate (FA2 on H100 still gains 6 % from 8K to 16K;
    # NeMo's B200 long-sequence rows show no such rise)
    assert attention_rate_flop_per_s(b200, 128, 16384, True, "bf16") == pytest.approx(at8k, rel=1e-9)
    assert attention_rate_flop_per_s(h100, 128, 2048, True, "bf16") == pytest.approx(265e12, rel=1e-9)
