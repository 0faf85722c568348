"""The Streamlit app driven headless with streamlit.testing.v1.AppTest: each page runs, numbers and
chart data match the library, and bad input becomes a message, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pa = pytest.importorskip("pyarrow")
import pandas as pd  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import perfmodel  # noqa: E402

APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGES = ["Estimate", "Compare hardware", "Layout search", "Training run", "Validation"]


def app(**query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def metric(at: AppTest, label: str, nth: int = 0) -> str:
    return [m.value for m in at.metric if m.label == label][nth]


def chart_frames(at: AppTest) -> list[list]:
    """The datasets behind each Altair chart on the page (one list of DataFrames per chart)."""
    return [[pa.ipc.open_stream(d.data.data).read_pandas() for d in c.proto.datasets] for c in at.get("vega_lite_chart")]


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


@pytest.fixture(scope="module")
def default_app() -> AppTest:
    return app()


def test_estimate_page_shows_the_library_numbers(default_app: AppTest) -> None:
    at = default_app
    no_exception(at)
    assert not errors(at)
    step = float(metric(at, "Step time (s)"))
    # the default sidebar: gpt3-175b on 1024 A100 80GB, tp 8, pp 8, dp 16, ZeRO-1, selective recompute, sp
    plan = perfmodel.ParallelPlan(dp=16, tp=8, pp=8, zero_stage=1, global_batch=1536, recompute="selective",
                                  sequence_parallel=True)
    est = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan)
    assert step == pytest.approx(est.step_time_s, rel=1e-3)
    assert float(metric(at, "MFU (%)")) == pytest.approx(est.mfu * 100, abs=0.06)


def test_breakdown_chart_data_sums_to_the_step_time(default_app: AppTest) -> None:
    frames = chart_frames(default_app)
    assert frames, "no Altair chart on the Estimate page"
    breakdown = next(f for fs in frames for f in fs if "component" in f and (f["kind"] == "time").all())
    assert breakdown["value"].sum() == pytest.approx(float(metric(default_app, "Step time (s)")), rel=1e-3)
    memory = next(f for fs in frames for f in fs if "GB" in f)
    assert set(memory["component"]) >= {"weights", "optimizer", "activations"}


def sidebar_errors(at: AppTest) -> list[str]:
    return [e.value for e in at.sidebar.error]


def test_tp_that_does_not_divide_heads_is_an_error_under_tp_with_fixes() -> None:
    # the head count is checked first; fixing tp to 8 leaves a valid layout on the default 1024 GPUs
    at = app(tp="7")
    no_exception(at)
    assert any("tp 7 does not divide the 96 attention heads" in e for e in sidebar_errors(at)), sidebar_errors(at)
    assert not [m for m in at.metric if m.label == "Step time (s)"]
    fixes = [b for b in at.sidebar.button if b.label.startswith("use tp")]
    assert [b.label for b in fixes] == ["use tp 6", "use tp 8"]  # the divisors of 96 nearest 7
    fixes[1].click().run()
    no_exception(at)
    assert at.sidebar.number_input(key="tp").value == 8 and not sidebar_errors(at)
    assert float(metric(at, "Step time (s)")) > 0


def test_layout_errors_stay_off_pages_that_do_not_use_the_layout() -> None:
    at = app(tp="7", gpus="896", page="Validation")
    no_exception(at)
    assert not sidebar_errors(at) and not errors(at)


def test_changing_tp_in_the_widget_reruns_with_an_error() -> None:
    at = app(gpus="896")
    at.sidebar.number_input(key="tp").set_value(7).run()
    no_exception(at)
    assert any("does not divide the 96 attention heads" in e for e in sidebar_errors(at))


def test_gpu_count_not_divisible_by_the_layout_names_every_operand() -> None:
    at = app(gpus="1000")
    no_exception(at)
    assert any("1000 GPUs do not split into tp 8 x pp 8 x cp 1 = 64" in e for e in sidebar_errors(at)), sidebar_errors(at)
    assert [b.label for b in at.sidebar.button if b.label.startswith("use")] == ["use 960 GPUs", "use 1,024 GPUs"]


def test_layout_that_does_not_fit_says_so() -> None:
    at = app(recompute="none", zero="0", pp="1", tp="8", gpus="1024", workload="gpt3-175b")
    no_exception(at)
    fit_msgs = [w.value for w in at.warning if "fit" in w.value]
    assert len(fit_msgs) == 1 and "per GPU >" in fit_msgs[0] and "of HBM" in fit_msgs[0], fit_msgs
    assert "with full recompute" in fit_msgs[0] and "GiB" not in fit_msgs[0], fit_msgs
    # said once: the engine's note is the warning, not also an info box
    assert not [i.value for i in at.info if "does not fit" in i.value.lower()]
    assert not errors(at)
    assert float(metric(at, "Step time (s)")) > 0


def test_recompute_modules_selector_matches_the_library() -> None:
    """Selective recompute offers Megatron-Core's recompute modules; picking them changes the plan
    the estimate runs (the library's number), and none picked is a message, not a traceback."""
    at = app(workload="deepseek-v3", acc="h100-sxm5-80gb", gpus="256", tp="1", pp="8", ep="8", vp="1", gb="256",
             recompute="selective", sp="false")
    no_exception(at)
    at.multiselect(key="recompute_modules").set_value(["moe_act", "mla_up_proj"]).run()
    no_exception(at)
    assert not errors(at), errors(at)
    plan = perfmodel.ParallelPlan(dp=32, tp=1, pp=8, ep=8, zero_stage=1, global_batch=256, recompute="selective",
                                  selective_recompute="moe_act,mla_up_proj")
    est = perfmodel.estimate("deepseek-v3", "h100-sxm5-80gb", plan)
    assert float(metric(at, "Step time (s)")) == pytest.approx(est.step_time_s, rel=1e-3)
    at.multiselect(key="recompute_modules").set_value([]).run()
    no_exception(at)
    assert any("selective_recompute" in e and "allowed" in e for e in errors(at) + sidebar_errors(at))


def test_what_if_faster_flops_lowers_the_step_time(default_app: AppTest) -> None:
    at = app()
    base = float(metric(at, "Step time (s)"))
    at.select_slider(key="s_flops").set_value(2.0).run()
    no_exception(at)
    faster = float(metric(at, "Step time (s)", nth=1))
    assert faster < base
    tornado = next(f for fs in chart_frames(at) for f in fs if "factor" in f)
    assert set(tornado["factor"]) >= {"peak FLOP/s", "HBM bandwidth"}
    flops_x2 = tornado[(tornado["factor"] == "peak FLOP/s") & (tornado["change"] == "×2")]
    assert float(flops_x2["step_time_s"].iloc[0]) == pytest.approx(faster, rel=1e-3)


def test_state_comes_from_the_url() -> None:
    at = app(workload="llama3-8b", acc="h100-sxm5-80gb", gpus="64", tp="4", pp="1", gb="512")
    no_exception(at)
    assert at.sidebar.selectbox(key="workload").value == "llama3-8b"
    assert at.sidebar.number_input(key="tp").value == 4
    plan = perfmodel.ParallelPlan(dp=16, tp=4, pp=1, zero_stage=1, global_batch=512, recompute="selective",
                                  sequence_parallel=True)
    est = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan)
    assert float(metric(at, "Step time (s)")) == pytest.approx(est.step_time_s, rel=1e-3)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_without_exception(page: str) -> None:
    at = app(page=page)
    no_exception(at)
    assert at.header[0].value


