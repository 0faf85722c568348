"""perfmodel what-if explorer: `streamlit run app.py`.

Thin by design: the sidebar widgets build one validated `ParallelPlan` plus the ids of a workload
and a system, the library computes, and `perfmodel.app_specs` (the Estimate page, plain Vega-Lite)
and `perfmodel.app_charts` (the other pages, Altair, imported by the pages that draw them) turn its
long-form frames into charts. Every widget is bound to the URL's query parameters (where Streamlit supports it),
so a what-if can be shared as a link. Bad input never shows a traceback: a `PerfmodelError` or
`ValueError` becomes an `st.error` with the library's message.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from perfmodel import app_specs as specs
from perfmodel.app_fixes import LayoutProblem, diagnose, field_of
from perfmodel.calibration.frameworks import FRAMEWORKS
from perfmodel.engines.registry import ENGINE_NAMES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.attention import attention_kernels
from perfmodel.memory import NO_FIT_PREFIX
from perfmodel.parallel.schedules import SCHEDULE_NAMES
from perfmodel.precision import precision_names
from perfmodel.workload.module_recompute import MODULES as RECOMPUTE_MODULES

ROOT = Path(__file__).resolve().parent
RUNS_PUBLIC = ROOT / "validation" / "runs_public.csv"
# the runs the Validation page can judge against: the public file the default profile is fitted on,
# and the judged-only files nothing is ever fitted on (out of sample for every profile)
RUN_FILES = {"public (fitted on)": RUNS_PUBLIC, "judged: published extra": ROOT / "validation" / "runs_published_extra.csv",
             "judged: DGX Cloud": ROOT / "validation" / "runs_judged_dgxc.csv",
             "judged: AMD Instinct": ROOT / "validation" / "runs_judged_amd.csv",
             "judged: Google TPU": ROOT / "validation" / "runs_judged_tpu.csv"}
PAGES = ["Estimate", "Compare hardware", "Layout search", "Training run", "Validation"]
SCALES = [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0]
WHATIF = {  # key -> (label, System.scaled keyword)
    "s_flops": ("peak FLOP/s", "flops"),
    "s_hbm": ("HBM bandwidth", "hbm_bw"),
    "s_intra": ("scale-up (NVLink, PCIe, xGMI, ICI) bandwidth", "intra_bw"),
    "s_inter": ("scale-out (network) bandwidth", "inter_bw"),
    "s_lat": ("link latency", "latency"),
}
USER_ERRORS = (PerfmodelError, ValueError, KeyError)
OPTIMIZER_LABELS = {"adam": "AdamW, fp32 master and moments (12 B per parameter)",
                    "adamw-bf16": "AdamW with bf16 moments beside the fp32 master (8 B; DeepSeek-V3)",
                    "adam8bit": "8-bit Adam moments (6 B; bitsandbytes)",
                    "sgd": "SGD with momentum (8 B)", "adafactor": "Adafactor, factored second moment (4 B)",
                    "muon": "Muon: momentum and Newton-Schulz on 2-D weights (8 B)"}
ZERO_LABELS = {0: "0: no sharding", 1: "1: optimizer states sharded", 2: "2: + gradients", 3: "3: + weights (FSDP)"}
SCHEDULE_LABELS = {"auto": "automatic", "1f1b": "1F1B", "interleaved": "interleaved 1F1B", "gpipe": "GPipe",
                   "zb-h1": "zero bubble (ZB-H1)", "dualpipe": "DualPipe (bidirectional, DeepSeek-V3)"}
LAYOUT_PAGES = ("Estimate", "Training run")  # pages that use the sidebar's layout (the others search or compare their own)
REFERENCE = "(reference node)"
NO_STACK = "(none)"
STACK_KERNEL = "(the stack's)"
ATTENTION_LABELS = {
    STACK_KERNEL: "what the training stack runs (flash without one)",
    "flash": "FlashAttention-2 (torch SDPA's flash backend; the newest measured generation where FA2 was not: FA4 "
             "on Blackwell)",
    "flash3": "FlashAttention-3 (Hopper)", "flash4": "FlashAttention-4 (Blackwell)",
    "fused": "cuDNN's fused attention (Transformer Engine's choice on Hopper and later)",
    "flash1": "the 2022-23 Triton FlashAttention", "unfused": "baddbmm + softmax + bmm, scores through HBM",
}


# ---- widgets bound to the URL -------------------------------------------------------------------
def _bound(widget: Any, label: str, key: str, **kw: Any) -> Any:
    """Call a Streamlit widget with `key`, bound to the query parameter of that name when this
    Streamlit version supports `bind=` (1.5x+); older versions still work, without the URL."""
    if "bind" in inspect.signature(widget).parameters:
        kw["bind"] = "query-params"
    return widget(label, key=key, **kw)


# ---- cached library calls (inputs are ids, frozen plans and tuples) -------------------------------
def catalog() -> Any:
    """The hardware catalogue, with what the user uploaded (not cached here: uploads change it; the
    library caches the parsed files)."""
    from perfmodel.hardware.catalog import load_catalog

    return load_catalog()


@st.cache_resource(show_spinner=False)
def workloads() -> dict[str, Any]:
    from perfmodel.workload.catalog import load_workloads

    return load_workloads()


@st.cache_resource(show_spinner=False, max_entries=512)
def system_for(acc: str, system: str | None, n_gpus: int, scales: tuple[float, ...]) -> tuple[Any, tuple[str, ...]]:
    from perfmodel.hardware.system import resolve_system

    base, msgs = resolve_system(acc, system, n_gpus)
    kw = {name: f for (_, (_, name)), f in zip(WHATIF.items(), scales, strict=True)}
    return (base.scaled(**kw) if any(f != 1.0 for f in scales) else base), tuple(msgs)


@st.cache_resource(show_spinner=False, max_entries=1024)
def estimate(workload: Any, acc: str, system: str | None, plan: Any, engine: str,
             scales: tuple[float, ...] = (1.0,) * len(WHATIF), calibration: str = "default",
             framework: str | None = None) -> Any:
    """One Estimate; cached on (ids, frozen ParallelPlan, engine, what-if factors, calibration, stack)."""
    import perfmodel

    sysobj, _ = system_for(acc, system, plan.world, scales)
    return perfmodel.estimate(workload, sysobj, plan, engine=engine, calibration=calibration, framework=framework)


@st.cache_data(show_spinner=False)
def validation_frames(runs_path: str, mtime: float, engine: str, calibration: str = "default") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(joined runs + predictions, metrics per source) for a runs file under a calibration
    profile; cached on the file's mtime."""
    from perfmodel.validation.predict import validate_file
    from perfmodel.validation.report import joined, metrics

    del mtime  # part of the cache key only
    with tempfile.TemporaryDirectory() as tmp:
        pred = Path(tmp) / "pred.csv"
        validate_file(runs_path, pred, engine=engine, calibration=calibration)
        m = joined([Path(runs_path)], [pred])
    return m, metrics(m)


