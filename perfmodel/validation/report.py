"""Error report: predicted vs measured step time per source, with charts.

Metrics per source and overall, on rows predicted ok with a measured step time:
    APE_i = |pred_i - meas_i| / meas_i;  MAPE = mean APE;  median APE;  worst APE
    bias = median signed error (pred - meas)/meas  (> 0: the model is slow, < 0: optimistic)
    Kendall tau between predicted and measured step time (does the model rank layouts right)
    tau ceiling = the Kendall tau of a model exact up to what the rows' input columns tell apart
        (runs that agree on every column a prediction reads score as ties): the most any model
        reading this runs file can reach
    interval held = share of rows with an 80 % interval whose measured time lies inside it
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.validation.runs import COLUMNS, FREE_TEXT, OPTIONAL_COLUMNS, cell_number

MEASURED = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu")  # what a run measured, never a prediction's input
TARGETS = {"overall_mape": 0.10, "source_mape": 0.15, "kendall_tau": 0.8, "cpu_mape": 0.15}


def _read(path: Path, what: str, dtype: dict[str, type], encoding: str = "utf-8", need: tuple[str, ...] = ()) -> pd.DataFrame:
    """A CSV the report reads; SpecError naming the file when it is empty or lacks a column."""
    from perfmodel.errors import SpecError

    try:
        d = pd.read_csv(path, dtype=dtype, encoding=encoding, encoding_errors="replace")
    except pd.errors.EmptyDataError:
        raise SpecError("(file)", "is empty", what, str(path)) from None
    except (OSError, pd.errors.ParserError) as e:
        raise SpecError("(file)", f"cannot be read ({' '.join(str(e).split())})", what, str(path)) from None
    missing = [c for c in ("run_id", *need) if c not in d.columns]
    if missing:
        raise SpecError(missing[0], "missing column", f"{what}, with columns {', '.join(('run_id', *need))}",
                        str(path))
    return d


def _cell(x: object, blank: str = "") -> str:
    """A runs-file cell as written, a whole number without '.0'; `blank` where the row left it out."""
    if isinstance(x, float):
        return blank if x != x else str(int(x)) if x == int(x) else str(x)
    return str(x)


def joined(runs: list[Path], preds: list[Path]) -> pd.DataFrame:
    frames = []
    for r, p in zip(runs, preds, strict=False):
        # a runs file may carry a BOM, stray non-UTF-8 bytes and damaged cells: validate made
        # those rows error rows; here they must only not stop the report
        with open(r, "rb") as f:
            enc = "utf-16" if f.read(2) in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
        d = _read(r, "a runs file (docs/DESIGN.md, the validation contract)", {"run_id": str}, encoding=enc)
        d["run_id"] = d["run_id"].fillna("")
        d = d[~d["run_id"].duplicated()]  # a repeated run_id is an error row in the predictions
        # columns the report groups and labels by; a file without them is still one source
        if "source" not in d:
            d["source"] = Path(r).name
        d["source"] = d["source"].astype(object).where(d["source"].notna(), Path(r).name)
        for col in COLUMNS:  # the contract's columns a file leaves out read as blank cells
            if col not in d:
                d[col] = np.nan
        q = _read(p, "the output of perfmodel validate", {"run_id": str, "message": str},
                  need=("status", "predicted_step_time_s"))
        q["run_id"] = q["run_id"].fillna("")
        frames.append(d.merge(q.drop_duplicates("run_id"), on="run_id", how="left"))
    m = pd.concat(frames, ignore_index=True)
    for col in ("step_time_s", "predicted_step_time_s", "tp", "pp", "dp", "n_gpus"):
        if col in m:
            # digit grouping ("1,024") and a step time's unit ("850 ms") read as validate reads them
            m[col] = pd.to_numeric(m[col].astype(str).str.strip().map(lambda v, c=col: cell_number(v, c), na_action="ignore"),
                                   errors="coerce")
    m.loc[~(m["step_time_s"] > 0), "step_time_s"] = np.nan  # 0, negative, NaN, text: not measured
    m["signed_error"] = (m["predicted_step_time_s"] - m["step_time_s"]) / m["step_time_s"]
    m["ape"] = m["signed_error"].abs()
    return m


def _key(g: pd.DataFrame, cols: list[str], blanks: dict[str, str] | None = None) -> pd.Series:
    """One text key per row from `cols`, '|'-joined; a blank cell reads as `blanks[col]` or ''. A
    column a runs file leaves all blank reads as float NaN: it is texted cell by cell."""
    out = None
    for col in cols:
        part = g[col].astype(object).where(g[col].notna(), (blanks or {}).get(col, "")).astype(str)
        out = part if out is None else out + "|" + part
    assert out is not None
    return out


def group_tau(g: pd.DataFrame) -> float:
    """Kendall tau between predicted and measured step time inside each (model, hardware)
    group with at least 3 runs, averaged with weights = group size: does the model rank the
    layouts of one model on one machine right?"""
    from scipy.stats import kendalltau

    if g.empty:
        return float("nan")
    key = _key(g, ["model", "arch", "n_layers", "hidden", "accelerator"], {"accelerator": "a100-sxm4-80gb"})
    taus, weights = [], []
    for _, grp in g.groupby(key):
        if len(grp) < 3 or grp["step_time_s"].nunique() < 2:
            continue
        t = kendalltau(grp["predicted_step_time_s"], grp["step_time_s"]).statistic
        if t == t:
            taus.append(t)
            weights.append(len(grp))
    return float(np.average(taus, weights=weights)) if taus else float("nan")


def tau_ceiling(g: pd.DataFrame) -> float:
    """group_tau of a model that is exact up to what the rows' input columns tell apart: runs that
    agree on every column a prediction reads (all but run_id, the measured figures and FREE_TEXT)
    are predicted their mean measured time, so they score as ties. Below 1 where one (model,
    hardware) group holds runs of one configuration measured apart: another software release, a
    setting the runs format has no column for (torch.compile, async TP, an fp8 scaling granularity).
    No model that reads only these columns ranks such runs, so the gap between group_tau and this
    ceiling is the ranking a better model could still gain."""
    if g.empty:
        return float("nan")
    inputs = [c for c in (*COLUMNS, *OPTIONAL_COLUMNS) if c in g and c not in ("run_id", *FREE_TEXT, *MEASURED)]
    same = _key(g, inputs)
    exact = g.copy()
    exact["predicted_step_time_s"] = g.groupby(same)["step_time_s"].transform("mean")
    return group_tau(exact)


def _held(g: pd.DataFrame) -> float:
    """Share of rows with an interval whose measured step time lies inside it (nan: no intervals)."""
    if "predicted_step_time_lo_s" not in g:
        return float("nan")
    has = g["predicted_step_time_lo_s"].notna() & g["predicted_step_time_hi_s"].notna()
    if not has.any():
        return float("nan")
    h = g[has]
    return float(((h["predicted_step_time_lo_s"] <= h["step_time_s"]) & (h["step_time_s"] <= h["predicted_step_time_hi_s"])).mean())


def metrics(m: pd.DataFrame) -> pd.DataFrame:
    ok = m[(m["status"] == "ok") & m["step_time_s"].notna()]
    rows = []
    for name, g in [("overall", ok), *list(ok.groupby("source"))]:
        tau = group_tau(g)
        rows.append({"source": name, "rows": len(g), "mape": g["ape"].mean(), "median_ape": g["ape"].median(),
                     "bias": g["signed_error"].median(), "worst_ape": g["ape"].max(),
                     "worst_run": g.loc[g["ape"].idxmax(), "run_id"] if len(g) else "", "kendall_tau": tau,
                     "kendall_tau_ceiling": tau_ceiling(g),
                     "within_10pct": (g["ape"] <= 0.10).mean(), "within_20pct": (g["ape"] <= 0.20).mean(),
                     "interval_held": _held(g)})
    errors = m[m["status"] != "ok"]
    out = pd.DataFrame(rows)
    out.attrs["errors"] = len(errors)
    return out


def charts(m: pd.DataFrame):
    import altair as alt

    ok = m[(m["status"] == "ok") & m["step_time_s"].notna()].copy()
    ok["layout"] = ok.apply(lambda r: f"tp{_cell(r.tp, '?')} pp{_cell(r.pp, '?')} dp{_cell(r.dp, '?')}", axis=1)
    lo = float(min(ok.step_time_s.min(), ok.predicted_step_time_s.min()))
    hi = float(max(ok.step_time_s.max(), ok.predicted_step_time_s.max()))
    line = pd.DataFrame({"x": [lo, hi], "y": [lo, hi]})
    base = alt.Chart(ok).mark_circle(size=30, opacity=0.6).encode(
        x=alt.X("step_time_s:Q", scale=alt.Scale(type="log"), title="measured step time (s)"),
        y=alt.Y("predicted_step_time_s:Q", scale=alt.Scale(type="log"), title="predicted step time (s)"),
        color=alt.Color("source:N", legend=alt.Legend(orient="bottom", columns=2)),
        tooltip=["run_id", "source", "model", "layout", "n_gpus", "step_time_s", "predicted_step_time_s", "signed_error"],
    )
    diag = alt.Chart(line).mark_line(color="black", strokeDash=[4, 4]).encode(x="x:Q", y="y:Q")
    bands = []
    for f, dash in ((0.10, [2, 2]), (0.25, [6, 3])):
        for sgn in (1, -1):
            b = pd.DataFrame({"x": [lo, hi], "y": [lo * (1 + sgn * f), hi * (1 + sgn * f)]})
            bands.append(alt.Chart(b).mark_line(color="gray", strokeDash=dash, opacity=0.7).encode(x="x:Q", y="y:Q"))
    scatter = alt.layer(diag, *bands, base).properties(
        width=420, height=420, title="predicted vs measured (dashed: equal; gray: ±10 %, ±25 %)")
    ok["recompute"] = ok["recompute"].fillna("none")
    ok["hardware"] = ok["accelerator"].fillna("a100-sxm4-80gb (default)")
    feats = []
    for feat, title in (("tp", "tp"), ("pp", "pp"), ("recompute", "recompute"), ("hardware", "hardware")):
        feats.append(alt.Chart(ok).mark_boxplot(extent="min-max").encode(
            x=alt.X(f"{feat}:O", title=title), y=alt.Y("signed_error:Q", title="(pred - meas) / meas", axis=alt.Axis(format="%")),
            color=alt.Color("source:N")).properties(width=200, height=180))
    grid = alt.vconcat(alt.hconcat(*feats[:2]), alt.hconcat(*feats[2:]))
    return alt.hconcat(scatter, grid).resolve_scale(color="shared")


def write_report(runs: list[Path], preds: list[Path], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    m = joined(runs, preds)
    met = metrics(m)
    met.to_csv(out / "metrics.csv", index=False)
    m.to_csv(out / "joined.csv", index=False)
    text = summary_markdown(met, m)
    (out / "report.md").write_text(text)
    try:
        ch = charts(m)
        ch.save(str(out / "validation.html"))
        try:
            ch.save(str(out / "validation.png"), scale_factor=1.5)
        except Exception as e:  # vl-convert missing: the HTML still carries the chart
            (out / "png_error.txt").write_text(str(e))
    except Exception as e:
        (out / "chart_error.txt").write_text(repr(e))
    return text


def summary_markdown(met: pd.DataFrame, m: pd.DataFrame) -> str:
    lines = ["| source | rows | MAPE | median | bias | worst (run) | Kendall τ (per model × hardware) "
             "| τ ceiling (the columns' ties) | ≤10% | ≤20% | 80 % interval held |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in met.itertuples():
        held = "n/a" if r.interval_held != r.interval_held else f"{r.interval_held:.0%}"
        tau = "n/a" if r.kendall_tau != r.kendall_tau else f"{r.kendall_tau:.3f}"
        ceiling = "n/a" if r.kendall_tau_ceiling != r.kendall_tau_ceiling else f"{r.kendall_tau_ceiling:.3f}"
        if not r.rows:
            lines.append(f"| {r.source} | 0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        lines.append(f"| {r.source} | {r.rows} | {r.mape:.1%} | {r.median_ape:.1%} | {r.bias:+.1%} | "
                     f"{r.worst_ape:.1%} ({r.worst_run}) | {tau} | {ceiling} | {r.within_10pct:.0%} | {r.within_20pct:.0%} "
                     f"| {held} |")
    worst = worst_rows(m, 5)
    lines += ["", "Worst rows:", "", "| run | model | layout | measured s | predicted s | error |", "| --- | --- | --- | --- | --- | --- |"]
    for r in worst.itertuples():
        layout = " ".join(f"{k}{_cell(v)}" for k, v in (("tp", r.tp), ("pp", r.pp), ("dp", r.dp), ("mb", r.micro_batch),
                                                        ("gb", r.global_batch), ("", r.recompute)) if _cell(v))
        model = r.model if isinstance(r.model, str) and r.model else (r.arch if isinstance(r.arch, str) else "-")
        lines.append(f"| {r.run_id} | {model} | {layout} | {r.step_time_s:.4g} | {r.predicted_step_time_s:.4g} | {r.signed_error:+.1%} |")
    n_err = int((m["status"] != "ok").sum())
    lines.append("")
    unmeasured = int(((m["status"] == "ok") & m["step_time_s"].isna()).sum())
    lines.append(f"{len(m)} rows, {n_err} not predicted (status error)"
                 + (f", {unmeasured} without a measured step time (left out of the figures)." if unmeasured else "."))
    if n_err:
        top = m[m["status"] != "ok"]["message"].value_counts().head(5)
        lines += [f"- {c} x {msg}" for msg, c in top.items()]
    return "\n".join(lines) + "\n"


def worst_rows(m: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    ok = m[(m["status"] == "ok") & m["step_time_s"].notna()]
    return ok.reindex(ok["ape"].sort_values(ascending=False).index).head(n)


__all__ = ["TARGETS", "charts", "joined", "metrics", "tau_ceiling", "worst_rows", "write_report"]