def test_compare_page_bad_input_is_a_message() -> None:
    at = app(page="Compare hardware")
    at.multiselect(key="cands").set_value([]).run()
    no_exception(at)
    assert any("at least one candidate" in w.value for w in at.warning)


def test_compare_page_has_one_row_per_candidate() -> None:
    pytest.importorskip("perfmodel.planning")
    at = app(page="Compare hardware")
    at.multiselect(key="cands").set_value(["a100-sxm4-80gb", "h100-sxm5-80gb"]).run()
    no_exception(at)
    table = at.dataframe[0].value
    assert list(table["candidate"]) == ["a100-sxm4-80gb", "h100-sxm5-80gb"]
    assert (table["days"] > 0).all()
    days = next(f for fs in chart_frames(at) for f in fs if "days" in f and "candidate" in f)
    assert set(days["candidate"]) == {"a100-sxm4-80gb", "h100-sxm5-80gb"}


def test_search_page_ranks_fitting_layouts() -> None:
    pytest.importorskip("perfmodel.planning")
    at = app(page="Layout search", workload="llama3-8b", acc="h100-sxm5-80gb", gpus="64", gb="512")
    no_exception(at)
    assert not errors(at)
    assert int(metric(at, "Layouts that fit").replace(",", "")) > 0
    table = at.dataframe[0].value
    assert table["step_time_s"].is_monotonic_increasing
    pareto = next(f for fs in chart_frames(at) for f in fs if "headroom_gb" in f)
    assert pareto["front"].any()