def planning() -> Any | None:
    """The planner package (perfmodel.planning), or None where this build lacks it."""
    try:
        import perfmodel.planning as planning_pkg
    except ImportError:
        return None
    return planning_pkg


def search_labels(table: Any) -> Any:
    """The layout label of every row of a search table (planning.search.layout_labels)."""
    from perfmodel.planning.search import layout_labels

    return layout_labels(table)


NO_PLANNER = "This page needs the planner (perfmodel.planning), which is not available in this build."


@st.cache_resource(show_spinner=False, max_entries=64)
def run_search(workload: Any, cluster: str, n_gpus: int, global_batch: int, seq_len: int | None, precision: str,
               objective: str, space: Any, calibration: str = "default", framework: str | None = None,
               optimizer: str = "adam", attention: str | None = None) -> Any:
    """A SearchResult; cached on ids, numbers and the frozen SearchSpace."""
    return planning().search(workload, cluster, n_gpus, global_batch, seq_len=seq_len, precision=precision,
                             space=space, objective=objective, calibration=calibration, framework=framework,
                             optimizer=optimizer, attention=attention)


# ---- sidebar: the configuration -------------------------------------------------------------------
def sidebar() -> dict[str, Any] | None:
    """Draw the configuration widgets; return the raw choices, or None when the catalogue is broken."""
    sb = st.sidebar
    sb.title("perfmodel")
    page = _bound(sb.radio, "Page", "page", options=PAGES)
    sb.subheader("Workload and hardware")
    custom = upload_workload(sb)
    upload_hardware(sb)
    try:
        cat, wl = catalog(), workloads()
    except USER_ERRORS as e:
        st.error(f"The hardware or workload catalogue could not be read: {e}")
        return None
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
    cal_label, calibration = calibration_selector(sb, cat.accelerators[acc].generation)
    stack = _bound(sb.selectbox, "Training stack", "framework", options=[NO_STACK, *FRAMEWORKS],
                   help="selects the stack's mechanisms (attention kernel, host dispatch, TP / p2p overlap, fused "
                        "fp8 casts and loss, MoE dispatcher, FSDP layout), each from that stack's code; never a "
                        "fitted factor (docs/CALIBRATION.md)")
    if stack != NO_STACK:
        sb.caption(FRAMEWORKS[stack].evidence[:240] + ("…" if len(FRAMEWORKS[stack].evidence) > 240 else ""))
    kernels = [STACK_KERNEL, *attention_kernels(cat.accelerators[acc])]
    if st.session_state.get("attention") not in kernels:
        st.session_state["attention"] = STACK_KERNEL
    attention = _bound(sb.selectbox, "Attention kernel", "attention", options=kernels,
                       help="; ".join(f"{k}: {ATTENTION_LABELS[k]}" for k in kernels) + " (FlashAttention-3 / -4 are "
                            "offered where the accelerator's generation measured them)")
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
    precision = _bound(c2.selectbox, "precision", "precision", options=precision_names())
    modules: list[str] = []
    if recompute == "selective":
        modules = sb.multiselect("recompute modules", list(RECOMPUTE_MODULES), default=["core_attn"],
                                 key="recompute_modules",
                                 help="what selective recompute reruns (Megatron-Core recompute_modules): core_attn the "
                                      "attention core; layernorm the norms that run on their own (MLA input, MoE "
                                      "pre-MLP); moe_act the experts' activation; mla_up_proj MLA's up-projections "
                                      "and RoPE; mlp a dense MLP; moe the whole MoE layer; shared_experts the "
                                      "shared experts")
    window = 0
    if recompute == "full":
        window = _bound(sb.number_input, "recompute only the first N layers per chunk", "recompute_window",
                        min_value=0, max_value=100_000, value=0,
                        help="Megatron-Core recompute_method block with recompute_num_layers N: only the first N "
                             "layers of each model chunk rerun their forward, the rest keep their activations; "
                             "0 = every layer")
    optimizer = _bound(sb.selectbox, "optimizer", "optimizer", options=list(OPTIMIZER_LABELS),
                       help="; ".join(f"{k}: {v}" for k, v in OPTIMIZER_LABELS.items()))
    c1, c2 = sb.columns(2)
    schedule = _bound(c1.selectbox, "schedule", "schedule", options=["auto", *SCHEDULE_NAMES],
                      help="; ".join(f"{k}: {SCHEDULE_LABELS.get(k, k)}" for k in ["auto", *SCHEDULE_NAMES]))
    sp = _bound(c2.checkbox, "seq. parallel", "sp", value=True, help="sequence parallelism (needs tp > 1)")
    offload = _bound(sb.number_input, "activation offload (layers)", "offload", min_value=0, max_value=100_000, value=0,
                     help="the first N transformer layers' saved activations go to host memory and back over the "
                          "node's measured host link (Megatron-Core cpu_offloading_num_layers); needs pp 1 and "
                          "recompute none")
    return dict(page=page, workload=workload, acc=acc, system=None if system == REFERENCE else system, gpus=int(gpus),
                engine=engine, calibration=calibration, tp=int(tp), pp=int(pp), cp=int(cp), ep=int(ep), vp=int(vp),
                calibration_label=cal_label, framework=None if stack == NO_STACK else stack,
                attention=None if attention == STACK_KERNEL else attention,
                zero=int(zero), mb=int(mb),
                gb=int(gb), seq=int(seq), recompute=recompute, modules=tuple(modules), precision=precision,
                window=int(window), schedule=schedule, sp=bool(sp), optimizer=optimizer,
                offload=int(offload), slots=slots)


CALIBRATIONS = ["default", "none"]


def calibration_selector(sb: Any, generation: str | None = None) -> tuple[str, str]:
    """The calibration radio (default / none / each uploaded profile) with the upload above it and
    the chosen profile's provenance below; returns (its label, what every page passes as
    `calibration=`: 'default', 'none' or the path of the uploaded YAML)."""
    uploaded: dict[str, str] = st.session_state.setdefault("custom_profiles", {})  # label -> stored path
    with sb.expander("Your calibration profile (perfmodel fit --out PROFILE.yaml)"):
        up = st.file_uploader("calibration profile", type=["yaml", "yml"], key="upload_profile", label_visibility="collapsed",
                              help="a profile fitted on your own cluster's runs: `perfmodel fit --runs RUNS.csv --out "
                              "PROFILE.yaml`; every page then uses it")
        if up is not None:
            from perfmodel.app_fixes import add_uploaded_profile

            root = st.session_state.setdefault("user_profiles_dir", tempfile.mkdtemp(prefix="perfmodel-profiles-"))
            try:
                path = add_uploaded_profile(up.name, up.getvalue(), root)
            except USER_ERRORS as e:
                st.error(str(e))
            else:
                label = up.name if uploaded.get(up.name, path) == path else f"{up.name} ({Path(path).parent.name[:6]})"
                if st.session_state.get("uploaded_profile") != path:  # a new upload: select it once
                    st.session_state["uploaded_profile"] = path
                    st.session_state["calibration"] = label
                uploaded[label] = path
                st.success(f"added profile {label}; selected below")
    options = [*CALIBRATIONS, *uploaded]
    asked = st.session_state.get("calibration") or st.query_params.get("calibration")
    if asked not in options:
        if asked:  # a shared link names a profile uploaded in another session
            sb.warning(f"The link asks for calibration profile {asked!r}, which is not uploaded in this session: showing "
                       "the default profile. Upload the file under 'Your calibration profile' to use it.")
        st.session_state["calibration"] = "default"
    choice = _bound(sb.radio, "Calibration", "calibration", options=options, horizontal=True,
                    help="default: the shipped profile fitted on the public runs (docs/CALIBRATION.md), with an 80 % "
                    "interval; none: physics only (microbenchmark rates as measured); an uploaded profile: your fit")
    value = uploaded.get(choice, choice)
    profile_details(sb, choice, value, generation)
    return choice, value


