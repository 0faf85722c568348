"""What a part achieves where it has no measurement of its own: one derating rule, and the
provenance of every efficiency an estimate uses.

A cost model reads, per accelerator, a few achieved rates: the maximum achievable matmul rate
(MAMF, per matrix format), the whole-model efficiency on top of it, the streaming HBM bandwidth
and the kernel launch gap. A part's own microbenchmark (its `calibration:` block) is used as is.
A part without one takes the rule:

    ratio(part) = median over peers of ratio(peer),   ratio = achieved / datasheet figure
    peers       = the other parts that measured the term, at the nearest level of
                  same generation -> same vendor -> same kind (gpu, tpu, hpu) -> any accelerator

The ratio, not the absolute figure, carries over: an MI325X (the MI300X's CDNA 3 compute die)
starts from the MI300X's 668.4 / 1307.4 = 0.511 of its matmul peak under the same ROCm stack
(then the power rule below), rather than the 0.80 of a generic fallback that made it 1.56x
faster than the MI300X. The kernel launch gap, a time rather than a rate, is carried as the
peers' median seconds.

Within a generation the MAMF ratio also follows the power budget (the power rule). A dense
GEMM runs the chip at its power limit: the isolated MAMF sits below the rated clock because the
board meets its cap (MI300X's GEMMs run at 1115-1230 MHz against a 2100 MHz peak clock, AMD MAF
blog), so the same die under another cap sustains another clock. Dynamic power goes as f V^2
with V rising with f, so a fully power-limited clock goes as P^(1/3), a clock near its maximum
moves less (alpha -> 0) and one held near the voltage floor moves more (P ~ f, alpha -> 1). The
rule carries the peer's achieved rate per rated clock and scales it by the power each part has
per unit of math it does per clock:

    load                = tdp / (dense peak FLOP per clock)      (power per compute unit at work)
    ratio(part <- peer) = min(ceiling, ratio(peer) x (clock_peer / clock_part) x (load_part / load_peer)^alpha)

clock is the clock the part's peaks are quoted at (`clock`), so a peer whose datasheet peak
already counts a larger budget (GB200's 2062 MHz against B200's 1856 MHz) is not credited twice.
On one die with its compute units all enabled the load ratio is the power ratio; a part with
more units (GB300's 152 SMs against B200's 148) spreads its power over more math, and one whose
tensor rate is cut (H20: GH100 with 78 SMs at about a quarter of H100's per-SM tensor rate, 148
dense TFLOP/s on 400 W, 3.8x H100's power per unit of math) has power to spare. The ceiling is the
best MAMF/peak the generation measured at any power, the high ends of its pairs included (Hopper
bf16 828.6 / 989.4 = 0.837 on GH200 at 900 W): past it the clock meets its boost limit and the
tile and pipeline losses remain, so more headroom buys nothing the measurements show. H20 takes
that ceiling (its FlashAttention-3 forward reaches 85 % of its peak, h20-96gb.yaml); a
generation without measurements is bounded by the peak.
alpha is measured on one die at two power budgets (POWER_PAIRS: alpha = ln(rate_hi / rate_lo) /
ln(P_hi / P_lo), equal compute units) per generation and per format class, 16-bit and wider
against 8-bit and narrower (precision.FORMAT_BITS; the narrow formats do 2-4x the math per clock
and sit deeper under the cap):

    hopper     bf16 0.167  fp8 0.359   H100 SXM 700 W vs GH200 900 W (ml-eng MAMF tables; the
                                       900 W is the GH200 module budget, Grace CPU included, so
                                       these are lower bounds)
    blackwell  bf16 0.237  fp8 0.285   B200 1000 W vs GB200 1200 W (ml-eng MAMF tables)
    cdna3      bf16 0.607, fp16 0.674 (median 0.640), fp8 0.614
                                       MI300X 750 W vs MI325X 1000 W (AMD MAF blog, one hipBLASLt
                                       build; the median GEMM clocks move alike, 1207 -> 1447 MHz)

A generation without a pair takes the median over the generations (0.237 and 0.359). A part or
peer without a `tdp` keeps the unscaled ratio, and the peers above the generation level (other
dies, other processes) carry theirs unscaled: a TDP ratio across dies says nothing about clocks.
Examples: the H100 board capped at 500 W takes 0.803 x (500/700)^0.167 = 0.759 in bf16 (was 0.803);
MI325X takes 0.511 x (1000/750)^0.640 = 0.615 (was 0.511); H200 and H100 (both 700 W) are unchanged;
H20 takes Hopper's ceiling, 0.837 in bf16 and 0.776 in fp8 (by board power alone it took 0.731 and
0.590, as if its GEMMs were as power bound as H100's).
The H100 500 W figure extrapolates the 700-900 W pair downwards, where the clock sits deeper under
the cap and alpha grows (a GB300 capped at 500 W ran cuBLAS GEMMs at ~617 TFLOP/s against
~1600-2174 at 1400 W, alpha ~1: facebookexperimental/triton PR 2023): it is an upper bound.

The whole-model efficiency (`calibration.in_model_efficiency`: what fraction of the isolated
kernel rates a real model's step reaches, 0.68 for B200's GEMMs) is carried only within a generation
(same die, clocks and kernels); a generation without a measurement keeps the isolated rates
(1.0) and says so, since carrying B200's figure to other generations would be a guess. Attention
takes its own in-step fraction where one was measured (`calibration.attention_in_step`: FA4 inside
an 8k training step, 0.82 of its isolated curve on B200), carried the same way, else the GEMMs'.
CPUs are peers only of CPUs.

The fused-attention curve a part without its own points carries is hardware/attention.py.

Every value comes with a provenance string: "measured: ..." or "fallback: ...", which the
Estimate shows per cost term.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from perfmodel import precision as registry
from perfmodel.hardware.specs import Accelerator

if TYPE_CHECKING:
    from perfmodel.hardware.system import System

LEVELS = ("generation", "vendor", "kind", "any accelerator")
GENERIC_MAMF_RATIO = 0.80  # only when no accelerator in the catalogue measured a MAMF: Bekman's
#                            MAMF/peak 0.87 (A100), 0.80 (H100), 0.76 (H200), rounded mean
DEFAULT_LAUNCH_S = 2.5e-6  # only when no peer measured one: gpu-benches A100 fit (2.555 us)


@dataclass(frozen=True, slots=True)
class Derived:
    """One efficiency figure and where it comes from."""

    value: float
    provenance: str

    @property
    def measured(self) -> bool:
        return self.provenance.startswith("measured")


def _peers(acc: Accelerator) -> tuple[Accelerator, ...]:
    from perfmodel.hardware.catalog import load_catalog

    return tuple(p for p in load_catalog().accelerators.values() if p.id != acc.id)


def _level_peers(acc: Accelerator, peers: Iterable[Accelerator], level: str) -> list[Accelerator]:
    same_cpu = [p for p in peers if (p.kind == "cpu") == (acc.kind == "cpu")]
    if level == "generation":
        return [p for p in same_cpu if p.generation == acc.generation]
    if level == "vendor":
        return [p for p in same_cpu if p.vendor == acc.vendor]
    if level == "kind":
        return [p for p in same_cpu if p.kind == acc.kind]
    return same_cpu


def peer_median(acc: Accelerator, peers: Iterable[Accelerator], own: Callable[[Accelerator], float | None],
                what: str, levels: tuple[str, ...] = LEVELS) -> Derived | None:
    """The median of `own(peer)` over the peers that measured it at the nearest level, or None."""
    pool = tuple(peers)
    for level in levels:
        vals = [(p.id, v) for p in _level_peers(acc, pool, level) if (v := own(p)) is not None]
        if vals:
            med = statistics.median(v for _, v in vals)
            label = f"same {level} {getattr(acc, level)}" if level in ("generation", "vendor", "kind") else level
            listed = ", ".join(f"{i} {v:.3g}" for i, v in sorted(vals))
            return Derived(med, f"fallback: {what} = median {med:.3g} of {listed} ({label})")
    return None


# -- the terms ----------------------------------------------------------------------------------
def _own_mamf_ratio(acc: Accelerator, fmt: str) -> tuple[float, str] | None:
    """(MAMF / peak, provenance) from the part's own measurement in `fmt`; else, for a narrow
    format (8 bits or fewer), in another narrow format of the part, the nearest in width (the same
    format class: 2-4x the 16-bit math per clock, as deep under the power cap); else in bf16/fp16
    carried to a narrower format (the same tensor cores, the same kernel maturity)."""
    cal = acc.calibration.gemm_max_achievable
    try:
        peak = acc.matrix_peak_flop_per_s(fmt)
    except ValueError:
        return None
    if fmt in cal:
        return min(cal[fmt].si("flop_per_s"), peak) / peak, f"measured: {fmt} MAMF ({cal[fmt].source})"
    if registry.format_bits(fmt) <= NARROW_FORMAT_BITS:
        bits = registry.format_bits(fmt)
        narrow = sorted((p for p in cal if p in registry.FORMAT_BITS and registry.format_bits(p) <= NARROW_FORMAT_BITS),
                        key=lambda p: (abs(registry.format_bits(p) - bits), p))
        for p in narrow:
            base = acc.matrix_peak_flop_per_s(p)
            return (min(cal[p].si("flop_per_s"), base) / base,
                    f"measured: {p} MAMF/peak ({cal[p].source}) at the {fmt} peak (the same narrow-format class)")
    for p in ("bf16", "fp16"):
        if p in cal:
            base = acc.matrix_peak_flop_per_s(p)
            return min(cal[p].si("flop_per_s"), base) / base, f"measured: {p} MAMF/peak ({cal[p].source}) at the {fmt} peak"
    return None


# -- the power rule of the MAMF ratio (module docstring) ----------------------------------------
NARROW_FORMAT_BITS = 8  # fp8, fp6, fp4, int8: 2-4x the 16-bit math per clock, deeper under the power cap


@dataclass(frozen=True, slots=True)
class PowerPair:
    """One die's MAMF in matrix format `fmt` measured at two board powers (equal compute units)."""

    generation: str
    fmt: str
    low_w: float
    low_flop_per_s: float
    high_w: float
    high_flop_per_s: float
    high_peak_flop_per_s: float  # the high end's datasheet peak in `fmt` (its ratio bounds the rule)
    source: str

    @property
    def alpha(self) -> float:
        """The power-law exponent: ln(rate_high / rate_low) / ln(P_high / P_low)."""
        return math.log(self.high_flop_per_s / self.low_flop_per_s) / math.log(self.high_w / self.low_w)