def test_search_page_tries_dualpipe_on_request() -> None:
    pytest.importorskip("perfmodel.planning")
    query = dict(page="Layout search", workload="llama3-8b", acc="h100-sxm5-80gb", gpus="64", gb="512")
    base = app(**query)
    at = app(**query, search_dualpipe="true")
    no_exception(at)
    assert not errors(at)
    more = int(metric(at, "Layouts that fit").replace(",", ""))
    assert more > int(metric(base, "Layouts that fit").replace(",", ""))


def test_search_page_nothing_fits_is_a_message() -> None:
    pytest.importorskip("perfmodel.planning")
    at = app(page="Layout search", headroom="200")
    no_exception(at)
    assert any("No layout fits" in w.value for w in at.warning)


def test_validation_page_reports_the_public_runs() -> None:
    at = app(page="Validation")
    no_exception(at)
    predicted, total = metric(at, "Runs predicted").split(" / ")
    assert int(total) > 1000 and int(predicted) > 0
    scatter = next(f for fs in chart_frames(at) for f in fs if "predicted_step_time_s" in f)
    assert (scatter["predicted_step_time_s"] > 0).all()
    at.multiselect(key="sources").set_value([]).run()
    no_exception(at)
    assert any("No predicted runs" in w.value for w in at.warning)


def test_validation_page_judges_the_files_nothing_is_fitted_on() -> None:
    """The judged-only files are out of sample for every profile: the page predicts each of them,
    says so, and switching files resets the source filter to the new file's sources."""
    at = app(page="Validation", runs_file="judged: DGX Cloud")
    no_exception(at)
    assert not errors(at)
    predicted, total = metric(at, "Runs predicted").split(" / ")
    assert int(total) == 326 and int(predicted) == 326
    assert any("Nothing is fitted on these runs" in c.value for c in at.caption)
    at.selectbox(key="runs_file").set_value("judged: published extra").run()
    no_exception(at)
    predicted, total = metric(at, "Runs predicted").split(" / ")
    assert int(total) == int(predicted) > 200
    assert set(at.multiselect(key="sources").value) == set(at.multiselect(key="sources").options)


def test_des_engine_gives_a_number_or_a_message() -> None:
    at = app(engine="des", workload="llama3-8b", acc="h100-sxm5-80gb", gpus="64", tp="4", pp="2", gb="512")
    no_exception(at)
    shown = [m for m in at.metric if m.label == "Step time (s)"]
    assert (shown and float(shown[0].value) > 0) or any("engine" in e for e in errors(at)), errors(at)


def test_des_engine_shows_the_timeline_gantt() -> None:
    """With the DES engine the Estimate page draws the trace as a Gantt chart whose lanes are the
    pipeline stages (2 here) and offers the Chrome trace download."""
    import json

    from perfmodel.app_charts import timeline_frame

    at = app(engine="des", workload="gpt3-175b", acc="a100-sxm4-80gb", gpus="16", tp="8", pp="2", gb="4")
    no_exception(at)
    charts_ = [c for c in at.get("vega_lite_chart") if "DES timeline" in json.dumps(c.proto.spec if hasattr(c, "proto") else "")]
    assert charts_, "no DES timeline chart"
    import perfmodel

    est = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", perfmodel.ParallelPlan(tp=8, pp=2, global_batch=4), engine="des")
    frame = timeline_frame(est.timeline)
    assert {"stage 0 · compute", "stage 1 · compute"} <= set(frame["lane"])
    assert (frame["end_s"] >= frame["start_s"]).all() and frame["end_s"].max() <= est.step_time_s * (1 + 1e-9)


