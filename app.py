"""perfmodel what-if explorer: `streamlit run app.py`.

Thin by design: the sidebar widgets build one validated `ParallelPlan` plus the ids of a workload
and a system, the library computes, and `perfmodel.app_charts` turns its long-form frames into
Altair charts. Every widget is bound to the URL's query parameters (where Streamlit supports it),
so a what-if can be shared as a link. Bad input never shows a traceback: a `PerfmodelError` or
`ValueError` becomes an `st.error` with the library's message.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from perfmodel import app_charts as charts
from perfmodel.app_fixes import LayoutProblem, diagnose, field_of
from perfmodel.engines.registry import ENGINE_NAMES
from perfmodel.errors import PerfmodelError
from perfmodel.parallel.schedules import SCHEDULE_NAMES

ROOT = Path(__file__).resolve().parent
RUNS_PUBLIC = ROOT / "validation" / "runs_public.csv"
PAGES = ["Estimate", "Compare hardware", "Layout search", "Training run", "Validation"]
SCALES = [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0]
WHATIF = {  # key -> (label, System.scaled keyword)
    "s_flops": ("peak FLOP/s", "flops"),
    "s_hbm": ("HBM bandwidth", "hbm_bw"),
    "s_intra": ("scale-up (NVLink) bandwidth", "intra_bw"),
    "s_inter": ("scale-out (network) bandwidth", "inter_bw"),
    "s_lat": ("link latency", "latency"),
}
USER_ERRORS = (PerfmodelError, ValueError, KeyError)
ZERO_LABELS = {0: "0: no sharding", 1: "1: optimizer states sharded", 2: "2: + gradients", 3: "3: + weights (FSDP)"}
SCHEDULE_LABELS = {"auto": "automatic", "1f1b": "1F1B", "interleaved": "interleaved 1F1B", "gpipe": "GPipe",
                   "zb-h1": "zero bubble (ZB-H1)"}
LAYOUT_PAGES = ("Estimate", "Training run")  # pages that use the sidebar's layout (the others search or compare their own)
REFERENCE = "(reference node)"


# ---- widgets bound to the URL -------------------------------------------------------------------
def _bound(widget: Any, label: str, key: str, **kw: Any) -> Any:
    """Call a Streamlit widget with `key`, bound to the query parameter of that name when this
    Streamlit version supports `bind=` (1.5x+); older versions still work, without the URL."""
    if "bind" in inspect.signature(widget).parameters:
        kw["bind"] = "query-params"
    return widget(label, key=key, **kw)


# ---- cached library calls (inputs are ids, frozen plans and tuples) -------------------------------
@st.cache_resource(show_spinner=False)
def catalog() -> Any:
    from perfmodel.hardware.catalog import load_catalog

    return load_catalog()


@st.cache_resource(show_spinner=False)
def workloads() -> dict[str, Any]:
    from perfmodel.workload.catalog import load_workloads

    return load_workloads()


@st.cache_resource(show_spinner=False, max_entries=512)
def system_for(acc: str, system: str | None, n_gpus: int, scales: tuple[float, ...]) -> tuple[Any, tuple[str, ...]]:
    from perfmodel.hardware.catalog import resolve_system

    base, msgs = resolve_system(acc, system, n_gpus)
    kw = {name: f for (_, (_, name)), f in zip(WHATIF.items(), scales, strict=True)}
    return (base.scaled(**kw) if any(f != 1.0 for f in scales) else base), tuple(msgs)


@st.cache_resource(show_spinner=False, max_entries=1024)
def estimate(workload: Any, acc: str, system: str | None, plan: Any, engine: str,
             scales: tuple[float, ...] = (1.0,) * len(WHATIF), calibration: str = "default") -> Any:
    """One Estimate; cached on (ids, frozen ParallelPlan, engine, what-if factors, calibration)."""
    import perfmodel

    sysobj, _ = system_for(acc, system, plan.world, scales)
    return perfmodel.estimate(workload, sysobj, plan, engine=engine, calibration=calibration)


@st.cache_data(show_spinner=False)
def validation_frames(runs_path: str, mtime: float, engine: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(joined runs + predictions, metrics per source) for a runs file; cached on its mtime."""
    from perfmodel.validation.predict import validate_file
    from perfmodel.validation.report import joined, metrics

    del mtime  # part of the cache key only
    with tempfile.TemporaryDirectory() as tmp:
        pred = Path(tmp) / "pred.csv"
        validate_file(runs_path, pred, engine=engine)
        m = joined([Path(runs_path)], [pred])
    return m, metrics(m)


