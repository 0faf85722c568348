"""A calibration profile: fitted parameter values, the residual spread the prediction intervals
come from, and provenance. Applying one produces an adjusted System (accelerator, node and
network efficiencies), so the cost functions stay pure and both engines and the planner read the
same numbers.

    profile = load_profile(None)            # the shipped default (profiles/default.yaml)
    system = calibrated_system(system, profile, framework("megatron-core"))
    lo, hi = step_time_interval(profile, system, spec, plan, step_time_s)

`load_profile("none")` is the physics-only model: every knob 1 (microbenchmark rates as
measured); the framework's mechanisms still apply, they are physics, not fitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from perfmodel.calibration.frameworks import Framework, host_dispatch_factor
from perfmodel.calibration.frameworks import framework as named_framework
from perfmodel.calibration.parameters import KNOBS, REGISTRY, Knob, split_key
from perfmodel.compute.ops import FLASH_FALLBACK_RATIO, kernel_ratio
from perfmodel.errors import PerfmodelError
from perfmodel.estimate import Estimate
from perfmodel.hardware.attention import FLASH1_KERNEL, attention_curve
from perfmodel.hardware.network import NetworkLevel
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system import System
from perfmodel.hardware.variability import slowest_unit_factor
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.units import parse_quantity
from perfmodel.workload.spec import ModelSpec

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = PROFILES_DIR / "default.yaml"
TINY_EAGER_OP_S = 7e-6  # the host-op unit engines/costs.host_op_s scales from (pytorch/pytorch#41383)
Z80 = 1.2816  # standard normal quantile of 0.90: an 80 % central interval
# spread added (log space, 1 sigma) when the fit saw no run of the model family: mechanisms the
# public set cannot exercise (MoE dispatch, Mamba scans, encoders) are physics without data
UNSEEN_FAMILY_SIGMA = 0.20
# spread added (log space, 1 sigma) when another CPU's spec stands in for this machine's (an
# uncalibrated `host-cpu`, hardware/host_cpu.py): the two measured hosts, an EPYC Zen 4 and a Zen 5,
# ran the same 28 CPU runs a median 1.9x apart (1.3x to 2.6x; validation/runs_cpu*.csv), ln 1.9
STAND_IN_HOST_SIGMA = 0.64


class ProfileError(PerfmodelError):
    """A calibration profile file that cannot be read; the message names the file and field."""


@dataclass(frozen=True)
class Profile:
    name: str
    values: dict[str, float] = field(default_factory=dict)
    sigma_log: dict[str, float] = field(default_factory=dict)
    # regime -> (q10, q90) of log(measured / predicted) from leave-one-source-out residuals
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    physics_only: bool = False

    def value(self, name: str, scope_value: str | None = None) -> float:
        """A parameter's fitted value, else its prior (a generation the fit never saw: 1, the pool)."""
        if self.physics_only:
            return 1.0
        k = name if scope_value is None else f"{name}[{scope_value}]"
        if k in self.values:
            return self.values[k]
        p = next(p for p in REGISTRY if p.name == name)
        return p.prior

    def knobs(self, acc: Accelerator, fw: Framework | None = None) -> dict[Knob, float]:
        """The knob factors for one accelerator under one stack (1 = microbenchmark as measured)."""
        f: dict[Knob, float] = dict.fromkeys(KNOBS, 1.0)
        dispatch = fw.host_dispatch if fw is not None else "eager"
        for p in REGISTRY:
            scope_value = acc.generation if p.scope == "generation" else None
            if p.applies(acc, scope_value, dispatch):
                f[p.knob] *= self.value(p.name, scope_value)
        if fw is not None:
            f["host"] *= host_dispatch_factor(fw)
        return f

    @property
    def generations_seen(self) -> set[str]:
        return set(self.provenance.get("generations", []))

    @property
    def mechanisms_seen(self) -> set[str]:
        """The model families and token mixers (spec_mechanisms) the fitted rows ran; a profile
        fitted before mixers were recorded saw its families' own mixers only."""
        return set(self.provenance.get("mechanisms", self.provenance.get("families", [])))

    @property
    def frameworks_seen(self) -> set[str]:
        return set(self.provenance.get("frameworks", []))

    @property
    def between_source_sigma(self) -> float:
        """How far a new source (stack, cluster, software release) sits from the others: the
        standard deviation over the fit's sources of the median held-out log residual, from this
        profile's own leave-one-source-out table (UNSEEN_FAMILY_SIGMA where it has none)."""
        meds = [math.log1p(float(r["loso_median"])) for r in self.provenance.get("leave_one_source_out", [])
                if r.get("loso_median") is not None and float(r["loso_median"]) > -1]
        if len(meds) < 3:
            return UNSEEN_FAMILY_SIGMA
        mean = sum(meds) / len(meds)
        return math.sqrt(sum((m - mean) ** 2 for m in meds) / (len(meds) - 1))