def test_timeline_lanes_numeric_colour_families_and_one_dp_entry() -> None:
    """Stage 2 before stage 10; forward / backward / weight-grad chunks share their family's hue;
    every DP bucket is one legend entry; zoom and pan on time; durations in the tooltip."""
    import json

    import perfmodel
    from perfmodel.app_charts import TIMELINE_FAMILIES, _timeline_colours, gantt_chart, timeline_frame

    plan = perfmodel.ParallelPlan(tp=1, pp=12, vp=2, dp=2, global_batch=48, micro_batch=1)
    est = perfmodel.estimate("gpt3-1.3b", "a100-sxm4-80gb", plan, engine="des")
    frame = timeline_frame(est.timeline)
    lanes = frame.sort_values("order")["lane"].drop_duplicates().tolist()
    assert lanes.index("stage 2 · compute") < lanes.index("stage 10 · compute")
    kinds = set(frame["kind"])
    assert {"forward, chunk 0", "forward, chunk 1", "backward, chunk 0", "backward, chunk 1"} <= kinds
    assert not any(k.startswith("dp bucket") for k in kinds) and "dp gradient reduce" in kinds
    domain, colours = _timeline_colours(sorted(kinds))
    colour = dict(zip(domain, colours, strict=True))
    assert colour["forward, chunk 0"] in TIMELINE_FAMILIES["forward"]
    assert colour["forward, chunk 1"] in TIMELINE_FAMILIES["forward"]
    assert colour["forward, chunk 0"] != colour["forward, chunk 1"]
    assert colour["backward, chunk 1"] in TIMELINE_FAMILIES["backward"]
    spec = gantt_chart(est.timeline).to_dict()
    text = json.dumps(spec)
    assert "duration_ms" in text and '"bind": "scales"' in text  # tooltip durations; interactive zoom / pan
    assert spec["encoding"]["y"]["sort"] == lanes


def test_an_uploaded_workload_can_be_picked_and_estimated() -> None:
    from perfmodel.app_fixes import parse_uploaded_workload

    spec = parse_uploaded_workload("tiny-gpt.yaml", b"id: tiny-gpt\nname: Tiny GPT\nfamily: dense\nsource: my notes\n"
                                   b"num_layers: 2\nhidden: 256\nffn_hidden: 1024\nnum_heads: 4\nvocab: 1000\nseq_len: 128\n")
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["custom_workloads"] = {"tiny-gpt": spec}
    at.query_params.update(workload="tiny-gpt", gpus="8", tp="1", pp="1", gb="8")
    at.run()
    no_exception(at)
    assert not errors(at), errors(at)
    est = perfmodel.estimate(spec, "a100-sxm4-80gb", perfmodel.ParallelPlan(dp=8, global_batch=8, zero_stage=1,
                                                                            recompute="selective"))
    assert float(metric(at, "Step time (s)")) == pytest.approx(est.step_time_s, rel=1e-3)


def test_training_run_page_shows_the_converge_curve_and_goodput() -> None:
    from perfmodel.app_run import default_target
    from perfmodel.planning.converge import time_to_target

    at = app(page="Training run", workload="gpt2-124m", acc="a100-sxm4-80gb", gpus="8", tp="1", pp="1", gb="64")
    no_exception(at)
    assert not errors(at), errors(at)
    target = default_target(perfmodel.get_workload("gpt2-124m"))
    assert target == pytest.approx(2.70)  # Chinchilla floor at 124M parameters is 2.409, plus 0.3, to 0.05
    res = time_to_target("gpt2-124m", "a100-sxm4-80gb", 8, target)
    assert int(metric(at, "Fastest global batch").replace(",", "")) == res.best.global_batch
    assert float(metric(at, "Days to target")) == pytest.approx(res.best.time_s / 86400, abs=0.006)
    tables = [d.value for d in at.dataframe]
    assert any("goodput" in t for t in tables) and any("days" in t for t in tables)


