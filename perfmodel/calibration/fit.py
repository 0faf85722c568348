"""`perfmodel fit`: fit a calibration profile to measured runs, judged leave-one-source-out.

Method (docs/CALIBRATION.md):
  residual   r_i = log(T_i(theta) / M_i) / SIGMA_ROW, M measured, T predicted
  loss       soft-L1 on r (rho = 2(sqrt(1 + r^2) - 1)): a few rows that the physics cannot
             explain (a missing mechanism) pull linearly, not quadratically
  weights    row weight^2 = min(n_s, ROWS_PER_SOURCE) / n_s for a source of n_s rows, so a source
             counts as at most ROWS_PER_SOURCE rows and one large source cannot dominate
  prior      (log theta_p - log prior_p) / sigma_p per parameter (MAP): a parameter without data
             stays at its prior
  solver     scipy.optimize.least_squares on log theta, inside the registry's bounds

Speed: the step time is linearised per knob. For every row the engine is run once at the
linearisation point and once per knob with that knob's time doubled; the extra seconds A_ij are
what knob j contributes, so T_i(theta) = T_i0 + sum_j A_ij (k_ij0 / k_ij(theta) - 1) (host and p2p, which multiply seconds: the
ratio the other way up). This is exact where step time is a sum of terms, and the finite
doubling captures max() and overlap. Two passes (linearise at the prior, fit, re-linearise at the
fit, refit). Every number reported (fit and leave-one-source-out) is then recomputed with the full
engine, never the linearisation.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.calibration.frameworks import Framework, apply_framework, framework
from perfmodel.calibration.parameters import KNOBS, REGISTRY, TIME_KNOBS, Knob, Parameter, key
from perfmodel.calibration.profile import Profile, scale_bucket, spec_mechanisms, step_time_interval, system_with_knobs
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.system import System
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.spec import ModelSpec

SIGMA_ROW = 0.10  # expected per-row scatter of log(T/M) a good fit leaves (10 %)
ROWS_PER_SOURCE = 50
EFFICIENCY_KNOBS: tuple[Knob, ...] = tuple(k for k in KNOBS if k not in TIME_KNOBS)


class FitError(PerfmodelError):
    """Runs that cannot be fitted; the message says why."""


@dataclass
class FitRow:
    run_id: str
    source: str
    spec: ModelSpec
    plan: ParallelPlan
    system: System
    fw: Framework
    measured_s: float
    notes: list[str]


def read_fit_rows(paths: list[Path | str], say: Callable[[str], None] = lambda _m: None) -> list[FitRow]:
    """Rows of the runs files with a positive measured step time and a given micro_batch that the
    model can predict."""
    from perfmodel.validation.runs import RowError, read_rows, row_run
    from perfmodel.workload.catalog import load_workloads

    workloads = load_workloads()
    rows: list[FitRow] = []
    for path in paths:
        skipped = 0
        for r in read_rows(path):
            try:
                measured = float(r.get("step_time_s") or "nan")
                if not measured > 0 or not math.isfinite(measured) or not r.get("micro_batch"):
                    # a row without its micro-batch cannot tell per-kernel host cost from compute:
                    # validate predicts it with the default, the fit leaves it out
                    skipped += 1
                    continue
                run = row_run(r, workloads)
                named = r.get("framework") or None
                fw = framework(named)  # empty: the default stack's host dispatch, which is no stack's (eager)
                plan = apply_framework(run.plan, fw, run.spec) if named else run.plan  # as validate: empty applies no stack
                rows.append(FitRow(run.run_id, r.get("source") or str(path), run.spec, plan,
                                   run.system, fw, measured, run.notes))
            except (PerfmodelError, RowError, ValueError, KeyError):
                skipped += 1
        say(f"{path}: {len(rows)} rows so far, {skipped} skipped (no positive step_time_s, no micro_batch, "
            "or not predictable)")
    if not rows:
        raise FitError(f"no row of {', '.join(map(str, paths))} has a positive step_time_s the model can predict")
    return rows


def _predict(row: FitRow, knobs: dict[Knob, float]) -> float:
    from perfmodel.engines.analytic import analytic_estimate

    return analytic_estimate(row.spec, system_with_knobs(row.system, knobs), row.plan, list(row.notes)).step_time_s


class Problem:
    """The active parameters (globals, plus gemm_generation for each generation in the rows) and
    each row's knob factors as a function of them."""

    def __init__(self, rows: list[FitRow]):
        self.rows = rows
        gens = sorted({r.system.accelerator.generation for r in rows})
        self.keys: list[str] = []
        self.params: list[Parameter] = []
        for p in REGISTRY:
            for g in (gens if p.scope == "generation" else [None]):
                self.keys.append(key(p, g))
                self.params.append(p)
        # membership[i, j, k] = 1 when parameter k multiplies knob j of row i
        self.member = np.zeros((len(rows), len(KNOBS), len(self.keys)))
        for i, r in enumerate(rows):
            for k, (name, p) in enumerate(zip(self.keys, self.params, strict=True)):
                acc = r.system.accelerator
                if p.applies(acc, acc.generation if name == key(p, acc.generation) else None, r.fw.host_dispatch):
                    self.member[i, KNOBS.index(p.knob), k] = 1.0
        from perfmodel.calibration.frameworks import host_dispatch_factor

        self.fixed = np.ones((len(rows), len(KNOBS)))  # framework factors (not fitted)
        for i, r in enumerate(rows):
            self.fixed[i, KNOBS.index("host")] = host_dispatch_factor(r.fw)
        self.log_prior = np.log([p.prior for p in self.params])
        self.sigma = np.array([p.prior_sigma_log for p in self.params])
        self.lower = np.log([p.lower for p in self.params])
        self.upper = np.log([p.upper for p in self.params])

    def knobs(self, log_theta: np.ndarray) -> np.ndarray:
        """[rows, knobs] factors."""
        return np.exp(self.member @ log_theta) * self.fixed

    def row_knobs(self, log_theta: np.ndarray, i: int) -> dict[Knob, float]:
        k = self.knobs(log_theta)[i]
        return {name: float(k[j]) for j, name in enumerate(KNOBS)}


