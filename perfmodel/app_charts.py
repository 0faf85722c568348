"""Pure functions: long-form DataFrames in, Altair charts out (the Streamlit app draws them).

No Streamlit here and no perfmodel computation: each function takes the frame a library call
produced (``Estimate.to_frame()``, a search / compare table, the validation join) and only decides
how it looks. Units are converted for display here and named on every axis.
"""

from __future__ import annotations

from typing import Any, TypeVar

import altair as alt
import pandas as pd

from perfmodel.app_specs import band_height, breakdown_chart, memory_chart, tornado_chart  # the Estimate page's, as plain Vega-Lite

FIT_X = alt.AutoSizeParams(type="fit-x", contains="padding")


C = TypeVar("C", alt.Chart, alt.LayerChart)


def fixed_height(chart: C, n_rows: int, step: int, **props: Any) -> C:
    """`chart` with a plot height of `n_rows` x `step` px that fits the page's width (see `band_height`)."""
    return chart.properties(height=band_height(n_rows, step), autosize=FIT_X, **props).configure(autosize=FIT_X)


def compare_chart(frame: pd.DataFrame, column: str, title: str, higher_is_better: bool = False,
                  interval: tuple[str, str] | None = None) -> alt.Chart | alt.LayerChart | alt.FacetChart:
    """One metric across hardware candidates, best (smallest) first.

    `frame`: one row per candidate with a `candidate` column and `column`; `title` names the
    metric with its unit, e.g. 'time to train (days)'. Colours follow the candidate, so several
    of these charts side by side read as one. `interval`: the (lo, hi) columns of the 80 %
    interval, drawn as a black whisker where a row has one.
    """
    f = frame.dropna(subset=[column])
    # the order as an explicit list: a sort by field (op sum) cannot be unioned with the whisker
    # layer's domain, and Vega-Lite drops it with two console warnings per chart
    ranked = f.sort_values(column, ascending=not higher_is_better, kind="stable")["candidate"].drop_duplicates().tolist()
    y = alt.Y("candidate:N", title=None, sort=ranked, axis=alt.Axis(labelLimit=200))
    tips = ["candidate:N", alt.Tooltip(f"{column}:Q", title=title, format=",.4g")]
    has_iv = interval is not None and all(c in f for c in interval) and f[list(interval)].notna().all(axis=1).any()
    if has_iv:
        tips += [alt.Tooltip(f"{interval[0]}:Q", title="80 % low", format=",.4g"),  # type: ignore[index]
                 alt.Tooltip(f"{interval[1]}:Q", title="80 % high", format=",.4g")]  # type: ignore[index]
    bars = alt.Chart(f).mark_bar().encode(
        x=alt.X(f"{column}:Q", title=title), y=y,
        color=alt.Color("candidate:N", legend=None, scale=alt.Scale(domain=sorted(frame["candidate"]), scheme="tableau10")),
        tooltip=tips,
    )
    if not has_iv:
        return fixed_height(bars, len(f), 28, title=title)
    lo, hi = interval  # type: ignore[misc]
    whisker = alt.Chart(f.dropna(subset=[lo, hi])).mark_rule(color="black", strokeWidth=2).encode(
        x=f"{lo}:Q", x2=f"{hi}:Q", y=y)
    return fixed_height(alt.LayerChart(layer=[bars, whisker]), len(f), 28, title=title)


def sensitivity_chart(frame: pd.DataFrame) -> alt.Chart:
    """How each candidate's time to train moves when one knob moves by ±pct.

    `frame`: long form with candidate, knob, change_pct (e.g. -20, +20) and days_ratio (days /
    baseline days), as `perfmodel.planning.sensitivity` returns it.
    """
    f = frame.dropna(subset=["days_ratio"]).copy()
    f["delta"] = f["days_ratio"] - 1
    f["row"] = f["candidate"] + " · " + f["knob"]
    f["change"] = f["change_pct"].map(lambda c: f"{c:+.0f} %")
    return fixed_height(
        alt.Chart(f)
        .mark_bar()
        .encode(
            x=alt.X("delta:Q", title="change in time to train (relative)", axis=alt.Axis(format="+%")),
            y=alt.Y("row:N", title=None, sort=None, axis=alt.Axis(labelLimit=320)),
            color=alt.Color("change:N", title="knob moved by", scale=alt.Scale(scheme="redblue")),
            tooltip=["candidate:N", "knob:N", "change:N", alt.Tooltip("days:Q", title="days", format=".2f"),
                     alt.Tooltip("delta:Q", title="change", format="+.1%")],
        ), f["row"].nunique(), 16, title="sensitivity of time to train")