def profile_details(sb: Any, label: str, calibration: str, generation: str | None = None) -> None:
    """The chosen profile's provenance (fitted on which rows, when, its cross-validated error) and
    what its 80 % interval means, in a sidebar expander; a note under the radio when the fit saw no
    run of the chosen accelerator's `generation`."""
    from perfmodel.app_fixes import profile_summary
    from perfmodel.calibration.profile import load_profile

    prof = load_profile(calibration)
    if generation and not prof.physics_only and prof.generations_seen and generation not in prof.generations_seen:
        sb.caption(f":orange[The fit saw no {generation} run]: its generation factor stays at the prior and the interval "
                   "is widened by the prior's spread.")
    with sb.expander(f"About the profile: {label}"):
        if prof.physics_only:
            st.markdown("**Physics only**: every efficiency factor 1, the hardware specs' microbenchmark rates as "
                        "measured. No prediction interval: nothing was fitted, so nothing says how far to trust it.")
            return
        st.markdown(f"Profile **{prof.name}**" + (" (shipped with perfmodel)" if calibration == "default" else " (uploaded)"))
        st.markdown("\n".join(f"- {k}: **{v}**" for k, v in profile_summary(prof).items()))
        if prof.values:
            from perfmodel.calibration.parameters import split_key

            st.caption("Fitted factors (prior → fitted): " + " · ".join(
                f"{k} {split_key(k)[0].prior:g} → {v:.3g}" for k, v in prof.values.items()))
        unit = "run" if str(prof.provenance.get("held_out_by", "source")).startswith("run") else "source"
        held = (prof.provenance.get("leave_one_source_out_error") or {}).get("interval_coverage")
        st.caption(f"The 80 % interval of a step time: the 10th to 90th percentile of log(measured / predicted) over "
                   f"the runs the fit predicted with each {unit} left out (a fit that never saw that {unit}), at the "
                   "run's scale; widened where the fit saw no run of the accelerator generation, the model family or the "
                   "training stack. About 8 in 10 runs like the fitted ones should land inside it"
                   + (f"; on the held-out runs it held {held:.0%}." if isinstance(held, (int, float)) else "."))


def spec_of(workload: str) -> Any:
    """The ModelSpec of a workload id: an uploaded one first, then the built-in catalogue."""
    return st.session_state.get("custom_workloads", {}).get(workload) or workloads()[workload]


def upload_workload(sb: Any) -> dict[str, Any]:
    """'Bring your own model': a workload YAML or a Hugging Face config.json, validated on upload;
    errors name the file and the field."""
    custom: dict[str, Any] = st.session_state.setdefault("custom_workloads", {})
    with sb.expander("Bring your own model (workload YAML or HF config.json)"):
        up = st.file_uploader("workload", type=["yaml", "yml", "json"], key="upload_workload", label_visibility="collapsed",
                              help="the fields of a file in workloads/, or a Hugging Face config.json")
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


def upload_hardware(sb: Any) -> None:
    """'Bring your own hardware': an accelerator, node, cluster or fabric YAML joins the catalogue
    through a specs directory of this session; errors name the file and the field."""
    with sb.expander("Bring your own hardware (spec YAML)"):
        up = st.file_uploader("hardware", type=["yaml", "yml"], key="upload_hardware", label_visibility="collapsed",
                              help="a file like those in hardware_specs/ (every number with its unit and source)")
        if up is not None and st.session_state.get("uploaded_hw") != (up.name, up.size):
            from perfmodel.app_fixes import add_uploaded_hardware

            root = st.session_state.setdefault("user_specs_dir", tempfile.mkdtemp(prefix="perfmodel-specs-"))
            try:
                kind, ident = add_uploaded_hardware(up.name, up.getvalue(), root)
            except USER_ERRORS as e:
                st.error(str(e))
            else:
                st.session_state["uploaded_hw"] = (up.name, up.size)
                st.success(f"added {kind[:-1]} {ident}; pick it above")


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
        optimizer=cfg.get("optimizer", "adam"),
        schedule=None if cfg["schedule"] == "auto" else cfg["schedule"], offload_activations=cfg.get("offload", 0),
        # a kernel named here outranks the stack's (frameworks.apply_framework keeps a field the plan sets)
        **({"attention_impl": cfg["attention"]} if cfg.get("attention") else {}),
        # the default (core_attn) left unset, so that a stack with its own policy (torchtitan: op) keeps it
        **({"selective_recompute": ",".join(mods)} if cfg["recompute"] == "selective"
           and (mods := cfg.get("modules", ("core_attn",))) != ("core_attn",) else {}),
        **({"recompute_method": "block", "recompute_num_layers": cfg["window"]}
           if cfg["recompute"] == "full" and cfg.get("window") else {}),
    )
    plan.validate_for(spec_of(cfg["workload"]), cfg["gpus"])
    return plan


