"""The explorer's "Training run" page: time to a target loss per global batch, and goodput with
checkpoints from the model (perfmodel.planning.converge / checkpoint). Thin: widgets, library
calls, pure chart functions; app.py calls `page_run(cfg, spec_of)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from perfmodel.errors import PerfmodelError

USER_ERRORS = (PerfmodelError, ValueError, KeyError)


def default_target(spec: Any, seq_len: int | None = None) -> float:
    """A reachable default target: 0.3 nats above what the Chinchilla law lets the model reach with
    unlimited data, rounded to 0.05."""
    from perfmodel.planning.converge import CHINCHILLA
    from perfmodel.workload.builder import build_graph

    params = build_graph(spec, 1, seq_len or spec.seq_len, "bf16", "flash").total_params_full()
    return round((CHINCHILLA.floor(params) + 0.3) * 20) / 20


def converge_frame(res: Any) -> pd.DataFrame:
    """One row per global batch: days, tokens, steps, GPU-hours and the layout, best marked."""
    best = res.best
    rows = []
    for p in res.curve:
        lay = p.layout
        rows.append({"global batch (sequences)": p.global_batch, "tokens (B)": p.tokens / 1e9, "steps": p.steps,
                     "step time (s)": p.step_time_s, "days": p.time_s / 86400, "GPU-hours": p.gpu_hours,
                     "layout": f"dp{lay['dp']} tp{lay['tp']} pp{lay['pp']} cp{lay['cp']} mb{lay['micro_batch']}",
                     "fastest": p is best})
    return pd.DataFrame(rows)


def _num(fmt: str) -> Any:
    return st.column_config.NumberColumn(format=fmt)


# shown to the precision the model has, not the float's 16 digits
CONVERGE_COLUMNS = {"tokens (B)": _num("%.1f"), "steps": _num("%.0f"), "step time (s)": _num("%.4g"),
                    "days": _num("%.2f"), "GPU-hours": _num("%.0f")}
GOODPUT_COLUMNS = {"checkpoint every (min)": _num("%.1f"), "goodput": _num("percent"), "stall per checkpoint (s)": _num("%.3g"),
                   "write (s)": _num("%.3g"), "restart (s)": _num("%.3g"), "job MTBF (h)": _num("%.3g"),
                   "checkpoint (TB)": _num("%.3g")}


def converge_chart(frame: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    base = alt.Chart(frame).encode(x=alt.X("global batch (sequences):Q", scale=alt.Scale(type="log", base=2),
                                           title="global batch (sequences, log scale)"))
    line = base.mark_line(point=True).encode(
        y=alt.Y("days:Q", title="days to the target"),
        tooltip=["global batch (sequences)", alt.Tooltip("days:Q", format=".2f"), alt.Tooltip("tokens (B):Q", format=".1f"),
                 alt.Tooltip("steps:Q", format=",.0f"), "layout"])
    best = base.transform_filter("datum.fastest").mark_point(size=160, color="#d62728", filled=True).encode(y="days:Q")
    return alt.layer(line, best).properties(height=300, title="time to the target loss by global batch")


@st.cache_data(show_spinner=False, max_entries=16)
def _converge(workload: Any, hardware: str, n_gpus: int, target: float, e_min: float | None, b_noise: float | None,
              seq_len: int | None, precision: str, calibration: str) -> Any:
    from perfmodel.planning.converge import time_to_target

    return time_to_target(workload, hardware, n_gpus, target, e_min_tokens=e_min, noise_scale_tokens=b_noise,
                          seq_len=seq_len, precision=precision, calibration=calibration)


@st.cache_data(show_spinner=False, max_entries=16)
def _goodput(workload: Any, hardware: str, plan: Any, storage: str, asynchronous: bool, calibration: str) -> pd.DataFrame:
    import perfmodel
    from perfmodel.hardware.system import resolve_hardware
    from perfmodel.planning.checkpoint import goodput_from_model, load_storage
    from perfmodel.workload.builder import build_graph

    system, _ = resolve_hardware(hardware, plan.world)
    est = perfmodel.estimate(workload, system, plan, calibration=calibration)
    params = build_graph(workload, 1, plan.seq_len or workload.seq_len, plan.precision,
                         "flash").total_params_full()
    rows = goodput_from_model(est, system, load_storage(storage), params, asynchronous=asynchronous,
                              intervals_s=[300.0, 900.0, 1800.0, 3600.0, 7200.0])
    return pd.DataFrame([{"checkpoint every (min)": r.interval_s / 60, "goodput": r.result.fraction,
                          "stall per checkpoint (s)": r.checkpoint.stall_s, "write (s)": r.checkpoint.write_s,
                          "restart (s)": r.restart_s, "job MTBF (h)": r.result.mtbf_s / 3600,
                          "checkpoint (TB)": r.checkpoint.total_bytes / 1e12, "Young/Daly": i == 0}
                         for i, r in enumerate(rows)])


@st.cache_data(show_spinner=False, max_entries=32)
def _rl(workload: str, hardware: str, spec: Any, calibration: str) -> Any:
    from perfmodel.planning.rl import policy_timings, simulate_rl

    inference_s, learn_s = policy_timings(workload, hardware, spec, calibration=calibration)
    return simulate_rl(spec, inference_s, learn_s)


def input_pipeline_section(cfg: dict[str, Any], spec: Any, plan: Any, hardware: str) -> None:
    """Is the data loader the bottleneck? The sidebar's estimate bounded by an input pipeline."""
    import perfmodel
    from perfmodel.hardware.system import resolve_hardware
    from perfmodel.planning.input_pipeline import InputPipelineSpec, apply_input_pipeline

    st.subheader("Input pipeline")
    st.caption("Per GPU and step: storage reads (per-node bandwidth shared by its GPUs), CPU decode and transforms over the "
               "DataLoader workers, host-to-device copies; they overlap compute, so the slowest bounds the step "
               "(`perfmodel calibrate --dataset module:factory` measures your Dataset's CPU time per sample).")
    c = st.columns(4)
    storage = c[0].number_input("storage read (GB/s per node)", min_value=0.001, value=2.0, key="ip_storage")
    sample = c[1].number_input("sample read (kB)", min_value=0.001, value=40.0, key="ip_sample")
    device = c[2].number_input("sample on device (kB)", min_value=0.001, value=430.0, key="ip_device")
    cpu_ms = c[3].number_input("CPU per sample (ms, one worker)", min_value=0.0, value=4.0, key="ip_cpu")
    c2 = st.columns(3)
    workers = c2[0].number_input("workers per GPU", min_value=1, max_value=256, value=4, key="ip_workers")
    h2d = c2[1].number_input("host-to-device (GB/s per GPU)", min_value=0.001, value=25.0, key="ip_h2d")
    prefetch = c2[2].number_input("prefetch (batches)", min_value=0, max_value=64, value=2, key="ip_prefetch")
    pipe = InputPipelineSpec(storage_read_Bps=storage * 1e9, sample_bytes=sample * 1e3, device_sample_bytes=device * 1e3,
                             cpu_s_per_sample=cpu_ms / 1e3, workers_per_gpu=int(workers), h2d_Bps=h2d * 1e9,
                             prefetch=int(prefetch))
    try:
        system, _ = resolve_hardware(hardware, plan.world)
        est = perfmodel.estimate(spec, system, plan, calibration=cfg.get("calibration", "default"))
        est = apply_input_pipeline(est, pipe, system.node.accelerators_per_node)
    except USER_ERRORS as e:
        st.error(str(e))
        return
    m = st.columns(3)
    m[0].metric("Step with the loader (s)", f"{est.step_time_s:.4g}")
    m[1].metric("Waiting for data (s)", f"{est.breakdown_s['data_wait_s']:.3g}")
    m[2].metric("Input bound", "yes" if est.input_bound else "no")
    st.caption(est.messages[-1])


