"""Hardware evaluation: the same job on several candidate systems, each at its best layout.

For every candidate (an accelerator id, which brings its reference node, or a node / cluster id)
the search finds the fastest fitting layout on the same GPU count; `train.time_to_train` turns
it into days, GPU-hours, cost and energy, and `goodput` into the expected wall time under the
Llama 3 failure rate. The sensitivity view re-searches each candidate with scale-out bandwidth,
scale-up bandwidth or HBM bandwidth moved by ±pct, and reprices it by ±pct.
`write_report` writes a Markdown page and an HTML page with Altair charts a person can forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfmodel.calibration.profile import Profile
from perfmodel.engines.stages import cached_graph
from perfmodel.errors import PerfmodelError, UnknownIdError
from perfmodel.hardware.system import System
from perfmodel.planning.goodput import checkpoint_bytes, goodput
from perfmodel.planning.search import layout_label, resolve_hardware, search
from perfmodel.planning.space import SearchSpace
from perfmodel.planning.train import PowerModel, time_to_train
from perfmodel.units import GB
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.spec import ModelSpec

DEFAULT_TOKENS = 1e12


@dataclass(frozen=True)
class Job:
    spec: ModelSpec
    n_gpus: int
    global_batch: int
    tokens: float = DEFAULT_TOKENS
    seq_len: int | None = None
    precision: str = "bf16"
    power_model: PowerModel = "tdp"
    pue: float = 1.0
    electricity_usd_per_kwh: float | None = None
    calibration: str | Profile | None = "default"
    framework: str | None = None
    optimizer: str = "adam"


def evaluate_candidate(job: Job, system: System, label: str, space: SearchSpace | None = None) -> dict[str, object]:
    """One comparison row: best layout, time, cost, energy, goodput (or the error)."""
    row: dict[str, object] = {"candidate": label, "accelerator": system.accelerator.id, "system": system.name,
                              "n_gpus": job.n_gpus}
    res = search(job.spec, system, job.n_gpus, job.global_batch, seq_len=job.seq_len, precision=job.precision, space=space,
                 calibration=job.calibration, framework=job.framework, optimizer=job.optimizer)
    if res.table.empty:
        return {**row, "message": f"no layout fits ({res.n_layouts} tried)"}
    est = res.best()
    run = time_to_train(est, system, tokens=job.tokens, power_model=job.power_model, pue=job.pue,
                        electricity_usd_per_kwh=job.electricity_usd_per_kwh)
    seq = job.seq_len or job.spec.seq_len
    params = cached_graph(job.spec, 1, seq, 1, 1, 1, False, job.precision, "flash").total_params_full()
    gp = goodput(job.n_gpus, checkpoint_bytes(params), ideal_wall_s=run.wall_s)
    return {
        **row, "layout": layout_label(est.plan), "plan": est.plan, "step_time_s": est.step_time_s,
        "tokens_per_s": est.tokens_per_s,
        "step_time_lo_s": getattr(est, "step_time_lo_s", None), "step_time_hi_s": getattr(est, "step_time_hi_s", None),
        "mfu": est.mfu, "memory_gb": est.memory.total_bytes / GB, "days": run.wall_days, "gpu_hours": run.gpu_hours,
        "usd_per_gpu_hour": run.price_per_gpu_hour_usd, "cost_usd": run.cost_usd, "energy_mwh": run.energy_mwh,
        "power_per_gpu_w": run.power_per_gpu_w, "power_basis": run.power_basis, "pue": run.pue,
        "energy_cost_usd": run.energy_cost_usd, "tokens_per_usd": run.tokens_per_usd, "tokens_per_joule": run.tokens_per_joule,
        "measured_terms": ", ".join(k for k, v in est.provenance.items() if v.startswith("measured")),
        "fallback_terms": ", ".join(est.fallback_terms), "mfu_flag": est.mfu_flag or "",
        "goodput": gp.fraction, "checkpoint_interval_s": gp.interval_s,
        "days_with_failures": (gp.effective_wall_s or math.nan) / 86400.0, "layouts_searched": res.n_layouts,
        "message": run.message,
    }


def compare(workload: str | ModelSpec, candidates: list[str | System], n_gpus: int, global_batch: int,
            tokens: float = DEFAULT_TOKENS, *, seq_len: int | None = None, precision: str = "bf16",
            space: SearchSpace | None = None, power_model: PowerModel = "tdp", pue: float = 1.0,
            electricity_usd_per_kwh: float | None = None, calibration: str | Profile | None = "default",
            framework: str | None = None, optimizer: str = "adam") -> pd.DataFrame:
    """One row per candidate; a candidate that cannot run (too few GPUs, nothing fits) gets a row
    whose `message` says why; an id the catalogue does not know is an UnknownIdError (a typo,
    not a result). Each row says its power basis and which cost terms are measured on
    that hardware and which take the derating rule (`fallback_terms`). `optimizer`: every
    layout's optimizer (ParallelPlan.optimizer)."""
    spec = get_workload(workload) if isinstance(workload, str) else workload
    job = Job(spec, n_gpus, global_batch, tokens, seq_len, precision, power_model, pue, electricity_usd_per_kwh,
              calibration, framework, optimizer)
    rows = []
    for cand in candidates:
        label = cand if isinstance(cand, str) else cand.name
        try:
            rows.append(evaluate_candidate(job, resolve_hardware(cand, n_gpus), label, space))
        except UnknownIdError:
            raise
        except (PerfmodelError, ValueError, KeyError) as e:
            rows.append({"candidate": label, "n_gpus": n_gpus, "message": f"{type(e).__name__}: {e}"})
    return pd.DataFrame(rows)