def pareto_chart(frame: pd.DataFrame, x: str, y: str, x_title: str, y_title: str,
                 front: str | None = None, log_y: bool = True) -> alt.Chart:
    """Scatter of layouts (e.g. step time against memory headroom), the Pareto front in red.

    `frame`: one row per layout with columns x, y, `layout` (a label) and optionally a boolean
    column `front`. Step times span decades along a front, hence the log y axis by default.
    """
    f = frame.copy()
    on = f[front].astype(bool) if front and front in f else pd.Series(False, index=f.index)
    f["set"] = on.map({True: "Pareto front", False: "other layouts"})
    f = f.sort_values("set", ascending=False)  # front drawn last, on top
    tips = [c for c in ("layout", x, y) if c in f]
    return (
        alt.Chart(f)
        .mark_circle(size=50)
        .encode(
            x=alt.X(f"{x}:Q", title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(type="log") if log_y else alt.Scale(zero=False)),
            color=alt.Color("set:N", title=None, scale=alt.Scale(domain=["Pareto front", "other layouts"],
                                                                 range=["#d62728", "#9ca3af"])),
            opacity=alt.condition(alt.datum.set == "Pareto front", alt.value(1.0), alt.value(0.35)),
            tooltip=tips,
        )
        .properties(height=340, title=f"{y_title} vs {x_title}")
    )


