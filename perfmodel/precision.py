"""The training precisions and their scaling recipes, in one table every layer reads.

A precision is what a plan names (`--precision`, the runs file's `precision` column, the app's
selectbox). Everything else about it is read from here: the number format of the accelerator
spec it takes its peak and MAMF from, the bytes its GEMM operands and weights move, the bytes a
gradient is reduced in, the scaling recipes its quantize casts follow, whether a chip runs it
merely by listing its format, and the other names it is known by.

Adding a precision is one entry in PRECISIONS (plus a recipe in RECIPES when it scales its
tensors a new way) and the numbers in the accelerator YAMLs that run it (`matrix_peak`,
`calibration.gemm_max_achievable`, `training_precisions`). Nothing below this module keeps a
copy: parallel/plan.py, hardware/specs.py, compute/ops.py, compute/fp8_recipes.py,
workload/builder.py, workload/moe.py, validation/runs.py, planning/sweep.py, cli.py and app.py
read the tables when they run, so an entry added at run time is accepted everywhere.

Spec lookups (hardware/specs.py, hardware/derating.py):
    peak  matrix_peak[f] for the first f of peak_formats(matrix_format) the chip lists (fp32
          matmuls may run as tf32); never a wider or narrower format: a chip without fp8 does
          not run fp8 at its bf16 rate
    MAMF  calibration.gemm_max_achievable[matrix_format], else the part's bf16 / fp16 MAMF over
          peak carried to the format (the same tensor cores), else its peers' (derating rule)

Scaling recipes (the quantize casts of one GEMM: perfmodel/compute/fp8_recipes.py):

recipe     precision  element  scales per element        amax before the cast
delayed    fp8        1 B      one fp32 per tensor (~0)  no: the last steps' amax history
current    fp8        1 B      one fp32 per tensor (~0)  yes: a reduction pass reading 2 B
blockwise  fp8        1 B      fp32 per 1x128 = 4/128 B  no: per block, inside the cast
mxfp8      mxfp8      1 B      E8M0 per 32 = 1/32 B      no: per block, inside the cast
nvfp4      nvfp4      0.5 B    E4M3 per 16 = 1/16 B      yes: the fp32 per-tensor scale needs it

Sources (Transformer Engine recipe API, transformer_engine.common.recipe):
  DelayedScaling(amax_history_len=1024, amax_compute_algo='max'): the cast uses the scale from
    previous iterations and records this tensor's amax in the same kernel; one bulk history and
    scale update per step. TE's and Megatron-Core's default fp8 recipe (fp8_autocast(recipe=None),
    --fp8-recipe delayed), hence the first recipe of fp8.
  Float8CurrentScaling: the scale comes from the current tensor's amax, known only after a pass.
  Float8BlockScaling: DeepSeek-V3 style, 1x128 blocks for activations, 128x128 for weights.
  MXFP8BlockScaling: OCP Microscaling v1.0, 32-element blocks with an E8M0 scale (Blackwell).
  NVFP4BlockScaling and NVIDIA, "Pretraining Large Language Models with NVFP4" (2025): E2M1
    elements, 16-element blocks with E4M3 scales plus an fp32 tensor scale, a 16-point random
    Hadamard transform on the wgrad operands, stochastic rounding of gradients.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from perfmodel.errors import PrecisionError
from perfmodel.names import spelling

DEFAULT_PRECISION = "bf16"

# Number formats an accelerator spec may give a peak or a measurement for (keys of matrix_peak,
# vector_peak, calibration.gemm_max_achievable; precision of a GEMM / attention point), each with
# the other formats whose figure serves a peak lookup in it (fp32 matmuls may run as tf32).
NUMBER_FORMATS: dict[str, tuple[str, ...]] = {
    "fp64": (), "tf32": ("fp32",), "fp32": ("tf32",), "bf16": (), "fp16": (), "fp8": (), "fp6": (), "fp4": (),
    "int8": (),
}


# Element width in bits of each NUMBER_FORMATS key as the matrix unit reads it (tf32: 1 sign, 8
# exponent and 10 mantissa bits of an fp32 word). Read where a rule depends on how narrow a
# format is: derating.py's power-law exponent of the matmul rate.
FORMAT_BITS: dict[str, int] = {
    "fp64": 64, "tf32": 19, "fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp6": 6, "fp4": 4, "int8": 8,
}


# A vector-peak lookup with no entry in the format asked for takes the first of these the chip
# lists: a chip that publishes only a 16-bit vector rate (Gaudi 3) serves it for wider formats,
# since no wider figure exists to prefer.
VECTOR_PEAK_FALLBACK = ("fp32", "bf16", "fp16")

BF16_BYTES = 2.0  # the tensor a quantize cast reads


@dataclass(frozen=True)
class Fp8Recipe:
    """How a low-precision GEMM scales its tensors (see the module table)."""

    name: str
    element_bytes: float
    scale_bytes_per_element: float
    amax_pass: bool  # a separate amax reduction kernel reads the bf16 tensor before the cast
    hadamard_on_wgrad: bool = False
    # cross-rank amax all-reduces (compute/fp8_recipes.py): per fp8_autocast region (delayed), per
    # sequence-parallel all-gather of a quantized operand (current, nvfp4), or none
    amax_reduction: Literal["region", "sp_gather", "none"] = "none"
    # one scale per tensor: the row-wise quantized data also serves the transposed operand where the
    # chip runs fp8 GEMMs in any layout (compute/fp8_recipes.py); a block scale runs along one axis only
    per_tensor_scale: bool = False

    @property
    def cast_bytes_per_element(self) -> float:
        """HBM bytes moved to quantize one bf16 element: read 2 B, write the element and its
        scale share, plus 2 B more when the amax needs its own pass."""
        return BF16_BYTES + self.element_bytes + self.scale_bytes_per_element + (BF16_BYTES if self.amax_pass else 0.0)

    @property
    def kernels_per_cast(self) -> int:
        return 2 if self.amax_pass else 1


RECIPES: dict[str, Fp8Recipe] = {
    "delayed": Fp8Recipe("delayed", 1.0, 0.0, amax_pass=False, amax_reduction="region", per_tensor_scale=True),
    "current": Fp8Recipe("current", 1.0, 0.0, amax_pass=True, amax_reduction="sp_gather", per_tensor_scale=True),
    "blockwise": Fp8Recipe("blockwise", 1.0, 4.0 / 128, amax_pass=False),
    "mxfp8": Fp8Recipe("mxfp8", 1.0, 1.0 / 32, amax_pass=False),
    "nvfp4": Fp8Recipe("nvfp4", 0.5, 1.0 / 16, amax_pass=True, hadamard_on_wgrad=True, amax_reduction="sp_gather"),
}


@dataclass(frozen=True)
class TrainingPrecision:
    """One precision a training run may name.

    bits                element width of its GEMM operands; lists of a chip's precisions go widest first
    matrix_format       the NUMBER_FORMATS key its peak and MAMF are read under (mxfp8 runs on the fp8 units)
    gemm_operand_bytes  bytes per element of A, B and C in a GEMM's memory term (compute/ops.py)
    weight_bytes        bytes per GEMM weight element an op reads (workload/builder.py, workload/moe.py)
    grad_bytes          bytes per gradient element reduced over data parallelism (plan.grad_reduce_bytes default):
                        fp32 main grads in Megatron-LM / FSDP mixed precision, 2 B in fp16 DeepSpeed
    recipes             the RECIPES that run it, its default first; empty: no quantize casts
    listed_by_format    a chip whose matrix_peak lists the format runs it without `training_precisions`
                        (block-scaled formats need the chip to list them there)
    model_copy_bytes    bytes per parameter of the weights the forward reads: a 2 B bf16 / fp16 copy beside
                        the fp32 master (fp8 / fp4 training keeps it too, Transformer Engine); in pure fp32
                        training the 4 B weights are the master copy, so there is no second one
    aliases             other names it is accepted under
    """

    name: str
    bits: int
    matrix_format: str
    gemm_operand_bytes: float
    weight_bytes: float
    grad_bytes: int = 4
    recipes: tuple[str, ...] = ()
    listed_by_format: bool = True
    model_copy_bytes: float = 2.0
    aliases: tuple[str, ...] = ()

    @property
    def separate_master(self) -> bool:
        """An fp32 master copy is kept beside the model copy (mixed precision)."""
        return self.model_copy_bytes < 4.0

    @property
    def quantized(self) -> bool:
        """Its GEMM operands are quantized from bf16 by a scaling recipe (fp8, fp4 families)."""
        return bool(self.recipes)


# Order is the order a user is offered them in (CLI choices, app selectbox, error messages); the
# default first. Byte widths are what the kernels read: an fp32 GEMM 4 B per operand element, a
# packed nvfp4 element 0.5 B plus its E4M3 scale per 16 (1/16 B), NVIDIA's NVFP4 paper Sec. 2.
PRECISIONS: dict[str, TrainingPrecision] = {p.name: p for p in (
    # aliases: how stacks and published tables write them (Lightning "bf16-mixed", Composer "amp_bf16",
    # Megatron-Bridge's tables "FP8-CS" / "FP8-DS" / "FP8-MX"); the recipe a name implies is not taken
    TrainingPrecision("bf16", 16, "bf16", 2.0, 2, aliases=("bfloat16", "bf16-mixed", "amp-bf16", "bf16-amp")),
    TrainingPrecision("fp16", 16, "fp16", 2.0, 2, grad_bytes=2,
                      aliases=("float16", "half", "fp16-mixed", "16-mixed", "amp-fp16", "fp16-amp")),
    TrainingPrecision("fp8", 8, "fp8", 1.0, 1, recipes=("delayed", "current", "blockwise"),
                      aliases=("float8", "fp8-cs", "fp8-ds", "fp8-delayed", "fp8-current", "fp8-hybrid", "fp8-e4m3",
                               "fp8-blockwise", "fp8-block", "fp8-tensorwise", "fp8-rowwise", "float8-tensorwise",
                               "float8-rowwise", "fp8-current-scaling", "fp8-delayed-scaling",
                               # Megatron-Bridge's fp8_sc, "FP8-SS" in NVIDIA's DGX Cloud tables: subchannel
                               # (blockwise) scaling, training/mixed_precision.py bf16_with_fp8_subchannel_scaling_mixed
                               "fp8-sc", "fp8-ss", "fp8-subchannel", "fp8-subchannel-scaling")),
    TrainingPrecision("mxfp8", 8, "fp8", 1.0, 1, recipes=("mxfp8",), listed_by_format=False, aliases=("fp8-mx",)),
    TrainingPrecision("nvfp4", 4, "fp4", 0.5 + 1.0 / 16, 0.5 + 1.0 / 16, recipes=("nvfp4",), listed_by_format=False),
    TrainingPrecision("fp32", 32, "fp32", 4.0, 4, model_copy_bytes=4.0, aliases=("float32",)),
)}

# Non-GEMM matmul kernels (FlashAttention, the SSD scan) run in bf16 under every precision, else
# in the first of these the chip runs (fp16 on a V100, fp32 on a CPU).
ATTENTION_PRECISIONS = ("bf16", "fp16", "fp32")
# The output layer (LM head) of a quantized run stays in bf16 in every stack that trains fp8 / fp4:
# Megatron-Core's GPTModel.output_layer is tensor_parallel.ColumnParallelLinear, not a Transformer
# Engine module, so fp8_autocast leaves it alone; torchtitan's float8 / MX configs and torchao's MX
# converter skip it (filter_fqns ["output"]); MPT (llm-foundry) computes its tied head with F.linear.
QUANTIZED_HEAD_PRECISION = "bf16"


# ---- lookups --------------------------------------------------------------------------------

def precision_names() -> list[str]:
    return list(PRECISIONS)


def recipe_names() -> list[str]:
    return [r for p in PRECISIONS.values() for r in p.recipes]


def canonical(name: str) -> str | None:
    """The registry name of `name` (itself or an alias, any case), None if it is none."""
    if name in PRECISIONS:
        return name
    # 'fp8 (delayed)', 'bf16 mixed precision': brackets and a trailing 'mixed precision' say nothing more
    key = re.sub(r"-(mixed-)?precision$", "", spelling(re.sub(r"[()\[\],]", " ", name)).strip("-"))
    if key in PRECISIONS:
        return key
    return next((p.name for p in PRECISIONS.values() if key in p.aliases), None)


def get(name: str) -> TrainingPrecision:
    """The precision `name` (or an alias); a PrecisionError naming the allowed ones otherwise."""
    p = PRECISIONS.get(name)
    if p is not None:
        return p
    found = canonical(name) if isinstance(name, str) else None
    if found is None:
        raise PrecisionError(f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}")
    return PRECISIONS[found]


def recipe_precision(recipe: str) -> str:
    """The precision a scaling recipe runs."""
    return next(p.name for p in PRECISIONS.values() if recipe in p.recipes)


def matrix_format(name: str) -> str:
    """The number format a precision's GEMMs run in; a number format maps to itself."""
    found = canonical(name)
    return PRECISIONS[found].matrix_format if found is not None else name