def rl_section(cfg: dict[str, Any]) -> None:
    """Actor-learner RL: environment steps per second and which side is the bottleneck."""
    from perfmodel.planning.rl import RLPipelineSpec

    st.subheader("Reinforcement learning: actors, inference, learner")
    st.caption("CPU actors step environments, accelerators batch the policy's inference, a learner trains on "
               "trajectories (IMPALA / SEED RL); inference and learner times come from the cost models of the policy "
               "workload (e.g. ppo-mlp-humanoid) on the sidebar's accelerator; a simpy simulation finds the rate.")
    c = st.columns(4)
    workers = c[0].number_input("actor workers", min_value=1, max_value=100_000, value=64, key="rl_workers")
    envs = c[1].number_input("envs per worker", min_value=1, max_value=4096, value=8, key="rl_envs")
    step_ms = c[2].number_input("CPU per env step (ms)", min_value=0.0001, value=0.2, format="%.4f", key="rl_step")
    unroll = c[3].number_input("unroll length", min_value=1, max_value=100_000, value=128, key="rl_unroll")
    c2 = st.columns(3)
    batch = c2[0].number_input("trajectories per learner step", min_value=1, max_value=100_000, value=32, key="rl_batch")
    servers = c2[1].number_input("inference accelerators", min_value=1, max_value=4096, value=1, key="rl_servers")
    maxb = c2[2].number_input("max inference batch", min_value=1, max_value=1_000_000, value=512, key="rl_maxb")
    spec = RLPipelineSpec(actor_workers=int(workers), envs_per_worker=int(envs), env_step_s=step_ms / 1e3,
                          inference_servers=int(servers), inference_max_batch=int(maxb), unroll_length=int(unroll),
                          learner_batch=int(batch))
    try:
        r = _rl(cfg["workload"], cfg["acc"], spec, cfg.get("calibration", "default"))
    except USER_ERRORS as e:
        st.error(str(e))
        return
    m = st.columns(4)
    m[0].metric("Environment steps/s", f"{r.env_steps_per_s:,.0f}")
    m[1].metric("Bottleneck", r.bottleneck)
    m[2].metric("Inference busy", f"{r.inference_busy:.0%}")
    m[3].metric("Learner busy", f"{r.learner_busy:.0%}")
    st.caption(f"actors {r.actor_busy:.0%} busy; mean inference batch {r.mean_inference_batch:.1f}; learner step "
               f"{r.learner_step_s * 1e3:.3g} ms")


