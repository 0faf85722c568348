"""The purchase view's library side (perfmodel.planning.purchase) and the explorer's pure chart
helpers: hand-computed prices, PUE and amortisation; a cross-check against train.time_to_train;
candidates on another fabric; partial nodes and racks; the HTML report; the tornado's bars."""

from __future__ import annotations

import importlib.util
import math

import pandas as pd
import pytest

from perfmodel.app_charts import compare_chart, tornado_chart
from perfmodel.errors import UnknownIdError
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.compare import compare
from perfmodel.planning.purchase import (
    Site,
    apply_site,
    calibration_status,
    candidate_ids,
    headline_rows,
    html_report,
    layout_sensitivity,
    partial_unit_warning,
    resolve_candidate,
    spec_price,
)
from perfmodel.planning.search import layout_label, layout_labels, search


def rows(**extra: object) -> pd.DataFrame:
    base = {"candidate": ["a", "b"], "gpu_hours": [1000.0, 2000.0], "energy_mwh": [10.0, 20.0], "days": [2.0, 4.0],
            "step_time_s": [10.0, 20.0], "message": ["a (node n) has no hourly price: add", "b (node n) has no hourly price: add"]}
    return pd.DataFrame({**base, **extra})


def test_hourly_cost_pue_and_energy_cost_by_hand() -> None:
    f = apply_site(rows(), {"a": 2.5, "b": None}, Site(basis="hourly", electricity_usd_per_kwh=0.1, pue=1.25), tokens=1e12)
    a, b = f.iloc[0], f.iloc[1]
    assert a["cost_usd"] == pytest.approx(1000 * 2.5)  # GPU-hours x price; electricity is in a cloud price
    assert a["usd_per_trillion_tokens"] == pytest.approx(2500.0)
    assert a["energy_mwh"] == pytest.approx(12.5)  # 10 MWh IT x PUE 1.25
    assert a["energy_cost_usd"] == pytest.approx(12.5e3 * 0.1)  # kWh x USD/kWh
    assert a["message"] == ""  # the spec's no-price message goes once a price is given
    assert math.isnan(b["cost_usd"]) and b["price_note"] == "no price: type one"


def test_purchase_cost_amortises_over_used_hours_plus_electricity() -> None:
    site = Site(basis="purchase", electricity_usd_per_kwh=0.08, pue=1.5, amortisation_years=4.0, utilisation=0.5)
    f = apply_site(rows(), {"a": 30_000.0, "b": 30_000.0}, site, tokens=1e12)
    rate = 30_000 / (4 * 8766 * 0.5)  # 1.711 USD per used GPU-hour
    assert f.iloc[0]["usd_per_gpu_hour"] == pytest.approx(rate)
    assert f.iloc[0]["cost_usd"] == pytest.approx(1000 * rate + 10 * 1.5 * 1000 * 0.08)


def test_interval_scales_days_and_cost_with_the_step_time() -> None:
    f = apply_site(rows(step_time_lo_s=[8.0, None], step_time_hi_s=[13.0, None]), {"a": 1.0}, Site(), tokens=1e12)
    assert f.iloc[0]["days_lo"] == pytest.approx(1.6) and f.iloc[0]["days_hi"] == pytest.approx(2.6)
    assert f.iloc[0]["cost_lo_usd"] == pytest.approx(800.0)
    cells = headline_rows(f)
    assert cells[0]["days"] == "2.0 (1.6 – 2.6)"
    assert cells[1]["days"] == "4.0 (no interval)"


@pytest.mark.parametrize("bad", [Site(pue=0.9), Site(utilisation=0.0), Site(amortisation_years=0.0),
                                 Site(electricity_usd_per_kwh=-1.0)])
def test_bad_site_inputs_name_the_field(bad: Site) -> None:
    with pytest.raises(ValueError, match=r"pue|utilisation|amortisation_years|electricity"):
        apply_site(rows(), {}, bad, tokens=1e12)


