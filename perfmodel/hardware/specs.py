"""Strict pydantic models of the accelerator specs (hardware_specs/accelerators/*.yaml) and the
``Sourced`` leaf every hardware number is; nodes, fabrics and clusters are in system_specs.py.

Every number in a spec is a ``Sourced`` leaf: ``{value: "312 TFLOP/s", source: datasheet}`` where
``source`` is a key of the file's ``references`` map (or a full citation). Values are parsed to SI
floats once, by ``Sourced.si(dimension)``; the models keep the original text so a report can quote
it. Bandwidths of links say whether the quoted figure is one-way or bidirectional; the ``*_Bps``
properties always return one-way bytes/s.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel import precision as registry
from perfmodel.units import Dimension, parse_quantity

# number formats and training precisions are checked against perfmodel/precision.py
Precision = registry.FormatName
TrainingPrecision = registry.PrecisionName
Direction = Literal["one-way", "bidirectional"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def __hash__(self) -> int:
        # specs are loaded once and shared; identity hashing lets cost functions cache on them
        # (field hashing fails on the dict-valued fields)
        return id(self)


class Sourced(_Strict):
    """One number with its unit and where it comes from."""

    value: str | float | int
    source: str = Field(min_length=1, description="key of `references`, or a citation")
    direction: Direction | None = Field(None, description="bandwidths of links: which the figure is")
    note: str | None = None

    def si(self, dim: Dimension, field: str = "value") -> float:
        return parse_quantity(self.value, dim, field)

    def one_way_Bps(self, field: str = "bandwidth") -> float:
        bw = self.si("bytes_per_s", field)
        if self.direction is None:
            from perfmodel.errors import SpecError

            raise SpecError(field, "a link bandwidth without `direction`", "direction: one-way or bidirectional")
        return bw / 2.0 if self.direction == "bidirectional" else bw


class GemmPoint(_Strict):
    """An achieved GEMM rate on one shape (cuBLAS/hipBLASLt microbenchmark)."""

    precision: Precision
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    achieved: str
    source: str

    @property
    def achieved_flop_per_s(self) -> float:
        return parse_quantity(self.achieved, "flop_per_s", "calibration.gemm_shapes.achieved")


class AttentionPoint(_Strict):
    """An achieved fused-attention rate (FlashAttention benchmarks), FLOP counted as the kernel's
    authors count them (4·b·s²·h·d forward, halved when causal; backward 2.5x forward)."""

    kernel: str
    direction: Literal["fwd", "bwd", "fwd_bwd"]
    causal: bool
    head_dim: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    precision: Precision = "bf16"
    achieved: str
    source: str

    @property
    def achieved_flop_per_s(self) -> float:
        return parse_quantity(self.achieved, "flop_per_s", "calibration.attention.achieved")


class AcceleratorCalibration(_Strict):
    """What real kernels achieve on this accelerator, from microbenchmarks (never from the
    training runs perfmodel is judged on)."""

    gemm_max_achievable: dict[Precision, Sourced] = Field(default_factory=dict)
    gemm_shapes: list[GemmPoint] = Field(default_factory=list)
    gemm_by_shape: bool = Field(False, description=(
        "the measured GEMM rates differ by more than 2x across shapes (a CPU without native kernels for a "
        "format: torch's generic bf16 GEMM on AVX2), which one MAMF and a fixed cost cannot express: each GEMM "
        "runs at the rate of the nearest measured shape of its precision (perfmodel calibrate sets it)"))
    hbm_achieved: Sourced | None = None
    optimizer_step_per_param: Sourced | None = Field(
        None, description="measured optimizer step seconds per parameter (else 38 B/param through HBM)")
    in_model_efficiency: Sourced | None = Field(
        None, description="fraction of the isolated GEMM / attention rates a real model's forward reaches "
                          "on this part (sustained power and clocks, real shape mix); default 1")
    attention_in_step: Sourced | None = Field(
        None, description="fraction of the isolated fused-attention curve the attention kernel reaches inside a "
                          "training step, measured by kernel time in a step's trace (where measured it replaces "
                          "in_model_efficiency for attention; else attention takes in_model_efficiency as the "
                          "GEMMs do)")
    elementwise_achieved: Sourced | None = Field(
        None,
        description="achieved bytes/s of typical memory-bound training ops (norm, activation, softmax, casts); "
        "defaults to hbm_achieved",
    )
    attention: list[AttentionPoint] = Field(default_factory=list)
    attention_fallback_ratio: Sourced | None = Field(
        None, description="fused-attention fwd+bwd rate / GEMM rate where no part of the generation measured "
                          "attention (default 0.60, compute/ops.FLASH_FALLBACK_RATIO)")
    kernel_launch: Sourced | None = Field(None, description="back-to-back launch gap per kernel")
    gemm_fixed: Sourced | None = Field(
        None, description="fill/drain seconds per GEMM kernel where it is known directly; else it is fitted to "
                          "gemm_shapes (a what-if freezes it here: faster HBM or math does not lengthen a "
                          "kernel's fill and drain)")
    host_op_overhead: Sourced | None = Field(
        None, description="host time to issue one eager framework op (dispatch + autograd)"
    )


class Price(_Strict):
    purchase: Sourced | None = None
    hourly: Sourced | None = None


class HostCpu(_Strict):
    """The CPU a host spec was calibrated on, as /proc/cpuinfo names it: `host-cpu` resolves to
    the spec whose CPU is the machine's own (hardware/catalog.py, host_cpu_alias)."""

    vendor: str = Field(min_length=1, description="vendor_id, e.g. AuthenticAMD, GenuineIntel")
    family: int = Field(ge=0, description="cpu family")
    model: int = Field(ge=0, description="model")