def linearise(prob: Problem, log_theta: np.ndarray, idx: list[int], say: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray]:
    """(T0 [n], A [n, knobs]) at log_theta for rows idx."""
    base = prob.knobs(log_theta)
    t0 = np.array([_predict(prob.rows[i], prob.row_knobs(log_theta, i)) for i in idx])
    a = np.zeros((len(idx), len(KNOBS)))
    for j, name in enumerate(KNOBS):
        say(f"  sensitivity of {len(idx)} rows to {name}")
        for n, i in enumerate(idx):
            k = {kn: float(base[i, jj]) for jj, kn in enumerate(KNOBS)}
            k[name] = k[name] * 2.0 if name in TIME_KNOBS else k[name] / 2.0
            a[n, j] = _predict(prob.rows[i], k) - t0[n]
    return t0, a


def _soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals whose square is the soft-L1 loss 2(sqrt(1 + r^2) - 1)."""
    return np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))


def _weights(rows: list[FitRow], idx: list[int]) -> np.ndarray:
    counts: dict[str, int] = {}
    for i in idx:
        counts[rows[i].source] = counts.get(rows[i].source, 0) + 1
    return np.array([math.sqrt(min(counts[rows[i].source], ROWS_PER_SOURCE) / counts[rows[i].source]) for i in idx])


def solve(prob: Problem, idx: list[int], lin_theta: np.ndarray, t0: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MAP fit on rows idx with the linearisation (t0, a) taken at lin_theta. (log_theta, sigma_log)."""
    from scipy.optimize import least_squares

    k0 = prob.knobs(lin_theta)[idx]
    meas = np.array([prob.rows[i].measured_s for i in idx])
    w = _weights(prob.rows, idx)
    host = [KNOBS.index(k) for k in TIME_KNOBS]
    eff = [KNOBS.index(k) for k in EFFICIENCY_KNOBS]
    # parameters no row in idx depends on stay at the prior exactly (their prior residual is 0)
    used = (np.abs(a[:, None, :] @ prob.member[idx]).squeeze(1) > 0).any(axis=0) if len(idx) else np.zeros(len(prob.keys), bool)

    def model(lt: np.ndarray) -> np.ndarray:
        k = prob.knobs(lt)[idx]
        ratio = np.ones_like(k)
        ratio[:, eff] = k0[:, eff] / k[:, eff]
        ratio[:, host] = np.where(k0[:, host] > 0, k[:, host] / np.maximum(k0[:, host], 1e-30), 1.0)
        return np.maximum(t0 + (a * (ratio - 1.0)).sum(axis=1), 1e-3 * t0)

    def resid(lt: np.ndarray) -> np.ndarray:
        data = w * _soft_l1(np.log(model(lt) / meas) / SIGMA_ROW)
        prior = (lt - prob.log_prior) / prob.sigma
        return np.concatenate([data, prior])

    x0 = np.clip(lin_theta, prob.lower + 1e-9, prob.upper - 1e-9)
    res = least_squares(resid, x0, bounds=(prob.lower, prob.upper), x_scale=prob.sigma, method="trf")
    jac = res.jac
    try:
        cov = np.linalg.inv(jac.T @ jac)
        sig = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        sig = prob.sigma.copy()
    sig = np.where(used, sig, prob.sigma)
    return res.x, sig


