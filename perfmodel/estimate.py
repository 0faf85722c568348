"""Estimate: what one engine predicts for one (workload, system, plan)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfmodel import precision as registry
from perfmodel.compute.autocast import autocast_on
from perfmodel.memory import MemoryBreakdown
from perfmodel.parallel.plan import ParallelPlan

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Estimate:
    """One engine's prediction. `breakdown_s` keys (seconds, summing to `step_time_s`):
    compute_fwd_s / compute_bwd_s (kernels on the slowest stage, all micro-batches; bwd = dgrad +
    wgrad), recompute_s (forward recomputed before backward), tp_ep_cp_comm_s (exposed tensor-,
    expert- and context-parallel collectives), host_overhead_s (GPU waiting for the host to issue
    kernels), activation_offload_s (the GPU waiting for activation-offload copies to and from host
    memory, engines/offload.py), pp_bubble_s (fill and drain), pp_p2p_s (pipeline sends on the critical path),
    dp_comm_exposed_s (data-parallel collectives not hidden by compute, plus the compute slowed by
    NCCL's SMs while they hide), optimizer_s (optimizer step and embedding gradient sync)."""

    workload: str
    system: str
    accelerator: str
    plan: ParallelPlan
    engine: str
    step_time_s: float
    breakdown_s: dict[str, float]
    memory: MemoryBreakdown
    hbm_bytes: float
    tokens_per_step: float
    model_flop_per_step: float
    hardware_flop_per_step: float
    peak_flop_per_s: float
    n_gpus: int
    messages: tuple[str, ...] = ()
    timeline: Any = field(default=None, compare=False, repr=False)
    input_bound: bool = False  # the input pipeline, not compute, sets the step (planning.input_pipeline)
    provenance: dict[str, str] = field(default_factory=dict, compare=False)
    best_published_mfu: float | None = None
    best_published_mfu_source: str = ""
    stage_time_s: tuple[float, ...] = ()  # per pipeline rank: seconds of one micro-batch (fwd + bwd + p2p)
    calibration: str = "none"  # the calibration profile the step time was computed with
    step_time_lo_s: float | None = None  # 80 % prediction interval of the step time (None: no interval)
    step_time_hi_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (no recompute counted), the convention of Megatron and MosaicML."""
        return self.model_flop_per_step / self.step_time_s / self.n_gpus / 1e12

    @property
    def mfu(self) -> float:
        return self.model_flop_per_step / (self.step_time_s * self.n_gpus * self.peak_flop_per_s)

    @property
    def hfu(self) -> float:
        return self.hardware_flop_per_step / (self.step_time_s * self.n_gpus * self.peak_flop_per_s)

    @property
    def mfu_flag(self) -> str | None:
        """A warning when the predicted MFU is above the best any published run reached on this
        generation (`Accelerator.best_published_mfu`, with its source); None otherwise."""
        best = self.best_published_mfu
        if best is None or self.mfu <= best:
            return None
        return (f"MFU {self.mfu:.1%} is above the best published {best:.0%} "
                f"({self.best_published_mfu_source}): treat this prediction as optimistic")

    @property
    def fallback_terms(self) -> list[str]:
        """Cost terms that use the derating rule, not a measurement of this hardware."""
        return [k for k, v in self.provenance.items() if not v.startswith("measured")]

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.hbm_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "system": self.system, "accelerator": self.accelerator,
            "engine": self.engine, "n_gpus": self.n_gpus, "plan": self.plan.model_dump(),
            "step_time_s": self.step_time_s, "step_time_interval_80_s": (
                [self.step_time_lo_s, self.step_time_hi_s] if self.step_time_lo_s is not None else None),
            "calibration": self.calibration, "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "breakdown_s": dict(self.breakdown_s),
            "memory_bytes": {**self.memory.as_dict(), "total": self.memory.total_bytes, "capacity": self.hbm_bytes},
            "fits_in_memory": self.fits, "input_bound": self.input_bound, "messages": list(self.messages),
            "provenance": dict(self.provenance), "mfu_flag": self.mfu_flag,
        }

    def to_frame(self) -> pd.DataFrame:
        """Long form: one row per component, kind 'time' (seconds) or 'memory' (bytes)."""
        import pandas as pd

        rows = [{"kind": "time", "component": k, "value": v, "unit": "s"} for k, v in self.breakdown_s.items()]
        rows += [{"kind": "memory", "component": k, "value": v, "unit": "B"} for k, v in self.memory.as_dict().items()]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        from perfmodel.units import fmt

        lines = [
            f"{self.workload} on {self.n_gpus} x {self.accelerator} ({self.system}), {self.engine} engine",
            f"  layout  dp {self.plan.dp} tp {self.plan.tp} pp {self.plan.pp} cp {self.plan.cp} ep {self.plan.ep}"
            + (f" etp {self.plan.etp}" if self.plan.etp > 1 else "")
            + (f" ({self.plan.moe_dispatcher or 'alltoall'} dispatcher"
               + (f" on {self.plan.moe_a2a_sms} SMs" if self.plan.moe_a2a_sms else "")
               + (", per-expert GEMMs" if self.plan.expert_gemm == "per-expert" else "") + ")" if self.plan.ep > 1 else "")
            + f" vp {self.plan.vp} zero {self.plan.zero_stage} mb {self.plan.micro_batch} gb {self.plan.global_batch}"
            f" recompute {self.plan.recompute_label}"
            + f" {self.plan.precision}"
            + (f" {self.plan.fp8_recipe}" if self.plan.fp8_recipe else "") + _mechanisms(self.plan),
            f"  step    {self.step_time_s:.4g} s   {self.tokens_per_s:,.0f} tokens/s   "
            f"{self.tflops_per_gpu:.1f} TFLOP/s/GPU   MFU {self.mfu:.1%}",
            (f"  80 %    {self.step_time_lo_s:.4g} - {self.step_time_hi_s:.4g} s (prediction interval, calibration "
             f"{self.calibration})" if self.step_time_lo_s is not None and self.step_time_hi_s is not None
             else f"  calibration {self.calibration} (no prediction interval)"),
            f"  memory  {fmt(self.memory.total_bytes, 'B')} of {fmt(self.hbm_bytes, 'B')} per GPU"
            + ("" if self.fits else "  (DOES NOT FIT)"),
        ]
        for k, v in self.breakdown_s.items():
            if v > 1e-9 * self.step_time_s:
                lines.append(f"    {k:<20} {v:10.4g} s  {v / self.step_time_s:6.1%}")
        lines += [f"  note: {m}" for m in self.messages]
        if self.mfu_flag:
            lines.append(f"  WARNING: {self.mfu_flag}")
        if self.provenance:
            lines.append("  provenance (measured on this hardware, or the fallback rule of docs/DESIGN.md):")
            lines += [f"    {k:<22} {v}" for k, v in self.provenance.items()]
        return "\n".join(lines)


def _mechanisms(plan: ParallelPlan) -> str:
    """The stack mechanisms a plan turns on (perfmodel/calibration/frameworks.py), for the layout line."""
    low_precision = registry.get(plan.precision).gemm_operand_bytes < 2  # the casts exist only below 16 bits
    on = [name for name, flag in (("tp overlap", plan.overlap_tp_comm), ("p2p overlap", plan.overlap_p2p_comm),
                                  ("fused fp8 casts", plan.fp8_fused_casts and low_precision),
                                  ("fused loss", plan.cross_entropy_impl == "fused"),
                                  ("fused classifier", plan.cross_entropy_impl == "classifier"),
                                  ("cuda graphs", plan.cuda_graphs), ("unfused attention", plan.attention_impl == "unfused"),
                                  ("FlashAttention-1-era attention", plan.attention_impl == "flash1"),
                                  ("FlashAttention-3", plan.attention_impl == "flash3"),
                                  ("FlashAttention-4", plan.attention_impl == "flash4"),
                                  (f"cp ring {plan.cp_ring}", plan.cp > 1 and plan.cp_ring != "p2p"),
                                  ("eager element-wise ops", plan.elementwise == "eager"),
                                  ("autocast weight casts", autocast_on(plan)),
                                  ("fp8 SwiGLU inputs", plan.act_fp8_input_store),
                                  (f"optimizer {plan.optimizer}", plan.optimizer not in ("adam", "adamw")))
          if flag]
    return f"; {', '.join(on)}" if on else ""