class Accelerator(_Strict):
    id: str
    name: str
    aliases: list[str] = Field(default_factory=list, description=(
        "other names the chip goes by (the short marketing name, nvidia-smi's name): a runs file or a CLI "
        "argument naming one gets this spec and a message saying so; case, spaces, '_' and a vendor prefix "
        "do not matter"))
    vendor: Literal["nvidia", "amd", "google", "intel", "host"]
    kind: Literal["gpu", "tpu", "hpu", "cpu"]
    generation: str = Field(min_length=1, description="architecture generation (ampere, hopper, blackwell, cdna3, tpu-v5p, ...): "
                            "the scope of the efficiency parameters a calibration profile fits")
    references: dict[str, str] = Field(default_factory=dict)
    matrix_peak: dict[Precision, Sourced] = Field(description="dense (no sparsity) matrix-unit peaks")
    vector_peak: dict[Precision, Sourced]
    compute_units: Sourced = Field(description="SMs, CUs, TensorCores or CPU cores")
    clock: Sourced
    hbm_capacity: Sourced
    hbm_bandwidth: Sourced
    l2_cache: Sourced = Field(description="L2 cache, or the chip's on-chip SRAM (TPU VMEM/CMEM, Gaudi SRAM)")
    tdp: Sourced | None = Field(None, description="board power; None only where the vendor publishes none")
    price: Price | None = None
    reference_node: str | None = Field(None, description="node spec id a run without a system gets")
    host_cpu: HostCpu | None = Field(None, description="kind cpu: the CPU this spec was calibrated on (perfmodel "
                                     "calibrate writes it); `host-cpu` resolves to the spec whose CPU the machine has")
    training_precisions: list[TrainingPrecision] | None = Field(
        None, description="GEMM precisions a training run may name on this chip (its matrix units run them "
        "natively; names of perfmodel/precision.py); default: those marked listed_by_format whose format "
        "matrix_peak lists: bf16, fp16 and fp8, fp32 where it lists fp32 or tf32. mxfp8 and nvfp4 (block-scaled "
        "formats) only when listed here.")
    fp8_any_layout: bool = Field(
        False, description="the matrix units run fp8 GEMMs with either operand transposed (Blackwell), so a "
        "per-tensor-scaled fp8 tensor needs no transposed copy (compute/fp8_recipes.py); False: TN only (Hopper, Ada)")
    best_published_mfu: Sourced | None = Field(
        None, description="the highest MFU a published training run reached on this chip's generation; a "
        "prediction above it is flagged (never used to compute one)")
    calibration: AcceleratorCalibration = Field(default_factory=AcceleratorCalibration)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Accelerator:
        from perfmodel.errors import SpecError

        checks: dict[str, tuple[Sourced, Dimension]] = {
            "compute_units": (self.compute_units, "dimensionless"),
            "clock": (self.clock, "hertz"),
            "hbm_capacity": (self.hbm_capacity, "bytes"),
            "hbm_bandwidth": (self.hbm_bandwidth, "bytes_per_s"),
            "l2_cache": (self.l2_cache, "bytes"),
        }
        if self.tdp is not None:
            checks["tdp"] = (self.tdp, "watts")
        for prec, s in self.matrix_peak.items():
            checks[f"matrix_peak.{prec}"] = (s, "flop_per_s")
        for prec, s in self.vector_peak.items():
            checks[f"vector_peak.{prec}"] = (s, "flop_per_s")
        usable = registry.VECTOR_PEAK_FALLBACK  # what vector_peak_flop_per_s('fp32') reads, in order
        if not any(p in self.vector_peak for p in usable):
            # the memory-bound ops' arithmetic (compute/ops.memory_bound_cost) runs at it
            raise SpecError("vector_peak.fp32", f"missing (vector_peak lists {sorted(self.vector_peak)})",
                            "the FP32 vector (non-matrix) peak, e.g. {value: 66.9 TFLOP/s, source: ...}, or where "
                            f"none is published the widest of {', '.join(usable)} that is")
        cal = self.calibration
        for prec, s in cal.gemm_max_achievable.items():
            checks[f"calibration.gemm_max_achievable.{prec}"] = (s, "flop_per_s")
        if cal.hbm_achieved:
            checks["calibration.hbm_achieved"] = (cal.hbm_achieved, "bytes_per_s")
        if cal.optimizer_step_per_param:
            checks["calibration.optimizer_step_per_param"] = (cal.optimizer_step_per_param, "seconds")
        if cal.in_model_efficiency:
            eff = cal.in_model_efficiency.si("dimensionless", "calibration.in_model_efficiency")
            if not 0 < eff <= 1:
                raise SpecError("calibration.in_model_efficiency", f"{eff} is outside (0, 1]", "a fraction in (0, 1]")
        if cal.attention_in_step:
            eff = cal.attention_in_step.si("dimensionless", "calibration.attention_in_step")
            if not 0 < eff <= 1:
                raise SpecError("calibration.attention_in_step", f"{eff} is outside (0, 1]", "a fraction in (0, 1]")
        if cal.elementwise_achieved:
            checks["calibration.elementwise_achieved"] = (cal.elementwise_achieved, "bytes_per_s")
        if cal.kernel_launch:
            checks["calibration.kernel_launch"] = (cal.kernel_launch, "seconds")
        if cal.host_op_overhead:
            checks["calibration.host_op_overhead"] = (cal.host_op_overhead, "seconds")
        if self.best_published_mfu:
            mfu = self.best_published_mfu.si("dimensionless", "best_published_mfu")
            if not 0 < mfu <= 1:
                raise SpecError("best_published_mfu", f"{mfu} is outside (0, 1]", "a fraction in (0, 1]")
        for tprec in self.training_precisions or ():
            if not any(f in self.matrix_peak for f in registry.peak_formats(tprec)):
                raise SpecError(f"training_precisions.{tprec}", f"matrix_peak has no {registry.matrix_format(tprec)!r} entry",
                                f"one of the formats matrix_peak lists: {sorted(self.matrix_peak)}")
        if self.price and self.price.purchase:
            checks["price.purchase"] = (self.price.purchase, "usd")
        if self.price and self.price.hourly:
            checks["price.hourly"] = (self.price.hourly, "usd_per_hour")
        for field, (s, dim) in checks.items():
            v = s.si(dim, field)
            if v <= 0:
                raise SpecError(field, f"{s.value!r} is not positive", "a positive quantity")
        if "bf16" not in self.matrix_peak and "fp32" not in self.matrix_peak:
            raise SpecError("matrix_peak", "neither bf16 nor fp32 is given", "at least one of them")
        return self

    # SI views, computed once -------------------------------------------------------------
    @cached_property
    def num_compute_units(self) -> int:
        return int(self.compute_units.si("dimensionless"))

    @cached_property
    def hbm_bytes(self) -> float:
        return self.hbm_capacity.si("bytes")

    @cached_property
    def hbm_Bps(self) -> float:
        return self.hbm_bandwidth.si("bytes_per_s")

    @cached_property
    def hbm_achieved_Bps(self) -> float:
        """Achieved streaming bandwidth (STREAM triad); without a measurement, the datasheet
        figure x the peers' achieved ratio (perfmodel.hardware.derating)."""
        from perfmodel.hardware.derating import hbm_ratio

        return hbm_ratio(self).value * self.hbm_Bps

    @cached_property
    def in_model_efficiency(self) -> float:
        """Whole-model fraction of isolated kernel rates (measured, else its generation's)."""
        from perfmodel.hardware.derating import in_model_efficiency

        return in_model_efficiency(self).value

    @cached_property
    def attention_in_step(self) -> float:
        """Fraction of the isolated attention curve reached inside a step (measured, else its
        generation's, else the whole-model efficiency)."""
        from perfmodel.hardware.derating import attention_in_step

        return attention_in_step(self).value

    @cached_property
    def elementwise_achieved_Bps(self) -> float:
        """Achieved bytes/s of typical memory-bound training ops; falls back to hbm_achieved_Bps."""
        cal = self.calibration.elementwise_achieved
        return cal.si("bytes_per_s", "calibration.elementwise_achieved") if cal else self.hbm_achieved_Bps

    @cached_property
    def tdp_w(self) -> float:
        if self.tdp is None:
            from perfmodel.errors import SpecError

            raise SpecError("tdp", f"{self.id} has no published TDP", "a `tdp:` entry before energy can be estimated")
        return self.tdp.si("watts")

    @property
    def has_tdp(self) -> bool:
        return self.tdp is not None

    @cached_property
    def supported_precisions(self) -> tuple[str, ...]:
        """Training GEMM precisions this chip runs natively (`training_precisions`, else derived
        from matrix_peak, see the field), widest first."""
        if self.training_precisions is not None:
            return tuple(self.training_precisions)
        derived = [p.name for p in registry.PRECISIONS.values()
                   if p.listed_by_format and any(f in self.matrix_peak for f in registry.peak_formats(p.name))]
        return tuple(registry.widest_first(derived))

    def check_precision(self, precision: str) -> None:
        """Raise PrecisionError unless a training run may use `precision` on this chip."""
        if precision not in self.supported_precisions:
            from perfmodel.errors import PrecisionError

            raise PrecisionError(f"{self.name} ({self.id}) has no {precision} matrix format; it supports "
                                 f"{', '.join(self.supported_precisions)} (hardware_specs/accelerators/{self.id}.yaml "
                                 "training_precisions)")

    def matrix_peak_flop_per_s(self, precision: str) -> float:
        """Dense matrix-unit peak; a plan precision maps to its matrix format (mxfp8 -> fp8,
        nvfp4 -> fp4), fp32 to tf32 where the chip has no fp32 matrix mode. A format the chip
        lacks is a PrecisionError naming what it has."""
        for p in registry.peak_formats(precision):
            if p in self.matrix_peak:
                return self.matrix_peak[p].si("flop_per_s")
        from perfmodel.errors import PrecisionError

        raise PrecisionError(f"{self.name} ({self.id}) has no {precision} matrix peak; matrix_peak lists "
                             f"{', '.join(sorted(self.matrix_peak))}")

    def vector_peak_flop_per_s(self, precision: str) -> float:
        """Non-matrix peak; a chip that publishes only a 16-bit vector rate (Gaudi 3) serves it
        for wider formats too, since no wider figure exists to prefer."""
        for p in [*registry.peak_formats(precision), *registry.VECTOR_PEAK_FALLBACK]:
            if p in self.vector_peak:
                return self.vector_peak[p].si("flop_per_s")
        raise KeyError(precision)

    def has_matrix_precision(self, precision: str) -> bool:
        return precision in self.matrix_peak
