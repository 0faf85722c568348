"""Op -> seconds on one accelerator: GEMM, attention and memory-bound kernels.

Every function returns an `OpCost` (compute, memory, fixed seconds and which bound won), and the
engines add them up. The efficiency each one uses comes from the accelerator's calibration block
(microbenchmarks, see hardware_specs/) and falls back to a physical argument when it is absent:

GEMM   t = ((F/R)^p + (B/W)^p)^(1/p) + t0                                       [s]
       F FLOP, R the maximum achievable matmul rate (MAMF), B the bytes of A, B and C, W the
       achieved streaming bandwidth, p = 2 a soft roofline (a GEMM near the ridge point neither
       fully overlaps its loads with its math nor fully serialises them: the Azure A100 skinny
       GEMM 802816x192x768 runs 1.50 ms where max() says 0.93 ms and a sum says 1.83 ms; p = 2
       gives 1.29 ms), t0 the fixed fill/drain time of one kernel, fitted per accelerator to its
       calibration `gemm_shapes` (A100: about 10 us, from the 1024^3 and 2048^3 points).
       A CPU spec whose measured rates differ more than 2x by shape (calibration.gemm_by_shape:
       torch's generic bf16 kernel on an AVX2-only core) runs a GEMM at the measured rate of the
       shape whose weight is within 2x of its own (shape_rate_flop_per_s), else at R.
       Without a MAMF measurement of its own a part takes the derating rule of
       perfmodel.hardware.derating: the median MAMF/peak of the parts that measured it, from
       the nearest of its generation, vendor, kind or any accelerator (MI325X: MI300X's 0.511).
       A dimension off the tensor cores' alignment runs the GEMM at 0.685 of R (compute/alignment.py).
Attn   FlashAttention fwd+bwd rate measured by (head_dim, seq_len, causal), interpolated in
       log(seq_len), or the curve of a same-generation part scaled by the 16-bit MAMF ratio
       (hardware/attention.attention_curve); a head smaller than any measured one at
       d / (d + 20) of the rate relative to the measured head (a softmax share worth 20 head
       dims per score: FA2 charts, 64 against 128 is 0.88); without
       points in the generation 0.60 x R (FA2 on A100 reaches 187/271 = 0.69 of MAMF at
       head_dim 128, 162/271 = 0.60 at head_dim 64).
Memory-bound ops: t = max(B/W, F/vector peak) + launch.
SSD    Mamba-2 chunked scan: blocked matmuls of Q x N x P tiles (64-256), the tile sizes
       FlashAttention runs at, so the same fallback rate 0.60 x R; plus its bytes (inputs, fp32
       chunk states) at streaming bandwidth and one launch per Triton kernel.
RNN    fused recurrence (cuDNN on a GPU, oneDNN under ATen on a CPU): compute/recurrence.py.
Grouped GEMM (MoE experts, one kernel over G experts of m rows each): every expert's rows are
       tiled separately, so each is padded to the tile height (m_pad = ceil(m/128)·128: Hopper
       and Blackwell grouped kernels use 128-row tiles; DeepGEMM's contiguous layout aligns each
       expert's segment to that block), and each output tile pays a fixed prologue / epilogue
       worth K0 = 256 of reduction depth: t = soft_roofline(F·(1 + K0/K)/R, B/W) + t0.
       K0 is fitted to DeepGEMM's measured FP8 grouped GEMMs on H800 (README @ 55ab91f, 10 shapes:
       4-8 groups of 4096-8192 rows at 1214-1346 TFLOP/s, 1-4 groups of 256-1024 rows at
       815-1233 TFLOP/s, N x K = 4096 x 7168 and 7168 x 2048): with K0 = 256 the rates are
       reproduced within 13 % (mean 3 %); without it the K = 2048 shapes come out 13-23 % too fast.
       The backward pass is two grouped GEMMs: dgrad [m, n] x [n, k] (depth n) and wgrad
       [k, m] x [m, n], whose reduction depth is the expert's own m rows, small for
       fine-grained experts (DeepSeek-V3, Qwen3: a few hundred rows).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from perfmodel import precision as registry
from perfmodel.compute.alignment import alignment_factor
from perfmodel.compute.fp8_recipes import Fp8Recipe, gemm_cast_work, recipe_for
from perfmodel.hardware.attention import (
    FLASH1_KERNEL,
    FLASH_KERNELS,
    AttentionPt,
    attention_curve,
    check_attention_kernel,
    kernel_reference,
    length_reference,
)
from perfmodel.hardware.derating import kernel_launch_s, mamf_ratio
from perfmodel.hardware.specs import Accelerator
from perfmodel.workload.graph import Op

FLASH_FALLBACK_RATIO = 0.60  # FA2 fwd+bwd / MAMF on A100 at head_dim 64
# a smaller head than any measured one: each attention score costs its head_dim of matmul work plus a
# fixed softmax share (exp, max, rescale) worth c head dims, so the FLOP rate goes as d / (d + c). FA2
# fwd+bwd at head_dim 64 reaches 0.87-0.91 of its rate at 128 on A100 and 0.88-0.89 on H100 (causal
# and not, seq 2k-8k; the fa2 charts cited in a100-sxm4-80gb.yaml and h100-sxm5-80gb.yaml):
# (64 / (64 + c)) / (128 / (128 + c)) = 0.88 gives c = 20
ATTENTION_SOFTMAX_HEAD_DIMS = 20.0
SOFT_ROOFLINE_P = 2.0
DEFAULT_GEMM_FIXED_S = 10e-6  # A100 fit; used for accelerators without gemm_shapes
GROUPED_TILE_M = 128  # rows per tile of a grouped (MoE) GEMM, see module docstring
GROUPED_TILE_FIXED_K = 256  # per-tile prologue / epilogue in reduction-depth units (DeepGEMM fit)
# mamba_ssm's Triton SSD kernels (chunk_cumsum, chunk_state, state_passing, bmm_chunk, chunk_scan and
# their backward) move their bytes at this fraction of the GPU's streaming bandwidth. Megatron-LM PR
# #5829 (2026-07, Nemotron 3 Nano prefill on Blackwell, 2K-8K input): nsys puts the Triton SSD at
# 369 us a layer (a fused CuTe DSL kernel at 256 us), where streaming the scan's bytes at one 8K
# sequence takes 142 us on B200 (workload/ssm.ssd_bytes: 1.01 GB at 7.07 TB/s): 0.39. The Mamba-2
# paper's A100 benchmark (Dao & Gu 2024, Fig. 10: SSD level with FlashAttention-2 at 2K) allows up
# to about 0.65, so a kernel sweep could raise it. GPUs only: a CPU runs the PyTorch reference.
SSD_TRITON_BANDWIDTH = 0.39


@dataclass(frozen=True, slots=True)
class OpCost:
    compute_s: float
    memory_s: float
    fixed_s: float
    time_s: float
    bound: str  # "compute", "memory" or "latency"


def _bound(tc: float, tm: float, t0: float) -> str:
    if t0 > max(tc, tm):
        return "latency"
    return "compute" if tc >= tm else "memory"


def gemm_precision(precision: str) -> str:
    """The matrix format a GEMM runs in (perfmodel/precision.py: mxfp8 runs on the fp8 units, nvfp4 on fp4)."""
    return registry.matrix_format(precision)


@lru_cache(maxsize=256)
def gemm_rate_flop_per_s(acc: Accelerator, precision: str) -> float:
    """R: the dense matmul rate a model reaches: MAMF in `precision` x the accelerator's
    in-model efficiency (1 unless its generation measured a whole model forward). A precision
    the chip has no matrix format for is a PrecisionError naming the ones it has."""
    acc.check_precision(precision)
    return _mamf(acc, precision) * low_precision_in_model_efficiency(acc, precision)


def low_precision_in_model_efficiency(acc: Accelerator, precision: str) -> float:
    """The in-model efficiency a GEMM in `precision` keeps of its own isolated MAMF.

    The in-model efficiency e is measured (or fitted) against the 16-bit MAMF: a step runs its
    GEMMs at e x r16 of the dense peak (r = MAMF / peak). An fp8 / fp4 MAMF is already a lower
    fraction of its peak (H100 fp8 0.709 against bf16 0.803, H200 0.734, GH200 at 900 W 0.776 against
    0.838, B200 0.763 against 0.776: CALIBRATION_FACTS §1): at twice the math per cycle the chip
    meets its power limit in the isolated benchmark already (the gap shrinks where the power
    budget is larger, GH200 against H100), and a whole step runs under the same limit. Applying e
    to that MAMF again would charge the power limit twice, so the low-precision GEMM runs at
    min(r_p, e x r16) of its peak, i.e. its own MAMF times min(1, e x r16 / r_p)."""
    e = acc.in_model_efficiency
    if e >= 1.0 or registry.canonical(precision) is None or not registry.get(precision).quantized:
        return e
    # the 16-bit reference the in-model efficiency was measured against: the first the chip runs
    ref = registry.reference_16bit_format(acc.supported_precisions)
    if ref is None:
        return e
    r_low, r_ref = mamf_ratio(acc, gemm_precision(precision)).value, mamf_ratio(acc, ref).value
    return min(1.0, e * r_ref / r_low) if r_low > 0 else e


def _mamf(acc: Accelerator, precision: str) -> float:
    """MAMF: measured, or the peak x the derating rule's ratio (hardware/derating.py)."""
    prec = gemm_precision(precision)
    return acc.matrix_peak_flop_per_s(prec) * mamf_ratio(acc, prec).value