def planning() -> Any | None:
    """The planner package (perfmodel.planning), or None where this build lacks it."""
    try:
        import perfmodel.planning as planning_pkg
    except ImportError:
        return None
    return planning_pkg


NO_PLANNER = "This page needs the planner (perfmodel.planning), which is not available in this build."


@st.cache_resource(show_spinner=False, max_entries=64)
def run_search(workload: Any, cluster: str, n_gpus: int, global_batch: int, seq_len: int | None, precision: str,
               objective: str, space: Any, calibration: str = "default") -> Any:
    """A SearchResult; cached on ids, numbers and the frozen SearchSpace."""
    return planning().search(workload, cluster, n_gpus, global_batch, seq_len=seq_len, precision=precision,
                             space=space, objective=objective, calibration=calibration)


@st.cache_data(show_spinner=False, max_entries=64)
def run_compare(workload: Any, cands: tuple[str, ...], n_gpus: int, global_batch: int, tokens: float,
                seq_len: int | None, precision: str, calibration: str = "default") -> pd.DataFrame:
    return planning().compare(workload, list(cands), n_gpus, global_batch, tokens, seq_len=seq_len, precision=precision,
                              calibration=calibration)


@st.cache_data(show_spinner=False, max_entries=32)
def run_sensitivity(workload: Any, cands: tuple[str, ...], n_gpus: int, global_batch: int, tokens: float,
                    pct: float, seq_len: int | None, precision: str) -> pd.DataFrame:
    return planning().sensitivity(workload, list(cands), n_gpus, global_batch, tokens, pct, seq_len=seq_len,
                                  precision=precision)


