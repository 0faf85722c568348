"""The Estimate page's charts as plain Vega-Lite dicts (pure functions, no Streamlit, no Altair).

The explorer's first page draws these three charts; writing them as dicts rather than Altair
objects keeps Altair (and the JSON-schema validation of every chart) off the first page load,
about a quarter of its Python time. The other pages' charts stay in `perfmodel.app_charts`.
Each function returns a `Spec`: a Vega-Lite dict whose `datasets` hold the DataFrames by name;
`st.vega_lite_chart(spec)` sends them as Arrow, `Spec.to_dict()` gives them as JSON records.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

GB = 1e9  # decimal gigabyte: memory axes are in GB (10^9 B), as datasheets quote HBM

TIME_LABELS = {
    "compute_fwd_s": "forward compute",
    "compute_bwd_s": "backward compute",
    "recompute_s": "recompute",
    "tp_ep_cp_comm_s": "TP/EP/CP comm (exposed)",
    "host_overhead_s": "host overhead",
    "activation_offload_s": "activation offload (exposed)",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline send/recv",
    "dp_comm_exposed_s": "DP comm (exposed)",
    "optimizer_s": "optimizer step",
}
TIME_ORDER = list(TIME_LABELS.values())
MEMORY_ORDER = ["weights", "grads", "optimizer", "activations", "runtime"]
FIT_X = {"type": "fit-x", "contains": "padding"}


class Spec(dict[str, Any]):
    """A Vega-Lite spec with its data as DataFrames in `datasets` (name -> frame)."""

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready Vega-Lite: every dataset as a list of records."""
        out = dict(self)
        out["datasets"] = {k: v.to_dict(orient="records") for k, v in self["datasets"].items()}
        return out


def band_height(n_rows: int, step: int) -> int:
    """The plot height of a chart with `n_rows` bands `step` px apart, as a number of pixels.
    Streamlit asks Vega to "fit" every chart; a band-step height cannot fit, and Vega drops half of
    it with a console warning per chart and redraw ("Dropping fit-y because spec has discrete
    height"). A number with autosize "fit-x" keeps the height and fits the width, without a warning."""
    return max(1, n_rows) * step


def spec(datasets: dict[str, pd.DataFrame], n_rows: int, step: int, title: str, **body: Any) -> Spec:
    """A top-level spec `body` with its data, a fixed plot height of `n_rows` x `step` px and a
    width that fits the page (see `band_height`)."""
    # no "$schema": the page's own Vega-Lite reads it (a stated version it does not run is a console warning)
    return Spec({"title": title, "height": band_height(n_rows, step), "autosize": FIT_X,
                 "config": {"autosize": FIT_X}, **body, "datasets": datasets})


def field(name: str, kind: str = "nominal", **kw: Any) -> dict[str, Any]:
    return {"field": name, "type": kind, **kw}


def _time_frame(frame: pd.DataFrame) -> pd.DataFrame:
    t = frame[frame["kind"] == "time"].copy()
    t["component"] = t["component"].map(lambda c: TIME_LABELS.get(c, c))
    t["order"] = t["component"].map(lambda c: TIME_ORDER.index(c) if c in TIME_ORDER else len(TIME_ORDER))
    # drop components that are zero or round-off (< 1 ppm of the step) so the legend stays readable
    return t[t["value"] > 1e-6 * t.groupby("scenario" if "scenario" in t else "kind")["value"].transform("sum")]


def breakdown_chart(frame: pd.DataFrame) -> Spec:
    """Stacked horizontal bar of where one step's time goes, one bar per `scenario`.

    `frame`: long form with columns kind, component, value (seconds for kind 'time') and optionally
    scenario (e.g. 'baseline' / 'what-if'); rows of other kinds are ignored.
    """
    t = _time_frame(frame)
    if "scenario" not in t:
        t["scenario"] = "this layout"
    t["share"] = t["value"] / t.groupby("scenario")["value"].transform("sum")
    present = set(t["component"])
    return spec(
        {"breakdown": t}, t["scenario"].nunique(), 40, "step-time breakdown (s)",
        data={"name": "breakdown"}, mark={"type": "bar"},
        encoding={
            "x": field("value", "quantitative", aggregate="sum", stack="zero", title="time per optimizer step (s)"),
            "y": field("scenario", sort=None, title=None),
            "color": field("component", title="component", sort=TIME_ORDER,
                           scale={"domain": TIME_ORDER, "scheme": "tableau10"},  # fixed domain: stable colours
                           legend={"orient": "bottom", "columns": 3, "values": [c for c in TIME_ORDER if c in present]}),
            "order": field("order", "quantitative"),
            "tooltip": [field("scenario"), field("component"),
                        field("value", "quantitative", title="seconds", format=".4g"),
                        field("share", "quantitative", title="share of step", format=".1%")],
        })