# ---- Explorer v2: the purchase view, trust on every number, the tornado --------------------------
def compare_table(at: AppTest) -> pd.DataFrame:
    return at.dataframe[0].value.set_index("candidate")


def small_compare(cands: list[str], **query: str) -> AppTest:
    pytest.importorskip("perfmodel.planning")
    at = app(**{"page": "Compare hardware", "workload": "llama3-8b", "gpus": "64", "gb": "256", **query})
    at.multiselect(key="cands").set_value(cands).run()
    no_exception(at)
    return at


def test_purchase_view_prices_from_the_specs_and_typed_ones() -> None:
    at = small_compare(["h100-sxm5-80gb", "b200"])
    t = compare_table(at)
    # the H100's price comes prefilled from its spec (12.29 USD per GPU-hour), the B200 has none
    assert at.number_input(key="price_hourly_GPU_h100-sxm5-80gb").value == pytest.approx(12.29)
    assert at.number_input(key="price_hourly_GPU_b200").value is None
    assert t.loc["h100-sxm5-80gb", "cost_usd"] == pytest.approx(t.loc["h100-sxm5-80gb", "gpu_hours"] * 12.29)
    assert pd.isna(t.loc["b200", "cost_usd"]) and t.loc["b200", "price_note"] == "no price: type one"
    assert any("no hourly price" in c.value for c in at.caption)
    # typing a price costs the candidate; cost per 10^12 tokens follows (1000 B tokens by default)
    at.number_input(key="price_hourly_GPU_b200").set_value(6.0).run()
    t = compare_table(at)
    assert t.loc["b200", "cost_usd"] == pytest.approx(t.loc["b200", "gpu_hours"] * 6.0)
    assert t.loc["b200", "usd_per_trillion_tokens"] == pytest.approx(t.loc["b200", "cost_usd"])
    # PUE multiplies the energy; the electricity price sets the energy cost
    e12 = t.loc["b200", "energy_mwh"]
    at.number_input(key="pue").set_value(1.5).run()
    t = compare_table(at)
    assert t.loc["b200", "energy_mwh"] == pytest.approx(e12 * 1.5 / 1.2)
    assert t.loc["b200", "energy_cost_usd"] == pytest.approx(t.loc["b200", "energy_mwh"] * 1000 * 0.10)


def test_purchase_view_buying_amortises_a_node_price() -> None:
    at = small_compare(["b200"])
    at.radio(key="basis").set_value("purchase").run()
    at.radio(key="price_per").set_value("node").run()
    at.number_input(key="price_purchase_node_b200").set_value(400_000.0).run()
    no_exception(at)
    t = compare_table(at)
    rate = 400_000 / 8 / (4 * 8766 * 0.8)  # node price / 8 GPUs / (4 years x 8766 h x 80 % utilisation)
    assert t.loc["b200", "usd_per_gpu_hour"] == pytest.approx(rate)
    assert t.loc["b200", "cost_usd"] == pytest.approx(t.loc["b200", "gpu_hours"] * rate + t.loc["b200", "energy_cost_usd"])


def test_purchase_view_precision_per_candidate_and_a_rack_on_another_fabric() -> None:
    at = small_compare(["h100-sxm5-80gb", "dgx-h100@roce"])
    step_bf16 = compare_table(at).loc["h100-sxm5-80gb", "step_time_s"]
    at.selectbox(key="prec_h100-sxm5-80gb").set_value("fp8").run()
    t = compare_table(at)
    assert t.loc["h100-sxm5-80gb", "precision"] == "fp8" and t.loc["dgx-h100@roce", "precision"] == "bf16"
    assert t.loc["h100-sxm5-80gb", "step_time_s"] < step_bf16  # fp8 GEMMs on H100
    assert t.loc["dgx-h100@roce", "step_time_s"] >= step_bf16 * (1 - 1e-9)  # RoCE hops are no faster than NDR's


def test_purchase_view_warns_of_a_partial_rack() -> None:
    at = small_compare(["nvl72"], gpus="100")
    assert any("partial NVLink domain (rack) of 72" in w.value for w in at.warning), [w.value for w in at.warning]