# ---- sidebar: the configuration -------------------------------------------------------------------
def sidebar() -> dict[str, Any] | None:
    """Draw the configuration widgets; return the raw choices, or None when the catalogue is broken."""
    sb = st.sidebar
    sb.title("perfmodel")
    page = _bound(sb.radio, "Page", "page", options=PAGES)
    try:
        cat, wl = catalog(), workloads()
    except USER_ERRORS as e:
        st.error(f"The hardware or workload catalogue could not be read: {e}")
        return None
    sb.subheader("Workload and hardware")
    custom = upload_workload(sb)
    ids = sorted(wl) + sorted(k for k in custom if k not in wl)
    workload = _bound(sb.selectbox, "Workload", "workload", options=ids,
                      index=ids.index("gpt3-175b") if "gpt3-175b" in ids else 0)
    sb.caption(f"**{spec_of(workload).name}**" + ("  (uploaded)" if workload in custom and workload not in wl else ""))
    accs = sorted(cat.accelerators)
    acc = _bound(sb.selectbox, "Accelerator", "acc", options=accs,
                 index=accs.index("a100-sxm4-80gb") if "a100-sxm4-80gb" in accs else 0)
    sb.caption(f"**{cat.accelerators[acc].name}**")
    nodes = [n for n, node in cat.nodes.items() if node.accelerator == acc]
    clusters = [c for c, cl in cat.clusters.items() if cat.nodes.get(cl.node) and cat.nodes[cl.node].accelerator == acc]
    systems = [REFERENCE, *sorted(nodes + clusters)]
    if st.session_state.get("system") not in systems:
        st.session_state["system"] = REFERENCE
    names = {**{n: node.name for n, node in cat.nodes.items()}, **{c: cl.name for c, cl in cat.clusters.items()}}
    system = _bound(sb.selectbox, "Node / cluster", "system", options=systems,
                    help="the reference node is the vendor's DGX/HGX-style node for this accelerator")
    if system != REFERENCE:
        sb.caption(f"**{names.get(system, system)}**")
    gpus = _bound(sb.number_input, "GPUs (total)", "gpus", min_value=1, max_value=1_000_000, value=1024, step=8)
    slots = {"gpus": sb.container()}
    engine = _bound(sb.radio, "Engine", "engine", options=list(ENGINE_NAMES), horizontal=True,
                    help="analytic: closed form, instant; des: discrete-event simulation with a timeline")
    calibration = _bound(sb.radio, "Calibration", "calibration", options=["default", "none"], horizontal=True,
                         help="default: the shipped profile fitted on the public runs (docs/CALIBRATION.md), with an 80 % "
                         "interval; none: physics only (microbenchmark rates as measured)")
    sb.subheader("Layout")
    slots["top"] = sb.container()
    c1, c2, c3 = sb.columns(3)
    tp = _bound(c1.number_input, "tp", "tp", min_value=1, max_value=512, value=8)
    pp = _bound(c2.number_input, "pp", "pp", min_value=1, max_value=512, value=8)
    cp = _bound(c3.number_input, "cp", "cp", min_value=1, max_value=512, value=1)
    slots["tp"] = sb.container()
    c1, c2, c3 = sb.columns(3)
    ep = _bound(c1.number_input, "ep", "ep", min_value=1, max_value=1024, value=1)
    vp = _bound(c2.number_input, "vp", "vp", min_value=1, max_value=64, value=1, help="virtual stages per pipeline rank")
    zero = _bound(c3.selectbox, "ZeRO", "zero", options=[0, 1, 2, 3], index=1,
                  help="; ".join(ZERO_LABELS.values()))
    slots["ep"] = sb.container()
    c1, c2, c3 = sb.columns(3)
    mb = _bound(c1.number_input, "micro batch", "mb", min_value=1, max_value=4096, value=1, help="sequences")
    gb = _bound(c2.number_input, "global batch", "gb", min_value=1, max_value=10_000_000, value=1536, help="sequences per step")
    seq = _bound(c3.number_input, "seq len", "seq", min_value=0, max_value=10_000_000, value=0,
                 help="tokens; 0 = workload default")
    slots["batch"] = sb.container()
    c1, c2 = sb.columns(2)
    recompute = _bound(c1.selectbox, "recompute", "recompute", options=["none", "selective", "full"], index=1)
    precision = _bound(c2.selectbox, "precision", "precision", options=["bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32"])
    c1, c2 = sb.columns(2)
    schedule = _bound(c1.selectbox, "schedule", "schedule", options=["auto", *SCHEDULE_NAMES],
                      help="; ".join(f"{k}: {SCHEDULE_LABELS.get(k, k)}" for k in ["auto", *SCHEDULE_NAMES]))
    sp = _bound(c2.checkbox, "seq. parallel", "sp", value=True, help="sequence parallelism (needs tp > 1)")
    return dict(page=page, workload=workload, acc=acc, system=None if system == REFERENCE else system, gpus=int(gpus),
                engine=engine, calibration=calibration, tp=int(tp), pp=int(pp), cp=int(cp), ep=int(ep), vp=int(vp),
                zero=int(zero), mb=int(mb),
                gb=int(gb), seq=int(seq), recompute=recompute, precision=precision, schedule=schedule, sp=bool(sp),
                slots=slots)


def spec_of(workload: str) -> Any:
    """The ModelSpec of a workload id: an uploaded one first, then the built-in catalogue."""
    return st.session_state.get("custom_workloads", {}).get(workload) or workloads()[workload]


def upload_workload(sb: Any) -> dict[str, Any]:
    """'Bring your own model': a workload YAML, validated on upload; errors name the field."""
    custom: dict[str, Any] = st.session_state.setdefault("custom_workloads", {})
    with sb.expander("Bring your own model (workload YAML)"):
        up = st.file_uploader("workload YAML", type=["yaml", "yml"], key="upload_workload", label_visibility="collapsed",
                              help="the fields of a file in workloads/ (id, name, family, source, sizes)")
        if up is not None:
            from perfmodel.app_fixes import parse_uploaded_workload

            try:
                spec = parse_uploaded_workload(up.name, up.getvalue())
            except USER_ERRORS as e:
                st.error(str(e))
            else:
                custom[spec.id] = spec
                st.success(f"added {spec.id} ({spec.name}); pick it above")
    return custom