def memory_chart(frame: pd.DataFrame, capacity_bytes: float) -> Spec:
    """Stacked bar of bytes per GPU by kind, with the HBM capacity as a red rule.

    `frame`: long form with kind, component, value (bytes for kind 'memory').
    """
    m = frame[frame["kind"] == "memory"].copy()
    m["GB"] = m["value"] / GB
    m["order"] = m["component"].map(lambda c: MEMORY_ORDER.index(c) if c in MEMORY_ORDER else len(MEMORY_ORDER))
    m["gpu"] = "per GPU"
    cap = capacity_bytes / GB
    top = max(float(m["GB"].sum()), cap) * 1.05
    rule = pd.DataFrame({"GB": [cap], "label": [f"HBM capacity {cap:.0f} GB"]})
    bars = {"data": {"name": "memory"}, "mark": {"type": "bar"}, "encoding": {
        "x": field("GB", "quantitative", aggregate="sum", title="memory per GPU (GB = 10⁹ B)", scale={"domain": [0, top]}),
        "y": field("gpu", title=None),
        "color": field("component", title="memory", sort=MEMORY_ORDER, scale={"domain": MEMORY_ORDER, "scheme": "set2"},
                       legend={"orient": "bottom", "columns": 3}),
        "order": field("order", "quantitative"),
        "tooltip": [field("component"), field("GB", "quantitative", title="GB", format=".2f")],
    }}
    line = {"data": {"name": "capacity"}, "mark": {"type": "rule", "color": "#d62728", "strokeWidth": 3},
            "encoding": {"x": field("GB", "quantitative"), "tooltip": [field("label")]}}
    text = {"data": {"name": "capacity"}, "mark": {"type": "text", "align": "right", "dx": -4, "dy": -26, "color": "#d62728"},
            "encoding": {"x": field("GB", "quantitative"), "text": field("label")}}
    return spec({"memory": m, "capacity": rule}, 1, 48, "memory per GPU vs capacity", layer=[bars, line, text])


def tornado_chart(frame: pd.DataFrame, zero_tol: float = 5e-4) -> Spec:
    """Sensitivity of step time to each hardware factor: one bar per (factor, change), labelled
    with the change in seconds and percent, red where the step gets slower and blue where it gets
    faster; a change below `zero_tol` (relative; 5e-4 would print as 0.0 %) draws nothing, so a
    factor that does not matter shows as an empty row with a "no change" label.

    `frame`: columns factor (e.g. 'peak FLOP/s'), change (e.g. '×0.5', '×2'), delta (relative change
    of step time, -0.2 = 20 % faster), step_time_s (the scaled step) and delta_s (seconds).
    """
    f = frame.copy()
    if "delta_s" not in f:
        f["delta_s"] = f["delta"] * f["step_time_s"] / (1 + f["delta"])
    f["span"] = f.groupby("factor")["delta"].transform(lambda d: d.abs().max())
    order = f.sort_values("span", ascending=False)["factor"].drop_duplicates().tolist()
    moved = f["delta"].abs() > zero_tol
    f["direction"] = (f["delta"] > 0).map({True: "slower", False: "faster"})
    f["label"] = [f"{c}: {s:+.3g} s ({d:+.1%})" for c, s, d in zip(f["change"], f["delta_s"], f["delta"], strict=True)]
    bars_df, still = f[moved], f[~moved].drop_duplicates("factor")
    still = still[~still["factor"].isin(bars_df["factor"])].assign(label="no change", delta=0.0)
    span = max(float(f["delta"].abs().max()) if len(f) else 0.0, 0.01) * 1.9  # room for the labels beside the bars
    x = field("delta", "quantitative", title="change in step time", axis={"format": "+%"}, scale={"domain": [-span, span]})
    y = field("factor", sort=order, title=None, axis={"labelLimit": 260})
    bars = {"data": {"name": "moved"}, "mark": {"type": "bar", "height": 18}, "encoding": {
        "x": x, "y": y,
        "color": field("direction", title=None, scale={"domain": ["slower", "faster"], "range": ["#d62728", "#1f77b4"]}),
        "tooltip": [field("factor"), field("change"), field("delta_s", "quantitative", title="change (s)", format="+.4g"),
                    field("delta", "quantitative", title="change", format="+.1%"),
                    field("step_time_s", "quantitative", title="step time (s)", format=".4g")],
    }}

    def labels(name: str, **mark: Any) -> dict[str, Any]:
        return {"data": {"name": name}, "mark": {"type": "text", "fontSize": 11, **mark},
                "encoding": {"x": x, "y": y, "text": field("label")}}

    return spec({"moved": bars_df, "slower": bars_df[bars_df["delta"] > 0], "faster": bars_df[bars_df["delta"] <= 0],
                 "still": still}, len(order), 32,
                "sensitivity of step time: each factor halved (×0.5) and doubled (×2); red: slower",
                layer=[bars, labels("slower", align="left", dx=4), labels("faster", align="right", dx=-4),
                       labels("still", align="left", dx=4, color="#6b7280")])


__all__ = ["GB", "Spec", "band_height", "breakdown_chart", "memory_chart", "tornado_chart"]