@dataclass
class FitResult:
    profile: Profile
    table: list[dict[str, Any]]
    loso: list[dict[str, Any]]
    before: dict[str, float]
    after: dict[str, float]
    loso_all: dict[str, float]


def _errors(pred: list[float], meas: list[float]) -> dict[str, float]:
    e = [p / m - 1.0 for p, m in zip(pred, meas, strict=True)]
    if not e:
        return {"rows": 0, "mape": float("nan"), "median": float("nan")}
    return {"rows": len(e), "mape": statistics.fmean(abs(x) for x in e), "median": statistics.median(e)}


def fit(paths: list[Path | str], name: str = "fitted", say: Callable[[str], None] = lambda _m: None,
        loso: bool = True) -> FitResult:
    """Fit a profile to the runs in `paths`; judge it leave-one-source-out with the full engine."""
    rows = read_fit_rows(paths, say)
    prob = Problem(rows)
    idx = list(range(len(rows)))
    theta = prob.log_prior.copy()
    meas = [r.measured_s for r in rows]
    phys = [_predict(r, dict.fromkeys(KNOBS, 1.0) | {"host": float(prob.fixed[i, KNOBS.index("host")])})
            for i, r in enumerate(rows)]
    sig = prob.sigma
    t0 = a = np.zeros(0)
    for p in range(2):
        say(f"pass {p + 1}/2: linearising {len(rows)} rows around {'the prior' if p == 0 else 'the first fit'}")
        t0, a = linearise(prob, theta, idx, say)
        theta, sig = solve(prob, idx, theta, t0, a)
    fitted = [_predict(r, prob.row_knobs(theta, i)) for i, r in enumerate(rows)]
    sources = sorted({r.source for r in rows})
    # one source (a user's own cluster): hold out one run at a time instead
    by_run = len(sources) == 1
    group = (lambda r: r.run_id) if by_run else (lambda r: r.source)
    groups = sorted({group(r) for r in rows})
    loso_rows: list[dict[str, Any]] = []
    resid_by_row: dict[int, float] = {}
    if loso and len(groups) > 1:
        for s in groups:
            train = [i for i in idx if group(rows[i]) != s]
            test = [i for i in idx if group(rows[i]) == s]
            say(f"leave out {s!r}: fit on {len(train)} rows, predict {len(test)}")
            th, _ = solve(prob, train, theta, t0[train], a[train])
            pred = [_predict(rows[i], prob.row_knobs(th, i)) for i in test]
            for i, pv in zip(test, pred, strict=True):
                resid_by_row[i] = math.log(rows[i].measured_s / pv)
            e_phys = _errors([phys[i] for i in test], [meas[i] for i in test])
            e_loso = _errors(pred, [meas[i] for i in test])
            loso_rows.append({"source": s, "rows": len(test), "physics_mape": e_phys["mape"],
                              "physics_median": e_phys["median"], "loso_mape": e_loso["mape"],
                              "loso_median": e_loso["median"]})
    intervals = _interval_table(rows, resid_by_row)
    values = {k: float(math.exp(v)) for k, v in zip(prob.keys, theta, strict=True)}
    sigmas = {k: float(s) for k, s in zip(prob.keys, sig, strict=True)}
    table = [{"key": k, "prior": p.prior if p.scope != "generation" else 1.0, "prior_sigma_log": p.prior_sigma_log,
              "fitted": values[k], "sigma_log": sigmas[k], "knob": p.knob, "scope": p.scope, "source": p.source}
             for k, p in zip(prob.keys, prob.params, strict=True)]
    before, after = _errors(phys, meas), _errors(fitted, meas)
    loso_pred = [meas[i] / math.exp(resid_by_row[i]) for i in sorted(resid_by_row)]
    loso_all = _errors(loso_pred, [meas[i] for i in sorted(resid_by_row)])
    if resid_by_row and intervals:
        probe = Profile("probe", intervals=intervals)
        held = 0
        for i, r in resid_by_row.items():
            iv = step_time_interval(probe, rows[i].system.accelerator, None, rows[i].plan, 1.0, widen=False)
            held += iv is not None and math.log(iv[0]) <= r <= math.log(iv[1])
        loso_all["interval_coverage"] = held / len(resid_by_row)
    prov = {"fitted_on": [str(p) for p in paths], "rows": len(rows), "sources": sources,
            "date": dt.date.today().isoformat(),
            "held_out_by": "run (one source only)" if by_run else "source",
            "generations": sorted({r.system.accelerator.generation for r in rows}),
            "families": sorted({r.spec.family for r in rows}),
            "mechanisms": sorted({m for r in rows for m in spec_mechanisms(r.spec)}),
            "frameworks": sorted({r.fw.name for r in rows}),
            "physics_only_error": {k: round(v, 4) for k, v in before.items()},
            "in_sample_error": {k: round(v, 4) for k, v in after.items()},
            "leave_one_source_out_error": {k: round(v, 4) for k, v in loso_all.items()},
            "leave_one_source_out": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                                     for r in loso_rows]}
    prof = Profile(name, values, sigmas, intervals, prov)
    return FitResult(prof, table, loso_rows, before, after, loso_all)


