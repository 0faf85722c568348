"""The purchase decision: candidates (accelerators, nodes, racks, a node on another fabric), their
spec prices with sources, the buyer's own prices and site, and the one-page HTML report.

`compare.compare` finds each candidate's fastest fitting layout and its time, GPU-hours and energy
at PUE 1 (IT power, one power basis for every candidate: `train.power_basis_w`). `apply_site`
reprices those rows with the buyer's inputs, per candidate:

    hourly (cloud):  cost = GPU-hours x price per GPU-hour           (electricity is in the price)
    purchase:        cost = GPU-hours x purchase per GPU / (years x 8766 h x utilisation)
                            + energy cost
    energy           = IT energy x PUE
    energy cost      = energy x electricity price per kWh
    cost per 10^12 tokens = cost / tokens x 10^12

`utilisation` is the share of the amortisation period the GPUs do paid work: an idle GPU still
depreciates, so the amortised price of a used GPU-hour is divided by it. These are the formulas of
`train.time_to_train` (purchase price / (years x 8766 h), energy x PUE x price); the tests hold the
two equal where both apply.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from perfmodel.errors import UnknownIdError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.network import network_levels
from perfmodel.hardware.system import System
from perfmodel.hardware.system import resolve_hardware as catalog_resolve_hardware
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.train import HOURS_PER_YEAR, power_basis_w
from perfmodel.workload.spec import ModelSpec

if TYPE_CHECKING:
    from perfmodel.calibration.profile import Profile

FABRIC_SEP = "@"  # "dgx-h100@roce": a node or cluster id on another fabric of the catalogue
PriceBasis = Literal["hourly", "purchase"]


def candidate_ids() -> list[str]:
    """Every id the comparison takes: accelerators (their reference node), nodes, clusters, and
    each node with a default fabric on every other fabric of the catalogue ('node@fabric')."""
    cat = load_catalog()
    # host CPUs (host-cpu and the calibrated host-cpu-* specs it stands for) are no purchase
    nodes = sorted(n for n, node in cat.nodes.items() if cat.accelerators[node.accelerator].kind != "cpu")
    swaps = [f"{n}{FABRIC_SEP}{f}" for n in nodes for f in sorted(cat.fabrics)
             if cat.nodes[n].default_fabric and f != cat.nodes[n].default_fabric and cat.fabrics[f].kind in ("infiniband", "roce")]
    return sorted(a for a, acc in cat.accelerators.items() if acc.kind != "cpu") + nodes + sorted(cat.clusters) + swaps


def resolve_candidate(cand: str, n_gpus: int) -> tuple[System, list[str]]:
    """The System of a candidate id, and the resolver's messages. 'node@fabric' joins the node's
    (or cluster's) scale-out NICs by that fabric instead: the network levels are rebuilt by
    `hardware.network.network_levels` with it (its per-hop latency; the NICs set the line rate)."""
    base_id, _, fabric_id = cand.partition(FABRIC_SEP)
    system, msgs = catalog_resolve_hardware(base_id, n_gpus)
    if not fabric_id:
        return system, msgs
    cat = load_catalog()
    if fabric_id not in cat.fabrics:
        raise UnknownIdError(f"candidate {cand!r}: unknown fabric {fabric_id!r}; known: {', '.join(sorted(cat.fabrics))}")
    fab = cat.fabrics[fabric_id]
    levels = network_levels(system.node, fab, cat.clusters.get(base_id), system.gpus_per_node)
    return replace(system, fabric=fab, levels=levels, name=cand), msgs


def partial_unit_warning(system: System, n_gpus: int) -> str | None:
    """A warning when `n_gpus` leaves a node or a scale-up domain (an NVL72 rack) partly filled:
    the buyer pays for the whole unit."""
    node = system.node
    units = [(node.domain_size, "NVLink domain (rack)")] if node.domain_size > node.accelerators_per_node else []
    for size, unit in (*units, (node.accelerators_per_node, "node")):
        if size > 1 and n_gpus % size:
            full = math.ceil(n_gpus / size)
            return (f"{n_gpus} GPUs leave a partial {unit} of {size} GPUs on {system.name}: "
                    f"{full} units hold {full * size} GPUs (nearest full: {max(size, n_gpus // size * size)} or {full * size})")
    return None


@dataclass(frozen=True)
class SpecPrice:
    """The prices a candidate's specs carry, per GPU, with their sources (None: no price)."""

    usd_per_gpu_hour: float | None
    hourly_source: str
    purchase_usd_per_gpu: float | None
    purchase_source: str
    gpus_per_node: int


def spec_price(system: System) -> SpecPrice:
    """The accelerator's price, else the node's shared over its accelerators, for both bases."""
    acc, node = system.accelerator, system.node
    found: dict[str, tuple[float | None, str]] = {}
    for kind, unit in (("hourly", "usd_per_hour"), ("purchase", "usd")):
        found[kind] = (None, f"no {kind} price in hardware_specs/accelerators/{acc.id}.yaml or nodes/{node.id}.yaml")
        for owner, price, refs, share in ((acc.id, acc.price, acc.references, 1),
                                          (node.id, node.price, node.references, node.accelerators_per_node)):
            entry = getattr(price, kind) if price else None
            if entry:
                note = f" / {share} GPUs" if share > 1 else ""
                found[kind] = (entry.si(unit) / share, f"{owner}: {entry.value}{note} ({refs.get(entry.source, entry.source)})")
                break
    return SpecPrice(found["hourly"][0], found["hourly"][1], found["purchase"][0], found["purchase"][1],
                     node.accelerators_per_node)


@dataclass(frozen=True)
class Site:
    """The buyer's site: how GPUs are paid for, electricity, PUE and fleet utilisation."""

    basis: PriceBasis = "hourly"
    electricity_usd_per_kwh: float | None = None
    pue: float = 1.0
    amortisation_years: float = 4.0
    utilisation: float = 1.0

    def check(self) -> None:
        if self.basis not in ("hourly", "purchase"):
            raise ValueError(f"basis {self.basis!r}: expected 'hourly' or 'purchase'")
        if not (math.isfinite(self.pue) and self.pue >= 1.0):
            raise ValueError(f"pue {self.pue}: expected a number >= 1 (1.0 = IT power only; typical sites 1.1-1.6)")
        if self.electricity_usd_per_kwh is not None and not self.electricity_usd_per_kwh >= 0:
            raise ValueError(f"electricity_usd_per_kwh {self.electricity_usd_per_kwh}: expected a price >= 0")
        if not self.amortisation_years > 0:
            raise ValueError(f"amortisation_years {self.amortisation_years}: expected > 0")
        if not 0 < self.utilisation <= 1:
            raise ValueError(f"utilisation {self.utilisation}: expected a fraction in (0, 1]")


def apply_site(frame: pd.DataFrame, prices: dict[str, float | None], site: Site, tokens: float) -> pd.DataFrame:
    """Reprice compare rows (computed at PUE 1) with the buyer's site and one price per candidate:
    `prices[candidate]` is USD per GPU-hour (basis 'hourly') or the purchase USD per GPU (basis
    'purchase'); None or absent leaves the cost empty and the row's `price_note` says why."""
    site.check()
    f = frame.copy()
    has = "energy_mwh" in f
    f["pue"] = site.pue
    if has:
        f["energy_mwh"] = f["energy_mwh"] * site.pue
        kwh = f["energy_mwh"] * 1000.0
        f["energy_cost_usd"] = kwh * site.electricity_usd_per_kwh if site.electricity_usd_per_kwh is not None else math.nan
    rates, costs, notes = [], [], []
    for _, r in f.iterrows():
        p = prices.get(str(r["candidate"]))
        gpu_hours = r.get("gpu_hours")
        if p is None or gpu_hours is None or (isinstance(gpu_hours, float) and math.isnan(gpu_hours)):
            rates.append(math.nan)
            costs.append(math.nan)
            notes.append("no price: type one" if p is None and gpu_hours is not None else "")
            continue
        if site.basis == "hourly":
            rate = float(p)
            cost = gpu_hours * rate
        else:
            rate = float(p) / (site.amortisation_years * HOURS_PER_YEAR * site.utilisation)
            cost = gpu_hours * rate
            if site.electricity_usd_per_kwh is not None and has:
                cost += float(r["energy_cost_usd"])
        rates.append(rate)
        costs.append(cost)
        notes.append("")
    f["usd_per_gpu_hour"], f["cost_usd"], f["price_note"] = rates, costs, notes
    if "message" in f and "gpu_hours" in f:  # the spec's no-price message: price_note says it, or the price is typed
        no_price = f["message"].astype(str).str.contains(r"has no (?:hourly|purchase) price", regex=True)
        f.loc[f["gpu_hours"].notna() & no_price, "message"] = ""
    f["usd_per_trillion_tokens"] = f["cost_usd"] / tokens * 1e12
    f["tokens_per_usd"] = tokens / f["cost_usd"]
    if has:
        f["tokens_per_joule"] = tokens / (f["energy_mwh"] * 3.6e9)
    if "step_time_lo_s" in f and "step_time_hi_s" in f:  # the 80 % interval scales with the step time
        for lim in ("lo", "hi"):
            ratio = f[f"step_time_{lim}_s"] / f["step_time_s"]
            f[f"days_{lim}"] = f["days"] * ratio
            f[f"cost_{lim}_usd"] = f["cost_usd"] * ratio
    return f


def power_basis_text(system: System) -> str:
    """The power basis of a candidate in words (`train.power_basis_w`)."""
    watts, basis = power_basis_w(system)
    return f"{watts:,.0f} W per GPU: {basis}"


SENSITIVITY_KNOBS = {"scale-out bandwidth": "inter_bw", "scale-up bandwidth": "intra_bw", "HBM bandwidth": "hbm_bw"}


def layout_sensitivity(spec: ModelSpec, system: System, plan: ParallelPlan, pct: float,
                       calibration: str | Profile | None = "default", framework: str | None = None) -> pd.DataFrame:
    """Time to train of one chosen layout with each bandwidth moved by ±pct, as a ratio to the
    baseline, and the price moved by ±pct (long form: knob, change_pct, days_ratio, cost_ratio).
    The layout is held (one analytic estimate per point, no re-search): what the bought system
    does when a bandwidth turns out lower or higher than its spec. Time and cost scale with the
    step time (the token count is fixed); energy is not moved here. `calibration` as in
    `perfmodel.estimate`: the profile is applied to every moved system, as the compare did, and so
    is the `framework`'s mechanisms."""
    from perfmodel.calibration.frameworks import apply_framework
    from perfmodel.calibration.frameworks import framework as get_framework
    from perfmodel.calibration.profile import calibrated_system, load_profile
    from perfmodel.engines.registry import run_engine

    prof = load_profile(calibration)
    fw = get_framework(framework) if framework else None
    if fw is not None:
        plan = apply_framework(plan, fw, spec)
    base = run_engine("analytic", spec, calibrated_system(system, prof, fw), plan).step_time_s
    rows = []
    for knob, arg in SENSITIVITY_KNOBS.items():
        for sign in (-1, 1):
            moved = calibrated_system(system.scaled(**{arg: 1 + sign * pct / 100}), prof, fw)
            step = run_engine("analytic", spec, moved, plan).step_time_s
            rows.append({"knob": knob, "change_pct": sign * pct, "step_time_s": step, "days_ratio": step / base,
                         "cost_ratio": step / base})
    rows += [{"knob": "price", "change_pct": sign * pct, "step_time_s": base, "days_ratio": 1.0,
              "cost_ratio": 1 + sign * pct / 100} for sign in (-1, 1)]
    return pd.DataFrame(rows)


def validation_error(joined: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """accelerator -> (mean absolute % error of the predicted step time, runs) over the predicted
    rows of a validation join (`validation.report.joined`)."""
    ok = joined[joined["status"] == "ok"] if "status" in joined else joined
    return {str(a): (float(g["signed_error"].abs().mean()), len(g)) for a, g in ok.groupby("accelerator")}


# ---- the one-page HTML report -------------------------------------------------------------------
def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return ""
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def interval_text(r: Any, key: str, lo: str, hi: str, spec: str) -> str:
    """'12.3 (10.1-14.0)' with the 80 % interval when the row has one, else '12.3 (no interval)'."""
    v = _fmt(r.get(key), spec)
    if not v:
        return ""
    a, b = _fmt(r.get(lo), spec), _fmt(r.get(hi), spec)
    return f"{v} ({a} – {b})" if a and b else f"{v} (no interval)"


HEADLINE = [  # (column, title, format, (lo, hi) of its 80 % interval or None)
    ("candidate", "candidate", "", None), ("precision", "precision", "", None), ("layout", "best layout", "", None),
    ("step_time_s", "step (s)", ".3g", ("step_time_lo_s", "step_time_hi_s")), ("mfu", "MFU", ".1%", None),
    ("days", "days", ".1f", ("days_lo", "days_hi")), ("gpu_hours", "GPU-hours", ",.0f", None),
    ("usd_per_gpu_hour", "USD / GPU-h", ",.2f", None), ("cost_usd", "cost (USD)", ",.0f", ("cost_lo_usd", "cost_hi_usd")),
    ("usd_per_trillion_tokens", "USD / 10¹² tokens", ",.0f", None), ("energy_mwh", "energy (MWh)", ",.0f", None),
    ("energy_cost_usd", "energy cost (USD)", ",.0f", None), ("power_per_gpu_w", "W / GPU", ",.0f", None),
    ("calibration", "calibration", "", None), ("validation_mape", "validation error", ".0%", None),
]


def headline_rows(frame: pd.DataFrame) -> list[dict[str, str]]:
    """The headline table as text cells (intervals in brackets), for the report and Markdown."""
    out = []
    for _, r in frame.iterrows():
        row = {}
        for key, title, spec, iv in HEADLINE:
            if iv:
                row[title] = interval_text(r, key, iv[0], iv[1], spec)
            else:
                row[title] = _fmt(r.get(key), spec) if spec else ("" if pd.isna(r.get(key, "")) else str(r.get(key, "")))
        note = " ".join(str(r.get(k) or "") for k in ("price_note", "partial_warning", "mfu_flag", "message")
                        if isinstance(r.get(k), str) and r.get(k))
        row["note"] = note
        out.append(row)
    return out


def headline_markdown(frame: pd.DataFrame) -> str:
    rows = headline_rows(frame)
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[c].replace("|", "/") for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def html_report(frame: pd.DataFrame, title: str, inputs: dict[str, Any], sources: dict[str, dict[str, str]],
                chart_specs: list[dict[str, Any]] | None = None) -> str:
    """One self-contained page to forward: the headline table (80 % intervals in brackets, or 'no
    interval'), every input, each candidate's spec sources, calibration status (which cost terms
    are measured on it and which take the derating rule) and the charts (`chart_specs`, Vega-Lite:
    inline SVG where vl-convert is installed, else drawn by vega-embed from its CDN)."""
    e = html.escape
    rows = headline_rows(frame)
    cols = list(rows[0]) if rows else []
    table = ("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{e(r[c])}</td>" for c in cols) + "</tr>" for r in rows) + "</table>")
    inp = "<table>" + "".join(f"<tr><th>{e(str(k))}</th><td>{e(str(v))}</td></tr>" for k, v in inputs.items()) + "</table>"
    src = "".join(f"<h3>{e(c)}</h3><ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in s.items()) + "</ul>"
                  for c, s in sources.items())
    specs = chart_specs or []
    head, divs, script = _chart_html(specs)
    style = ("body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px;font-size:13px}"
             "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;"
             "vertical-align:top}th{background:#f3f4f6}.chart{display:inline-block;margin:4px}h3{margin:8px 0 2px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{style}</style>"
            f"{head}</head><body>"
            f"<h1>{e(title)}</h1><p>Numbers in brackets: the 80 % interval of the prediction, where the calibration "
            "provides one. 'calibration': the cost terms measured on that hardware; the others take the derating rule "
            "of docs/DESIGN.md (a fallback). Each candidate runs its fastest fitting layout (analytic engine).</p>"
            f"{table}{divs}<h2>Inputs</h2>{inp}<h2>Spec sources</h2>{src}{script}</body></html>")