_ML_ENG = "Bekman, ML Engineering compute/accelerator/README.md MAMF tables @ 744d01e"
_AMD_MAF = ("AMD, 'Measuring Max-Achievable FLOPs - Part 2' (rocm-blogs, 28 Feb 2025) Table 1: hipblaslt-bench, "
            "hipBLASLt db8e93b, trig_float init, 512 MB rotating buffers; same 304 CUs and peaks")
POWER_PAIRS: tuple[PowerPair, ...] = (
    # the high ends' peaks: GH200 = H100 SXM5 (989.4 / 1978.9, gh200-96gb-hbm3.yaml), GB200 2.5 / 5
    # PFLOP/s (gb200.yaml), MI325X = MI300X (1307.4 / 2614.9, mi325x.yaml)
    PowerPair("hopper", "bf16", 700.0, 794.5e12, 900.0, 828.6e12, 989.4e12,
              f"{_ML_ENG}: H100 SXM vs GH200 '900W 141GiB HBM3e'"),
    PowerPair("hopper", "fp8", 700.0, 1402.6e12, 900.0, 1535.0e12, 1978.9e12,
              f"{_ML_ENG}: H100 SXM vs GH200 '900W 141GiB HBM3e'"),
    PowerPair("blackwell", "bf16", 1000.0, 1745.0e12, 1200.0, 1822.0e12, 2500e12, f"{_ML_ENG}: B200 vs GB200 (148 SMs each)"),
    PowerPair("blackwell", "fp8", 1000.0, 3432.5e12, 1200.0, 3615.6e12, 5000e12, f"{_ML_ENG}: B200 vs GB200 (148 SMs each)"),
    PowerPair("cdna3", "bf16", 750.0, 708e12, 1000.0, 843e12, 1307.4e12, f"{_AMD_MAF}: MI300X vs MI325X (1207 vs 1447 MHz median)"),
    PowerPair("cdna3", "fp16", 750.0, 654e12, 1000.0, 794e12, 1307.4e12, f"{_AMD_MAF}: MI300X vs MI325X (1115 vs 1354 MHz median)"),
    PowerPair("cdna3", "fp8", 750.0, 1273e12, 1000.0, 1519e12, 2614.9e12, f"{_AMD_MAF}: MI300X vs MI325X (1230 vs 1464 MHz median)"),
)


