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

The amax all-reduce across ranks (delayed: the amax reduction group once per step; current and
nvfp4: the tensor-parallel group for sequence-parallel inputs) moves a few bytes per tensor and
is not charged here.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel import precision as registry
from perfmodel.precision import RECIPES, Fp8Recipe

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


def gemm_cast_work(recipe: Fp8Recipe, m: int, n: int, k: int, batch: int, bwd: bool) -> CastWork:
    """Bytes, kernels and FLOPs of the quantize casts one GEMM [m,k]x[k,n] (x batch) needs in
    the forward (input and weight) or backward (output gradient twice, input again)."""
    if bwd:
        elems = (2 * m * n + m * k) * batch
        wgrad_operands = (m * n + m * k) * batch
        casts = 3
    else:
        elems = m * k * batch + k * n
        wgrad_operands = 0
        casts = 2
    # a 16-point Hadamard transform: a 16 x 16 matrix times each 16-element vector = 2 x 16 FLOP per element
    flop = 2.0 * HADAMARD_BLOCK * wgrad_operands if recipe.hadamard_on_wgrad else 0.0
    return CastWork(recipe.cast_bytes_per_element * elems, casts * recipe.kernels_per_cast, flop)


__all__ = ["RECIPES", "CastWork", "Fp8Recipe", "gemm_cast_work", "recipe_for"]