@lru_cache(maxsize=256)
def gemm_fixed_s(acc: Accelerator) -> float:
    """t0: fill/drain seconds per GEMM kernel, from the calibration shapes (least squares on
    t_measured - t_ideal over shapes whose ideal time is under 200 us; large shapes measure the
    asymptote, not t0), unless the spec states it (calibration.gemm_fixed)."""
    if acc.calibration.gemm_fixed is not None:
        return max(acc.calibration.gemm_fixed.si("seconds", "calibration.gemm_fixed"), launch_s(acc))
    pts = acc.calibration.gemm_shapes
    residuals = []
    for g in pts:
        R = _mamf(acc, g.precision)  # the shapes are isolated-kernel measurements
        flop = 2.0 * g.m * g.n * g.k
        ideal = _soft_roofline(flop / R, _gemm_bytes(g.m, g.n, g.k, 2) / acc.hbm_achieved_Bps)
        if ideal < 200e-6:
            residuals.append(flop / g.achieved_flop_per_s - ideal)
    if not residuals:
        return max(launch_s(acc), DEFAULT_GEMM_FIXED_S)
    return max(sum(residuals) / len(residuals), launch_s(acc))


@lru_cache(maxsize=256)
def launch_s(acc: Accelerator) -> float:
    return kernel_launch_s(acc).value