def _narrow(fmt: str) -> bool:
    return registry.format_bits(fmt) <= NARROW_FORMAT_BITS


def _format_class(fmt: str) -> str:
    return f"{NARROW_FORMAT_BITS}-bit and narrower formats" if _narrow(fmt) else "16-bit and wider formats"


@lru_cache(maxsize=64)
def power_exponent(generation: str, fmt: str) -> tuple[float, str]:
    """(alpha, where it comes from): the exponent of the achieved matmul rate in the board power
    for `fmt`'s class on `generation`: the median of that generation's POWER_PAIRS in the class,
    else the median over the generations that measured a pair in it."""
    pairs = [p for p in POWER_PAIRS if _narrow(p.fmt) == _narrow(fmt)]

    def of(gen: str) -> float:
        return statistics.median(p.alpha for p in pairs if p.generation == gen)

    if any(p.generation == generation for p in pairs):
        return of(generation), f"{generation}'s pair"
    gens = sorted({p.generation for p in pairs})
    return statistics.median(of(g) for g in gens), f"the median of {', '.join(gens)}"


def _peak_per_clock(acc: Accelerator, fmt: str) -> float:
    """Dense matrix FLOP per clock in `fmt` (compute units x their per-clock rate), else in bf16."""
    f = fmt if acc.has_matrix_precision(fmt) else "bf16"
    return acc.matrix_peak_flop_per_s(f) / acc.clock.si("hertz", "clock")