def build_plan(cfg: dict[str, Any]) -> Any:
    """The validated ParallelPlan of the sidebar: dp is what the GPU count leaves after tp·pp·cp."""
    from perfmodel.errors import LayoutError
    from perfmodel.parallel.plan import ParallelPlan

    per_replica = cfg["tp"] * cfg["pp"] * cfg["cp"]
    if cfg["gpus"] % per_replica:
        raise LayoutError(f"GPUs {cfg['gpus']} is not divisible by tp {cfg['tp']} x pp {cfg['pp']} x cp {cfg['cp']} = "
                          f"{per_replica}; "
                          f"nearest valid GPU counts: {max(per_replica, cfg['gpus'] // per_replica * per_replica)}, "
                          f"{(cfg['gpus'] // per_replica + 1) * per_replica}")
    plan = ParallelPlan(
        dp=cfg["gpus"] // per_replica, tp=cfg["tp"], pp=cfg["pp"], cp=cfg["cp"], ep=cfg["ep"], vp=cfg["vp"],
        sequence_parallel=cfg["sp"], zero_stage=cfg["zero"], micro_batch=cfg["mb"], global_batch=cfg["gb"],
        seq_len=cfg["seq"] or None, recompute=cfg["recompute"], precision=cfg["precision"],
        schedule=None if cfg["schedule"] == "auto" else cfg["schedule"],
    )
    plan.validate_for(spec_of(cfg["workload"]), cfg["gpus"])
    return plan


def run_estimate(cfg: dict[str, Any], plan: Any, scales: tuple[float, ...] | None = None) -> Any | None:
    """The estimate, or None after showing why it could not be made."""
    try:
        return estimate(spec_of(cfg["workload"]), cfg["acc"], cfg["system"], plan, cfg["engine"],
                        scales or (1.0,) * len(WHATIF), cfg.get("calibration", "default"))
    except ModuleNotFoundError as e:
        st.error(f"The {cfg['engine']!r} engine is not available in this build ({e.name} missing); choose 'analytic'.")
    except USER_ERRORS as e:
        st.error(str(e))
    return None


# ---- page: Estimate -------------------------------------------------------------------------------
def page_estimate(cfg: dict[str, Any], plan: Any) -> None:
    st.header("Estimate one training step")
    st.caption(f"{cfg['workload']} on {cfg['gpus']} × {cfg['acc']} ({cfg['system'] or 'reference node'}), "
               f"dp {plan.dp} · tp {plan.tp} · pp {plan.pp} · cp {plan.cp} · ep {plan.ep} · vp {plan.vp}, "
               f"{plan.num_micro_batches} micro-batches of {plan.micro_batch}, {cfg['engine']} engine")
    est = run_estimate(cfg, plan)
    if est is None:
        return
    _, sys_msgs = system_for(cfg["acc"], cfg["system"], plan.world, (1.0,) * len(WHATIF))
    for m in dict.fromkeys((*sys_msgs, *est.messages)):  # a System's notes come back in est.messages
        st.info(m)
    frame = est.to_frame()
    if not est.fits:
        st.warning(f"Does not fit: {est.memory_per_gpu_bytes / charts.GB:.1f} GB per GPU needed, "
                   f"{est.hbm_bytes / charts.GB:.1f} GB of HBM. The numbers below are greyed: this layout would not run. "
                   "Try more recompute, a higher ZeRO stage, or more tp / pp.")
        st.markdown("<style>[data-testid='stMetricValue'] {color: #9a9a9a;}</style>", unsafe_allow_html=True)
    show_metrics(est)
    if est.step_time_lo_s is not None:
        st.caption(f"80 % prediction interval of the step time: {est.step_time_lo_s:.4g} - {est.step_time_hi_s:.4g} s "
                   f"(calibration profile {est.calibration!r}, from leave-one-source-out residuals; docs/CALIBRATION.md)")
    else:
        st.caption(f"Calibration {est.calibration!r}: physics only, no prediction interval.")
    left, right = st.columns([3, 2])
    left.altair_chart(charts.breakdown_chart(frame), width="stretch")
    right.altair_chart(charts.memory_chart(frame, est.hbm_bytes), width="stretch")
    whatif(cfg, plan, est)
    timeline(est)
    st.download_button("Download estimate (JSON)", json.dumps(est.to_dict(), indent=2, default=str),
                       file_name=f"estimate-{cfg['workload']}-{cfg['acc']}.json", mime="application/json")