def test_site_matches_time_to_train_where_both_apply() -> None:
    # the library's own PUE and electricity inputs (compare -> time_to_train) give the same energy
    # and energy cost as repricing the PUE-1 rows
    kw = dict(n_gpus=64, global_batch=256, tokens=1e11)
    it = compare("llama3-8b", ["h100-sxm5-80gb"], **kw)
    site = compare("llama3-8b", ["h100-sxm5-80gb"], **kw, pue=1.3, electricity_usd_per_kwh=0.12)
    mine = apply_site(it, {"h100-sxm5-80gb": float(it["usd_per_gpu_hour"].iloc[0])},
                      Site(electricity_usd_per_kwh=0.12, pue=1.3), tokens=1e11)
    assert mine["energy_mwh"].iloc[0] == pytest.approx(site["energy_mwh"].iloc[0], rel=1e-9)
    assert mine["energy_cost_usd"].iloc[0] == pytest.approx(site["energy_cost_usd"].iloc[0], rel=1e-9)
    assert mine["cost_usd"].iloc[0] == pytest.approx(site["cost_usd"].iloc[0], rel=1e-9)


def test_spec_prices_carry_their_source() -> None:
    h100, _ = resolve_candidate("h100-sxm5-80gb", 64)
    p = spec_price(h100)
    assert p.usd_per_gpu_hour == pytest.approx(12.29) and "p5.48xlarge" in p.hourly_source
    assert p.purchase_usd_per_gpu is None and "no purchase price" in p.purchase_source
    b200, _ = resolve_candidate("b200", 64)
    assert spec_price(b200).usd_per_gpu_hour is None


def test_nodes_racks_and_fabrics_are_candidates() -> None:
    ids = candidate_ids()
    assert {"h100-sxm5-80gb", "dgx-h100", "nvl72", "dgx-h100@roce"} <= set(ids)
    ib, _ = resolve_candidate("dgx-h100", 64)
    roce, _ = resolve_candidate("dgx-h100@roce", 64)
    assert roce.fabric is not None and roce.fabric.id == "roce" and roce.name == "dgx-h100@roce"
    out_ib, out_roce = ib.levels[-1], roce.levels[-1]
    assert out_roce.name == "roce" and out_ib.name == "ib-ndr"
    assert out_roce.latency_s == pytest.approx(3 * 0.6e-6)  # RoCE per-hop latency x 3 hops
    assert out_roce.bandwidth_Bps == out_ib.bandwidth_Bps  # the node's NICs set the line rate
    assert roce.levels[0] == ib.levels[0]  # the same NVLink domain
    with pytest.raises(UnknownIdError, match=r"unknown fabric 'nope'.*roce"):
        resolve_candidate("dgx-h100@nope", 64)


def test_partial_node_and_rack_warnings() -> None:
    rack, _ = resolve_candidate("nvl72", 144)
    assert partial_unit_warning(rack, 144) is None
    w = partial_unit_warning(rack, 100)
    assert w is not None and "partial NVLink domain (rack) of 72" in w and "72 or 144" in w
    node, _ = resolve_candidate("dgx-h100", 64)
    assert partial_unit_warning(node, 64) is None
    w = partial_unit_warning(node, 100)
    assert w is not None and "partial node of 8" in w and "96 or 104" in w


def test_calibration_status() -> None:
    assert calibration_status({"measured_terms": "gemm_rate, hbm_bandwidth", "fallback_terms": ""}) == "measured"
    assert calibration_status({"measured_terms": "", "fallback_terms": "gemm_rate"}) == "fallback"
    assert calibration_status({"measured_terms": "a, b, c", "fallback_terms": "d"}) == "partly measured (3 of 4 terms)"


def test_html_report_holds_every_input_source_and_status() -> None:
    f = apply_site(rows(fallback_terms=["in_model_efficiency", ""], measured_terms=["gemm_rate", "gemm_rate"]),
                   {"a": 2.0}, Site(), tokens=1e12)
    f["calibration"] = [calibration_status(r) for _, r in f.iterrows()]
    chart = compare_chart(f, "days", "time to train (days)").to_dict()
    page = html_report(f, "llama3-70b on 576 GPUs", {"PUE": 1.2, "sequence length (tokens)": 8192},
                       {"a": {"price": "AWS p5 list price"}}, [chart])
    drawn = "<svg" if importlib.util.find_spec("vl_convert") else "vegaEmbed('#chart0'"
    for text in ("llama3-70b on 576 GPUs", "PUE", "8192", "AWS p5 list price", "partly measured (1 of 2 terms)",
                 "measured", "no interval", "no price: type one", drawn):
        assert text in page, text