@lru_cache(maxsize=64)
def ratio_ceiling(generation: str, fmt: str) -> tuple[float, str]:
    """(the highest MAMF/peak measured on `generation` in `fmt`'s class, where from): the carried
    ratio never exceeds it. A part with power to spare runs its GEMMs unthrottled, and what an
    unthrottled GEMM reaches (tile and pipeline losses, the boost-clock limit) is bounded by the
    best any part of the generation measured, the high end of its power pair included; 1 (the
    peak) where the generation measured nothing."""
    from perfmodel.hardware.catalog import load_catalog

    found = [(p.high_flop_per_s / p.high_peak_flop_per_s, f"{p.generation} pair at {p.high_w:.0f} W")
             for p in POWER_PAIRS if p.generation == generation and _narrow(p.fmt) == _narrow(fmt)]
    for part in load_catalog().accelerators.values():
        # the ratio a peer carries in `fmt` (mamf_ratio's peer_ratio): its own, else its bf16 one
        own = (_own_mamf_ratio(part, fmt) or _own_mamf_ratio(part, "bf16")) if part.generation == generation else None
        if own is not None:
            found.append((own[0], part.id))
    if not found:
        return 1.0, "the peak"
    value, where = max(found)
    return min(1.0, value), f"{generation}'s best measured {value:.3g} ({where})"