def validation_scatter(frame: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Predicted against measured step time, log-log, coloured by source, with y = x and ±20 %.

    `frame`: one row per run with run_id, source, step_time_s (measured), predicted_step_time_s,
    signed_error.
    """
    f = frame.dropna(subset=["step_time_s", "predicted_step_time_s"])
    lo = float(min(f["step_time_s"].min(), f["predicted_step_time_s"].min())) * 0.8
    hi = float(max(f["step_time_s"].max(), f["predicted_step_time_s"].max())) * 1.25
    lines = pd.DataFrame({"x": [lo, hi] * 3, "y": [lo, hi, lo * 1.2, hi * 1.2, lo / 1.2, hi / 1.2],
                          "line": ["equal"] * 2 + ["+20 %"] * 2 + ["-20 %"] * 2})
    scale = alt.Scale(type="log", domain=[lo, hi])
    guide = alt.Chart(lines).mark_line(color="gray", strokeDash=[4, 4]).encode(
        x=alt.X("x:Q", scale=scale), y=alt.Y("y:Q", scale=scale), detail="line:N")
    tips = [c for c in ("run_id", "source", "model", "n_gpus", "accelerator") if c in f]
    points = alt.Chart(f).mark_circle(size=40, opacity=0.7).encode(
        x=alt.X("step_time_s:Q", scale=scale, title="measured step time (s)"),
        y=alt.Y("predicted_step_time_s:Q", scale=scale, title="predicted step time (s)"),
        color=alt.Color("source:N", legend=alt.Legend(orient="bottom", columns=2, labelLimit=320)),
        tooltip=[*tips, alt.Tooltip("step_time_s:Q", title="measured (s)", format=".4g"),
                 alt.Tooltip("predicted_step_time_s:Q", title="predicted (s)", format=".4g"),
                 alt.Tooltip("signed_error:Q", title="error", format="+.1%")],
    )
    return alt.layer(guide, points).properties(height=520, title="predicted vs measured step time (dashed: equal, ±20 %)")


__all__ = [
    "breakdown_chart",
    "compare_chart",
    "memory_chart",
    "pareto_chart",
    "sensitivity_chart",
    "tornado_chart",
    "validation_scatter",
]


# colour families of the timeline: one hue per kind of work, the chunk (virtual stage) as its shade
TIMELINE_FAMILIES = {
    "forward": ["#1f4e9c", "#3a78c9", "#6fa3e0", "#a9c9ef"],
    "backward": ["#b4490c", "#e0701f", "#f29c55", "#f8c593"],
    "weight grad": ["#5b2a86", "#8652b8", "#ae85d6", "#d2bdea"],
}
TIMELINE_OTHER = {"p2p send": "#7f7f7f", "dp gradient reduce": "#2e8b57", "fsdp wait": "#bcbd22",
                  "dp contention + param gather": "#17becf", "optimizer": "#d62728"}
STREAM_NAMES = {0: "compute", 1: "send to next stage", 2: "send to previous stage", 3: "data-parallel"}


def _timeline_kind(name: str) -> tuple[str, str]:
    """(legend entry, family) of one trace event name: F3.1 -> ('forward, chunk 1', 'forward')."""
    if name[:1] in ("F", "B", "W") and name[1:2].isdigit():
        family = {"F": "forward", "B": "backward", "W": "weight grad"}[name[0]]
        chunk = name.split(".")[1] if "." in name else "0"
        return f"{family}, chunk {chunk}", family
    if name.startswith(("act", "grad")):
        return "p2p send", "comm"
    if name.startswith("dp bucket"):
        return "dp gradient reduce", "comm"
    return name, "other"


def timeline_frame(events: list[dict]) -> pd.DataFrame:
    """Chrome trace 'X' events -> one row per task: lane (stage and stream, in numeric order),
    kind (legend entry), family, start / end / duration in seconds."""
    names = {(e.get("pid", 0), None): (e.get("args") or {}).get("name") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    rows = []
    for e in events:
        if e.get("ph") != "X":
            continue
        name = str(e.get("name", ""))
        kind, family = _timeline_kind(name)
        pid, tid = int(e.get("pid", 0)), int(e.get("tid", 0))
        proc = names.get((pid, None)) or f"stage {pid}"
        lane = f"{proc} · {STREAM_NAMES.get(tid, f'stream {tid}')}"
        rows.append({"task": name, "lane": lane, "order": pid * 16 + tid, "kind": kind, "family": family,
                     "start_s": e["ts"] / 1e6, "end_s": (e["ts"] + e["dur"]) / 1e6, "duration_ms": e["dur"] / 1e3})
    return pd.DataFrame(rows, columns=["task", "lane", "order", "kind", "family", "start_s", "end_s", "duration_ms"])


def _timeline_colours(kinds: list[str]) -> tuple[list[str], list[str]]:
    """(domain, range): forward / backward / weight-grad chunks in their family's shades, then the rest."""
    domain, colours = [], []
    for family, shades in TIMELINE_FAMILIES.items():
        chunks = sorted((k for k in kinds if k.startswith(family + ", chunk")), key=lambda k: int(k.rsplit(" ", 1)[1]))
        for i, k in enumerate(chunks):
            domain.append(k)
            colours.append(shades[i % len(shades)])
    fallback = ["#8c564b", "#e377c2", "#9edae5", "#c49c94"]
    for i, k in enumerate(sorted(k for k in kinds if k not in domain)):
        domain.append(k)
        colours.append(TIMELINE_OTHER.get(k, fallback[i % len(fallback)]))
    return domain, colours


def gantt_chart(events: list[dict]) -> alt.Chart:
    """The DES timeline as a Gantt chart: one lane per stage and stream in numeric order, colour
    families for forward, backward, weight-gradient and communication work (the chunk as shade),
    zoom and pan on the time axis, durations in the tooltip."""
    d = timeline_frame(events)
    lanes = d.sort_values("order")["lane"].drop_duplicates().tolist()
    domain, colours = _timeline_colours(sorted(d["kind"].unique()))
    chart = alt.Chart(d).mark_bar(stroke="white", strokeWidth=0.2).encode(
        x=alt.X("start_s:Q", title="time in the step (s)"), x2="end_s:Q",
        y=alt.Y("lane:N", title=None, sort=lanes, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=domain, range=colours),
                        legend=alt.Legend(orient="bottom", columns=4, symbolLimit=0)),
        tooltip=["lane", "task", "kind", alt.Tooltip("start_s:Q", format=".4f", title="start (s)"),
                 alt.Tooltip("duration_ms:Q", format=".3f", title="duration (ms)")],
    ).interactive(bind_y=False)
    return fixed_height(chart, len(lanes), 14 if len(lanes) > 24 else 22, title="DES timeline (drag to pan, scroll to zoom)")
