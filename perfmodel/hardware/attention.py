"""The fused-attention rate of a part, as a curve: (kernel, causal, head_dim, seq_len) -> fwd+bwd
FLOP/s, measured on the part or carried from its generation (the derating rule of
hardware/derating.py, for a curve instead of a ratio). A part without
FlashAttention points of its own takes the curve of a part of its generation that has them (the
same kernels on the same tensor cores), scaled by the ratio of their 16-bit MAMFs: an H100 run at
500 W or an H200 runs H100 SXM5's FA2 curve, a GB200 / B300 / GB300 B200's FA4 points. Forward and
backward points measured separately (FA4 on B200) combine into one fwd+bwd rate at the
FlashAttention FLOP convention (backward 2.5x forward): r = 3.5 / (1/r_fwd + 2.5/r_bwd). A
generation without any attention measurement keeps the ratio fallback of compute/ops. Which
kernel's points an implementation reads: AttentionCurve.kernel_points. A curve measured at one
sequence length (B200's FA4 at 8K) takes its length dependence from length_reference's FA2
curve (compute/ops.length_factor), so a short sequence or a sliding window is not costed at the
8K rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from perfmodel import precision as registry
from perfmodel.hardware.derating import _level_peers, _peers, mamf_ratio
from perfmodel.hardware.specs import Accelerator

ATTENTION_BWD_FLOP_FACTOR = 2.5  # FlashAttention's FLOP convention (specs.AttentionPoint docstring)
AttentionPt = tuple[str, bool, int, int, float]  # (kernel, causal, head_dim, seq_len, fwd+bwd FLOP/s)
# FlashAttention generations, oldest first: the kernel an attention implementation reads
# (compute/ops.attention_rate_flop_per_s) is picked from these by name
FLASH_KERNELS = ("flash2", "flash3", "flash4")
# the kernel whose points `flash1` (a FlashAttention-1-era kernel) reads: the 2022-23 Triton
# FlashAttention, measured beside FA2 in the FA2 README's A100 chart; flash-attn 1.x CUDA reads
# within 0.85-1.2 of it there (FlashAttention bars)
FLASH1_KERNEL = "triton"
# cuDNN's fused attention (the FusedAttention backend Transformer Engine prefers on sm90+, llm.c's
# USE_CUDNN path, XLA's GPU attention): the kernel `fused` reads where its generation measured it
# (Hopper: the FA3 paper's cuDNN bars on H100, 0.88 of FA3 at 8K causal fwd+bwd); elsewhere the
# newest FlashAttention generation stands in for it, an upper bound (FA4's paper puts cuDNN 9.13
# up to 1.3x below FA4 on B200; NVIDIA's cudnn-frontend publishes Blackwell SDPA sweeps, left out:
# docs/DESIGN.md, attention kernels)
CUDNN_KERNEL = "cudnn"
# the implementations that name one FlashAttention generation; each reads the points of the kernel of
# its own name, and no other generation's curve stands in for them (FA3 is Hopper's warp-specialised
# kernel, FA4 Blackwell's; a chip whose generation never measured one is refused, check_attention_kernel)
NAMED_GENERATIONS = ("flash3", "flash4")


@dataclass(frozen=True, slots=True)
class AttentionCurve:
    """Fused-attention fwd+bwd rates by (kernel, causal, head_dim, seq_len), and where they come from."""

    points: tuple[AttentionPt, ...]
    provenance: str

    def kernel_points(self, impl: str) -> tuple[AttentionPt, ...]:
        """The points of the kernel an attention implementation runs: `fused` cuDNN's where
        measured (CUDNN_KERNEL), else the newest FlashAttention generation measured, `flash`
        FlashAttention-2 where measured, else the newest (Blackwell measured FA4 only), `flash1` the
        FLASH1_KERNEL points (empty where not measured: compute/ops.kernel_ratio carries its ratio),
        `flash3` / `flash4` that generation's own points (empty where not measured: refused, see
        check_attention_kernel). Points of other kernels (a CPU's sdpa) serve flash and fused."""
        if impl == "flash1":
            return tuple(p for p in self.points if p[0] == FLASH1_KERNEL)
        if impl in NAMED_GENERATIONS:
            return tuple(p for p in self.points if p[0] == impl)
        if impl == "fused" and self.has(CUDNN_KERNEL):
            return tuple(p for p in self.points if p[0] == CUDNN_KERNEL)
        newest = self.newest_flash()
        if newest is None:
            return tuple(p for p in self.points if p[0] not in (FLASH1_KERNEL, CUDNN_KERNEL))
        pick = newest if impl == "fused" or not self.has("flash2") else "flash2"
        return tuple(p for p in self.points if p[0] == pick)

    def has(self, kernel: str) -> bool:
        return any(p[0] == kernel for p in self.points)

    def newest_flash(self) -> str | None:
        """The newest FlashAttention generation with points on this curve, or None."""
        known = [k for k in FLASH_KERNELS if self.has(k)]
        return known[-1] if known else None


def _own_attention_points(acc: Accelerator) -> tuple[AttentionPt, ...]:
    """The part's fwd+bwd points, plus:
    - one per (kernel, source, causal, head_dim, seq_len) measured only as a forward and a
      backward: 1 + b FLOPs over the two times, b = ATTENTION_BWD_FLOP_FACTOR;
    - a causal point where a kernel has a non-causal fwd+bwd point but no causal one: the
      non-causal rate times the kernel's own causal / non-causal forward ratio at that head and
      length, from a source that measured both (FA3 on H100: backward published non-causal only)."""
    pts = acc.calibration.attention
    out: dict[tuple[str, bool, int, int], float] = {
        (p.kernel, p.causal, p.head_dim, p.seq_len): p.achieved_flop_per_s for p in pts if p.direction == "fwd_bwd"}
    fwd = {(p.kernel, p.source, p.causal, p.head_dim, p.seq_len): p.achieved_flop_per_s for p in pts if p.direction == "fwd"}
    bwd = {(p.kernel, p.source, p.causal, p.head_dim, p.seq_len): p.achieved_flop_per_s for p in pts if p.direction == "bwd"}
    b = ATTENTION_BWD_FLOP_FACTOR
    for k in sorted(fwd.keys() & bwd.keys()):
        out.setdefault((k[0], *k[2:]), (1.0 + b) / (1.0 / fwd[k] + b / bwd[k]))
    for (kern, causal, d, n), r in sorted(out.items()):
        if causal or (kern, True, d, n) in out:
            continue
        ratios = sorted(fwd[(kern, src, True, d, n)] / fwd[(kern, src, False, d, n)]
                        for (k2, src, c2, d2, n2) in fwd if (k2, c2, d2, n2) == (kern, True, d, n)
                        and (kern, src, False, d, n) in fwd)
        if ratios:
            out[(kern, True, d, n)] = r * ratios[0]
    return tuple((*k, v) for k, v in sorted(out.items()))


@lru_cache(maxsize=8)
def kernel_reference(impl: str) -> Accelerator | None:
    """The first catalogue part (by id) that measured both the kernel `impl` reads and
    FlashAttention-2, whose ratio carries to other parts; None for FA2-or-later kernels."""
    from perfmodel.hardware.catalog import load_catalog

    if impl != "flash1":
        return None
    for _, acc in sorted(load_catalog().accelerators.items()):
        pts = _own_attention_points(acc)
        if any(p[0] == FLASH1_KERNEL for p in pts) and any(p[0] == "flash2" for p in pts):
            return acc
    return None


@lru_cache(maxsize=1)
def length_reference() -> Accelerator | None:
    """The GPU with the fastest 16-bit tensor cores (MAMF) among those whose FlashAttention-2
    points span several sequence lengths: the part that gives a curve measured at one length
    (Blackwell's FA4 at 8K) its length dependence. The fixed cost per query tile weighs more the
    faster the matmuls, so the fastest measured part is the nearest to the parts it serves."""
    from perfmodel.hardware.catalog import load_catalog

    best: tuple[float, str] | None = None
    parts = load_catalog().accelerators
    for pid, acc in sorted(parts.items()):
        mamf = mamf16_flop_per_s(acc)
        if acc.kind != "gpu" or mamf is None or len({p[3] for p in _own_attention_points(acc) if p[0] == "flash2"}) < 2:
            continue
        if best is None or mamf > best[0]:
            best = (mamf, pid)
    return parts[best[1]] if best else None


def _kernel_counts(pts: tuple[AttentionPt, ...]) -> str:
    """'flash2 24, flash3 7': the kernels of a curve and their point counts."""
    kernels = sorted({p[0] for p in pts})
    return ", ".join(f"{k} {sum(p[0] == k for p in pts)}" for k in kernels)


def mamf16_flop_per_s(acc: Accelerator) -> float | None:
    """The part's maximum achievable 16-bit matmul rate (bf16, else fp16), or None without one."""
    fmt = registry.reference_16bit_format(acc.supported_precisions)
    return acc.matrix_peak_flop_per_s(fmt) * mamf_ratio(acc, fmt).value if fmt else None


@lru_cache(maxsize=512)
def attention_curve(acc: Accelerator) -> AttentionCurve | None:
    """The part's own attention points, else the curve of the same-generation peer with points
    whose 16-bit MAMF is nearest, times mamf16(part) / mamf16(peer); None when no part of the
    generation measured attention."""
    own = _own_attention_points(acc)
    if own:
        srcs = sorted({p.source for p in acc.calibration.attention})
        return AttentionCurve(own, f"measured: fused-attention fwd+bwd points {_kernel_counts(own)} ({', '.join(srcs)})")
    mine = mamf16_flop_per_s(acc)
    if mine is None:
        return None
    cands = []
    for p in _level_peers(acc, _peers(acc), "generation"):
        theirs, pts = mamf16_flop_per_s(p), _own_attention_points(p)
        if pts and theirs:
            cands.append((abs(math.log(mine / theirs)), p.id, theirs, pts))
    if not cands:
        return None
    _, peer, theirs, pts = min(cands)
    scale = mine / theirs
    return AttentionCurve(tuple((k, c, d, n, r * scale) for k, c, d, n, r in pts),
                          f"fallback: {peer}'s fused-attention curve ({_kernel_counts(pts)}) x 16-bit MAMF ratio {scale:.3g} "
                          f"(same generation {acc.generation})")


def attention_kernels(acc: Accelerator) -> list[str]:
    """The attention implementations a plan may name on `acc` (workload/graph.ATTENTION_IMPLS):
    every one but a FlashAttention generation (NAMED_GENERATIONS) neither the part nor its
    generation measured, those last."""
    from perfmodel.workload.graph import ATTENTION_IMPLS

    curve = attention_curve(acc)
    return ([k for k in ATTENTION_IMPLS if k not in NAMED_GENERATIONS]
            + [k for k in NAMED_GENERATIONS if curve is not None and curve.has(k)])


def check_attention_kernel(acc: Accelerator, impl: str) -> None:
    """Raise LayoutError when `impl` names a FlashAttention generation (NAMED_GENERATIONS) that
    neither this part nor a part of its generation measured: FA3 on an A100, FA4 on an H100 or a
    CPU would otherwise be costed at another kernel's rate."""
    if impl not in NAMED_GENERATIONS:
        return
    curve = attention_curve(acc)
    if curve is not None and curve.has(impl):
        return
    from perfmodel.errors import LayoutError

    have = sorted({p[0] for p in curve.points}) if curve is not None else []
    where = sorted(pid for pid, part in _catalog_parts().items() if any(p[0] == impl for p in _own_attention_points(part)))
    raise LayoutError(
        f"attention {impl}: no {impl} rate is measured on {acc.name} ({acc.id}) or its generation "
        f"({acc.generation}; its curve has {', '.join(have) or 'no fused-attention points'}); {impl} is measured on "
        f"{', '.join(where) or 'no catalogue part'} and the parts of its generation. Allowed on this part: "
        f"{', '.join(attention_kernels(acc))}")


def _catalog_parts() -> dict[str, Accelerator]:
    from perfmodel.hardware.catalog import load_catalog

    return load_catalog().accelerators


__all__ = [
    "ATTENTION_BWD_FLOP_FACTOR",
    "CUDNN_KERNEL",
    "FLASH1_KERNEL",
    "FLASH_KERNELS",
    "NAMED_GENERATIONS",
    "AttentionCurve",
    "AttentionPt",
    "attention_curve",
    "attention_kernels",
    "check_attention_kernel",
    "kernel_reference",
    "length_reference",
    "mamf16_flop_per_s",
]