def _interval_table(rows: list[FitRow], resid: dict[int, float], min_rows: int = 30) -> dict[str, tuple[float, float]]:
    """q10 / q90 of the held-out log residuals log(M/T), all rows and per scale bucket with
    min_rows or more."""
    if len(resid) < 5:
        return {}
    out = {"all": _q(list(resid.values()))}
    buckets: dict[str, list[float]] = {}
    for i, r in resid.items():
        buckets.setdefault(f"scale:{scale_bucket(rows[i].plan.world)}", []).append(r)
    for b, rs in buckets.items():
        if len(rs) >= min_rows:
            out[b] = _q(rs)
    return out


def _q(xs: list[float]) -> tuple[float, float]:
    q = np.quantile(np.array(xs), [0.10, 0.90])
    return float(q[0]), float(q[1])


def format_result(r: FitResult) -> str:
    lines = [f"{'parameter':<34}{'prior':>8}{'fitted':>9}{'+-(x)':>8}  source"]
    for t in r.table:
        lines.append(f"{t['key']:<34}{t['prior']:>8.3g}{t['fitted']:>9.3f}{math.exp(t['sigma_log']):>8.3f}  {t['source'][:60]}")
    unit = "run" if str(r.profile.provenance.get("held_out_by", "source")).startswith("run") else "source"
    lines += ["", f"{'held-out ' + unit:<44}{'rows':>6}{'physics MAPE':>14}{'median':>9}{'held-out MAPE':>15}{'median':>9}"]
    for s in r.loso:
        lines.append(f"{s['source'][:43]:<44}{s['rows']:>6}{s['physics_mape']:>14.1%}{s['physics_median']:>+9.1%}"
                     f"{s['loso_mape']:>15.1%}{s['loso_median']:>+9.1%}")
    lines += ["", f"all rows: physics only MAPE {r.before['mape']:.1%} (median {r.before['median']:+.1%}); "
              f"fitted in sample {r.after['mape']:.1%} ({r.after['median']:+.1%})"]
    if r.loso_all.get("rows"):
        lines.append(f"leave-one-{unit}-out: MAPE {r.loso_all['mape']:.1%} (median {r.loso_all['median']:+.1%}); "
                     f"80 % interval held {r.loso_all.get('interval_coverage', float('nan')):.0%} of held-out rows")
    return "\n".join(lines)


def fit_main(runs: list[str], out: str, name: str | None = None, quiet: bool = False) -> int:
    import time

    t_start = time.monotonic()

    def say(m: str) -> None:
        if not quiet:
            print(f"[fit {time.monotonic() - t_start:5.1f} s] {m}", file=sys.stderr, flush=True)

    res = fit([Path(p) for p in runs], name or Path(out).stem, say)
    from perfmodel.calibration.profile import save_profile

    save_profile(res.profile, out, res.table)
    print(format_result(res))
    print(f"wrote {out}")
    return 0