def _gemm_bytes(m: int, n: int, k: int, el: float) -> float:
    return (m * k + k * n + m * n) * el


def _soft_roofline(tc: float, tm: float) -> float:
    p = SOFT_ROOFLINE_P
    return (tc**p + tm**p) ** (1.0 / p)


def shape_rate_flop_per_s(acc: Accelerator, m: int, n: int, k: int, precision: str) -> float | None:
    """Where the spec says one MAMF does not describe its GEMMs (calibration.gemm_by_shape): the
    rate of a measured shape of this precision whose weight [n, k] is within 2x of this one's in
    both dimensions (the nearest in log n, log k, then log m), times the in-model efficiency as R
    is. A generic kernel's rate follows its weight operand (the data-gradient GEMM reads it
    column-wise: Zen 3 bf16, 3.4 GFLOP/s on a 256 x 256 weight, 0.86 on 2048 x 2048 whatever m),
    and no point is carried further than 2x: beyond it the MAMF path stands. Each point is a
    Linear's forward, data-gradient and weight-gradient GEMMs together (bench_gemm), so a layer's
    forward plus backward takes the measured total. None elsewhere."""
    if not acc.calibration.gemm_by_shape:
        return None
    fmt = gemm_precision(precision)
    reach = math.log(2.0) + 1e-9
    pts = [p for p in acc.calibration.gemm_shapes if p.precision == fmt
           and abs(math.log(p.n / n)) <= reach and abs(math.log(p.k / k)) <= reach]
    if not pts:
        return None
    near = min(pts, key=lambda p: (math.log(p.n / n) ** 2 + math.log(p.k / k) ** 2, abs(math.log(p.m / m))))
    return near.achieved_flop_per_s * low_precision_in_model_efficiency(acc, precision)


