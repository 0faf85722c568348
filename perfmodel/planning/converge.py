"""Time to a target loss: how the global batch trades steps against tokens, and what that costs.

Two published relations combine with the step time the planner finds at each batch:

1. Steps and data to a target (McCandlish et al. 2018, "An Empirical Model of Large-Batch
   Training", Eq. 2.11-2.12): with B the batch and B_noise the gradient noise scale (both in
   tokens here),

       S = S_min · (1 + B_noise / B)          optimizer steps to the target
       E = E_min · (1 + B / B_noise)          tokens (examples) processed to the target
       S_min = E_min / B_noise

   so at B = B_noise a run takes twice the minimum steps and twice the minimum data.

2. The noise scale grows as the loss falls (Kaplan et al. 2020, "Scaling Laws for Neural Language
   Models", Eq. 5.1 and Table 4): B_crit(L) = B_* / L^(1/α_B) with B_* ≈ 2·10^8 tokens and
   α_B ≈ 0.21 (loss in nats per token; B_crit ≈ B_noise, McCandlish et al. §2.3). Their fit is on
   WebText2 with the GPT-2 tokenizer: for other data it is an order-of-magnitude prior, which
   is why the caller may pass `noise_scale_tokens` directly.

The data a model of N parameters needs to reach loss L in the small-batch limit, E_min, comes from
a loss law L(N, D) = E + A/N^α + B/D^β solved for D: the default is Chinchilla's Approach 3 fit
(Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", Eq. 10: E = 1.69,
A = 406.4, B = 410.7, α = 0.34, β = 0.28, MassiveText, loss in nats). Treating the law's D as
E_min is an assumption (Chinchilla trained near, not far above, the noise scale); a user's own
loss curve (tokens, loss) logged at a known batch replaces the law (`fit_loss_curve`), its tokens
converted to E_min by the McCandlish relation. Models without a published law (time-series, RL)
give E_min and B_noise themselves, or estimate B_noise from gradient norms logged at two batch
sizes (`noise_scale_from_log`, McCandlish et al. Appendix A.1).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.errors import LayoutError, PerfmodelError
from perfmodel.hardware.system import System
from perfmodel.workload.spec import ModelSpec


class ConvergeError(PerfmodelError, ValueError):
    """A target that cannot be reached, or inputs that define no curve."""


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta (nats per token)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    source: str

    def loss(self, params: float, tokens: float) -> float:
        return self.E + self.A / params**self.alpha + self.B / tokens**self.beta

    def floor(self, params: float) -> float:
        """The loss a model of `params` parameters reaches with infinite data."""
        return self.E + self.A / params**self.alpha

    def tokens_to_loss(self, params: float, target_loss: float) -> float:
        """D with L(N, D) = target: (B / (L - E - A/N^α))^(1/β)."""
        gap = target_loss - self.floor(params)
        if gap <= 0:
            raise ConvergeError(f"target loss {target_loss:.3f} is below what {params / 1e9:.3g}B parameters reach with "
                                f"infinite data under {self.source} ({self.floor(params):.3f}): pick a target above it")
        return (self.B / gap) ** (1.0 / self.beta)


CHINCHILLA = LossLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,
                     source="Hoffmann et al. 2022 Eq. 10 (Chinchilla Approach 3)")
KAPLAN_B_STAR_TOKENS = 2.0e8  # Kaplan et al. 2020 Eq. 5.1 / Table 4
KAPLAN_ALPHA_B = 0.21


def kaplan_noise_scale_tokens(loss: float, b_star_tokens: float = KAPLAN_B_STAR_TOKENS,
                              alpha_b: float = KAPLAN_ALPHA_B) -> float:
    """B_crit(L) = B_* / L^(1/α_B), in tokens."""
    if loss <= 0:
        raise ConvergeError(f"loss {loss} must be positive")
    return b_star_tokens / loss ** (1.0 / alpha_b)


def steps_and_tokens(e_min_tokens: float, b_noise_tokens: float, batch_tokens: float | np.ndarray) -> tuple[Any, Any]:
    """(steps S, tokens E) to the target at batch `batch_tokens` (McCandlish et al. Eq. 2.11-2.12)."""
    if e_min_tokens <= 0 or b_noise_tokens <= 0:
        raise ConvergeError(f"E_min {e_min_tokens} and B_noise {b_noise_tokens} must be positive")
    b = np.asarray(batch_tokens, dtype=float)
    if np.any(b <= 0):
        raise ConvergeError(f"batch {batch_tokens} must be positive")
    s_min = e_min_tokens / b_noise_tokens
    steps = s_min * (1.0 + b_noise_tokens / b)
    tokens = e_min_tokens * (1.0 + b / b_noise_tokens)
    if np.ndim(batch_tokens) == 0:
        return float(steps), float(tokens)
    return steps, tokens


# -- the user's own data ------------------------------------------------------------------------

def _read_csv(path: str | Path, need: tuple[str, ...]) -> list[dict[str, str]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ConvergeError(f"{p}: cannot read ({e})") from None
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise ConvergeError(f"{p}: no rows")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ConvergeError(f"{p}: missing column(s) {missing}; columns present: {list(rows[0])}")
    return rows


def _floats(path: str | Path, rows: list[dict[str, str]], col: str) -> np.ndarray:
    out = []
    for i, r in enumerate(rows, start=2):
        try:
            v = float(r[col])
        except (TypeError, ValueError):
            raise ConvergeError(f"{path}: line {i}, column {col}: {str(r[col])[:40]!r} is not a number") from None
        if not math.isfinite(v) or v <= 0:
            raise ConvergeError(f"{path}: line {i}, column {col}: {v} must be a positive finite number")
        out.append(v)
    return np.array(out)


@dataclass(frozen=True)
class NoiseScaleEstimate:
    """B_simple = tr(Σ) / |G|² from gradient norms at two batch sizes (McCandlish et al. App. A.1):

        |G|²   ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
        tr(Σ)  ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

    each averaged over the logged steps before the ratio (the ratio of means, not the mean of
    ratios, which is biased). The unit of `b_noise` is the unit of the batch column."""

    b_small: float
    b_big: float
    grad_sq: float
    trace_sigma: float
    b_noise: float
    n_small: int
    n_big: int


def noise_scale_from_log(path: str | Path) -> NoiseScaleEstimate:
    """Read LOG.csv with columns `batch_size` and `grad_norm` (or `grad_norm_sq`), logged at two
    distinct batch sizes (more are allowed: the smallest and the largest are used)."""
    rows = _read_csv(path, ("batch_size",))
    col = "grad_norm_sq" if "grad_norm_sq" in rows[0] else "grad_norm"
    if col not in rows[0]:
        raise ConvergeError(f"{path}: needs a grad_norm or grad_norm_sq column; columns present: {list(rows[0])}")
    b = _floats(path, rows, "batch_size")
    g = _floats(path, rows, col)
    g2 = g if col == "grad_norm_sq" else g * g
    sizes = np.unique(b)
    if len(sizes) < 2:
        raise ConvergeError(f"{path}: gradient norms at one batch size only ({sizes.tolist()}): log two batch sizes")
    bs, bb = float(sizes[0]), float(sizes[-1])
    gs, gb = float(g2[b == bs].mean()), float(g2[b == bb].mean())
    grad_sq = (bb * gb - bs * gs) / (bb - bs)
    trace = (gs - gb) / (1.0 / bs - 1.0 / bb)
    if grad_sq <= 0 or trace <= 0:
        raise ConvergeError(f"{path}: the estimates |G|^2 = {grad_sq:.3g} and tr(Sigma) = {trace:.3g} are not both positive: "
                            "log more steps at each batch size (the noise of the norms swamps the difference)")
    return NoiseScaleEstimate(bs, bb, grad_sq, trace, trace / grad_sq, int((b == bs).sum()), int((b == bb).sum()))


def fit_loss_curve(path: str | Path) -> LossLaw:
    """Fit L(D) = E + B / D^β to a user's loss curve (columns `tokens`, `loss`), as a LossLaw with
    no parameter term (A = 0): it describes that model at the batch it was logged with."""
    from scipy.optimize import curve_fit

    rows = _read_csv(path, ("tokens", "loss"))
    d = _floats(path, rows, "tokens")
    y = _floats(path, rows, "loss")
    if len(d) < 4:
        raise ConvergeError(f"{path}: {len(d)} points; a fit of E + B/D^beta needs at least 4")

    def model(x: np.ndarray, e: float, log_b: float, beta: float) -> np.ndarray:
        return e + np.exp(log_b - beta * np.log(x))

    p0 = (0.8 * float(y.min()), math.log(max(1e-9, float(y.max() - 0.8 * y.min()))) + 0.3 * math.log(float(d.min())), 0.3)
    try:
        (e, log_b, beta), _ = curve_fit(model, d, y, p0=p0, bounds=([0.0, -50.0, 0.01], [float(y.min()), 200.0, 2.0]),
                                        maxfev=20000)
    except (RuntimeError, ValueError) as err:
        raise ConvergeError(f"{path}: the loss curve does not fit E + B/D^beta ({err})") from None
    return LossLaw(E=float(e), A=0.0, B=float(math.exp(log_b)), alpha=1.0, beta=float(beta),
                   source=f"fit to {Path(path).name} (E + B/D^beta)")


# -- the curve ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvergePoint:
    global_batch: int  # sequences
    batch_tokens: float
    steps: float
    tokens: float
    step_time_s: float
    time_s: float
    gpu_hours: float
    cost_usd: float | None
    energy_j: float
    mfu: float
    layout: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"global_batch": self.global_batch, "batch_tokens": self.batch_tokens, "steps": self.steps,
                "tokens": self.tokens, "step_time_s": self.step_time_s, "time_s": self.time_s,
                "gpu_hours": self.gpu_hours, "cost_usd": self.cost_usd, "energy_j": self.energy_j, "mfu": self.mfu,
                "layout": self.layout}


@dataclass(frozen=True)
class ConvergeResult:
    workload: str
    hardware: str
    n_gpus: int
    target_loss: float | None
    e_min_tokens: float
    b_noise_tokens: float
    params: float
    curve: tuple[ConvergePoint, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> ConvergePoint:
        return min(self.curve, key=lambda p: p.time_s)

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "hardware": self.hardware, "n_gpus": self.n_gpus,
                "target_loss": self.target_loss, "e_min_tokens": self.e_min_tokens,
                "b_noise_tokens": self.b_noise_tokens, "params": self.params,
                "curve": [p.to_dict() for p in self.curve], "best": self.best.to_dict(), "notes": list(self.notes)}


def default_batches(n_gpus: int, seq_len: int, b_noise_tokens: float, count: int = 12) -> list[int]:
    """Powers of two in sequences, from one sequence per GPU (or 1) up to past 16 x the noise scale."""
    lo = 1 << max(0, (max(1, n_gpus) - 1).bit_length() - 3)  # n_gpus/8, rounded up to a power of two
    hi_tokens = 16.0 * b_noise_tokens
    out: list[int] = []
    g = lo
    while len(out) < count and (g * seq_len <= hi_tokens or len(out) < 3):
        out.append(g)
        g *= 2
    return out


def time_to_target(workload: str | ModelSpec, hardware: str | System, n_gpus: int, target_loss: float | None = None, *,
                   e_min_tokens: float | None = None, noise_scale_tokens: float | None = None,
                   loss_law: LossLaw = CHINCHILLA, curve_batch_tokens: float | None = None,
                   global_batches: list[int] | None = None,
                   seq_len: int | None = None, precision: str = "bf16", pue: float = 1.0,
                   calibration: str | None = "default") -> ConvergeResult:
    """Wall-clock time, GPU-hours, cost and energy to reach `target_loss`, at each global batch
    with the best layout the planner finds for it (see the module docstring).

    E_min comes from `e_min_tokens`, else from `loss_law` at the model's parameter count; B_noise
    from `noise_scale_tokens`, else from Kaplan's B_crit(L) at the target loss. A `loss_law`
    fitted to the user's own curve (`fit_loss_curve`) describes the batch it was logged at:
    give that batch as `curve_batch_tokens` and its tokens become E_min = E / (1 + B / B_noise)."""
    from perfmodel.planning.search import resolve_hardware, search
    from perfmodel.planning.train import time_to_train
    from perfmodel.workload.builder import build_graph
    from perfmodel.workload.catalog import get_workload

    spec = get_workload(workload) if isinstance(workload, str) else workload
    system = resolve_hardware(hardware, n_gpus) if isinstance(hardware, str) else hardware
    s = seq_len or spec.seq_len
    params = float(build_graph(spec, 1, s, precision, "flash").total_params_full())
    notes: list[str] = []
    if spec.family == "moe":
        notes.append("MoE: the loss law is a dense-model fit, applied at the total parameter count (a rough guide)")
    if noise_scale_tokens is None:
        if target_loss is None:
            raise ConvergeError("give target_loss (for Kaplan's B_crit(L)) or noise_scale_tokens")
        noise_scale_tokens = kaplan_noise_scale_tokens(target_loss)
        notes.append(f"B_noise = Kaplan et al. 2020 B_crit(L) = 2e8 / L^(1/0.21) tokens at L = {target_loss}")
    if e_min_tokens is None:
        if target_loss is None:
            raise ConvergeError("give target_loss (with a loss law) or e_min_tokens")
        tokens = loss_law.tokens_to_loss(params, target_loss)
        if curve_batch_tokens is not None:
            e_min_tokens = tokens / (1.0 + curve_batch_tokens / noise_scale_tokens)
            notes.append(f"E_min from the loss curve ({loss_law.source}) logged at {curve_batch_tokens:.3g} tokens per batch")
        else:
            e_min_tokens = tokens
            notes.append(f"E_min from {loss_law.source} at {params / 1e9:.3g}B parameters (the law's tokens taken as "
                         "the small-batch limit)")
    batches = global_batches or default_batches(n_gpus, s, noise_scale_tokens)
    points = []
    for gb in batches:
        try:
            res = search(spec, system, n_gpus, gb, seq_len=s, precision=precision, calibration=calibration)
            est = res.best()
        except (LayoutError, PerfmodelError, ValueError) as e:
            notes.append(f"global batch {gb}: no layout ({str(e)[:120]})")
            continue
        batch_tokens = float(gb * s)
        steps, tokens = steps_and_tokens(e_min_tokens, noise_scale_tokens, batch_tokens)
        run = time_to_train(est, system, steps=steps, pue=pue)
        p = est.plan
        layout = {"dp": p.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "vp": p.vp, "zero_stage": p.zero_stage,
                  "micro_batch": p.micro_batch, "recompute": p.recompute, "schedule": p.schedule_name,
                  "sequence_parallel": p.sequence_parallel}
        points.append(ConvergePoint(gb, batch_tokens, steps, tokens, est.step_time_s, run.wall_s, run.gpu_hours,
                                    run.cost_usd, run.energy_j, est.mfu, layout))
    if not points:
        raise ConvergeError(f"no global batch in {batches} has a layout of {spec.id} that fits on {n_gpus} GPUs of "
                            f"{system.name}: " + "; ".join(notes[-3:]))
    return ConvergeResult(spec.id, system.name, n_gpus, target_loss, float(e_min_tokens), float(noise_scale_tokens),
                          params, tuple(points), tuple(notes))


__all__ = [
    "CHINCHILLA",
    "ConvergeError",
    "ConvergePoint",
    "ConvergeResult",
    "LossLaw",
    "NoiseScaleEstimate",
    "fit_loss_curve",
    "kaplan_noise_scale_tokens",
    "noise_scale_from_log",
    "steps_and_tokens",
    "time_to_target",
]