def page_run(cfg: dict[str, Any], spec_of: Callable[[str], Any], plan: Any | None) -> None:
    st.header("The whole training run")
    spec = spec_of(cfg["workload"])
    hardware = cfg["system"] or cfg["acc"]
    st.subheader("Time to a target loss")
    st.caption("Steps and tokens to the target trade against the global batch (McCandlish et al. 2018: "
               "S = S_min(1 + B_noise/B), E = E_min(1 + B/B_noise)); the planner picks the fastest fitting layout at each "
               "batch. Defaults: E_min from the Chinchilla law (Hoffmann et al. 2022), B_noise from Kaplan et al. 2020; "
               "give your own for models without a published law.")
    c1, c2, c3 = st.columns(3)
    target = c1.number_input("target loss (nats/token)", min_value=0.1, max_value=20.0, value=default_target(spec, cfg["seq"] or None),
                             step=0.05, key=f"run_target_{cfg['workload']}")
    e_min_b = c2.number_input("E_min (B tokens, 0 = from the law)", min_value=0.0, value=0.0, key="run_emin")
    b_noise_m = c3.number_input("B_noise (M tokens, 0 = Kaplan)", min_value=0.0, value=0.0, key="run_bnoise")
    try:
        with st.spinner("Searching the best layout at each global batch…"):
            res = _converge(spec, hardware, cfg["gpus"], float(target), e_min_b * 1e9 or None, b_noise_m * 1e6 or None,
                            cfg["seq"] or None, cfg["precision"], cfg.get("calibration", "default"))
    except USER_ERRORS as e:
        st.error(str(e))
    else:
        b = res.best
        c = st.columns(4)
        c[0].metric("Fastest global batch", f"{b.global_batch:,}")
        c[1].metric("Days to target", f"{b.time_s / 86400:.2f}")
        c[2].metric("Tokens (B)", f"{b.tokens / 1e9:.1f}")
        c[3].metric("GPU-hours", f"{b.gpu_hours:,.0f}")
        st.caption(f"E_min {res.e_min_tokens / 1e9:.3g} B tokens, B_noise {res.b_noise_tokens / 1e6:.3g} M tokens, "
                   f"{res.params / 1e9:.3g} B parameters, sequence length {cfg['seq'] or spec.seq_len}.")
        frame = converge_frame(res)
        st.altair_chart(converge_chart(frame), width="stretch")
        st.dataframe(frame, hide_index=True, column_config=CONVERGE_COLUMNS)
        for n in res.notes:
            st.caption(n)
    st.subheader("Checkpoints and goodput")
    if plan is None:
        st.info("Fix the layout in the sidebar to see checkpoint cost and goodput for it.")
        return
    from perfmodel.planning.checkpoint import storage_ids

    c1, c2 = st.columns(2)
    storage = c1.selectbox("storage", storage_ids(), key="run_storage")
    asynchronous = c2.checkbox("asynchronous checkpointing", value=True, key="run_async")
    try:
        g = _goodput(spec, hardware, plan, storage, asynchronous, cfg.get("calibration", "default"))
    except USER_ERRORS as e:
        st.error(str(e))
        return
    st.caption(f"Checkpoint of {g['checkpoint (TB)'].iloc[0]:.3g} TB (weights, master weights and optimizer states, "
               f"written once per unique shard); failures at the Llama 3 report's rate: a job on {plan.world:,} GPUs fails "
               f"every {g['job MTBF (h)'].iloc[0]:.2f} h. First row: the Young/Daly interval.")
    st.dataframe(g, hide_index=True, column_config=GOODPUT_COLUMNS)
    input_pipeline_section(cfg, spec, plan, hardware)
    if spec.family == "mlp":
        rl_section(cfg)


__all__ = ["converge_chart", "converge_frame", "page_run"]
