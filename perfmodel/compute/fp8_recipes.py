"""Low-precision training recipes: how each one scales its tensors, and the casts and amax
reductions that implies for one GEMM.

A GEMM in fp8 / fp4 needs its bf16 operands quantized first. Per operand element the cast
kernel reads 2 B (bf16) and writes the quantized element plus its share of the scales; a recipe
that needs the tensor's amax before it can choose the scale reads the bf16 tensor once more in
a separate reduction kernel. Per GEMM, as Transformer Engine's Linear does it: forward the input
activation [m, k] and the weight [k, n]; backward the output gradient [m, n] twice (a row-wise
and a column-wise copy for dgrad and wgrad) and the input again, column-wise, for wgrad.

recipe     precision  element  scales per element        amax before the cast
delayed    fp8        1 B      one fp32 per tensor (~0)  no: the last steps' amax history
current    fp8        1 B      one fp32 per tensor (~0)  yes: a reduction pass reading 2 B
blockwise  fp8        1 B      fp32 per 1x128 = 4/128 B  no: per block, inside the cast
mxfp8      mxfp8      1 B      E8M0 per 32 = 1/32 B      no: per block, inside the cast
nvfp4      nvfp4      0.5 B    E4M3 per 16 = 1/16 B      yes: the fp32 per-tensor scale needs it

Sources (Transformer Engine recipe API, transformer_engine.common.recipe):
  DelayedScaling(amax_history_len=1024, amax_compute_algo='max'): the cast uses the scale from
    previous iterations and records this tensor's amax in the same kernel; one bulk history and
    scale update per step. TE's and Megatron-Core's default fp8 recipe.
  Float8CurrentScaling: the scale comes from the current tensor's amax, known only after a pass.
  Float8BlockScaling: DeepSeek-V3 style, 1x128 blocks for activations, 128x128 for weights.
  MXFP8BlockScaling: OCP Microscaling v1.0, 32-element blocks with an E8M0 scale (Blackwell).
  NVFP4BlockScaling and NVIDIA, "Pretraining Large Language Models with NVFP4" (2025): E2M1
    elements, 16-element blocks with E4M3 scales plus an fp32 tensor scale, a 16-point random
    Hadamard transform on the wgrad operands, stochastic rounding of gradients.

The amax all-reduce across ranks (delayed: the amax reduction group once per step; current and
nvfp4: the tensor-parallel group for sequence-parallel inputs) moves a few bytes per tensor and
is not charged here.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.parallel.plan import DEFAULT_FP8_RECIPE, FP8_RECIPE_PRECISION

BF16_BYTES = 2.0
HADAMARD_BLOCK = 16  # NVFP4's random Hadamard transform: 16 x 16 blocks on the wgrad operands


@dataclass(frozen=True)
class Fp8Recipe:
    name: str
    element_bytes: float
    scale_bytes_per_element: float
    amax_pass: bool  # a separate amax reduction kernel reads the bf16 tensor before the cast
    hadamard_on_wgrad: bool = False

    @property
    def cast_bytes_per_element(self) -> float:
        """HBM bytes moved to quantize one bf16 element: read 2 B, write the element and its
        scale share, plus 2 B more when the amax needs its own pass."""
        return BF16_BYTES + self.element_bytes + self.scale_bytes_per_element + (BF16_BYTES if self.amax_pass else 0.0)

    @property
    def kernels_per_cast(self) -> int:
        return 2 if self.amax_pass else 1


RECIPES: dict[str, Fp8Recipe] = {
    "delayed": Fp8Recipe("delayed", 1.0, 0.0, amax_pass=False),
    "current": Fp8Recipe("current", 1.0, 0.0, amax_pass=True),
    "blockwise": Fp8Recipe("blockwise", 1.0, 4.0 / 128, amax_pass=False),
    "mxfp8": Fp8Recipe("mxfp8", 1.0, 1.0 / 32, amax_pass=False),
    "nvfp4": Fp8Recipe("nvfp4", 0.5, 1.0 / 16, amax_pass=True, hadamard_on_wgrad=True),
}


def recipe_for(precision: str, name: str | None = None) -> Fp8Recipe | None:
    """The recipe a GEMM in `precision` runs under: `name`, else the precision's default
    (parallel/plan.py DEFAULT_FP8_RECIPE); None for 16/32-bit precisions."""
    if precision not in DEFAULT_FP8_RECIPE:
        return None  # a 16/32-bit GEMM (the plan may still name a recipe for its fp8 GEMMs)
    if name is None or FP8_RECIPE_PRECISION[name] != precision:
        name = DEFAULT_FP8_RECIPE[precision]
    return RECIPES[name]


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