def test_compare_rows_carry_badges_interval_and_mfu_flag() -> None:
    at = small_compare(["h100-sxm5-80gb", "mi300x"])
    t = compare_table(at)
    md = [m.value for m in at.markdown]
    assert sum("badge[" in m for m in md) == 2  # one calibration badge per candidate
    # the shipped calibration profile gives every candidate an 80 % interval (docs/CALIBRATION.md)
    assert not any(s.endswith("(no interval)") for s in t["step_interval"]), list(t["step_interval"])
    flagged = [c for c in t.index if t.loc[c, "mfu_flag"]]
    assert sum("MFU above any published run" in m for m in md) == len(flagged)


def test_compare_flags_an_mfu_above_any_published_run() -> None:
    pytest.importorskip("perfmodel.planning")
    at = app(page="Compare hardware", workload="llama3-70b", gpus="576", gb="2048")
    at.multiselect(key="cands").set_value(["tpu-v4"]).run()
    no_exception(at)
    t = compare_table(at)
    assert t.loc["tpu-v4", "mfu"] > 0.462  # above PaLM's 46.2 % on TPU v4 (the spec's best published)
    assert any("MFU above any published run" in m.value for m in at.markdown)


def test_estimate_shows_no_interval_badge_and_assumptions(default_app: AppTest) -> None:
    md = [m.value for m in default_app.markdown]
    # the shipped calibration profile gives an interval (docs/CALIBRATION.md); physics only gives none
    assert any(m.startswith("Step time 80 % interval") and "no interval" not in m for m in md)
    assert any("badge[" in m and "measured" in m for m in md)
    assumptions = next(c.value for c in default_app.caption if c.value.startswith("Assumptions"))
    for text in ("sequence length (tokens): **2048**", "precision: **bf16**", "training stack", "calibration profile"):
        assert text in assumptions


def test_the_training_stack_selector_reaches_the_estimate() -> None:
    """Megatron-Core selects fused (FA3) attention and Transformer Engine's fusions: on H100 the
    same layout is faster than under no stack, the assumptions name the stack, and the page shows
    the stack's evidence; torchtitan (FA2, eager) is not that fast."""
    kw = dict(workload="llama3-8b", acc="h100-sxm5-80gb", gpus="8", tp="1", pp="1", gb="64", mb="1")
    plain, mcore, titan = app(**kw), app(**kw, framework="megatron-core"), app(**kw, framework="torchtitan")
    for at in (plain, mcore, titan):
        no_exception(at)
    step = {name: float(metric(at, "Step time (s)")) for name, at in
            (("plain", plain), ("mcore", mcore), ("titan", titan))}
    assert step["mcore"] < step["plain"] and step["mcore"] < step["titan"]
    assumptions = next(c.value for c in mcore.caption if c.value.startswith("Assumptions"))
    assert "training stack: **megatron-core**" in assumptions
    assert any("Transformer Engine" in c.value for c in mcore.caption)


def test_estimate_shows_the_interval_when_the_library_gives_one(monkeypatch: pytest.MonkeyPatch) -> None:
    del monkeypatch  # the library now gives the interval itself (the shipped calibration profile)
    at = app(seq="4096")
    no_exception(at)
    step = float(metric(at, "Step time (s)"))
    line = next(m.value for m in at.markdown if m.value.startswith("Step time 80 % interval"))
    lo, hi = (float(x) for x in line.split("**")[1].removesuffix(" s").split(" – "))
    assert lo <= step * 1.001 and hi >= step * 0.999 and lo < hi
    assert any("sequence length (tokens): **4096**" in c.value and "the sidebar" in c.value for c in at.caption)


def test_tornado_labels_seconds_and_percent_red_slower_nothing_for_zero(default_app: AppTest) -> None:
    frames = [f for fs in chart_frames(default_app) for f in fs if "direction" in f]
    bars = next(f for f in frames if len(f))
    assert (bars["delta"].abs() > 5e-4).all()  # no bar for a change that would print as 0.0 %
    assert ((bars["delta"] > 0) == (bars["direction"] == "slower")).all()
    halved = bars[(bars["factor"] == "peak FLOP/s") & (bars["change"] == "×0.5")].iloc[0]
    assert halved["label"] == f"×0.5: {halved['delta_s']:+.3g} s ({halved['delta']:+.1%})"


