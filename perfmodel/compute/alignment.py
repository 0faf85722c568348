"""GEMM operand alignment: the tensor cores' full rate needs every GEMM dimension to be a multiple
of the generation's alignment.

The multiple is TENSOR_CORE_ALIGNMENT_BYTES over the element's width: 128 B on A100, 64 bf16
elements; 16 B elsewhere, 8 bf16 elements, the V100 rule and TMA's stride rule on Hopper /
Blackwell. A GEMM with a dimension off it runs at MISALIGNED_GEMM_RATIO of its rate: Bekman's
swiglu-maf-bench on H100 (ml-engineering training/performance 'SwiGLU-based MLP' @ 744d01e,
h 4096): d_ff 10922 (a multiple of 2) 272.73 TFLOP/s against 398.38 at 10944 (of 64), 0.685, while
d_ff 10848 / 10880 / 10912 / 11008 (multiples of 32 or 64) read 395-396.
The same ratio is charged however far a dimension is from the rule (one measured point). BLOOM's
prequel runs check it out of sample: hidden 14400 at tp 8 (1800 per rank, a multiple of 8 but
not 64) logged 94.39 TFLOP/s where 13824 (1728 = 27 x 64) logged 120.05 on the same 40 A100
nodes and layout (bigscience tr11 chronicles-prequel.md 'tile and wave quantization'). The
token dimension of a grouped (MoE) GEMM is padded to its tile already, so only its weight
dimensions are checked. CPUs, TPUs and other vendors' parts have no rule here.

compute/ops.gemm_cost and grouped_gemm_cost read alignment_factor; ops.misaligned_gemms names the
GEMMs it charges for the estimate's message.
"""

from __future__ import annotations

import math

from perfmodel import precision as registry
from perfmodel.hardware.specs import Accelerator

# Bytes every GEMM dimension must be a multiple of for the tensor cores' full rate (module docstring):
# NVIDIA's Tensor Core requirements as Anthony et al. 2024 ('The Case for Co-Designing Model Architectures
# with Hardware', arXiv 2401.14489, §tile quantization) quote them: 16 B on V100, 128 B on A100; 16 B for
# the other GPU generations (Hopper / Blackwell TMA strides are multiples of 16 B)
TENSOR_CORE_ALIGNMENT_BYTES: dict[str, int] = {"ampere": 128}
GPU_DEFAULT_ALIGNMENT_BYTES = 16
MISALIGNED_GEMM_RATIO = 272.73 / 398.38  # H100 swiglu-maf-bench, d_ff 10922 against 10944 (module docstring)


def alignment_bytes(acc: Accelerator) -> int:
    """Bytes every GEMM dimension must be a multiple of on `acc` (TENSOR_CORE_ALIGNMENT_BYTES; 0 where
    no rule applies: CPUs, TPUs, other vendors' parts)."""
    if acc.kind != "gpu" or acc.vendor.lower() != "nvidia":
        return 0
    return TENSOR_CORE_ALIGNMENT_BYTES.get(acc.generation, GPU_DEFAULT_ALIGNMENT_BYTES)


def alignment_elements(acc: Accelerator, precision: str) -> int:
    """Elements every GEMM dimension must be a multiple of for the tensor cores' full rate on `acc`
    in `precision` (TENSOR_CORE_ALIGNMENT_BYTES over the element's width: 8 bf16, 16 fp8 / fp6, 32 fp4
    elements per 16 B); 1 where no rule applies (CPUs, TPUs, other vendors' parts)."""
    align = alignment_bytes(acc)
    if align == 0:
        return 1
    # the element's own width, not its scales; a width that does not divide the alignment (fp6) takes
    # the largest power of two of elements that fits in it
    return 1 << max(0, math.floor(math.log2(align * 8 / registry.get(precision).bits)))


def alignment_factor(acc: Accelerator, precision: str, dims: tuple[float, ...]) -> float:
    """MISALIGNED_GEMM_RATIO when a GEMM dimension is not a multiple of alignment_elements (a
    fractional dimension, an average of routed tokens, is not checked), else 1."""
    a = alignment_elements(acc, precision)
    if a == 1:
        return 1.0
    off = any(float(d).is_integer() and int(d) % a for d in dims if d)
    return MISALIGNED_GEMM_RATIO if off else 1.0