WHAT_IFS = {"scale-out bandwidth": "inter_bw", "scale-up bandwidth": "intra_bw", "HBM bandwidth": "hbm_bw"}


def sensitivity(workload: str | ModelSpec, candidates: list[str | System], n_gpus: int, global_batch: int,
                tokens: float = DEFAULT_TOKENS, pct: float = 20.0, *, seq_len: int | None = None,
                precision: str = "bf16", space: SearchSpace | None = None,
                calibration: str | Profile | None = "default", framework: str | None = None,
                optimizer: str = "adam") -> pd.DataFrame:
    """Long form: candidate, knob, change (±pct %), days, cost and their ratio to the baseline."""
    spec = get_workload(workload) if isinstance(workload, str) else workload
    job = Job(spec, n_gpus, global_batch, tokens, seq_len, precision, calibration=calibration, framework=framework,
              optimizer=optimizer)
    rows = []
    for cand in candidates:
        label = cand if isinstance(cand, str) else cand.name
        try:
            system = resolve_hardware(cand, n_gpus)
            base = evaluate_candidate(job, system, label, space)
        except (PerfmodelError, ValueError, KeyError):
            continue
        if "days" not in base:
            continue
        for knob, arg in WHAT_IFS.items():
            for sign in (-1, 1):
                f = 1 + sign * pct / 100
                r = evaluate_candidate(job, system.scaled(**{arg: f}), label, space)
                rows.append(_sens_row(label, knob, sign * pct, r.get("days"), r.get("cost_usd"), base))
        for sign in (-1, 1):
            cost = float(base["cost_usd"]) * (1 + sign * pct / 100) if base.get("cost_usd") is not None else None  # type: ignore[arg-type]
            rows.append(_sens_row(label, "price", sign * pct, base["days"], cost, base))
    return pd.DataFrame(rows)


def _sens_row(label: str, knob: str, change: float, days: object, cost: object, base: dict[str, object]) -> dict[str, object]:
    def ratio(v: object, b: object) -> float:
        return float(v) / float(b) if v is not None and b not in (None, 0) else math.nan  # type: ignore[arg-type]

    return {"candidate": label, "knob": knob, "change_pct": change, "days": days, "cost_usd": cost,
            "days_ratio": ratio(days, base["days"]), "cost_ratio": ratio(cost, base.get("cost_usd"))}


# ---------------------------------------------------------------------------------------------
def charts(df: pd.DataFrame, sens: pd.DataFrame | None = None):
    """Altair: days, cost, energy and MFU per candidate side by side (+ sensitivity)."""
    import altair as alt

    ok = df.dropna(subset=["days"]) if "days" in df else df.iloc[0:0]
    panels = []
    for col, title, fmt in (("days", "time to train (days)", ".1f"), ("cost_usd", "cost (USD)", "$,.3s"),
                            ("energy_mwh", "energy (MWh)", ".0f"), ("mfu", "MFU", ".0%")):
        data = ok.dropna(subset=[col]) if col in ok else ok.iloc[0:0]
        panels.append(alt.Chart(data).mark_bar().encode(
            x=alt.X("candidate:N", sort=None, title=None), y=alt.Y(f"{col}:Q", title=title, axis=alt.Axis(format=fmt)),
            tooltip=["candidate", "layout", alt.Tooltip(f"{col}:Q", format=fmt)],
        ).properties(title=title, width=180, height=200))
    chart: alt.HConcatChart | alt.VConcatChart = alt.hconcat(*panels)
    if sens is not None and not sens.empty:
        s = alt.Chart(sens).mark_point(filled=True, size=70).encode(
            x=alt.X("days_ratio:Q", title="time to train / baseline", scale=alt.Scale(zero=False)),
            y=alt.Y("knob:N", title=None), color="candidate:N", shape=alt.Shape("change_pct:N", title="change %"),
            tooltip=["candidate", "knob", "change_pct", "days", "days_ratio", "cost_ratio"],
        ).properties(title="sensitivity", width=400, height=160)
        chart = alt.vconcat(chart, s)
    return chart