def power_scaled_ratio(part: Accelerator, peer: Accelerator, ratio: float, fmt: str) -> tuple[float, str]:
    """The peer's MAMF/peak `ratio` in `fmt` carried to `part` of the same generation under the
    power rule: ratio x (clock_peer / clock_part) x (power per unit of math, part / peer)^alpha,
    where power per unit of math = tdp / (peak FLOP per clock), at most the generation's best
    measured ratio (ratio_ceiling); unscaled where either has no `tdp`. Returns (value, how)."""
    if part.tdp is None or peer.tdp is None:
        missing = part.id if part.tdp is None else peer.id
        return ratio, f"{peer.id} {ratio:.3g} (unscaled: {missing} has no tdp)"
    w_part, w_peer = part.tdp_w, peer.tdp_w
    hz_part, hz_peer = part.clock.si("hertz", "clock"), peer.clock.si("hertz", "clock")
    math_part, math_peer = _peak_per_clock(part, fmt), _peak_per_clock(peer, fmt)
    if math.isclose(math_part, math_peer, rel_tol=0.01):
        math_part = math_peer  # the same compute units: datasheet peaks rounded differently (990 vs 989.4)
    if w_part == w_peer and hz_part == hz_peer and math_part == math_peer:
        return ratio, f"{peer.id} {ratio:.3g}"
    alpha = power_exponent(part.generation, fmt)[0]
    headroom = (w_part / math_part) / (w_peer / math_peer)
    scaled = ratio * (hz_peer / hz_part) * headroom ** alpha
    ceiling, where = ratio_ceiling(part.generation, fmt)
    value = min(ceiling, scaled)
    terms = [f"{peer.id} {ratio:.3g}"]
    if hz_part != hz_peer:
        terms.append(f"({hz_peer / 1e6:.0f}/{hz_part / 1e6:.0f} MHz)")
    if math_part != math_peer:
        terms.append(f"({w_part:.0f} W per {math_part / 1e3:.4g}k FLOP/clk / {w_peer:.0f} W per {math_peer / 1e3:.4g}k)^{alpha:.3g}")
    elif w_part != w_peer:
        terms.append(f"({w_part:.0f}/{w_peer:.0f} W)^{alpha:.3g}")
    return value, " x ".join(terms) + f" = {value:.3g}" + (f" (capped at {where})" if scaled > ceiling else "")


@lru_cache(maxsize=512)
def mamf_ratio(acc: Accelerator, fmt: str) -> Derived:
    """Maximum achievable matmul rate / dense peak in matrix format `fmt`: measured, else the
    median of the same generation's measured parts under the power rule, else of the nearest
    level's parts (unscaled)."""
    own = _own_mamf_ratio(acc, fmt)
    if own is not None:
        return Derived(*own)

    def peer_ratio(p: Accelerator) -> float | None:
        r = _own_mamf_ratio(p, fmt) or _own_mamf_ratio(p, "bf16")
        return r[0] if r else None

    peers = _peers(acc)
    same_gen = [(p, r) for p in sorted(_level_peers(acc, peers, "generation"), key=lambda p: p.id)
                if (r := peer_ratio(p)) is not None]
    if same_gen:
        carried = [power_scaled_ratio(acc, p, r, fmt) for p, r in same_gen]
        med = statistics.median(v for v, _ in carried)
        listed = ", ".join(text for _, text in carried)
        if listed == ", ".join(f"{p.id} {r:.3g}" for p, r in same_gen):
            rule = ""  # equal clocks and board powers: nothing scaled
        else:
            alpha, where = power_exponent(acc.generation, fmt)
            rule = f"; power rule, alpha {alpha:.3g} for {_format_class(fmt)} from {where}"
        return Derived(med, f"fallback: MAMF/peak = median {med:.3g} of {listed} (same generation {acc.generation}{rule})")
    found = peer_median(acc, peers, peer_ratio, "MAMF/peak", levels=LEVELS[1:])
    return found or Derived(GENERIC_MAMF_RATIO, f"fallback: MAMF/peak {GENERIC_MAMF_RATIO} (no part measured one)")


def _measured_or_peers(acc: Accelerator, own: Callable[[Accelerator], float | None], field: str, measured: str,
                       what: str, fallback: Derived, levels: tuple[str, ...] = LEVELS) -> Derived:
    """The part's own calibration `field` (through `own`), else the median of its nearest peers',
    else `fallback`: the derating rule for a term that is one number per part."""
    value = own(acc)
    if value is not None:
        return Derived(value, f"measured: {measured} ({getattr(acc.calibration, field).source})")
    return peer_median(acc, _peers(acc), own, what, levels=levels) or fallback