def run_estimate(cfg: dict[str, Any], plan: Any, scales: tuple[float, ...] | None = None) -> Any | None:
    """The estimate, or None after showing why it could not be made."""
    try:
        return estimate(spec_of(cfg["workload"]), cfg["acc"], cfg["system"], plan, cfg["engine"],
                        scales or (1.0,) * len(WHATIF), cfg.get("calibration", "default"), cfg.get("framework"))
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
    # the engine's own "does not fit" note goes into the warning below, not a second box
    fit_notes = [m for m in est.messages if m.startswith(NO_FIT_PREFIX)]
    for m in dict.fromkeys((*sys_msgs, *est.messages)):  # a System's notes come back in est.messages
        if m not in fit_notes:
            st.info(m)
    frame = est.to_frame()
    if not est.fits:
        what = (fit_notes[0][0].upper() + fit_notes[0][1:] if fit_notes else
                f"Does not fit: {est.memory_per_gpu_bytes / specs.GB:.1f} GB per GPU needed, "
                f"{est.hbm_bytes / specs.GB:.1f} GB of HBM")
        st.warning(f"{what}. The numbers below are greyed: this layout would not run. "
                   "Try more recompute, a higher ZeRO stage, or more tp / pp.")
        st.markdown("<style>[data-testid='stMetricValue'] {color: #9a9a9a;}</style>", unsafe_allow_html=True)
    show_metrics(est)
    if est.step_time_lo_s is not None:
        st.caption(f"80 % prediction interval of the step time: {est.step_time_lo_s:.4g} - {est.step_time_hi_s:.4g} s "
                   f"(calibration {calibration_text(cfg, est)}, from leave-one-source-out residuals; what it means: "
                   "'About the profile' in the sidebar, docs/CALIBRATION.md)")
    else:
        st.caption(f"Calibration {calibration_text(cfg, est)}: no prediction interval"
                   + (" (nothing fitted)." if est.calibration == "none" else " (the profile has no held-out residuals)."))
    trust(cfg, plan, est)
    left, right = st.columns([3, 2])
    left.vega_lite_chart(specs.breakdown_chart(frame), width="stretch")
    right.vega_lite_chart(specs.memory_chart(frame, est.hbm_bytes), width="stretch")
    whatif(cfg, plan, est)
    timeline(est)
    st.download_button("Download estimate (JSON)", json.dumps(estimate_json(cfg, plan, est), indent=2, default=str),
                       file_name=f"estimate-{cfg['workload']}-{cfg['acc']}.json", mime="application/json")


def step_interval(est: Any) -> tuple[float, float] | None:
    """The 80 % interval of the step time when the library provides one (Estimate.step_time_lo_s / _hi_s)."""
    lo, hi = getattr(est, "step_time_lo_s", None), getattr(est, "step_time_hi_s", None)
    return (float(lo), float(hi)) if lo is not None and hi is not None else None


def assumptions(cfg: dict[str, Any], plan: Any, est: Any) -> dict[str, Any]:
    """What the headline rests on: sequence length in use, precision, framework, calibration profile."""
    return {"sequence length (tokens)": plan.seq_len or spec_of(cfg["workload"]).seq_len,
            "sequence length from": "the sidebar" if plan.seq_len else f"the workload's default ({cfg['workload']})",
            "precision": plan.precision,
            "optimizer": f"{plan.optimizer}: {OPTIMIZER_LABELS.get(plan.optimizer, '')}",
            # the plan the estimate ran (the stack may pick what selective recompute reruns: torchtitan's op)
            "recompute": est.plan.recompute_label,
            "training stack": cfg.get("framework") or ("none chosen (flash attention, eager dispatch, fused norms / "
                                                       "activations, 16-bit weights, none of the stack fusions)"),
            # the kernel the estimate ran: the stack's, or the one the sidebar names over it
            "attention kernel": f"{est.plan.attention_impl}"
                                f"{' (named in the sidebar)' if cfg.get('attention') else ''}",
            "calibration profile": calibration_text(cfg, est),
            "engine": est.engine}


def calibration_text(cfg: dict[str, Any], est: Any) -> str:
    """The calibration the estimate was computed with, as the sidebar names it."""
    label = cfg.get("calibration_label", cfg.get("calibration", "default"))
    if est.calibration == "none":
        return "none (physics only: microbenchmark rates as measured)"
    if label == "default":
        return "default (shipped, fitted on the public runs)"
    return f"{label} (uploaded; profile {est.calibration!r})"


def trust(cfg: dict[str, Any], plan: Any, est: Any) -> None:
    """Under the headline: the 80 % interval (or 'no interval'), the measured / fallback badge,
    the MFU flag and the assumptions."""
    iv = step_interval(est)
    fb = est.fallback_terms
    measured = [k for k in est.provenance if k not in fb]
    c = st.columns([4, 3, 5])
    c[0].markdown(f"Step time 80 % interval: **{iv[0]:.4g} – {iv[1]:.4g} s**" if iv else
                  "Step time 80 % interval: **no interval**", help=None if iv else "the calibration gives none for this case")
    with c[1]:
        why = f"measured on this hardware: {', '.join(measured) or 'none'}; derating rule (fallback): {', '.join(fb) or 'none'}"
        if est.provenance and not fb:
            st.badge("measured", icon=":material/check:", color="green", help=why)
        elif measured:
            st.badge(f"partly measured ({len(measured)} of {len(est.provenance)} terms)", icon=":material/rule:",
                     color="orange", help=why)
        else:
            st.badge("fallback", icon=":material/warning:", color="red", help=why)
    if est.mfu_flag:
        c[2].markdown(f":red[**MFU above any published run**]: {est.mfu_flag.split(' (')[0]}", help=est.mfu_flag)
    st.caption("Assumptions: " + " · ".join(f"{k}: **{v}**" for k, v in assumptions(cfg, plan, est).items()))


def estimate_json(cfg: dict[str, Any], plan: Any, est: Any) -> dict[str, Any]:
    """The estimate download: the library's dict plus the sequence length in use, the interval and the assumptions."""
    iv = step_interval(est)
    return {**est.to_dict(), "seq_len": plan.seq_len or spec_of(cfg["workload"]).seq_len,
            "step_time_interval_80_s": list(iv) if iv else "no interval", "assumptions": assumptions(cfg, plan, est)}


def _small(x: float) -> str:
    """One decimal from 1 up, three significant digits below (0.0412), 0 as "0"."""
    return f"{x:.1f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"