@pytest.mark.parametrize("key", ["s_flops", "s_hbm", "s_intra", "s_inter", "s_lat"])
def test_every_what_if_slider_moves_the_step_as_the_library_does(key: str) -> None:
    # the sliders feed System.scaled (tests/test_whatif.py holds every key moving the step on every
    # reference node where its term is over 1 %); here: the app shows the library's scaled step
    from perfmodel.hardware.system import resolve_system

    at = app()
    base = float(metric(at, "Step time (s)"))
    at.select_slider(key=key).set_value(2.0).run()
    no_exception(at)
    shown = float(metric(at, "Step time (s)", nth=1))
    kw = {"s_flops": "flops", "s_hbm": "hbm_bw", "s_intra": "intra_bw", "s_inter": "inter_bw", "s_lat": "latency"}[key]
    plan = perfmodel.ParallelPlan(dp=16, tp=8, pp=8, zero_stage=1, global_batch=1536, recompute="selective",
                                  sequence_parallel=True)
    system, _ = resolve_system("a100-sxm4-80gb", None, 1024)
    expected = perfmodel.estimate("gpt3-175b", system.scaled(**{kw: 2.0}), plan).step_time_s
    assert shown == pytest.approx(expected, rel=1e-3)
    if abs(expected / base - 1) > 0.01:
        assert shown != pytest.approx(base, rel=1e-3)


def test_training_run_page_input_pipeline_and_rl() -> None:
    at = app(page="Training run", workload="gpt2-124m", acc="a100-sxm4-80gb", gpus="8", tp="1", pp="1", gb="64")
    no_exception(at)
    assert metric(at, "Input bound") in ("yes", "no")
    at.number_input(key="ip_cpu").set_value(1000.0).run()  # 1 s of CPU per sample: 8 samples / 4 workers = 2 s
    no_exception(at)
    assert metric(at, "Input bound") == "yes"
    assert float(metric(at, "Step with the loader (s)")) == pytest.approx(2.0, rel=1e-3)
    rl = app(page="Training run", workload="ppo-mlp-humanoid", acc="h100-sxm5-80gb", gpus="1", tp="1", pp="1", gb="1",
             zero="0", recompute="none")
    no_exception(rl)
    assert float(metric(rl, "Environment steps/s").replace(",", "")) > 0
    assert metric(rl, "Bottleneck") in ("actors", "inference", "learner")


def test_a_link_naming_an_uploaded_profile_falls_back_to_default_and_says_so() -> None:
    at = app(calibration="their-cluster.yaml")
    no_exception(at)
    assert at.sidebar.radio(key="calibration").value == "default"
    assert any("their-cluster.yaml" in w.value and "not uploaded in this session" in w.value for w in at.sidebar.warning)
    plan = perfmodel.ParallelPlan(dp=16, tp=8, pp=8, zero_stage=1, global_batch=1536, recompute="selective",
                                  sequence_parallel=True)
    assert float(metric(at, "Step time (s)")) == pytest.approx(perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan).step_time_s,
                                                               rel=1e-3)


def test_search_page_offloading_checkbox_adds_offloaded_layouts() -> None:
    """Llama-3-8B at 8k tokens on 8 H100 (PCIe host link): with the box ticked, layouts that fit
    only by offloading activations are ranked too, and their label says how many layers."""
    pytest.importorskip("perfmodel.planning")
    query = dict(page="Layout search", workload="llama3-8b", acc="h100-sxm5-80gb", gpus="8", gb="64", seq="8192",
                 top="500")
    off, on = app(**query), app(**query, search_offload="true")
    for at in (off, on):
        no_exception(at)
        assert not errors(at)
    fit_off, fit_on = (int(metric(at, "Layouts that fit").replace(",", "")) for at in (off, on))
    assert fit_on > fit_off
    assert on.dataframe[0].value["layout"].str.contains(" offload ").any()
    assert not off.dataframe[0].value["layout"].str.contains(" offload ").any()