def _own_in_model(acc: Accelerator) -> float | None:
    cal = acc.calibration.in_model_efficiency
    return cal.si("dimensionless", "calibration.in_model_efficiency") if cal else None


@lru_cache(maxsize=512)
def in_model_efficiency(acc: Accelerator) -> Derived:
    """Fraction of the isolated GEMM / attention rates a whole model reaches (generation only)."""
    return _measured_or_peers(acc, _own_in_model, "in_model_efficiency", "whole-model forward", "whole-model efficiency",
                              Derived(1.0, f"fallback: 1.0, no whole-model measurement in generation {acc.generation} "
                                           "(isolated-kernel rates)"), levels=("generation",))


def _own_attention_in_step(acc: Accelerator) -> float | None:
    cal = acc.calibration.attention_in_step
    return cal.si("dimensionless", "calibration.attention_in_step") if cal else None


@lru_cache(maxsize=512)
def attention_in_step(acc: Accelerator) -> Derived:
    """Fraction of the isolated fused-attention curve the kernel reaches inside a training step:
    measured on the part (kernel time in a step's trace); else the part's own whole-model
    efficiency, where it measured one (a whole-step solve spreads one factor over GEMMs and
    attention, and the part's own figure outranks a peer's); else its generation's in-step
    figure; else the whole-model efficiency the GEMMs take."""
    whole_cal = acc.calibration.in_model_efficiency
    if _own_attention_in_step(acc) is None and whole_cal is not None:
        return Derived(whole_cal.si("dimensionless", "calibration.in_model_efficiency"),
                       "measured: the part's whole-model efficiency, GEMMs and attention together "
                       f"({whole_cal.source}; no attention measured inside a step on this part)")
    whole = in_model_efficiency(acc)
    return _measured_or_peers(acc, _own_attention_in_step, "attention_in_step", "attention kernel time in a step",
                              "attention in-step efficiency",
                              Derived(whole.value, f"fallback: the whole-model efficiency {whole.value:.3g} "
                                                   "(no attention measured inside a step in the generation)"),
                              levels=("generation",))


def _own_hbm_ratio(acc: Accelerator) -> float | None:
    cal = acc.calibration.hbm_achieved
    return cal.si("bytes_per_s", "calibration.hbm_achieved") / acc.hbm_Bps if cal else None


@lru_cache(maxsize=512)
def hbm_ratio(acc: Accelerator) -> Derived:
    """Achieved streaming bandwidth / datasheet HBM bandwidth."""
    return _measured_or_peers(acc, _own_hbm_ratio, "hbm_achieved", "streaming bandwidth", "achieved/datasheet HBM bandwidth",
                              Derived(1.0, "fallback: the datasheet bandwidth (no part measured one)"))


def _own_launch(acc: Accelerator) -> float | None:
    cal = acc.calibration.kernel_launch
    return cal.si("seconds", "calibration.kernel_launch") if cal else None


@lru_cache(maxsize=512)
def kernel_launch_s(acc: Accelerator) -> Derived:
    """Back-to-back kernel launch gap, seconds."""
    return _measured_or_peers(acc, _own_launch, "kernel_launch", "launch gap", "launch gap (s)",
                              Derived(DEFAULT_LAUNCH_S, f"fallback: {DEFAULT_LAUNCH_S * 1e6:.3g} us (A100 fit)"))


def _own_best_mfu(acc: Accelerator) -> float | None:
    b = acc.best_published_mfu
    return b.si("dimensionless", "best_published_mfu") if b else None


@lru_cache(maxsize=512)
def best_published_mfu(acc: Accelerator) -> tuple[float, str] | None:
    """(the highest MFU a published run reached on this generation, its source), else the
    highest on any accelerator; None when the catalogue has none."""
    if acc.best_published_mfu is not None:
        src = acc.best_published_mfu.source
        return _own_best_mfu(acc), f"{acc.id}: {acc.references.get(src, src)}"  # type: ignore[return-value]
    peers = _peers(acc)
    for level in ("generation", "any accelerator"):
        vals = [(v, p) for p in _level_peers(acc, peers, level) if (v := _own_best_mfu(p)) is not None]
        if vals:
            v, p = max(vals, key=lambda x: x[0])
            src = p.best_published_mfu.source  # type: ignore[union-attr]
            where = f"generation {acc.generation}" if level == "generation" else f"any accelerator ({p.generation})"
            return v, f"{where}: {p.references.get(src, src)}"
    return None