def show_metrics(est: Any, base: Any | None = None) -> None:
    c = st.columns(5)

    def delta(new: float, old: float | None) -> str | None:
        return None if old is None or old == 0 else f"{new / old - 1:+.1%}"

    c[0].metric("Step time (s)", f"{est.step_time_s:.4g}", delta(est.step_time_s, base and base.step_time_s),
                delta_color="inverse",
                help=(f"80 % interval {est.step_time_lo_s:.4g} - {est.step_time_hi_s:.4g} s (calibration {est.calibration})"
                      if est.step_time_lo_s is not None else f"calibration {est.calibration}: no interval"))
    c[1].metric("Throughput (tokens/s)", f"{est.tokens_per_s:,.0f}", delta(est.tokens_per_s, base and base.tokens_per_s))
    # three significant digits below 1: a small model's MFU (an LSTM forecaster's 0.04 %) is not "0.0"
    c[2].metric("MFU (%)", _small(est.mfu * 100), delta(est.mfu, base and base.mfu))
    c[3].metric("Model TFLOP/s per GPU", _small(est.tflops_per_gpu), delta(est.tflops_per_gpu, base and base.tflops_per_gpu))
    c[4].metric("Memory per GPU (GB)", f"{est.memory_per_gpu_bytes / specs.GB:.1f} / {est.hbm_bytes / specs.GB:.0f}",
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
        st.vega_lite_chart(specs.breakdown_chart(both), width="stretch")
    else:
        st.caption("Move a slider to scale that part of the chosen hardware; the step time and breakdown follow.")
    st.vega_lite_chart(specs.tornado_chart(sensitivity(cfg, plan, base)), width="stretch")


def sensitivity(cfg: dict[str, Any], plan: Any, base: Any) -> pd.DataFrame:
    """Step time with each factor halved and doubled, relative to the baseline (long form)."""
    rows = []
    for i, (label, _) in enumerate(WHATIF.values()):
        for f in (0.5, 2.0):
            scales = tuple(f if j == i else 1.0 for j in range(len(WHATIF)))
            est = estimate(spec_of(cfg["workload"]), cfg["acc"], cfg["system"], plan, "analytic", scales,
                           cfg.get("calibration", "default"), cfg.get("framework"))
            rows.append({"factor": label, "change": f"×{f:g}", "step_time_s": est.step_time_s,
                         "delta_s": est.step_time_s - base.step_time_s, "delta": est.step_time_s / base.step_time_s - 1})
    return pd.DataFrame(rows)


def timeline(est: Any) -> None:
    """The DES timeline (Chrome trace events) as a Gantt chart and a download, when the engine made one."""
    tl = est.timeline
    if not tl:
        return
    from perfmodel import app_charts as charts  # Altair: only the pages that draw with it import it

    st.altair_chart(charts.gantt_chart(tl), width="stretch")
    st.download_button("Download timeline (Chrome trace JSON, opens in Perfetto)", json.dumps(tl), file_name="trace.json")


# ---- page: Compare hardware -----------------------------------------------------------------------
COMPARE_METRICS = {"days": "time to train (days)", "cost_usd": "cost (USD)",
                   "usd_per_trillion_tokens": "cost per 10¹² tokens (USD)", "energy_mwh": "energy incl. PUE (MWh)",
                   "mfu": "MFU (fraction of peak)"}
COMPARE_COLUMNS = {
    "candidate": st.column_config.TextColumn("candidate"),
    "precision": st.column_config.TextColumn("precision"),
    "layout": st.column_config.TextColumn("best layout"),
    "step_time_s": st.column_config.NumberColumn("step time (s)", format="%.3g"),
    "step_interval": st.column_config.TextColumn("step 80 % interval (s)"),
    "calibration": st.column_config.TextColumn("calibration"),
    "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
    "mfu": st.column_config.NumberColumn("MFU", format="percent"),
    "mfu_flag": st.column_config.TextColumn("MFU check"),
    "memory_gb": st.column_config.NumberColumn("memory (GB/GPU)", format="%.1f"),
    "days": st.column_config.NumberColumn("time to train (days)", format="%.2f"),
    "days_interval": st.column_config.TextColumn("days 80 % interval"),
    "days_with_failures": st.column_config.NumberColumn("days with failures", format="%.2f"),
    "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.0f"),
    "usd_per_gpu_hour": st.column_config.NumberColumn("USD per GPU-hour", format="%.2f"),
    "cost_usd": st.column_config.NumberColumn("cost (USD)", format="dollar"),
    "cost_interval": st.column_config.TextColumn("cost 80 % interval (USD)"),
    "usd_per_trillion_tokens": st.column_config.NumberColumn("USD per 10¹² tokens", format="dollar"),
    "energy_mwh": st.column_config.NumberColumn("energy incl. PUE (MWh)", format="%.1f"),
    "energy_cost_usd": st.column_config.NumberColumn("energy cost (USD)", format="dollar"),
    "power_per_gpu_w": st.column_config.NumberColumn("wall power per GPU (W)", format="%.0f"),
    "power_basis": st.column_config.TextColumn("power basis"),
    "validation_mape": st.column_config.NumberColumn("validation error (MAPE)", format="percent"),
    "tokens_per_joule": st.column_config.NumberColumn("tokens per J", format="%.3g"),
    "goodput": st.column_config.NumberColumn("goodput", format="percent"),
    "price_note": st.column_config.TextColumn("price"),
    "partial_warning": st.column_config.TextColumn("partial node / rack"),
    "message": st.column_config.TextColumn("note"),
}
PRECISIONS = precision_names()
DEFAULT_CANDIDATES = ("h100-sxm5-80gb", "h200-sxm-141gb", "b200", "mi300x", "nvl72")


@st.cache_data(show_spinner=False, max_entries=256)
def run_candidate(workload: Any, cand: str, n_gpus: int, global_batch: int, tokens: float, seq_len: int | None,
                  precision: str, calibration: str = "default", framework: str | None = None,
                  optimizer: str = "adam") -> tuple[pd.DataFrame, Any]:
    """(one compare row at PUE 1, the best plan or None) for one candidate; cached per candidate, so
    changing one candidate's precision re-searches that one only."""
    from perfmodel.planning.purchase import resolve_candidate

    try:
        system, msgs = resolve_candidate(cand, n_gpus)
    except USER_ERRORS as e:
        return pd.DataFrame([{"candidate": cand, "n_gpus": n_gpus, "message": str(e)}]), None
    row = planning().compare(workload, [system], n_gpus, global_batch, tokens, seq_len=seq_len, precision=precision,
                             calibration=calibration, framework=framework, optimizer=optimizer)
    row["candidate"] = cand
    if msgs:
        row["message"] = ["; ".join([*msgs, str(m)] if isinstance(m, str) and m else msgs) for m in row.get("message", [""])]
    plan = row.pop("plan").iloc[0] if "plan" in row else None
    return row, plan


@st.cache_data(show_spinner=False, max_entries=64)
def run_layout_sensitivity(workload: Any, cand: str, n_gpus: int, plan: Any, pct: float,
                           calibration: str = "default", framework: str | None = None) -> pd.DataFrame:
    """Step time of the candidate's chosen layout with each bandwidth moved by ±pct (no re-search)."""
    from perfmodel.planning.purchase import layout_sensitivity, resolve_candidate

    system, _ = resolve_candidate(cand, n_gpus)
    return layout_sensitivity(workload, system, plan, pct, calibration=calibration,
                              framework=framework).assign(candidate=cand)


@st.cache_data(show_spinner=False)
def validation_error_by_accelerator(engine: str, calibration: str = "default") -> dict[str, tuple[float, int]]:
    from perfmodel.planning.purchase import validation_error

    m, _ = validation_frames(str(RUNS_PUBLIC), RUNS_PUBLIC.stat().st_mtime, engine, calibration)
    return validation_error(m)


def candidate_name(cand: str) -> str:
    cat = catalog()
    base, _, fabric = cand.partition("@")
    name = next((d[base].name for d in (cat.accelerators, cat.nodes, cat.clusters) if base in d), base)
    return f"{name} on {cat.fabrics[fabric].name}" if fabric in cat.fabrics else name


