"""The power rule of the derating: a part that carries a peer's MAMF/peak from its own
generation scales it by (clock_peer / clock_part) x (power per unit of math, part / peer)^alpha,
at most the generation's best measured ratio, with alpha measured on one die at two board powers
(perfmodel/hardware/derating.py)."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel import precision as registry
from perfmodel.errors import PrecisionError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.derating import POWER_PAIRS, mamf_ratio, power_exponent, power_scaled_ratio, ratio_ceiling
from perfmodel.hardware.specs import Accelerator

T = 1e12
# the exponents by hand: ln(rate at the higher power / rate at the lower) / ln(power ratio)
A_HOPPER_16 = math.log(828.6 / 794.5) / math.log(900 / 700)  # GH200 900 W vs H100 SXM 700 W, bf16: 0.1672
A_HOPPER_8 = math.log(1535.0 / 1402.6) / math.log(900 / 700)  # fp8: 0.3589
A_BLACKWELL_16 = math.log(1822.0 / 1745.0) / math.log(1200 / 1000)  # GB200 vs B200, bf16: 0.2368
A_BLACKWELL_8 = math.log(3615.6 / 3432.5) / math.log(1200 / 1000)  # fp8: 0.2850
A_CDNA3_16 = (math.log(843 / 708) + math.log(794 / 654)) / 2 / math.log(1000 / 750)  # MI325X vs MI300X, bf16 & fp16: 0.6405
A_CDNA3_8 = math.log(1519 / 1273) / math.log(1000 / 750)  # fp8: 0.6141


def _acc(acc_id: str) -> Accelerator:
    return load_catalog().accelerator(acc_id)


def _variant(base: str, new_id: str, **update: object) -> Accelerator:
    """A catalogue part under another id with fields replaced and no calibration of its own."""
    data = _acc(base).model_dump(mode="json", exclude_none=True)
    data.update(id=new_id, calibration={}, **update)
    return Accelerator.model_validate({k: v for k, v in data.items() if v is not None})


def test_exponents_by_hand():
    assert power_exponent("hopper", "bf16")[0] == pytest.approx(A_HOPPER_16)
    assert (round(A_HOPPER_16, 4), round(A_HOPPER_8, 4)) == (0.1672, 0.3589)
    assert power_exponent("hopper", "fp8")[0] == pytest.approx(A_HOPPER_8)
    assert power_exponent("blackwell", "bf16")[0] == pytest.approx(A_BLACKWELL_16)
    assert power_exponent("blackwell", "fp8")[0] == pytest.approx(A_BLACKWELL_8)
    assert power_exponent("cdna3", "bf16")[0] == pytest.approx(A_CDNA3_16)
    assert power_exponent("cdna3", "fp8")[0] == pytest.approx(A_CDNA3_8)
    # one value per format class: tf32 and fp16 with bf16, fp4 / fp6 / mxfp8 with fp8
    assert power_exponent("hopper", "tf32") == power_exponent("hopper", "fp16") == power_exponent("hopper", "bf16")
    assert power_exponent("hopper", "fp4") == power_exponent("hopper", "fp6") == power_exponent("hopper", "mxfp8")
    # a generation without a pair: the median over the generations that measured one
    assert power_exponent("ampere", "bf16")[0] == pytest.approx(statistics.median([A_HOPPER_16, A_BLACKWELL_16, A_CDNA3_16]))
    assert power_exponent("ampere", "fp8")[0] == pytest.approx(statistics.median([A_HOPPER_8, A_BLACKWELL_8, A_CDNA3_8]))
    assert "median of blackwell, cdna3, hopper" in power_exponent("ampere", "fp8")[1]
    # physical range: between a clock pinned at its maximum (0) and one at the voltage floor (1)
    assert all(0 < p.alpha < 1 for p in POWER_PAIRS)


def test_pairs_hold_the_catalogue_measurements():
    """The pairs' lower ends are the catalogue's own MAMF and tdp (no second copy drifting)."""
    def mamf(acc_id: str, fmt: str) -> float:
        return _acc(acc_id).calibration.gemm_max_achievable[fmt].si("flop_per_s")

    ends = {("hopper", "bf16"): ("h100-sxm5-80gb", None), ("hopper", "fp8"): ("h100-sxm5-80gb", None),
            ("blackwell", "bf16"): ("b200", "gb200"), ("blackwell", "fp8"): ("b200", "gb200"),
            ("cdna3", "fp16"): ("mi300x", None), ("cdna3", "fp8"): ("mi300x", None)}
    for (gen, fmt), (low, high) in ends.items():
        pair = next(p for p in POWER_PAIRS if (p.generation, p.fmt) == (gen, fmt))
        assert pair.low_flop_per_s == pytest.approx(mamf(low, fmt)) and pair.low_w == _acc(low).tdp_w
        if high:
            assert pair.high_flop_per_s == pytest.approx(mamf(high, fmt)) and pair.high_w == _acc(high).tdp_w
            assert _acc(low).num_compute_units == _acc(high).num_compute_units
        # the high end's peak: the catalogue's (GH200 and MI325X have their low ends' peaks)
        assert pair.high_peak_flop_per_s == pytest.approx(_acc(high or low).matrix_peak_flop_per_s(fmt))


def test_h100_at_500w_takes_the_700w_ratios_scaled_down():
    """bf16: 794.5 / 989.4 x (500/700)^0.167 = 0.759 from H100 and H200 alike; fp8: the median of
    H100's 1402.6 and H200's 1453.4 over 1978.9, each x (500/700)^0.359."""
    acc = _acc("h100-hbm2e-96gb-500w")
    bf16 = 794.5 / 989.4 * (500 / 700) ** A_HOPPER_16
    assert bf16 == pytest.approx(0.7591, abs=1e-4)
    assert mamf_ratio(acc, "bf16").value == pytest.approx(bf16)
    fp8 = (1402.6 + 1453.4) / 2 / 1978.9 * (500 / 700) ** A_HOPPER_8
    assert fp8 == pytest.approx(0.6395, abs=1e-4)
    assert mamf_ratio(acc, "fp8").value == pytest.approx(fp8)
    prov = mamf_ratio(acc, "fp8").provenance
    assert prov.startswith("fallback: MAMF/peak = median 0.64 of h100-sxm5-80gb 0.709 x (500/700 W)^0.359 = 0.628")
    assert "power rule, alpha 0.359 for 8-bit and narrower formats from hopper's pair" in prov
    assert "x (500/700 W)^0.167" in mamf_ratio(acc, "bf16").provenance


def test_clock_term_and_blackwell_parts():
    """A GB300 without its own measurement (1400 W, 152 SMs, peaks at 2008 MHz): from B200 0.7756 x
    1856/2008 x ((1400 W / 152 SMs) / (1000 W / 148 SMs))^a and from GB200 0.7288 x 2062/2008 x
    ((1400 / 152) / (1200 / 148))^a: the power that counts is per unit of math per clock (the
    clocks are derived from the SM counts, so peak / clock = SMs x 8192). The catalogue's GB300
    (measured 2106.8 / 2500, same clock, power and SMs) carries unscaled. With four peers the
    median is the mean of the middle two."""
    b200, gb200 = 1745.0 / 2250, 1822.0 / 2500
    per_sm = {"b200": 1000 / 148, "gb200": 1200 / 148, "b300": 1100 / 148, "gb300": 1400 / 152}  # W per SM
    from_b200 = b200 * (1856 / 2008) * (per_sm["gb300"] / per_sm["b200"]) ** A_BLACKWELL_16
    from_gb200 = gb200 * (2062 / 2008) * (per_sm["gb300"] / per_sm["gb200"]) ** A_BLACKWELL_16
    assert from_b200 == pytest.approx(from_gb200, rel=2e-4)  # the yaml clocks are rounded to the MHz
    from_b300 = 1769.0 / 2250 * (1856 / 2008) * (per_sm["gb300"] / per_sm["b300"]) ** A_BLACKWELL_16
    from_gb300 = 2106.8 / 2500
    unmeasured = mamf_ratio(_variant("gb300", "gb300-unmeasured"), "bf16")
    middle = sorted([from_b200, from_b300, from_gb200, from_gb300])[1:3]
    assert unmeasured.value == pytest.approx(sum(middle) / 2, rel=1e-4)  # clocks rounded to the MHz
    assert "b200 0.776 x (1856/2008 MHz) x (1400 W per 1245k FLOP/clk / 1000 W per 1212k)^0.237 = 0.771" in unmeasured.provenance
    assert ", gb300 0.843 (same generation blackwell" in unmeasured.provenance  # same clock and power: unscaled
    assert mamf_ratio(_acc("gb300"), "bf16").provenance == "measured: bf16 MAMF (aic-gemm)"
    # B300 (B200's clocks and SMs, 1100 W): the rule had carried 0.793 of the peak; measured 1769 / 2250 = 0.786
    carried_b300 = (b200 * 1.1 ** A_BLACKWELL_16 + gb200 * (2062 / 1856) * (1100 / 1200) ** A_BLACKWELL_16) / 2
    assert carried_b300 == pytest.approx(mamf_ratio(_acc("b300"), "bf16").value, rel=0.01)


def test_h20_has_power_to_spare():
    """H20 is GH100 with 78 SMs and its tensor rate cut to 148 TFLOP/s dense bf16 (15 % of H100) on
    a 400 W board: 400 W per 148 TFLOP/s is 3.8x H100's 700 W per 989.4, so its GEMMs are not power
    bound. The rule's headroom factor 3.82^0.167 = 1.25 lifts H100's 0.803 above the best ratio
    Hopper measured at any power (GH200 at 900 W: 828.6 / 989.4 = 0.837), which caps it; fp8 the
    same at 1535 / 1978.9 = 0.776. Published H20 kernels agree: FlashAttention-3 forward at 85 % of
    its peak. (By the board power alone it had taken 0.803 x (400/700)^0.167 = 0.731.)"""
    h20 = _acc("h20-96gb")
    headroom = (400 / 148) / (700 / 989.4)
    assert headroom == pytest.approx(3.82, abs=0.01)
    assert 794.5 / 989.4 * headroom ** A_HOPPER_16 > 828.6 / 989.4
    assert mamf_ratio(h20, "bf16").value == pytest.approx(828.6 / 989.4)
    assert mamf_ratio(h20, "fp8").value == pytest.approx(1535.0 / 1978.9)
    assert "capped at hopper's best measured 0.837 (hopper pair at 900 W)" in mamf_ratio(h20, "bf16").provenance
    assert ratio_ceiling("hopper", "bf16") == (pytest.approx(828.6 / 989.4), "hopper's best measured 0.837 (hopper pair at 900 W)")
    # a generation that measured nothing is bounded by the peak alone
    assert ratio_ceiling("volta", "fp16") == (1.0, "the peak")


def test_same_power_same_clock_is_unchanged():
    h100, h200 = _acc("h100-sxm5-80gb"), _acc("h200-sxm-141gb")
    assert power_scaled_ratio(h200, h100, 0.803, "bf16") == (0.803, "h100-sxm5-80gb 0.803")
    assert power_scaled_ratio(h200, h100, 0.709, "fp8") == (0.709, "h100-sxm5-80gb 0.709")
    # H200's fp4 (no fp4 peak measured anywhere in Hopper) takes H100's bf16 ratio unscaled
    fp4 = mamf_ratio(h200, "fp4")
    assert fp4.value == pytest.approx(794.5 / 989.4)
    assert fp4.provenance == "fallback: MAMF/peak = median 0.803 of h100-sxm5-80gb 0.803 (same generation hopper)"


def test_no_tdp_keeps_the_unscaled_ratio():
    part = _variant("h100-sxm5-80gb", "hopper-without-tdp", tdp=None, clock={"value": "1500 MHz", "source": "test"})
    d = mamf_ratio(part, "bf16")
    assert d.value == pytest.approx(794.5 / 989.4)  # neither the clock nor the power term
    assert "h100-sxm5-80gb 0.803 (unscaled: hopper-without-tdp has no tdp)" in d.provenance
    h100 = _acc("h100-sxm5-80gb")
    assert power_scaled_ratio(h100, part, 0.5, "fp8") == (0.5, "hopper-without-tdp 0.5 (unscaled: hopper-without-tdp has no tdp)")


def test_other_generations_carry_unscaled():
    """V100 (300 W, Volta) has no measured Volta peer: the NVIDIA median, no power term."""
    v100 = mamf_ratio(_acc("v100-sxm2-32gb"), "fp16")
    assert "same vendor nvidia" in v100.provenance and "W)^" not in v100.provenance


def test_never_above_the_generations_best():
    part = _variant("h100-sxm5-80gb", "hopper-at-20kw", tdp={"value": "20000 W", "source": "test"})
    value, text = power_scaled_ratio(part, _acc("h100-sxm5-80gb"), 794.5 / 989.4, "fp8")
    assert 794.5 / 989.4 * (20000 / 700) ** A_HOPPER_8 > 1 and value == pytest.approx(1535.0 / 1978.9)
    assert text.endswith("= 0.776 (capped at hopper's best measured 0.776 (hopper pair at 900 W))")
    assert mamf_ratio(part, "bf16").value == pytest.approx(828.6 / 989.4)
    # the ceiling is the best of the generation's own measurements and its pairs' high ends
    blackwell = max(1822.0 / 2500, 2106.8 / 2500, 1745.0 / 2250, 1769.0 / 2250)
    assert ratio_ceiling("blackwell", "bf16")[0] == pytest.approx(blackwell)


@settings(max_examples=25, deadline=None)
@given(low=st.floats(100, 3000), factor=st.floats(1.0, 4.0), fmt=st.sampled_from(["bf16", "fp8", "fp4", "tf32"]),
       base=st.sampled_from(["h100-sxm5-80gb", "gb200", "mi300x"]))
def test_more_power_never_lowers_the_carried_ratio(low, factor, fmt, base):
    parts = [_variant(base, f"power-test-{w:.6g}", tdp={"value": f"{w!r} W", "source": "test"}) for w in (low, low * factor)]
    lo, hi = (mamf_ratio(p, fmt).value for p in parts)
    assert 0 < lo <= hi <= 1.0


def test_format_bits_registry():
    assert set(registry.FORMAT_BITS) == set(registry.NUMBER_FORMATS)
    assert registry.format_bits("bf16") == 16 and registry.format_bits("mxfp8") == 8 and registry.format_bits("nvfp4") == 4
    with pytest.raises(PrecisionError, match="allowed: fp64"):
        registry.format_bits("fp12")


def test_a100_pcie_mamf_is_what_the_power_rule_predicts():
    """A100 PCIe 80GB (300 W, same clock and SMs as the 400 W SXM4) measured 252.9 / 312 = 0.811
    (ML Engineering MAMF table). The rule, from A100 SXM4's 271.2 / 312 = 0.869 with the 16-bit
    exponent Ampere borrows (no Ampere pair at two powers: the median of Hopper 0.167, Blackwell
    0.237 and CDNA3 0.641), predicts 0.869 x (300/400)^0.237 = 0.812: within 0.3 % of a measurement
    the exponent never saw."""
    alpha, basis = power_exponent("ampere", "bf16")
    assert alpha == pytest.approx(A_BLACKWELL_16) and basis == "the median of blackwell, cdna3, hopper"
    predicted = 271.2 / 312 * (300 / 400) ** alpha
    assert predicted == pytest.approx(252.9 / 312, rel=3e-3)
    assert mamf_ratio(_acc("a100-pcie-80gb"), "bf16").provenance == "measured: bf16 MAMF (ml-eng-mamf)"