def test_layout_sensitivity_holds_the_layout() -> None:
    res = search("llama3-8b", "h100-sxm5-80gb", 64, 256)
    plan = res.plan(0)
    sens = layout_sensitivity(res.spec, res.system, plan, 20.0)
    hbm = sens[sens["knob"] == "HBM bandwidth"].set_index("change_pct")["days_ratio"]
    assert hbm[-20.0] > 1.0 > hbm[20.0]  # less bandwidth is slower, more is faster
    price = sens[sens["knob"] == "price"].set_index("change_pct")
    assert price.loc[20.0, "cost_ratio"] == pytest.approx(1.2) and price.loc[20.0, "days_ratio"] == 1.0


def test_layout_labels_by_hand() -> None:
    """One labeller for search tables (the app's column), their rows and plans: every field that is
    not its default shows, in one order; the window and offload columns are optional."""
    t = pd.DataFrame([
        {"dp": 16, "tp": 8, "pp": 8, "cp": 1, "ep": 1, "vp": 2, "sequence_parallel": True, "zero_stage": 1,
         "micro_batch": 1, "recompute": "selective", "schedule": "interleaved-1f1b", "recompute_num_layers": 0,
         "offload_activations": 0},
        {"dp": 4, "tp": 1, "pp": 1, "cp": 2, "ep": 4, "vp": 1, "sequence_parallel": False, "zero_stage": 3,
         "micro_batch": 2, "recompute": "full", "schedule": "1f1b", "recompute_num_layers": 5, "offload_activations": 3}])
    labels = ["dp 16 tp 8 pp 8 vp 2 sp zero 1 mb 1 recompute selective interleaved-1f1b",
              "dp 4 tp 1 pp 1 cp 2 ep 4 zero 3 mb 2 recompute full (first 5 per chunk) offload 3"]
    assert layout_labels(t).tolist() == labels
    assert layout_label(t.iloc[1]) == labels[1]
    assert layout_labels(t.drop(columns=["recompute_num_layers", "offload_activations"])).iloc[0] == labels[0]
    plan = ParallelPlan(dp=4, tp=2, pp=2, micro_batch=1, global_batch=64, recompute="full", recompute_method="block",
                        recompute_num_layers=3, sequence_parallel=True)
    assert layout_label(plan) == "dp 4 tp 2 pp 2 sp zero 0 mb 1 recompute full (first 3 per chunk) 1f1b"
    table = search("llama3-8b", "h100-sxm5-80gb", 64, 256).table
    assert len(table) > 100 and layout_labels(table).is_unique


def test_tornado_draws_nothing_for_no_change_and_colours_by_direction() -> None:
    f = pd.DataFrame({"factor": ["peak FLOP/s"] * 2 + ["link latency"] * 2, "change": ["×0.5", "×2"] * 2,
                      "step_time_s": [15.0, 7.5, 10.0, 10.0], "delta_s": [5.0, -2.5, 0.0, 1e-6],
                      "delta": [0.5, -0.25, 0.0, 1e-7]})
    spec = tornado_chart(f).to_dict()
    data = spec["datasets"]
    bars = next(v for v in data.values() if any(r.get("direction") for r in v) and all(r["delta"] != 0 for r in v))
    assert {(r["factor"], r["direction"]) for r in bars} == {("peak FLOP/s", "slower"), ("peak FLOP/s", "faster")}
    assert {r["label"] for r in bars} == {"×0.5: +5 s (+50.0%)", "×2: -2.5 s (-25.0%)"}
    still = [r for v in data.values() for r in v if r.get("label") == "no change"]
    assert [r["factor"] for r in still] == ["link latency"]
    assert spec["layer"][0]["encoding"]["color"]["scale"]["range"][0] == "#d62728"  # slower is red


def test_compare_chart_orders_candidates_by_an_explicit_list() -> None:
    """Best first, as a list: a sort by field with an aggregate cannot be unioned with the
    whisker layer's domain (Vega-Lite drops it with console warnings)."""
    f = pd.DataFrame({"candidate": ["a", "b", "c"], "days": [3.0, 1.0, 2.0], "days_lo": [2.5, 0.9, 1.5],
                      "days_hi": [4.0, 1.2, 2.6], "mfu": [0.5, 0.3, 0.4]})
    spec = compare_chart(f, "days", "time to train (days)", interval=("days_lo", "days_hi")).to_dict()
    sorts = [layer["encoding"]["y"]["sort"] for layer in spec["layer"]]
    assert sorts == [["b", "c", "a"], ["b", "c", "a"]]
    assert compare_chart(f, "mfu", "MFU", higher_is_better=True).to_dict()["encoding"]["y"]["sort"] == ["a", "c", "b"]