def site_inputs() -> tuple[Any, str]:
    """The buyer's site widgets: price basis, electricity, PUE, amortisation and utilisation."""
    from perfmodel.planning.purchase import Site

    c = st.columns(5)
    basis = _bound(c[0].radio, "Pay for GPUs", "basis", options=["hourly", "purchase"], horizontal=True,
                   format_func=lambda b: {"hourly": "by the hour (cloud)", "purchase": "buy them"}[b])
    kwh = _bound(c[1].number_input, "Electricity (USD per kWh)", "kwh", min_value=0.0, max_value=10.0, value=0.10,
                 step=0.01, help="0.10 is an assumption (a typical industrial tariff): type your own. Enters the cost "
                                 "when you buy the GPUs; with cloud prices it is shown as energy cost only")
    pue = _bound(c[2].number_input, "PUE", "pue", min_value=1.0, max_value=3.0, value=1.2, step=0.05,
                 help="datacentre power / IT power; 1.0 = IT only. Multiplies the energy")
    years = _bound(c[3].number_input, "Amortisation (years)", "years", min_value=0.5, max_value=15.0, value=4.0, step=0.5,
                   help="straight-line depreciation of a purchase (4 years is an assumption)", disabled=basis == "hourly")
    util = _bound(c[4].number_input, "Utilisation (%)", "util", min_value=1.0, max_value=100.0, value=80.0, step=5.0,
                  help="share of the amortisation period the bought GPUs do paid work; an idle GPU still depreciates",
                  disabled=basis == "hourly")
    per = "GPU"
    if basis == "purchase":
        per = _bound(st.radio, "Purchase prices are per", "price_per", options=["GPU", "node"], horizontal=True,
                     help="a node price is shared over the node's GPUs")
    return Site(basis=basis, electricity_usd_per_kwh=float(kwh), pue=float(pue), amortisation_years=float(years),
                utilisation=float(util) / 100.0), per


def candidate_inputs(cands: list[str], n_gpus: int, basis: str, per: str, default_precision: str) -> tuple[
        dict[str, str], dict[str, float | None], dict[str, dict[str, str]]]:
    """Per candidate: precision, the price (prefilled from the specs, empty where they have none;
    converted to per GPU) and the spec sources behind it."""
    from perfmodel.planning.purchase import power_basis_text, resolve_candidate, spec_price

    precisions, prices, sources = {}, {}, {}
    unit = {"hourly": "USD per GPU-hour", "purchase": f"purchase USD per {per}"}[basis]
    for cand in cands:
        try:
            system, _ = resolve_candidate(cand, n_gpus)
        except USER_ERRORS as e:
            st.error(f"{cand}: {e}")
            continue
        sp = spec_price(system)
        spec_value = sp.usd_per_gpu_hour if basis == "hourly" else (
            None if sp.purchase_usd_per_gpu is None else sp.purchase_usd_per_gpu * (sp.gpus_per_node if per == "node" else 1))
        c = st.columns([3, 1, 2, 4])
        dom = system.node.domain_size
        racks = math.ceil(n_gpus / dom)
        units = (f"{racks} racks of {dom}" + (" (the last one partly filled)" if n_gpus % dom else "")
                 if dom > system.node.accelerators_per_node
                 else f"{system.num_nodes} × {system.node.accelerators_per_node}-GPU nodes")
        c[0].markdown(f"**{candidate_name(cand)}**  \n`{cand}` · {units}")
        precisions[cand] = c[1].selectbox("precision", PRECISIONS, key=f"prec_{cand}",
                                          index=PRECISIONS.index(default_precision) if default_precision in PRECISIONS else 0)
        value = c[2].number_input(unit, key=f"price_{basis}_{per}_{cand}", min_value=0.0, value=spec_value,
                                  placeholder="no price in the specs: type one", format="%.2f")
        src = sp.hourly_source if basis == "hourly" else sp.purchase_source
        c[3].caption(("spec price: " + src) if spec_value is not None else f"{src}. Type a price to cost this candidate.")
        per_gpu = None if value is None else float(value) / (sp.gpus_per_node if basis == "purchase" and per == "node" else 1)
        prices[cand] = per_gpu
        sources[cand] = {"hardware": f"{system.accelerator.name} ({system.accelerator.id}) in {system.name}",
                         "price": src if spec_value is not None and value == spec_value else (
                             f"typed by the user: {value} {unit}" if value is not None else src),
                         "power basis": power_basis_text(system)}
    return precisions, prices, sources


def sweep_results_view() -> None:
    """Open a `perfmodel sweep` Parquet: the best layout of every point, fastest first per point."""
    with st.expander("Open a sweep's results (perfmodel sweep ... --out RESULTS.parquet)"):
        up = st.file_uploader("sweep results", type=["parquet"], key="upload_sweep", label_visibility="collapsed")
        if up is None:
            return
        from perfmodel.planning.sweep_report import best_view

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(up.name).name
            path.write_bytes(up.getvalue())
            try:
                best, view = best_view(path)
            except (*USER_ERRORS, OSError, ImportError) as e:
                st.error(str(e).replace(str(path), up.name))
                return
        st.caption(f"{len(best)} points; the best layout (rank 0) of each, as `perfmodel report` lists them.")
        st.dataframe(view, hide_index=True, column_config={"mfu": st.column_config.NumberColumn("MFU", format="percent")})