def show_metrics(est: Any, base: Any | None = None) -> None:
    c = st.columns(5)

    def delta(new: float, old: float | None) -> str | None:
        return None if old is None or old == 0 else f"{new / old - 1:+.1%}"

    c[0].metric("Step time (s)", f"{est.step_time_s:.4g}", delta(est.step_time_s, base and base.step_time_s),
                delta_color="inverse",
                help=(f"80 % interval {est.step_time_lo_s:.4g} - {est.step_time_hi_s:.4g} s (calibration {est.calibration})"
                      if est.step_time_lo_s is not None else f"calibration {est.calibration}: no interval"))
    c[1].metric("Throughput (tokens/s)", f"{est.tokens_per_s:,.0f}", delta(est.tokens_per_s, base and base.tokens_per_s))
    c[2].metric("MFU (%)", f"{est.mfu * 100:.1f}", delta(est.mfu, base and base.mfu))
    c[3].metric("Model TFLOP/s per GPU", f"{est.tflops_per_gpu:.1f}", delta(est.tflops_per_gpu, base and base.tflops_per_gpu))
    c[4].metric("Memory per GPU (GB)", f"{est.memory_per_gpu_bytes / charts.GB:.1f} / {est.hbm_bytes / charts.GB:.0f}",
                "fits" if est.fits else "does not fit", delta_color="normal" if est.fits else "inverse")


def whatif(cfg: dict[str, Any], plan: Any, base: Any) -> None:
    st.subheader("What if the hardware were different?")
    cols = st.columns(len(WHATIF))
    scales = tuple(float(_bound(col.select_slider, f"{label} ×", key, options=SCALES, value=1.0))
                   for col, (key, (label, _)) in zip(cols, WHATIF.items(), strict=True))
    if any(s != 1.0 for s in scales):
        est = run_estimate(cfg, plan, scales)
        if est is None:
            return
        show_metrics(est, base)
        both = pd.concat([base.to_frame().assign(scenario="baseline"), est.to_frame().assign(scenario="what-if")])
        st.altair_chart(charts.breakdown_chart(both), width="stretch")
    else:
        st.caption("Move a slider to scale that part of the chosen hardware; the step time and breakdown follow.")
    st.altair_chart(charts.tornado_chart(sensitivity(cfg, plan, base)), width="stretch")


def sensitivity(cfg: dict[str, Any], plan: Any, base: Any) -> pd.DataFrame:
    """Step time with each factor halved and doubled, relative to the baseline (long form)."""
    rows = []
    for i, (label, _) in enumerate(WHATIF.values()):
        for f in (0.5, 2.0):
            scales = tuple(f if j == i else 1.0 for j in range(len(WHATIF)))
            est = estimate(spec_of(cfg["workload"]), cfg["acc"], cfg["system"], plan, "analytic", scales)
            rows.append({"factor": label, "change": f"×{f:g}", "step_time_s": est.step_time_s,
                         "delta": est.step_time_s / base.step_time_s - 1})
    return pd.DataFrame(rows)


def timeline(est: Any) -> None:
    """The DES timeline (Chrome trace events) as a Gantt chart and a download, when the engine made one."""
    tl = est.timeline
    if not tl:
        return
    st.altair_chart(charts.gantt_chart(tl), width="stretch")
    st.download_button("Download timeline (Chrome trace JSON, opens in Perfetto)", json.dumps(tl), file_name="trace.json")


# ---- page: Compare hardware -----------------------------------------------------------------------
COMPARE_METRICS = {"days": "time to train (days)", "cost_usd": "cost (USD)", "energy_mwh": "energy (MWh)",
                   "mfu": "MFU (fraction of peak)"}
COMPARE_COLUMNS = {
    "layout": st.column_config.TextColumn("best layout"),
    "step_time_s": st.column_config.NumberColumn("step time (s)", format="%.3g"),
    "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
    "mfu": st.column_config.NumberColumn("MFU", format="percent"),
    "memory_gb": st.column_config.NumberColumn("memory (GB/GPU)", format="%.1f"),
    "days": st.column_config.NumberColumn("time to train (days)", format="%.2f"),
    "days_with_failures": st.column_config.NumberColumn("days with failures", format="%.2f"),
    "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.0f"),
    "usd_per_gpu_hour": st.column_config.NumberColumn("USD per GPU-hour", format="%.2f"),
    "cost_usd": st.column_config.NumberColumn("cost (USD)", format="dollar"),
    "energy_mwh": st.column_config.NumberColumn("energy (MWh)", format="%.1f"),
    "power_per_gpu_w": st.column_config.NumberColumn("power per GPU (W)", format="%.0f"),
    "tokens_per_usd": st.column_config.NumberColumn("tokens per USD", format="%.0f"),
    "tokens_per_joule": st.column_config.NumberColumn("tokens per J", format="%.3g"),
    "goodput": st.column_config.NumberColumn("goodput", format="percent"),
    "message": st.column_config.TextColumn("note"),
}


