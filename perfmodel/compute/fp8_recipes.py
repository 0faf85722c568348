"""Low-precision training recipes: how each one scales its tensors, and the casts and amax
reductions that implies for one GEMM.

A GEMM in fp8 / fp4 needs its bf16 operands quantized first. Per operand element the cast
kernel reads 2 B (bf16) and writes the quantized element plus its share of the scales; a recipe
that needs the tensor's amax before it can choose the scale reads the bf16 tensor once more in
a separate reduction kernel. Per GEMM, as Transformer Engine's Linear does it: forward the input
activation [m, k] and the weight [k, n]; backward the output gradient [m, n] twice (a row-wise
and a column-wise copy for dgrad and wgrad) and the input again, column-wise, for wgrad.

The recipes themselves (element and scale bytes, amax pass, Hadamard transform, with their
Transformer Engine sources) and which precision each runs are in perfmodel/precision.py.

Fused casts (Transformer Engine's Linear / LayerNormLinear, what Megatron-Core and NeMo /
Megatron-Bridge run; `fused=True`), per GEMM and micro-batch:
  input   after a norm (QKV, FC1: LayerNormLinear) the norm kernel writes the quantized output
          itself (layernorm_linear.py `with_quantized_norm`): no cast kernel, only the second
          (column-wise, for wgrad) 1 B copy; any other input one cast reading 2 B and writing the
          row- and column-wise copies (linear.py `input_quantizer.set_usage(rowwise=True,
          columnwise=backward_needs_input)`), so the backward does not cast the input again
  weight  cast on the first micro-batch only and reused (linear.py `update_ws =
          is_first_microbatch is None or is_first_microbatch`); Megatron-Bridge's fp8 recipes keep
          the parameters in fp8 (mixed_precision.py `fp8_param_gather = True`): none per micro-batch
  dgrad   the output gradient cast once into both copies: read 2 B, write 2 x 1 B (cast-transpose)
  amax    a recipe with an amax pass still reads each cast tensor once more (not the norm-fused one)
(TransformerEngine @ d0067d0, transformer_engine/pytorch/module/{linear,layernorm_linear}.py.)

Chips that run fp8 GEMMs in any operand layout (Blackwell: `Accelerator.fp8_any_layout`) need no
column-wise copy under a per-tensor recipe (delayed, current): one scale serves the tensor and its
transpose, so TE's Float8Quantizer / Float8CurrentScalingQuantizer write the row-wise data only
(csrc/quantizer.cpp: `with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported`;
utils.is_non_tn_fp8_gemm_supported: compute capability 10.x-11.x and 13+). Per fused GEMM that
drops the second 1 B copy: the input cast writes one copy, a norm-fused input costs nothing extra,
the output gradient's cast writes one copy. Block-scaled recipes (blockwise, mxfp8, nvfp4) scale
along the reduction axis, so the transposed operand still needs its own quantized copy.

Amax all-reduces across ranks (Transformer Engine, transformer_engine/pytorch/quantization.py and
module/linear.py; Megatron-Core fp8_utils.get_fp8_context), charged as latency-bound all-reduces
through comm/collectives.py (`amax_allreduce_s`):
  delayed    FP8GlobalStateManager.reduce_and_update_fp8_tensors: at the exit of the outermost
             fp8_autocast region (Megatron-Core: one around each TransformerBlock forward, i.e. per
             model chunk and micro-batch) one all-reduce (MAX) of the concatenated fp32 amaxes of
             every fp8 tensor the region touched, 3 per GEMM (input, weight, output); and one in the
             backward, 2 per GEMM (grad output, grad input). Group: Megatron's amax reduction group,
             tp x cp x dp (get_amax_reduction_group(with_context_parallel=True)).
  current,   the per-tensor scale needs the whole tensor's amax: a column-parallel GEMM whose
  nvfp4      sequence-parallel input is all-gathered (in fp8) all-reduces its input's amax over tp
             in the forward, a row-parallel GEMM its output gradient's amax in the backward; one
             fp32 each (set_quantizer_amax_reduction_group(..., tp_group) in _Linear).
  blockwise, scales are per block, inside the cast: no cross-rank reduction.
  mxfp8
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel import precision as registry
from perfmodel.comm.collectives import collective_time_s
from perfmodel.hardware.system import System
from perfmodel.precision import BF16_BYTES, RECIPES, Fp8Recipe

AMAX_BYTES = 4.0  # one fp32 amax per tensor
DELAYED_AMAX_PER_GEMM = {"fwd": 3, "bwd": 2}  # TE fp8_meta: input, weight, output / grad output, grad input
HADAMARD_BLOCK = 16  # NVFP4's random Hadamard transform: 16 x 16 blocks on the wgrad operands


def recipe_for(precision: str, name: str | None = None) -> Fp8Recipe | None:
    """The recipe a GEMM in `precision` runs under: `name` when it runs that precision, else the
    precision's default (its first recipe in perfmodel/precision.py); None for 16/32-bit GEMMs
    (the plan may still name a recipe for its fp8 GEMMs)."""
    recipes = registry.get(precision).recipes
    if not recipes:
        return None
    return RECIPES[name if name in recipes else recipes[0]]


@dataclass(frozen=True)
class CastWork:
    bytes: float
    kernels: int
    flop: float


def gemm_cast_work(recipe: Fp8Recipe, m: int, n: int, k: int, batch: int, bwd: bool, fused: bool = False,
                   norm_input: bool = False, any_layout: bool = False) -> CastWork:
    """Bytes, kernels and FLOPs of the quantize casts one GEMM [m,k]x[k,n] (x batch) needs in
    the forward (input and weight) or backward (output gradient twice, input again). `fused`:
    Transformer Engine's fused casts (module docstring); `norm_input`: the GEMM's input comes
    straight from a norm (LayerNormLinear), which writes it quantized; `any_layout`: the chip runs
    fp8 GEMMs in any layout, so a per-tensor recipe's fused casts write one copy (module docstring)."""
    # a 16-point Hadamard transform: a 16 x 16 matrix times each 16-element vector = 2 x 16 FLOP per element
    wgrad_operands = (m * n + m * k) * batch if bwd else 0
    flop = 2.0 * HADAMARD_BLOCK * wgrad_operands if recipe.hadamard_on_wgrad else 0.0
    if fused:
        # quantized copies per element: row- and column-wise, or one where it serves both (docstring)
        copies = 1 if any_layout and recipe.per_tensor_scale else 2
        copy_bytes = recipe.element_bytes + recipe.scale_bytes_per_element
        cast = BF16_BYTES + copies * copy_bytes  # read the bf16 tensor, write its copies
        amax = BF16_BYTES if recipe.amax_pass else 0.0
        extra_kernel = 1 if recipe.amax_pass else 0
        if bwd:  # output gradient, cast-transpose; the input's column-wise copy came from the forward
            return CastWork((cast + amax) * m * n * batch, 1 + extra_kernel, flop)
        if norm_input:  # the norm writes the row-wise copy; any further copy is the cast's extra work
            return CastWork((copies - 1) * copy_bytes * m * k * batch, 0, flop)
        return CastWork((cast + amax) * m * k * batch, 1 + extra_kernel, flop)
    if bwd:
        elems = (2 * m * n + m * k) * batch
        casts = 3
    else:
        elems = m * k * batch + k * n
        casts = 2
    return CastWork(recipe.cast_bytes_per_element * elems, casts * recipe.kernels_per_cast, flop)


def amax_allreduce_s(system: System, nbytes: float, degree: int, stride: int = 1) -> float:
    """Seconds of one amax all-reduce of `nbytes` over `degree` ranks `stride` apart: a few bytes,
    so the collective's latency terms (comm/collectives.py alpha) are what it costs; 0 on one rank."""
    if degree <= 1:
        return 0.0
    return collective_time_s(system, "all_reduce", nbytes, degree, stride)


def delayed_amax_bytes(fp8_gemms: float, direction: str) -> float:
    """Bytes of delayed scaling's concatenated amax buffer for a region holding `fp8_gemms` GEMMs:
    3 fp32 amaxes per GEMM in the forward, 2 in the backward (TE fp8_meta)."""
    return AMAX_BYTES * DELAYED_AMAX_PER_GEMM[direction] * fp8_gemms


__all__ = ["AMAX_BYTES", "RECIPES", "CastWork", "Fp8Recipe", "amax_allreduce_s", "delayed_amax_bytes", "gemm_cast_work",
           "recipe_for"]