def page_compare(cfg: dict[str, Any]) -> None:
    from perfmodel import app_charts as charts  # Altair: only the pages that draw with it import it

    st.header("Compare hardware: the purchase view")
    if planning() is None:
        st.info(NO_PLANNER)
        return
    sweep_results_view()
    from perfmodel.planning.purchase import (
        apply_site,
        calibration_status,
        candidate_ids,
        interval_text,
        partial_unit_warning,
        resolve_candidate,
    )

    ids = candidate_ids()
    cands = _bound(st.multiselect, "Candidates: accelerators (on their reference node), nodes, racks, a node on another "
                   "fabric (node@fabric)", "cands", options=ids, default=[c for c in DEFAULT_CANDIDATES if c in ids],
                   format_func=lambda c: f"{candidate_name(c)} ({c})")
    c1, c2 = st.columns(2)
    tokens_b = _bound(c1.number_input, "Training tokens (billions)", "tokens_b", min_value=0.001, value=1000.0)
    pct = _bound(c2.number_input, "Sensitivity: move bandwidths and price by ± (%)", "pct",
                 min_value=0.0, max_value=90.0, value=0.0,
                 help="0 = off; each candidate's chosen layout is re-timed with each bandwidth moved (no re-search)")
    seq = cfg["seq"] or spec_of(cfg["workload"]).seq_len
    if not cands:
        st.warning("Pick at least one candidate.")
        return
    site, per = site_inputs()
    with st.expander("Price and precision per candidate (prefilled from the specs, with their sources)", expanded=True):
        precisions, prices, sources = candidate_inputs(cands, cfg["gpus"], site.basis, per, cfg["precision"])
    st.caption(f"{cfg['workload']} on {cfg['gpus']} GPUs of each candidate, global batch {cfg['gb']} sequences of "
               f"**{seq} tokens**, {tokens_b:g} B tokens; each candidate runs its own fastest fitting layout.")
    tokens = tokens_b * 1e9
    rows, plans = [], {}
    try:
        with st.spinner("Searching the best layout on each candidate…"):
            for cand in precisions:
                row, plan = run_candidate(spec_of(cfg["workload"]), cand, cfg["gpus"], cfg["gb"], tokens, cfg["seq"] or None,
                                          precisions[cand], cfg.get("calibration", "default"), cfg.get("framework"),
                                          cfg.get("optimizer", "adam"))
                rows.append(row.assign(precision=precisions[cand]))
                plans[cand] = plan
    except USER_ERRORS as e:
        st.error(str(e))
        return
    if not rows:
        return
    frame = apply_site(pd.concat(rows, ignore_index=True), prices, site, tokens)
    frame["partial_warning"] = [partial_unit_warning(resolve_candidate(c, cfg["gpus"])[0], cfg["gpus"]) or ""
                                if c in plans else "" for c in frame["candidate"]]
    frame["calibration"] = [calibration_status(r) for _, r in frame.iterrows()]
    if st.session_state.get("with_validation"):
        errs = validation_error_by_accelerator("analytic", cfg.get("calibration", "default"))
        frame["validation_mape"] = [errs.get(str(a), (None, 0))[0] for a in frame.get("accelerator", [])]
    frame["step_interval"] = [interval_text(r, "step_time_s", "step_time_lo_s", "step_time_hi_s", ".3g") for _, r in frame.iterrows()]
    frame["days_interval"] = [interval_text(r, "days", "days_lo", "days_hi", ".1f") for _, r in frame.iterrows()]
    frame["cost_interval"] = [interval_text(r, "cost_usd", "cost_lo_usd", "cost_hi_usd", ",.0f") for _, r in frame.iterrows()]
    for _, r in frame.iterrows():
        if r.get("partial_warning"):
            st.warning(r["partial_warning"])
    trust_badges(frame)
    shown = [(c, t) for c, t in COMPARE_METRICS.items() if c in frame and frame[c].notna().any()]
    cols = st.columns(2)
    for i, (col, title) in enumerate(shown):
        chart = charts.compare_chart(frame, col, title, higher_is_better=col == "mfu", interval=INTERVALS.get(col))
        cols[i % 2].altair_chart(chart, width="stretch")
    table = frame[[c for c in COMPARE_COLUMNS if c in frame]]
    st.dataframe(table, hide_index=True, column_config=COMPARE_COLUMNS)
    how = ("GPU-hours × the price per GPU-hour" if site.basis == "hourly"
           else "GPU-hours × purchase price / (years × 8766 h × utilisation) + energy cost")
    st.caption(f"Cost: {how}; "
               "an empty price leaves the cost empty. Energy: GPUs × wall power per GPU (one basis for every candidate: "
               "the node's or rack's published wall power per GPU, else TDP × the published-node overhead) × time × PUE, "
               "full power for the whole run. Days with failures: Young/Daly checkpointing at the Llama 3 failure rate.")
    st.checkbox("Add each accelerator's validation error (predicts the public runs once, ~10 s)", key="with_validation")
    sens = None
    if pct:
        sens = pd.concat([run_layout_sensitivity(spec_of(cfg["workload"]), c, cfg["gpus"], plans[c], float(pct),
                                                 cfg.get("calibration", "default"), cfg.get("framework"))
                          for c in plans if plans[c] is not None] or [pd.DataFrame()], ignore_index=True)
        if not sens.empty:
            st.altair_chart(charts.sensitivity_chart(sens), width="stretch")
    report_downloads(cfg, frame, sens, site, per, tokens_b, seq, sources, shown)


INTERVALS = {"days": ("days_lo", "days_hi"), "cost_usd": ("cost_lo_usd", "cost_hi_usd")}


def trust_badges(frame: pd.DataFrame) -> None:
    """Per candidate: measured / fallback calibration badge, the interval or 'no interval', the MFU flag."""
    for _, r in frame.iterrows():
        if pd.isna(r.get("step_time_s")):
            st.error(f"{r['candidate']}: {r.get('message') or 'no result'}")
            continue
        cal = str(r.get("calibration") or "")
        c = st.columns([2, 3, 3, 5])
        c[0].markdown(f"**{r['candidate']}**")
        with c[1]:
            why = (f"measured on this hardware: {r.get('measured_terms') or 'none'}; derating rule (fallback): "
                   f"{r.get('fallback_terms') or 'none'}")
            if cal == "measured":
                st.badge("measured", icon=":material/check:", color="green", help=why)
            elif cal.startswith("partly"):
                st.badge(cal, icon=":material/rule:", color="orange", help=why)
            else:
                st.badge("fallback", icon=":material/warning:", color="red", help=why)
        c[2].markdown(f"step {r['step_interval']}" if "no interval" not in str(r["step_interval"])
                      else f"step {r['step_time_s']:.3g} s · no interval")
        if r.get("mfu_flag"):
            c[3].markdown(f":red[**MFU above any published run**]: {str(r['mfu_flag']).split(' (')[0]}", help=r["mfu_flag"])


def report_downloads(cfg: dict[str, Any], frame: pd.DataFrame, sens: pd.DataFrame | None, site: Any, per: str,
                     tokens_b: float, seq: int, sources: dict[str, dict[str, str]], shown: list[tuple[str, str]]) -> None:
    """The one-page HTML report, the Markdown and the CSV, to download and forward."""
    from perfmodel import app_charts as charts  # Altair: only the pages that draw with it import it
    from perfmodel.planning.compare import markdown
    from perfmodel.planning.purchase import headline_markdown, html_report

    title = f"{cfg['workload']} on {cfg['gpus']} GPUs, {tokens_b:g} B tokens"
    inputs = {"workload": f"{spec_of(cfg['workload']).name} ({cfg['workload']})", "GPUs per candidate": cfg["gpus"],
              "global batch (sequences)": cfg["gb"], "sequence length (tokens)": seq, "training tokens": f"{tokens_b:g} B",
              "pay for GPUs": site.basis, "purchase prices per": per if site.basis == "purchase" else "-",
              "electricity (USD/kWh)": site.electricity_usd_per_kwh, "PUE": site.pue,
              "amortisation (years)": site.amortisation_years if site.basis == "purchase" else "-",
              "utilisation": f"{site.utilisation:.0%}" if site.basis == "purchase" else "-",
              "precision per candidate": ", ".join(f"{c}: {p}" for c, p in zip(frame["candidate"], frame["precision"], strict=True)),
              "engine": "analytic (layout search)"}

    import altair as alt

    def page() -> str:  # built on click only: drawing the charts to SVG takes a moment
        specs = [charts.compare_chart(frame, col, t, higher_is_better=col == "mfu", interval=INTERVALS.get(col))
                 .properties(width=280, autosize=alt.AutoSizeParams(type="pad"), padding={"left": 40, "top": 5, "right": 5, "bottom": 5})
                 .to_dict(validate=False) for col, t in shown]  # left padding: viewer fonts run wider than vl-convert measures
        return html_report(frame, title, inputs, sources, specs)

    c1, c2, c3 = st.columns(3)
    c1.download_button("Download the purchase report (HTML, one page)", page, file_name="purchase-report.html",
                       mime="text/html", type="primary", on_click="ignore")
    md = markdown(frame, title, sens) + "\n## Headline\n\n" + headline_markdown(frame)
    c2.download_button("Download report (Markdown)", md, file_name="compare.md", mime="text/markdown")
    c3.download_button("Download table (CSV)", frame.to_csv(index=False), file_name="compare.csv", mime="text/csv")


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
    c1, c2, c3 = st.columns(3)
    within = _bound(c1.checkbox, "tp within one NVLink domain", "tp_node", value=True)
    fix_tp = _bound(c2.checkbox, "keep the sidebar's tp", "fix_tp", value=False)
    offload = _bound(c3.checkbox, "try activation offloading", "search_offload", value=False,
                     help="where a layout does not fit: the fewest layers whose activations go to host memory "
                          "(Megatron-Core: pp 1, no recompute; needs the node's host link)")
    dualpipe = _bound(st.checkbox, "also try DualPipe", "search_dualpipe", value=False,
                      help="DeepSeek's bidirectional pipeline (deepseek-ai/DualPipe): two stages per rank, twice the "
                           "weights, a smaller bubble; in no stack perfmodel models, so off by default")
    sp_mod = planning()
    schedules = sp_mod.SEARCHED_SCHEDULES if dualpipe else sp_mod.DEFAULT_SCHEDULES
    space = sp_mod.SearchSpace(min_headroom_bytes=headroom * specs.GB, tp_within_node=within,
                               tp=(st.session_state.get("tp", 1),) if fix_tp else None,
                               offload_activations=offload, schedules=schedules)
    return objective, int(top), space