def format_bits(fmt: str) -> int:
    """Element width in bits of number format `fmt` (or of a precision's matrix format)."""
    f = matrix_format(fmt)
    if f not in FORMAT_BITS:
        raise PrecisionError(f"unknown number format {fmt!r}; allowed: {', '.join(FORMAT_BITS)}")
    return FORMAT_BITS[f]


def reference_16bit_format(supported: Iterable[str]) -> str | None:
    """The first 16-bit matrix format (bf16, else fp16) among a chip's `supported` precisions: the
    reference an in-model efficiency is measured against and the unit attention curves carry by."""
    have = set(supported)
    return next((p.matrix_format for p in PRECISIONS.values() if p.bits == 16 and p.matrix_format in have), None)


def peak_formats(name: str) -> tuple[str, ...]:
    """The spec formats that serve a peak lookup for a precision or a number format, in order."""
    fmt = matrix_format(name)
    return (fmt, *NUMBER_FORMATS.get(fmt, ()))


def widest_first(names: list[str]) -> list[str]:
    """Precision names ordered widest element first (registry order among equals)."""
    return sorted(names, key=lambda n: -PRECISIONS[n].bits)


# ---- pydantic field types: checked against the tables when a model is validated --------------

def _expected(names: list[str]) -> str:
    """Pydantic's Literal wording: 'a', 'b' or 'c'."""
    q = [repr(n) for n in names]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} or {q[-1]}"


