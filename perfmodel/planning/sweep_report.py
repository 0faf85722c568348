"""`perfmodel report RESULTS.parquet`: the HTML comparison of a sweep.

One section per (workload, global batch, sequence length, precision); in it one row per
(hardware, GPU count) with that point's best layout (rank 0): step time, tokens/s, MFU, memory per
GPU, the layout, and a bar of the step time relative to the fastest row of the section (the bar is
plain HTML, so that the page opens offline). Points where no layout fits, or that failed, are listed
with their status. The page is self-contained (no scripts).
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from perfmodel.planning.search import layout_label
from perfmodel.planning.sweep import read_results
from perfmodel.units import fmt


def best_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rank-0 row of every point, and the status row of every point without one."""
    return df[df["rank"] <= 0].reset_index(drop=True)


def best_view(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(best rows, the table the app shows): one row per point, fastest first within a workload and
    batch, memory in decimal GB."""
    best = best_rows(read_results(results))
    cols = [c for c in ("workload", "hardware", "n_gpus", "global_batch", "precision", "status", "step_time_s",
                        "tokens_per_s", "mfu", "memory_bytes") if c in best]
    view = best.sort_values([c for c in ("workload", "global_batch", "step_time_s") if c in best])[cols]
    if "memory_bytes" in view:
        view = view.assign(memory_gb=view.pop("memory_bytes") / 1e9)
    return best, view.reset_index(drop=True)


def write_sweep_report(results: Path, out: Path) -> str:
    df = read_results(results)
    best = best_rows(df)
    out.parent.mkdir(parents=True, exist_ok=True)
    sections = []
    for (wl, gb, seq, prec), grp in best.groupby(["workload", "global_batch", "seq_len", "precision"], sort=True):
        sections.append(_section(f"{wl}, global batch {gb}, sequence {seq}, {prec}", grp))
    n_points = len(best)
    title = f"perfmodel sweep: {html.escape(results.name)}"
    body = "".join(sections) or "<p>no points in this file</p>"
    out.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_CSS}</style>"
                   f"</head><body><h1>{title}</h1><p>{n_points} points, {len(df)} rows; best layout of each point "
                   f"(rank 0). Bars: step time relative to the section's fastest.</p>{body}</body></html>")
    return f"{n_points} points -> {out}"


def _section(heading: str, grp: pd.DataFrame) -> str:
    ok = grp[grp["status"] == "ok"].sort_values(["step_time_s"])
    fastest = float(ok["step_time_s"].min()) if not ok.empty else float("nan")
    rows = []
    for _, r in ok.iterrows():
        width = 100.0 * fastest / float(r["step_time_s"])
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            html.escape(str(r["hardware"])), int(r["n_gpus"]), f"{r['step_time_s']:.4g} s",
            f"<div class='bar' style='width:{width:.1f}%'></div>", f"{r['tokens_per_s']:,.0f}", f"{r['mfu']:.1%}",
            fmt(float(r["memory_bytes"]), "B"), html.escape(layout_label(r)), f"{int(r['n_layouts']):,}")) + "</tr>")
    for _, r in grp[grp["status"] != "ok"].iterrows():
        rows.append(f"<tr class='bad'><td>{html.escape(str(r['hardware']))}</td><td>{int(r['n_gpus'])}</td>"
                    f"<td colspan='7'>{html.escape(str(r['status']))}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("hardware", "GPUs", "step", "relative speed", "tokens/s", "MFU",
                                             "memory/GPU", "best layout", "layouts searched"))
    return f"<h2>{html.escape(heading)}</h2><table><tr>{head}</tr>{''.join(rows)}</table>"


_CSS = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:nth-child(8){text-align:left}"
        ".bar{background:#4c78a8;height:10px;min-width:1px}tr.bad td{color:#a33;text-align:left}"
        "td:nth-child(4){width:160px}")