def page_compare(cfg: dict[str, Any]) -> None:
    st.header("Compare hardware")
    if planning() is None:
        st.info(NO_PLANNER)
        return
    accs = sorted(catalog().accelerators)
    default = [a for a in ("a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200", "mi300x") if a in accs]
    cands = _bound(st.multiselect, "Candidates (each accelerator on its reference node)", "cands", options=accs, default=default)
    c1, c2 = st.columns(2)
    tokens_b = _bound(c1.number_input, "Training tokens (billions)", "tokens_b", min_value=0.001, value=300.0)
    pct = _bound(c2.number_input, "Sensitivity: move bandwidths and price by ± (%)", "pct",
                 min_value=0.0, max_value=90.0, value=0.0,
                 help="0 = off; otherwise each candidate is re-searched with each bandwidth moved (slower)")
    st.caption(f"{cfg['workload']} on {cfg['gpus']} GPUs of each candidate, global batch {cfg['gb']} sequences, "
               f"{tokens_b:g} B tokens; each candidate runs its own fastest fitting layout.")
    if not cands:
        st.warning("Pick at least one candidate.")
        return
    args = (spec_of(cfg["workload"]), tuple(cands), cfg["gpus"], cfg["gb"], tokens_b * 1e9)
    try:
        with st.spinner("Searching the best layout on each candidate…"):
            frame = run_compare(*args, cfg["seq"] or None, cfg["precision"], cfg.get("calibration", "default"))
            sens = run_sensitivity(*args, float(pct), cfg["seq"] or None, cfg["precision"]) if pct else None
    except USER_ERRORS as e:
        st.error(str(e))
        return
    shown = [(c, t) for c, t in COMPARE_METRICS.items() if c in frame and frame[c].notna().any()]
    cols = st.columns(2)
    for i, (col, title) in enumerate(shown):
        chart = charts.compare_chart(frame, col, title, higher_is_better=col == "mfu")
        cols[i % 2].altair_chart(chart, width="stretch")
    table = frame.drop(columns=[c for c in ("accelerator", "n_gpus", "checkpoint_interval_s", "layouts_searched") if c in frame])
    st.dataframe(table, hide_index=True, column_config=COMPARE_COLUMNS)
    st.caption("Cost: GPU-hours × the spec's hourly price (empty where the spec has none). Energy: GPUs × power × time, "
               "no PUE. Days with failures: Young/Daly checkpointing at the Llama 3 failure rate.")
    if sens is not None and not sens.empty:
        st.altair_chart(charts.sensitivity_chart(sens), width="stretch")
    from perfmodel.planning.compare import markdown

    report = markdown(frame, f"{cfg['workload']} on {cfg['gpus']} GPUs, {tokens_b:g} B tokens", sens)
    c1, c2 = st.columns(2)
    c1.download_button("Download report (Markdown)", report, file_name="compare.md", mime="text/markdown")
    c2.download_button("Download table (CSV)", frame.to_csv(index=False), file_name="compare.csv", mime="text/csv")


# ---- page: Layout search --------------------------------------------------------------------------
SEARCH_COLUMNS = {
    "layout": st.column_config.TextColumn("layout"),
    "step_time_s": st.column_config.NumberColumn("step time (s)", format="%.4g"),
    "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
    "mfu": st.column_config.NumberColumn("MFU", format="percent"),
    "memory_gb": st.column_config.NumberColumn("memory (GB/GPU)", format="%.1f"),
    "headroom_gb": st.column_config.NumberColumn("headroom (GB)", format="%.1f"),
    "cost_per_step_usd": st.column_config.NumberColumn("cost per step (USD)", format="%.3f"),
    "tokens_per_joule": st.column_config.NumberColumn("tokens per J", format="%.3g"),
}