def _literal_error(names: list[str]) -> PydanticCustomError:
    return PydanticCustomError("literal_error", "Input should be {expected}", {"expected": _expected(names)})


def _precision_field(v: object) -> str:
    found = canonical(v) if isinstance(v, str) else None
    if found is None:
        raise _literal_error(precision_names())
    return found


def _recipe_field(v: object) -> str:
    if not isinstance(v, str) or v not in recipe_names():
        raise _literal_error(recipe_names())
    return v


def _format_field(v: object) -> str:
    if not isinstance(v, str) or v not in NUMBER_FORMATS:
        raise _literal_error(list(NUMBER_FORMATS))
    return v


PrecisionName = Annotated[str, BeforeValidator(_precision_field)]
RecipeName = Annotated[str, BeforeValidator(_recipe_field)]
FormatName = Annotated[str, BeforeValidator(_format_field)]

__all__ = [
    "ATTENTION_PRECISIONS",
    "BF16_BYTES",
    "DEFAULT_PRECISION",
    "FORMAT_BITS",
    "NUMBER_FORMATS",
    "PRECISIONS",
    "QUANTIZED_HEAD_PRECISION",
    "RECIPES",
    "VECTOR_PEAK_FALLBACK",
    "FormatName",
    "Fp8Recipe",
    "PrecisionName",
    "RecipeName",
    "TrainingPrecision",
    "canonical",
    "format_bits",
    "get",
    "matrix_format",
    "peak_formats",
    "precision_names",
    "recipe_names",
    "recipe_precision",
    "reference_16bit_format",
    "widest_first",
]