def _attention_provenance(acc: Accelerator) -> str | None:
    from perfmodel.hardware.attention import attention_curve  # it reads this module's MAMF rule

    curve = attention_curve(acc)
    return curve.provenance if curve is not None else None


def accelerator_provenance(acc: Accelerator, precision: str) -> dict[str, str]:
    """Per cost term of an accelerator: 'measured: ...' or 'fallback: ...'."""
    cal = acc.calibration
    fmt = registry.matrix_format(precision)
    out = {
        "gemm_rate": mamf_ratio(acc, fmt).provenance,
        "in_model_efficiency": in_model_efficiency(acc).provenance,
        "attention_rate": (_attention_provenance(acc)
                           or "fallback: 0.60 x the GEMM rate (FA2 / MAMF on A100 at head_dim 64)"),
        "hbm_bandwidth": hbm_ratio(acc).provenance,
        "elementwise_bandwidth": (f"measured: typical memory-bound ops ({cal.elementwise_achieved.source})"
                                  if cal.elementwise_achieved else "fallback: the HBM streaming bandwidth"),
        "kernel_launch": kernel_launch_s(acc).provenance,
        "gemm_fixed_time": (f"stated: {cal.gemm_fixed.source}" if cal.gemm_fixed
                            else f"measured: fit to {len(cal.gemm_shapes)} GEMM shapes" if cal.gemm_shapes
                            else "fallback: 10 us per GEMM (A100 fit)"),
        "optimizer_step": (f"measured: per-parameter step ({cal.optimizer_step_per_param.source})"
                           if cal.optimizer_step_per_param else "fallback: optimizer bytes through HBM"),
    }
    # attention's in-step fraction is a term of its own only where the part or its generation
    # measured one; elsewhere it is the whole-model efficiency above
    step = attention_in_step(acc)
    if _own_attention_in_step(acc) is not None or step.provenance.startswith("fallback: attention in-step"):
        out["attention_in_step"] = step.provenance
    return out


__all__ = [
    "POWER_PAIRS",
    "Derived",
    "PowerPair",
    "accelerator_provenance",
    "attention_in_step",
    "best_published_mfu",
    "estimate_context",
    "hbm_ratio",
    "in_model_efficiency",
    "kernel_launch_s",
    "mamf_ratio",
    "peer_median",
    "power_exponent",
    "power_scaled_ratio",
    "system_provenance",
]


def system_provenance(system: System, precision: str) -> dict[str, str]:
    """accelerator_provenance plus the collectives: measured bus-bandwidth curves or efficiency
    of the node's fabric and NICs, else the line rate."""
    out = accelerator_provenance(system.accelerator, precision)
    intra = system.node.intra_node
    if intra.curves:
        kinds = sorted({c.collective for c in intra.curves})
        out["scale_up_collectives"] = f"measured: {system.node.id} bus-bandwidth curves ({', '.join(kinds)})"
    elif intra.collective_efficiency is not None:
        out["scale_up_collectives"] = f"measured: {system.node.id} collective efficiency ({intra.collective_efficiency.source})"
    else:
        out["scale_up_collectives"] = "fallback: the fabric's line rate"
    nics = system.node.nics
    if system.num_nodes > 1:
        out["scale_out_collectives"] = (f"measured: NIC collective efficiency ({nics.collective_efficiency.source})"
                                        if nics and nics.collective_efficiency else "fallback: the NICs' line rate")
    return out


def estimate_context(system: System, precision: str) -> dict[str, object]:
    """The Estimate fields that say where its numbers come from (provenance per cost term)
    and what they are judged against (the best published MFU of the generation)."""
    best = best_published_mfu(system.accelerator)
    return {"provenance": system_provenance(system, precision),
            "best_published_mfu": best[0] if best else None,
            "best_published_mfu_source": best[1] if best else ""}