def _chart_html(specs: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(head, body, script) for the charts: inline SVG rendered by vl-convert where it is installed
    (the page then opens offline), else Vega-Lite specs drawn by vega-embed from its CDN."""
    import json

    try:
        import vl_convert as vlc

        return "", "".join(f"<div class='chart'>{vlc.vegalite_to_svg(s)}</div>" for s in specs), ""
    except ImportError:
        pass
    head = ("<script src='https://cdn.jsdelivr.net/npm/vega@5'></script>"
            "<script src='https://cdn.jsdelivr.net/npm/vega-lite@5'></script>"
            "<script src='https://cdn.jsdelivr.net/npm/vega-embed@6'></script>")
    divs = "".join(f"<div id='chart{i}' class='chart'></div>" for i in range(len(specs)))
    embeds = "".join(f"vegaEmbed('#chart{i}', {json.dumps(s)}, {{actions: false}});" for i, s in enumerate(specs))
    return head, divs, f"<script>{embeds}</script>"


def calibration_status(row: Any) -> str:
    """'measured' when every cost term is measured on the candidate's hardware, 'fallback' when
    none is, else 'partly measured (k of n terms)'; '' for a row without provenance."""
    meas, fb = (row.get(k) if isinstance(row.get(k), str) else None for k in ("measured_terms", "fallback_terms"))
    if meas is None and fb is None:
        return ""
    n_m, n_f = (len([t for t in (v or "").split(", ") if t]) for v in (meas, fb))
    if n_f == 0:
        return "measured"
    return "fallback" if n_m == 0 else f"partly measured ({n_m} of {n_m + n_f} terms)"


__all__ = ["FABRIC_SEP", "HEADLINE", "Site", "SpecPrice", "apply_site", "calibration_status", "candidate_ids",
           "headline_markdown", "headline_rows", "html_report", "interval_text", "layout_sensitivity",
           "partial_unit_warning", "power_basis_text", "resolve_candidate", "spec_price", "validation_error"]