def misaligned_gemms(acc: Accelerator, ops: Iterable[Op]) -> list[str]:
    """'name [m x n x k]' of each distinct GEMM of `ops` that alignment_factor charges (a grouped
    GEMM by its weight dimensions), for the estimate's message."""
    out: dict[str, str] = {}
    for op in ops:
        if op.kind not in ("gemm", "bmm") or op.name in out:
            continue
        fmt = op.precision if op.grouped else op_gemm_format(acc, op.precision)
        dims = (op.n, op.k) if op.grouped else (op.m, op.n, op.k)
        if alignment_factor(acc, fmt, dims) < 1.0:
            out[op.name] = f"{op.name} [{int(op.m)} x {int(op.n)} x {int(op.k)}]"
    return list(out.values())


def gemm_cost(acc: Accelerator, m: int, n: int, k: int, precision: str, batch: int = 1,
              flop_scale: float = 1.0) -> OpCost:
    """One (batched) GEMM [m,k]x[k,n] of `batch` matrices, `flop_scale` times its FLOPs (the
    backward pass runs two GEMMs of the same size: dgrad and wgrad)."""
    R = shape_rate_flop_per_s(acc, m, n, k, precision) or gemm_rate_flop_per_s(acc, precision)
    el = registry.get(precision).gemm_operand_bytes
    R *= alignment_factor(acc, precision, (m, n, k))
    flop = 2.0 * m * n * k * batch * flop_scale
    tc = flop / R
    tm = _gemm_bytes(m, n, k, el) * batch * flop_scale / acc.hbm_achieved_Bps
    t0 = gemm_fixed_s(acc) * max(1.0, flop_scale)
    return OpCost(tc, tm, t0, _soft_roofline(tc, tm) + t0, _bound(tc, tm, t0))