def markdown(df: pd.DataFrame, job_line: str, sens: pd.DataFrame | None = None) -> str:
    cols = [("candidate", "candidate", "{}"), ("layout", "best layout", "{}"), ("step_time_s", "step (s)", "{:.3g}"),
            ("mfu", "MFU", "{:.1%}"), ("days", "days", "{:.1f}"), ("days_with_failures", "days w/ failures", "{:.1f}"),
            ("gpu_hours", "GPU-hours", "{:,.0f}"), ("cost_usd", "cost (USD)", "{:,.0f}"),
            ("energy_mwh", "energy (MWh)", "{:,.0f}"), ("power_per_gpu_w", "W / GPU", "{:,.0f}"),
            ("power_basis", "power basis", "{}"), ("energy_cost_usd", "energy cost (USD)", "{:,.0f}"),
            ("fallback_terms", "not measured on this hardware (derating rule)", "{}"), ("mfu_flag", "MFU check", "{}"),
            ("tokens_per_usd", "tokens / USD", "{:,.0f}"),
            ("tokens_per_joule", "tokens / J", "{:.3g}"), ("message", "note", "{}")]
    present = [c for c in cols if c[0] in df]
    lines = [f"# Hardware comparison: {job_line}", "", "| " + " | ".join(c[1] for c in present) + " |",
             "|" + "---|" * len(present)]
    for _, r in df.iterrows():
        cells = []
        for key, _, fmt in present:
            v = r.get(key)
            if key == "power_basis" and isinstance(v, str):
                v = v.split(" (")[0]  # the full derivation is in the CSV / JSON
            cells.append("" if v is None or (isinstance(v, float) and math.isnan(v)) or v == "" else fmt.format(v))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Each candidate runs its fastest fitting layout from perfmodel's layout search (analytic engine).",
              "Cost: GPU-hours x the spec's on-demand hourly price (blank where the spec has none).",
              "Energy: GPUs x power x time x PUE; power = the per-GPU share of the node's (or rack's) published wall power,",
              "else TDP x the wall/TDP overhead of the nearest published nodes (the 'power basis' column); full power for the",
              "whole run (the Llama 2 / Llama 3 convention). Energy cost = energy x the electricity price, when given.",
              "Cost terms not measured on a candidate's hardware take the derating rule of docs/DESIGN.md.",
              "Days with failures: Young/Daly checkpointing at the Llama 3 failure rate (419 unexpected interruptions",
              "in 54 days on 16,384 H100), 14 B/param checkpoints, the Llama 3 storage bandwidth share per GPU, 10 min restarts."]
    if sens is not None and not sens.empty:
        lines += ["", "## Sensitivity", "", "| candidate | knob | change | days / baseline | cost / baseline |",
                  "|---|---|---|---|---|"]
        for _, r in sens.iterrows():
            cr = "" if math.isnan(r["cost_ratio"]) else f"{r['cost_ratio']:.3f}"
            lines.append(f"| {r['candidate']} | {r['knob']} | {r['change_pct']:+.0f}% | {r['days_ratio']:.3f} | {cr} |")
    return "\n".join(lines) + "\n"


def write_report(df: pd.DataFrame, out: str | Path, job_line: str, sens: pd.DataFrame | None = None) -> list[Path]:
    """Write report.md, report.html (the table and the Altair charts) and compare.csv into `out`."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    md = markdown(df, job_line, sens)
    paths = [d / "report.md", d / "compare.csv"]
    paths[0].write_text(md)
    df = df.drop(columns=["plan"], errors="ignore")  # the layout column names it; the object is for callers
    df.to_csv(paths[1], index=False)
    if sens is not None and not sens.empty:
        sens.to_csv(d / "sensitivity.csv", index=False)
        paths.append(d / "sensitivity.csv")
    try:
        chart = charts(df, sens)
    except ImportError:
        return paths
    html = d / "report.html"
    shown = df.drop(columns=[c for c in ("accelerator", "system") if c in df])
    table = shown.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="")
    html.write_text(f"<html><head><meta charset='utf-8'><title>{job_line}</title>"
                    "<script src='https://cdn.jsdelivr.net/npm/vega@5'></script>"
                    "<script src='https://cdn.jsdelivr.net/npm/vega-lite@5'></script>"
                    "<script src='https://cdn.jsdelivr.net/npm/vega-embed@6'></script></head><body>"
                    f"<h1>{job_line}</h1>{table}<div id='vis'></div>"
                    f"<script>vegaEmbed('#vis', {chart.to_json()});</script></body></html>")
    paths.append(html)
    return paths


__all__ = ["Job", "charts", "compare", "evaluate_candidate", "markdown", "sensitivity", "write_report"]