def test_the_dualpipe_schedule_runs_from_the_sidebar() -> None:
    """The schedule box offers DualPipe: the default layout (pp 8, 96 micro-batches) under it shows
    the library's step; a layout DualPipe refuses is a message naming the rule, not a traceback."""
    at = app(schedule="dualpipe")
    no_exception(at)
    assert not errors(at)
    plan = perfmodel.ParallelPlan(dp=16, tp=8, pp=8, zero_stage=1, global_batch=1536, recompute="selective",
                                  sequence_parallel=True, schedule="dualpipe")
    est = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan)
    assert float(metric(at, "Step time (s)")) == pytest.approx(est.step_time_s, rel=1e-3)
    bad = app(schedule="dualpipe", pp="3", gpus="384")
    no_exception(bad)
    assert any("dualpipe' needs an even pp" in e for e in errors(bad))


def test_the_optimizer_selector_reaches_the_estimate() -> None:
    """bf16 AdamW moments keep less optimizer state than AdamW's: the same layout needs less memory,
    and the assumptions name the optimizer."""
    kw = dict(workload="llama3-8b", acc="h100-sxm5-80gb", gpus="8", tp="1", pp="1", gb="64", mb="1")
    adam, bf16 = app(**kw), app(**kw, optimizer="adamw-bf16")
    for at in (adam, bf16):
        no_exception(at)
    assumptions = next(c.value for c in bf16.caption if c.value.startswith("Assumptions"))
    assert "optimizer: **adamw-bf16" in assumptions
    mem = {name: float(metric(at, "Memory per GPU (GB)").split()[0]) for name, at in (("adam", adam), ("bf16", bf16))}
    assert mem["bf16"] < mem["adam"]


def test_the_attention_kernel_selector_outranks_the_stack() -> None:
    """The sidebar offers the kernels the accelerator's generation measured (H100: FA3, not FA4;
    B200: FA4, not FA3); a named kernel reaches the estimate and the search as the library runs it."""
    kw = dict(workload="llama3-8b", acc="h100-sxm5-80gb", gpus="8", tp="1", pp="1", gb="64", mb="1",
              framework="torchtitan")
    stack, fa3 = app(**kw), app(**kw, attention="flash3")
    for at in (stack, fa3):
        no_exception(at)
        assert not errors(at)
    options = next(s.options for s in stack.selectbox if s.label == "Attention kernel")
    assert "flash3" in options and "flash4" not in options
    b200 = app(**(kw | {"acc": "b200"}))
    assert "flash4" in next(s.options for s in b200.selectbox if s.label == "Attention kernel")
    assert "flash3" not in next(s.options for s in b200.selectbox if s.label == "Attention kernel")
    plan = perfmodel.ParallelPlan(dp=8, zero_stage=1, global_batch=64, recompute="selective", sequence_parallel=True,
                                  attention_impl="flash3")
    est = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, framework="torchtitan")
    assert float(metric(fa3, "Step time (s)")) == pytest.approx(est.step_time_s, rel=1e-3)
    assert float(metric(fa3, "Step time (s)")) < float(metric(stack, "Step time (s)"))
    assumptions = next(c.value for c in fa3.caption if c.value.startswith("Assumptions"))
    assert "attention kernel: **flash3 (named in the sidebar)**" in assumptions
    assert "attention kernel: **flash**" in next(c.value for c in stack.caption if c.value.startswith("Assumptions"))
    pytest.importorskip("perfmodel.planning")
    found = app(**kw, attention="flash3", page="Layout search")
    no_exception(found)
    from perfmodel.planning.search import search

    res = search("llama3-8b", "h100-sxm5-80gb", 8, 64, framework="torchtitan", attention="flash3")
    assert found.dataframe[0].value["step_time_s"].iloc[0] == pytest.approx(res.table["step_time_s"].iloc[0], rel=1e-3)
    assert res.plan().attention_impl == "flash3"
    assert res.best().step_time_s == pytest.approx(res.table["step_time_s"].iloc[0], rel=1e-6)