def page_search(cfg: dict[str, Any]) -> None:
    from perfmodel import app_charts as charts  # Altair: only the pages that draw with it import it

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
                             cfg["precision"], objective, space, cfg.get("calibration", "default"), cfg.get("framework"),
                             cfg.get("optimizer", "adam"), cfg.get("attention"))
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
    view = res.table.head(top).copy()
    view.insert(0, "layout", search_labels(view))
    view["memory_gb"], view["headroom_gb"] = view["memory_bytes"] / specs.GB, view["headroom_bytes"] / specs.GB
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


def pareto_frame(res: Any, limit: int = 600) -> pd.DataFrame:
    """Fitting layouts for the Pareto chart with labels: the front, plus up to `limit` others
    sampled evenly over the ranking (the cloud's shape, not thousands of overlapping points)."""
    t = res.table
    front = res.pareto_memory()
    keys = ["dp", "tp", "pp", "cp", "ep", "vp", "sequence_parallel", "zero_stage", "micro_batch", "recompute", "schedule"]
    sample = t.iloc[:: max(1, len(t) // limit)] if len(t) > limit else t
    f = pd.concat([sample, front]).drop_duplicates(subset=keys)
    f = f.merge(front[keys].assign(front=True), on=keys, how="left")
    f["front"] = f["front"].fillna(False).astype(bool)
    f["layout"] = search_labels(f)
    f["headroom_gb"] = f["headroom_bytes"] / specs.GB
    return f[["layout", "step_time_s", "headroom_gb", "front"]]


def open_layout(plan: Any) -> None:
    """Callback: copy a searched layout into the sidebar widgets and switch to the Estimate page."""
    st.session_state.update(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep, vp=plan.vp, zero=plan.zero_stage,
                            mb=plan.micro_batch, recompute=plan.recompute, sp=plan.sequence_parallel,
                            schedule=plan.schedule or "auto", offload=plan.offload_activations,
                            recompute_window=plan.recompute_num_layers if plan.recompute_method == "block" else 0,
                            page="Estimate")


# ---- page: Validation -----------------------------------------------------------------------------
def page_validation(cfg: dict[str, Any]) -> None:
    from perfmodel import app_charts as charts  # Altair: only the pages that draw with it import it

    st.header("Validation: how far to trust the numbers")
    files = [k for k, v in RUN_FILES.items() if v.exists()]
    if st.session_state.get("runs_file", st.query_params.get("runs_file")) not in files:
        st.session_state["runs_file"] = files[0]
    key = _bound(st.selectbox, "Measured runs", "runs_file", options=files,
                 help="public: validation/runs_public.csv, which the shipped profile is fitted on (in sample for "
                      "it); judged: validation/runs_published_extra.csv (Megatron-Bridge, NeMo, torchtitan, Hugging "
                      "Face, LLMQ), runs_judged_dgxc.csv (NVIDIA's DGX Cloud benchmarking recipes), "
                      "runs_judged_amd.csv (MLPerf, Primus and ROCm Megatron-LM on MI325X / MI355X) and "
                      "runs_judged_tpu.csv (MaxText on TPU v5e / v5p / v6e / TPU7x), never "
                      "fitted on: the error on runs the model has not seen")
    runs = RUN_FILES[key]
    fitted_here = {"default": " The default profile was fitted on these runs, so this is its in-sample error; its "
                   "leave-one-source-out error is under 'About the profile' in the sidebar.",
                   "none": " Physics only: nothing measured is an input."}
    why = fitted_here.get(cfg["calibration"], "") if runs == RUNS_PUBLIC else (
        " Nothing is fitted on these runs: this is the error on runs the model never saw.")
    st.caption(f"Every run in {runs.relative_to(ROOT)} predicted with the {cfg['engine']} engine and calibration "
               f"**{cfg['calibration_label']}**." + why + " APE = |predicted − measured| / measured step time.")
    try:
        with st.spinner("Predicting the runs…"):
            m, met = validation_frames(str(runs), runs.stat().st_mtime, cfg["engine"], cfg["calibration"])
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
    ceiling = overall["kendall_tau_ceiling"]
    c[3].metric("Kendall τ", f"{overall['kendall_tau']:.3f}",
                help="Rank agreement of predicted and measured step time within each model × hardware group. "
                     + ("" if ceiling != ceiling else
                        f"Ceiling {ceiling:.3f}: what a model exact up to what the runs' columns tell apart "
                        "would reach (runs identical in every input column tie)."))
    sources = sorted(m["source"].dropna().unique())
    if any(x not in sources for x in st.session_state.get("sources", [])):
        st.session_state["sources"] = sources  # another file's sources: start from all of this one's
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
    preload_other_pages()


def preload_other_pages() -> None:
    """Once the first page is drawn, import what the other pages draw with (Altair, the planner) in
    a background thread, while the user reads: the first visit to another page then does not pay
    for the imports. Python's import lock makes a page that needs them meanwhile wait, not fail."""
    if "perfmodel.app_charts" in sys.modules and "perfmodel.planning" in sys.modules:
        return

    def imports() -> None:
        import perfmodel.app_charts
        import perfmodel.planning  # noqa: F401

    threading.Thread(target=imports, name="perfmodel-preload", daemon=True).start()


main()