def search_space() -> Any:
    """The SearchSpace from the page's constraint widgets (frozen: it is part of the cache key)."""
    c1, c2, c3 = st.columns(3)
    objective = _bound(c1.selectbox, "Rank by", "objective", options=["step_time", "cost", "tokens_per_joule"])
    headroom = _bound(c2.number_input, "Min memory headroom (GB)", "headroom", min_value=0.0, max_value=200.0, value=0.0)
    top = _bound(c3.number_input, "Layouts to show", "top", min_value=1, max_value=500, value=25)
    c1, c2 = st.columns(2)
    within = _bound(c1.checkbox, "tp within one NVLink domain", "tp_node", value=True)
    fix_tp = _bound(c2.checkbox, "keep the sidebar's tp", "fix_tp", value=False)
    space = planning().SearchSpace(min_headroom_bytes=headroom * charts.GB, tp_within_node=within,
                                   tp=(st.session_state.get("tp", 1),) if fix_tp else None)
    return objective, int(top), space


def page_search(cfg: dict[str, Any]) -> None:
    st.header("Layout search")
    if planning() is None:
        st.info(NO_PLANNER)
        return
    st.caption(f"Every valid layout of {cfg['workload']} on {cfg['gpus']} × {cfg['acc']} at global batch {cfg['gb']} "
               f"sequences, {cfg['precision']}; the layouts that fit in HBM, ranked.")
    try:
        objective, top, space = search_space()
        with st.spinner("Searching layouts…"):
            res = run_search(spec_of(cfg["workload"]), cfg["system"] or cfg["acc"], cfg["gpus"], cfg["gb"], cfg["seq"] or None,
                             cfg["precision"], objective, space, cfg.get("calibration", "default"))
    except USER_ERRORS as e:
        st.error(str(e))
        return
    c = st.columns(3)
    c[0].metric("Layouts evaluated", f"{res.n_layouts:,}")
    c[1].metric("Layouts that fit", f"{len(res.table):,}")
    c[2].metric("Search speed (layouts/s)", f"{res.layouts_per_s:,.0f}")
    if res.table.empty:
        st.warning("No layout fits in memory: try more GPUs, a smaller global batch or less headroom.")
        return
    from perfmodel.planning.search import layout_label

    view = res.table.head(top).copy()
    view.insert(0, "layout", view.apply(layout_label, axis=1))
    view["memory_gb"], view["headroom_gb"] = view["memory_bytes"] / charts.GB, view["headroom_bytes"] / charts.GB
    cols = [c for c in ("layout", "step_time_s", "tokens_per_s", "mfu", "memory_gb", "headroom_gb", "cost_per_step_usd",
                        "tokens_per_joule") if c in view]
    st.caption("Select a row to open it on the Estimate page.")
    sel = st.dataframe(view[cols], hide_index=True, column_config=SEARCH_COLUMNS, on_select="rerun",
                       selection_mode="single-row", key="search_table")
    rows = sel.selection.rows if sel is not None else []
    if rows:
        plan = res.plan(rows[0])
        st.button(f"Open “{view['layout'].iloc[rows[0]]}” on the Estimate page", on_click=open_layout, args=(plan,))
    st.altair_chart(charts.pareto_chart(pareto_frame(res), "headroom_gb", "step_time_s", "memory headroom per GPU (GB)",
                                        "step time (s)", front="front"), width="stretch")


def pareto_frame(res: Any, limit: int = 4000) -> pd.DataFrame:
    """Fitting layouts for the Pareto chart (the front, plus up to `limit` others) with labels."""
    from perfmodel.planning.search import layout_label

    t = res.table
    front = res.pareto_memory()
    keys = ["dp", "tp", "pp", "cp", "ep", "vp", "sequence_parallel", "zero_stage", "micro_batch", "recompute", "schedule"]
    sample = t.head(limit)
    f = pd.concat([sample, front]).drop_duplicates(subset=keys)
    f = f.merge(front[keys].assign(front=True), on=keys, how="left")
    f["front"] = f["front"].fillna(False).astype(bool)
    f["layout"] = f.apply(layout_label, axis=1)
    f["headroom_gb"] = f["headroom_bytes"] / charts.GB
    return f[["layout", "step_time_s", "headroom_gb", "front"]]