def grouped_gemm_cost(acc: Accelerator, m: int, n: int, k: int, groups: int, precision: str,
                      direction: str = "fwd") -> OpCost:
    """`groups` experts, each [m, k] x [k, n], as one grouped kernel (fwd) or its dgrad and wgrad
    kernels (bwd); see the module docstring for the tile padding and K0."""
    R = gemm_rate_flop_per_s(acc, precision) * alignment_factor(acc, precision, (n, k))
    el = registry.get(precision).gemm_operand_bytes
    m_pad = -(-m // GROUPED_TILE_M) * GROUPED_TILE_M
    # (reduction depth, bytes of A, B and C per group) of each kernel
    kernels = [(k, _gemm_bytes(m_pad, n, k, el))] if direction == "fwd" else [
        (n, _gemm_bytes(m_pad, k, n, el)),  # dgrad: dY [m, n] x W^T [n, k]
        (m_pad, _gemm_bytes(k, n, m_pad, el)),  # wgrad: X^T [k, m] x dY [m, n]
    ]
    tc = tm = t = 0.0
    for depth, nbytes in kernels:
        c = 2.0 * m_pad * n * k * groups * (1.0 + GROUPED_TILE_FIXED_K / depth) / R
        b = nbytes * groups / acc.hbm_achieved_Bps
        tc, tm = tc + c, tm + b
        t += _soft_roofline(c, b) + gemm_fixed_s(acc)
    t0 = gemm_fixed_s(acc) * len(kernels)
    return OpCost(tc, tm, t0, t, _bound(tc, tm, t0))


def _curve_rate(pts: tuple[AttentionPt, ...], head_dim: int, seq_len: int, causal: bool) -> float:
    """One kernel's fwd+bwd rate at (head_dim, seq_len, causal) from its points: the nearest
    measured head, interpolated in log(seq_len); a smaller head pays the softmax share. A
    FlashAttention kernel measured at one length only (FA4 on B200: 8K) takes its fall-off below
    that length from the length reference's FA2 curve (length_factor); above it the kernel stays
    at its measured rate (NeMo's B200 long-sequence rows, 8K to 1M, show no rise with length)."""
    sel = [p for p in pts if p[1] == causal] or list(pts)
    dims = sorted({p[2] for p in sel}, key=lambda d: abs(d - head_dim))
    head = sorted((n, r) for _, _, d, n, r in sel if d == dims[0])
    rate = _interp_log(head, seq_len)
    if len({n for n, _ in head}) == 1 and seq_len < head[0][0] and sel[0][0] in (*FLASH_KERNELS, FLASH1_KERNEL):
        rate *= length_factor(causal, dims[0], seq_len, head[0][0])
    if head_dim < dims[0]:
        c = ATTENTION_SOFTMAX_HEAD_DIMS
        rate *= (head_dim / (head_dim + c)) / (dims[0] / (dims[0] + c))
    return rate


@lru_cache(maxsize=1024)
def length_factor(causal: bool, head_dim: int, seq_len: int, at_len: int) -> float:
    """rate(seq_len) / rate(at_len) of FlashAttention-2 on the length reference
    (hardware/attention.length_reference: H100 SXM5, 512 to 16K). A tile of queries pays a
    fixed prologue, softmax rescale and epilogue over a K/V loop as long as the keys it sees, so
    every FlashAttention generation loses rate the same way as the sequence (or a sliding window)
    shortens: FA3's causal forward on H100 reads 0.49 / 0.70 / 0.87 of its 8K rate at 512 / 1K /
    2K (fa3-fwd-chart), FA2's causal fwd+bwd 0.53 / 0.72 / 0.86. 1 without such a part."""
    ref = length_reference()
    curve = attention_curve(ref) if ref is not None else None
    if curve is None:
        return 1.0
    pts = tuple(p for p in curve.points if p[0] == "flash2")
    return _curve_rate(pts, head_dim, seq_len, causal) / _curve_rate(pts, head_dim, at_len, causal)


@lru_cache(maxsize=1024)
def kernel_ratio(kernel: str, head_dim: int, seq_len: int, causal: bool) -> float:
    """A kernel's rate over the FlashAttention-2 rate at the same shape, on the part that measured
    both (the A100 80GB chart's FlashAttention Triton and FlashAttention-2 bars for `flash1`): the
    kernel's maturity against FA2 carries to a part that measured only FA2. 1 for FA2-or-later."""
    ref = kernel_reference(kernel)
    if ref is None:
        return 1.0
    curve = attention_curve(ref)
    assert curve is not None  # kernel_reference returns parts with both curves
    return (_curve_rate(curve.kernel_points(kernel), head_dim, seq_len, causal)
            / _curve_rate(curve.kernel_points("flash"), head_dim, seq_len, causal))


@lru_cache(maxsize=1024)
def attention_rate_flop_per_s(acc: Accelerator, head_dim: int, seq_len: int, causal: bool, precision: str,
                              kernel: str = "flash") -> float:
    """Achieved fused-attention fwd+bwd FLOP/s (executed FLOPs: causal counted half) of the
    implementation `kernel` (flash / flash3 / flash4 / fused / flash1: AttentionCurve.kernel_points; a
    named generation the part's generation never measured is a LayoutError): the part's
    curve, or its generation's (hardware/attention.attention_curve), else a ratio of the GEMM rate;
    a kernel the curve lacks (flash1 on H100) at the FA2-class rate x kernel_ratio."""
    fmt = attention_format(acc, precision)
    curve = attention_curve(acc) if registry.format_bits(fmt) <= 16 else None
    check_attention_kernel(acc, kernel)  # a named generation (flash3 / flash4) is never costed as another
    if curve is not None:
        own = curve.kernel_points(kernel)
        if own:
            rate = _curve_rate(own, head_dim, seq_len, causal)
        else:
            rate = _curve_rate(curve.kernel_points("flash"), head_dim, seq_len, causal) * kernel_ratio(
                kernel, head_dim, seq_len, causal)
        # FlashAttention runs in bf16 under fp8 GEMM training (Transformer Engine's default); inside a
        # step at the rate measured there (calibration.attention_in_step), else the GEMMs' in-model factor
        return rate * acc.attention_in_step
    ratio = acc.calibration.attention_fallback_ratio
    r = ratio.si("dimensionless", "calibration.attention_fallback_ratio") if ratio else FLASH_FALLBACK_RATIO
    return r * gemm_rate_flop_per_s(acc, fmt) * kernel_ratio(kernel, head_dim, seq_len, causal)


def op_gemm_format(acc: Accelerator, precision: str) -> str:
    """The format a graph op's GEMM runs in: its own, except an op whose fixed precision the chip
    has no matrix format for, which runs at the chip's first 16-bit rate: an fp32 op inside a
    lower-precision step (the MoE router, hyper-connection mixing: workload/moe.py,
    hyper_connections.py) on TPUs, Gaudi 3 or MI355X as published (XLA's default dot precision on
    a TPU is one bf16 pass; no fp32 rate is published for the others), a bf16 one (DeepSeek-V4's
    index weights) on a V100, which runs it in fp16. A run whose own precision the chip lacks is
    refused before any op is costed (engines/step.prepare, the planner's Evaluator); these ops are
    a few per cent of their layer's work, so the choice moves a step by less than that."""
    own = registry.canonical(precision)
    if precision in acc.supported_precisions or own is None or registry.get(own).quantized:
        return precision
    return registry.reference_16bit_format(acc.supported_precisions) or precision


def attention_format(acc: Accelerator, precision: str) -> str:
    """The format fused attention runs in. A 16-bit run's own; under fp8 / fp4 GEMMs the first
    16-bit format the chip has (Transformer Engine keeps attention in bf16); an fp32 run's
    attention in fp32 (FlashAttention takes 16-bit inputs only: PyTorch's SDPA falls back to its
    memory-efficient kernel, on the fp32 matrix path). The measured curves are 16-bit kernels,
    so an fp32 run reads the fallback ratio of the fp32 GEMM rate instead: never faster than its
    own format's matmul, which MFU divides by."""
    own = registry.canonical(precision)
    if own in registry.ATTENTION_PRECISIONS and own in acc.supported_precisions:
        return own
    return next((p for p in registry.ATTENTION_PRECISIONS if p in acc.supported_precisions), "bf16")


def _interp_log(curve: list[tuple[int, float]], x: float) -> float:
    if x <= curve[0][0]:
        # below the smallest measured length the kernel is launch/occupancy bound: scale linearly
        return curve[0][1] * x / curve[0][0] if len(curve) > 1 else curve[0][1]
    if x >= curve[-1][0]:
        return curve[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if x0 <= x <= x1:
            f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + f * (y1 - y0)
    return curve[-1][1]


def attention_cost(acc: Accelerator, op: Op, flop_scale: float = 1.0) -> OpCost:
    """Fused attention: executed FLOPs x scale at the measured fwd+bwd rate of the op's kernel."""
    rate = attention_rate_flop_per_s(acc, op.head_dim, op.seq_kv, op.causal, op.precision, op.attention_kernel)
    tc = op.flop * flop_scale / rate
    tm = op.bytes * flop_scale / acc.hbm_achieved_Bps
    t0 = launch_s(acc) * max(1.0, flop_scale)
    return OpCost(tc, tm, t0, max(tc, tm) + t0, _bound(tc, tm, t0))


def memory_bound_cost(acc: Accelerator, flop: float, bytes_: float, kernels: int) -> OpCost:
    """Element-wise, norm, softmax, embedding, loss: streaming at achieved HBM bandwidth."""
    # typical norm / activation / softmax / cast kernels where measured (on one CPU core they
    # are compute bound and run far below STREAM), else streaming bandwidth
    tm = bytes_ / acc.elementwise_achieved_Bps
    tc = flop / acc.vector_peak_flop_per_s("fp32")
    t0 = launch_s(acc) * kernels
    return OpCost(tc, tm, t0, max(tc, tm) + t0, _bound(tc, tm, t0))


def _with_quantize(acc: Accelerator, c: OpCost, op: Op, bwd: bool, recipe: Fp8Recipe, fused: bool = False) -> OpCost:
    """fp8 / fp4 GEMMs pay the quantize casts of their recipe (perfmodel/compute/fp8_recipes.py:
    bytes per element, an amax pass where the scale needs one, NVFP4's Hadamard transform);
    `fused`: Transformer Engine's fused casts (norm-fused input, weights cast once, cast-transpose)."""
    work = gemm_cast_work(recipe, op.m, op.n, op.k, op.batch * op.repeat, bwd, fused, op.norm_input,
                          acc.fp8_any_layout)
    cast = memory_bound_cost(acc, work.flop, work.bytes, work.kernels)
    return OpCost(c.compute_s, c.memory_s + cast.memory_s, c.fixed_s + cast.fixed_s, c.time_s + cast.time_s, c.bound)


def ssd_cost(acc: Accelerator, op: Op, flop_scale: float = 1.0, bytes_scale: float = 1.0, kernels: int = 1) -> OpCost:
    """Mamba-2 SSD scan: its matmul FLOPs at FLASH_FALLBACK_RATIO x R, its bytes streamed (on a GPU
    at SSD_TRITON_BANDWIDTH of the streaming rate, as mamba_ssm's Triton kernels move them)."""
    # the scan runs in bf16, else the next format the chip has (fp16 on V100, fp32 on a CPU)
    fmt = next((p for p in registry.ATTENTION_PRECISIONS if p in acc.supported_precisions), "bf16")
    tc = op.flop * flop_scale / (FLASH_FALLBACK_RATIO * gemm_rate_flop_per_s(acc, fmt))
    tm = op.bytes * bytes_scale / (acc.hbm_achieved_Bps * (SSD_TRITON_BANDWIDTH if acc.kind == "gpu" else 1.0))
    t0 = launch_s(acc) * kernels
    return OpCost(tc, tm, t0, max(tc, tm) + t0, _bound(tc, tm, t0))


def op_cost(acc: Accelerator, op: Op, direction: str = "fwd", fp8_recipe: str | None = None,
            fused_casts: bool = False) -> OpCost:
    """Seconds of one op instance (all its `batch` and `repeat`) in `direction` fwd or bwd;
    `fp8_recipe` names the scaling recipe of fp8 / fp4 GEMMs (default: the precision's);
    `fused_casts` their casts fused as Transformer Engine does (compute/fp8_recipes.py)."""
    bwd = direction == "bwd"
    if op.grouped:
        c = grouped_gemm_cost(acc, op.m, op.n, op.k, op.batch * op.repeat, op.precision, direction)
        recipe = recipe_for(op.precision, fp8_recipe)
        return _with_quantize(acc, c, op, bwd, recipe, fused_casts) if recipe is not None else c
    if op.kind in ("gemm", "bmm"):
        scale = op.bwd_flop_factor if bwd else 1.0
        if op.kind == "gemm" and bwd and not op.has_weight_grad:
            scale = 1.0
        c = gemm_cost(acc, op.m, op.n, op.k, op_gemm_format(acc, op.precision), op.batch * op.repeat, scale)
        recipe = recipe_for(op.precision, fp8_recipe) if op.kind == "gemm" else None
        if recipe is not None:
            c = _with_quantize(acc, c, op, bwd, recipe, fused_casts)
        return c
    if op.kind == "attention":
        return attention_cost(acc, op, op.bwd_flop_factor if bwd else 1.0)
    if op.kind == "ssd":
        return ssd_cost(acc, op, op.bwd_flop_factor if bwd else 1.0, op.bwd_bytes_factor if bwd else 1.0,
                        op.bwd_kernels if bwd else op.kernels)
    if op.kind == "recurrence":
        from perfmodel.compute.recurrence import recurrence_cost  # it builds on this module's GEMM costs

        return recurrence_cost(acc, op, bwd)
    flop = op.flop * (op.bwd_flop_factor if bwd else 1.0)
    bytes_ = op.bytes * (op.bwd_bytes_factor if bwd else 1.0)
    kernels = op.bwd_kernels if bwd else op.kernels
    if bwd and op.bwd_bytes_factor == 0 and op.bwd_flop_factor == 0:
        kernels = 0
    return memory_bound_cost(acc, flop, bytes_, kernels)