NONE = Profile("none", physics_only=True)


def load_profile(which: str | Path | Profile | None) -> Profile:
    """None or 'default': the shipped profile; 'none': physics only; else a YAML path."""
    if isinstance(which, Profile):
        return which
    if which is None or str(which) == "default":
        return _load(str(DEFAULT_PROFILE)) if DEFAULT_PROFILE.exists() else NONE
    if str(which) == "none":
        return NONE
    return _load(str(which))


_CACHE: dict[str, Profile] = {}


def _load(path: str) -> Profile:
    if path in _CACHE:
        return _CACHE[path]
    p = Path(path)
    if not p.exists():
        raise ProfileError(f"calibration profile {path!r}: no such file; give a YAML written by `perfmodel fit`, "
                           "'default' or 'none'")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ProfileError(f"{path}: not valid YAML: {str(e)[:200]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
        raise ProfileError(f"{path}: expected a mapping with a `parameters:` mapping (written by `perfmodel fit`)")
    for fld in ("provenance", "intervals"):
        if data.get(fld) is not None and not isinstance(data[fld], dict):
            raise ProfileError(f"{path}: {fld} = {type(data[fld]).__name__}; expected a mapping (written by `perfmodel fit`)")
    if data.get("name") is not None and not isinstance(data["name"], str):
        raise ProfileError(f"{path}: name = {data['name']!r}; expected a string")
    values, sigmas = {}, {}
    for k, entry in data["parameters"].items():
        try:
            param, _ = split_key(str(k))
        except KeyError as e:
            raise ProfileError(f"{path}: parameters.{k}: {e.args[0]}") from None
        v = entry.get("fitted") if isinstance(entry, dict) else entry
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not param.lower <= v <= param.upper:
            raise ProfileError(f"{path}: parameters.{k}.fitted = {v!r}; allowed: a number in [{param.lower}, {param.upper}]")
        values[str(k)] = float(v)
        if isinstance(entry, dict) and isinstance(entry.get("sigma_log"), (int, float)):
            sigmas[str(k)] = float(entry["sigma_log"])
    intervals = {}
    for regime, q in (data.get("intervals") or {}).items():
        if not (isinstance(q, list) and len(q) == 2 and all(isinstance(x, (int, float)) for x in q) and q[0] <= q[1]):
            raise ProfileError(f"{path}: intervals.{regime} = {q!r}; expected [q10, q90] of log(measured/predicted)")
        intervals[str(regime)] = (float(q[0]), float(q[1]))
    prof = Profile(str(data.get("name") or p.stem), values, sigmas, intervals, dict(data.get("provenance") or {}))
    _CACHE[path] = prof
    return prof


def save_profile(prof: Profile, path: Path | str, table: list[dict[str, Any]] | None = None) -> None:
    """Write `prof` as YAML; `table` rows (key, prior, fitted, sigma_log, source) document each value."""
    params: dict[str, Any] = {}
    rows = {r["key"]: r for r in (table or [])}
    for k, v in prof.values.items():
        param, _ = split_key(k)
        r = rows.get(k, {})
        params[k] = {"fitted": round(v, 4), "prior": r.get("prior", param.prior),
                     "sigma_log": round(prof.sigma_log.get(k, param.prior_sigma_log), 4),
                     "knob": param.knob, "scope": param.scope, "source": param.source}
    data = {"name": prof.name, "provenance": prof.provenance, "parameters": params,
            "intervals": {k: [round(a, 4), round(b, 4)] for k, (a, b) in prof.intervals.items()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("# Calibration profile written by `perfmodel fit` (docs/CALIBRATION.md).\n"
                          + yaml.safe_dump(data, sort_keys=False, width=110))


# --- applying a profile --------------------------------------------------------------------------
_SRC = "fitted by perfmodel fit (calibration profile), not measured"  # a citation: the spec models accept it


def _adjusted_accelerator(acc: Accelerator, gemm: float, attention: float, flash1: float, memory_bound: float,
                          host: float) -> Accelerator:
    d = acc.model_dump()
    cal = d["calibration"]
    gemm_applied = 1.0
    # a whole-model efficiency measured on this part or its generation (B200's 0.68, carried to
    # GB200 / B300 / GB300 by hardware/derating.py) already is the in-model GEMM and attention
    # efficiency: the fitted knobs apply only where the part runs at isolated-kernel rates
    in_model_known = acc.calibration.in_model_efficiency is not None or acc.in_model_efficiency != 1.0
    if in_model_known:
        gemm, attention = 1.0, 1.0
    if gemm != 1.0:
        gemm_applied = min(gemm, 1.0)
        cal["in_model_efficiency"] = {"value": gemm_applied, "source": _SRC, "direction": None, "note": None}
    if attention != 1.0 or gemm_applied != 1.0 or flash1 != 1.0:
        # the attention rate is read times in_model_efficiency: divide it out so attention gets its own knob
        r = attention / gemm_applied
        curve = attention_curve(acc)
        if not cal["attention"] and curve is not None:
            # a curve carried from the generation (hardware/attention.py) takes the knob as the
            # measured ones do: written out as this part's points
            cal["attention"] = [{"kernel": k, "direction": "fwd_bwd", "causal": c, "head_dim": d, "seq_len": n,
                                 "achieved": f"{v:.6e} FLOP/s", "source": curve.provenance} for k, c, d, n, v in curve.points]
        if flash1 != 1.0 and curve is not None and not curve.kernel_points("flash1"):
            # a part without Triton points runs `flash1` at its FA2-class curve x the Triton / FA2
            # ratio of the part that measured both (compute/ops.kernel_ratio): written out as this
            # part's Triton points, so the kernel's factor reaches them
            cal["attention"] = list(cal["attention"]) + [
                {"kernel": FLASH1_KERNEL, "direction": "fwd_bwd", "causal": c, "head_dim": d, "seq_len": n,
                 "achieved": f"{v * kernel_ratio('flash1', d, n, c):.6e} FLOP/s", "source": curve.provenance}
                for _, c, d, n, v in curve.kernel_points("flash")]
        for pt in cal["attention"]:
            v = parse_quantity(pt["achieved"], "flop_per_s", "calibration.attention.achieved")
            pt["achieved"] = f"{v * r * (flash1 if pt.get('kernel') == FLASH1_KERNEL else 1.0):.6e} FLOP/s"
        if curve is None:
            # no attention measurement in the generation: the ratio fallback takes the knob the same way
            base = (acc.calibration.attention_fallback_ratio.si("dimensionless")
                    if acc.calibration.attention_fallback_ratio else FLASH_FALLBACK_RATIO)
            cal["attention_fallback_ratio"] = {"value": base * r, "source": _SRC, "direction": None, "note": None}
    if memory_bound != 1.0:
        cal["elementwise_achieved"] = {"value": f"{acc.elementwise_achieved_Bps * memory_bound:.6e} B/s",
                                       "source": _SRC, "direction": None, "note": None}
    if host != 1.0:
        base = acc.calibration.host_op_overhead.si("seconds") if acc.calibration.host_op_overhead else TINY_EAGER_OP_S
        cal["host_op_overhead"] = {"value": f"{base * host:.6e} s", "source": _SRC, "direction": None, "note": None}
    return Accelerator.model_validate(d)


@lru_cache(maxsize=256)
def _adjusted_levels(levels: tuple[NetworkLevel, ...], scale_up: float, scale_out: float) -> tuple[NetworkLevel, ...]:
    """Level 0 (scale-up): efficiency and measured busbw curves x scale_up; the scale-out levels:
    efficiency x scale_out."""
    out = []
    for i, lv in enumerate(levels):
        f = scale_up if i == 0 else scale_out
        if f == 1.0:
            out.append(lv)
            continue
        curves = tuple(replace(c, points=tuple((size, busbw * f) for size, busbw in c.points)) for c in lv.curves)
        out.append(replace(lv, efficiency=lv.efficiency * f, curves=curves))
    return tuple(out)


_ADJ: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def calibrated_system(system: System, prof: Profile, fw: Framework | None = None) -> System:
    """`system` with the profile's knobs applied (memoised, so cost caches keyed on the
    accelerator's identity keep working across rows). The one place a profile meets hardware."""
    return system_with_knobs(system, prof.knobs(system.accelerator, fw))


def system_with_knobs(system: System, k: dict[Knob, float]) -> System:
    """`system` with explicit knob factors (1 = unchanged)."""
    if all(v == 1.0 for v in k.values()):
        return system
    # memo keyed on the source objects' identity; the entry holds the source too, so an id is
    # never reused while its entry lives
    acc_key = (id(system.accelerator), k["gemm"], k["attention"], k["flash1"], k["memory_bound"], k["host"])
    hit = _ADJ.get(acc_key)
    if hit is None or hit[0] is not system.accelerator:
        hit = _ADJ[acc_key] = (system.accelerator, _adjusted_accelerator(
            system.accelerator, k["gemm"], k["attention"], k["flash1"], k["memory_bound"], k["host"]))
    acc = hit[1]
    levels = system.levels
    if k["scale_up"] != 1.0 or k["scale_out"] != 1.0:
        levels = _adjusted_levels(system.levels, k["scale_up"], k["scale_out"])
    return replace(system, accelerator=acc, levels=levels,
                   ep_dispatch_efficiency=system.ep_dispatch_efficiency * k["moe_dispatch"],
                   p2p_time_factor=system.p2p_time_factor * k["p2p"],
                   speed_spread=calibrated_spread(system, k))


def calibrated_spread(system: System, k: dict[Knob, float]) -> float:
    """The chip-speed spread a calibrated step runs with: the system's times the speed_spread knob
    (hardware/variability.py); what calibrated_system sets and the provenance line reports."""
    return system.speed_spread * k["speed_spread"]


# --- intervals -----------------------------------------------------------------------------------
SCALE_BUCKETS = ("1-8", "9-64", "65-512", ">512")


def scale_bucket(n_gpus: int) -> str:
    return "1-8" if n_gpus <= 8 else "9-64" if n_gpus <= 64 else "65-512" if n_gpus <= 512 else ">512"


def _quantiles_for(prof: Profile, n_gpus: int) -> tuple[float, float] | None:
    """The residual quantiles of the run's scale bucket, else of the nearest bucket the fit had,
    else of all held-out rows."""
    i = SCALE_BUCKETS.index(scale_bucket(n_gpus))
    for j in sorted(range(len(SCALE_BUCKETS)), key=lambda j: (abs(j - i), -j)):
        q = prof.intervals.get(f"scale:{SCALE_BUCKETS[j]}")
        if q is not None:
            return q
    return prof.intervals.get("all")


def spec_mechanisms(spec: ModelSpec | None) -> list[str]:
    """What a model runs that a fit may not have seen: its family (dense, moe, lstm, ...; 'graph'
    for an imported module) and the token mixers beside attention that the family does not imply:
    'mamba' (Mamba-2 mixers), 'mla' / 'csa' (latent or compressed attention)."""
    if spec is None:
        return ["graph"]
    out: list[str] = [spec.family]
    if spec.mamba is not None:
        out.append("mamba")
    if spec.attention in ("mla", "csa"):
        out.append(spec.attention)
    return out


def step_time_interval(prof: Profile, acc: Accelerator, spec: ModelSpec | None, plan: ParallelPlan,
                       step_time_s: float, widen: bool = True, framework: str | None = None,
                       host_stand_in: bool = False) -> tuple[float, float] | None:
    """80 % interval of the step time: the leave-one-source-out residual quantiles q10, q90 of
    log(measured / predicted) for the run's scale (the nearest scale the fit had), widened in
    quadrature where the fit saw neither the accelerator generation (the prior spread of
    gemm_generation) nor the model family or a token mixer it runs (once per unseen mechanism:
    spec_mechanisms), nor the training stack (`framework`, when given: the
    between-source spread of the fit's held-out medians, since the efficiency factors were fitted
    on other stacks), nor, for `host_stand_in`, the CPU the run is on (another CPU's spec stands in:
    STAND_IN_HOST_SIGMA). The interval always contains the point estimate
    (q10 <= 0 <= q90): where held-out runs of a scale were all slower than predicted, it says so
    by reaching far above the estimate, not by leaving it."""
    q = _quantiles_for(prof, plan.world) if prof.intervals else None
    if q is None:
        return None
    lo, hi = min(q[0], 0.0), max(q[1], 0.0)
    extra = 0.0
    if widen and acc.generation not in prof.generations_seen:
        extra += (Z80 * next(p.prior_sigma_log for p in REGISTRY if p.name == "gemm_generation")) ** 2
    if widen:
        # each mechanism of the model no fitted row ran (an MoE, a Mamba-2 mixer, latent attention)
        # is physics without data: its spread adds in quadrature
        unseen = [m for m in spec_mechanisms(spec) if m not in prof.mechanisms_seen]
        extra += len(unseen) * (Z80 * UNSEEN_FAMILY_SIGMA) ** 2
    if widen and framework and prof.frameworks_seen and framework not in prof.frameworks_seen:
        extra += (Z80 * prof.between_source_sigma) ** 2
    if widen and host_stand_in:
        extra += (Z80 * STAND_IN_HOST_SIGMA) ** 2
    if extra:
        lo, hi = -math.sqrt(lo**2 + extra), math.sqrt(hi**2 + extra)
    return step_time_s * math.exp(lo), step_time_s * math.exp(hi)


def with_interval(est: Estimate, prof: Profile, system: System, spec: ModelSpec | None,
                  framework: str | None = None) -> Estimate:
    """`est` labelled with the profile, carrying its 80 % step-time interval, and with the
    provenance of the uncalibrated `system` (what was measured or derated) plus one `calibration`
    entry naming the fitted factors applied on top."""
    from perfmodel.hardware.derating import system_provenance

    acc = system.accelerator
    iv = step_time_interval(prof, acc, spec, est.plan, est.step_time_s, framework=framework,
                            host_stand_in=system.host_stand_in)
    prov = system_provenance(system, est.plan.precision) if est.provenance else {}
    k = prof.knobs(acc, named_framework(framework) if framework else None)
    if prov:
        spread = calibrated_spread(system, k)
        prov["slowest_chip"] = (f"kernels at the pace of the slowest of {est.plan.world} chips: "
                                f"x{slowest_unit_factor(spread, est.plan.world):.4f} (chip-speed spread {spread:.2%}, "
                                "hardware/variability.py)")
    if not prof.physics_only:
        prov["calibration"] = (f"fitted: profile {prof.name!r} x " + ", ".join(f"{n} {v:.3g}" for n, v in k.items() if v != 1.0)
                               + " on the rates above (gemm and attention not where a whole-model efficiency is known)")
    return replace(est, calibration=prof.name, step_time_lo_s=iv[0] if iv else None, step_time_hi_s=iv[1] if iv else None,
                   provenance=prov)