def open_layout(plan: Any) -> None:
    """Callback: copy a searched layout into the sidebar widgets and switch to the Estimate page."""
    st.session_state.update(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep, vp=plan.vp, zero=plan.zero_stage,
                            mb=plan.micro_batch, recompute=plan.recompute, sp=plan.sequence_parallel,
                            schedule=plan.schedule or "auto", page="Estimate")


# ---- page: Validation -----------------------------------------------------------------------------
def page_validation(cfg: dict[str, Any]) -> None:
    st.header("Validation: how far to trust the numbers")
    st.caption(f"Every run in {RUNS_PUBLIC.relative_to(ROOT)} predicted with the {cfg['engine']} engine; nothing measured "
               "is an input. APE = |predicted − measured| / measured step time.")
    try:
        with st.spinner("Predicting the public runs…"):
            m, met = validation_frames(str(RUNS_PUBLIC), RUNS_PUBLIC.stat().st_mtime, cfg["engine"])
    except ModuleNotFoundError as e:
        st.error(f"The {cfg['engine']!r} engine is not available in this build ({e.name} missing); choose 'analytic'.")
        return
    except (*USER_ERRORS, OSError) as e:
        st.error(f"Could not run the validation: {e}")
        return
    overall = met[met["source"] == "overall"].iloc[0]
    c = st.columns(4)
    c[0].metric("Runs predicted", f"{int(overall['rows'])} / {len(m)}")
    c[1].metric("Mean APE (%)", f"{overall['mape'] * 100:.1f}")
    c[2].metric("Median APE (%)", f"{overall['median_ape'] * 100:.1f}")
    c[3].metric("Kendall τ", f"{overall['kendall_tau']:.3f}")
    sources = sorted(m["source"].dropna().unique())
    pick = _bound(st.multiselect, "Sources", "sources", options=sources, default=sources)
    ok = m[(m["status"] == "ok") & m["source"].isin(pick)]
    if ok.empty:
        st.warning("No predicted runs for these sources.")
    else:
        st.altair_chart(charts.validation_scatter(ok), width="stretch")
    pct = {c: st.column_config.NumberColumn(c, format="percent") for c in ("mape", "median_ape", "bias", "worst_ape",
                                                                             "within_10pct", "within_20pct")}
    st.subheader("Error per source")
    st.dataframe(met, hide_index=True, column_config=pct)
    errors = m[m["status"] != "ok"]
    if len(errors):
        with st.expander(f"{len(errors)} runs not predicted"):
            st.dataframe(errors[["run_id", "source", "message"]], hide_index=True)


def apply_fix(updates: dict[str, Any]) -> None:
    """Callback of a one-click fix: set the widgets, the rerun recomputes."""
    st.session_state.update(updates)


def show_problem(cfg: dict[str, Any], problem: Any) -> None:
    """The message under the widget that caused it, its one-click fixes, and a pointer on the page."""
    slot = cfg["slots"].get(problem.widget, cfg["slots"]["top"])
    slot.error(problem.message)
    for i, (label, updates) in enumerate(problem.fixes):
        slot.button(label, key=f"fix_{problem.widget}_{i}", on_click=apply_fix, args=(updates,))
    st.error(f"This layout is not valid: {problem.message} Fix it in the sidebar (one click under the field), "
             "or let the layout search pick one.")
    st.button("Open Layout search", on_click=apply_fix, args=({"page": "Layout search"},), key="open_search")


# ---- main -----------------------------------------------------------------------------------------
def main() -> None:
    st.set_page_config(page_title="perfmodel what-if explorer", layout="wide")
    cfg = sidebar()
    if cfg is None:
        return
    plan = None
    page = cfg["page"]
    problem = diagnose(cfg, spec_of(cfg["workload"]))
    if problem is not None:
        if page in LAYOUT_PAGES:
            show_problem(cfg, problem)
    else:
        try:
            plan = build_plan(cfg)
        except USER_ERRORS as e:
            if page in LAYOUT_PAGES:
                show_problem(cfg, LayoutProblem(field_of(str(e)), str(e)))
    if page == "Estimate" and plan is not None:
        page_estimate(cfg, plan)
    elif page == "Compare hardware":
        page_compare(cfg)
    elif page == "Layout search":
        page_search(cfg)
    elif page == "Training run":
        from perfmodel.app_run import page_run

        page_run(cfg, spec_of, plan)
    elif page == "Validation":
        page_validation(cfg)


main()
