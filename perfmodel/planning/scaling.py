"""Scaling curves: the best layout's step time, throughput and MFU against GPU count.

Strong scaling keeps the global batch fixed as GPUs are added (each GPU gets less work, so
communication and pipeline bubbles weigh more); weak scaling keeps sequences per GPU fixed
(global batch = `batch_per_gpu` x GPUs). Every point is the search's best fitting layout, so the
curve shows what a well-tuned job reaches, not one layout pushed past its sweet spot.
"""

from __future__ import annotations

from typing import Literal

import pandas as pd

from perfmodel.hardware.system import System
from perfmodel.planning.search import layout_label, search
from perfmodel.planning.space import SearchSpace
from perfmodel.workload.spec import ModelSpec


def scaling_curve(workload: str | ModelSpec, cluster: str | System, gpu_counts: list[int], *,
                  mode: Literal["strong", "weak"] = "strong", global_batch: int | None = None,
                  batch_per_gpu: float | None = None, seq_len: int | None = None, precision: str = "bf16",
                  space: SearchSpace | None = None) -> pd.DataFrame:
    """One row per GPU count: the best layout, step time, tokens/s, tokens/s per GPU, MFU and
    the scaling efficiency against the smallest count (1.0 = linear)."""
    rows = []
    if mode == "strong":
        if global_batch is None:
            raise ValueError("strong scaling needs global_batch (sequences per step, fixed)")
        res = search(workload, cluster, max(gpu_counts), global_batch, seq_len=seq_len, precision=precision,
                     space=space, gpu_counts=gpu_counts)
        best = res.table.drop_duplicates("world", keep="first").set_index("world")
        for n in sorted(gpu_counts):
            rows.append(_row(n, global_batch, best.loc[n] if n in best.index else None))
    elif mode == "weak":
        if batch_per_gpu is None:
            raise ValueError("weak scaling needs batch_per_gpu (sequences per GPU per step)")
        for n in sorted(gpu_counts):
            gb = max(1, round(batch_per_gpu * n))
            res = search(workload, cluster, n, gb, seq_len=seq_len, precision=precision, space=space)
            rows.append(_row(n, gb, res.table.iloc[0] if len(res.table) else None))
    else:
        raise ValueError(f"mode {mode!r}: expected 'strong' or 'weak'")
    df = pd.DataFrame(rows)
    ok = df.dropna(subset=["tokens_per_s"])
    if not ok.empty:
        base = ok.iloc[0]
        df["scaling_efficiency"] = (df["tokens_per_s"] / df["n_gpus"]) / (base["tokens_per_s"] / base["n_gpus"])
    df["mode"] = mode
    return df


def _row(n: int, gb: int, r: pd.Series | None) -> dict[str, object]:
    if r is None:
        return {"n_gpus": n, "global_batch": gb, "layout": "no layout fits", "step_time_s": None, "tokens_per_s": None,
                "tokens_per_s_per_gpu": None, "mfu": None}
    d = dict(r)
    d.setdefault("world", n)
    return {"n_gpus": n, "global_batch": gb, "layout": layout_label(pd.Series(d)), "step_time_s": float(r["step_time_s"]),
            "tokens_per_s": float(r["tokens_per_s"]), "tokens_per_s_per_gpu": float(r["tokens_per_s"]) / n,
            "mfu": float(r["mfu"])}


def scaling_chart(df: pd.DataFrame):
    """Altair chart: tokens/s and MFU against GPU count (log x)."""
    import altair as alt

    base = alt.Chart(df.dropna(subset=["tokens_per_s"])).encode(
        x=alt.X("n_gpus:Q", scale=alt.Scale(type="log", base=2), title="GPUs"))
    tput = base.mark_line(point=True).encode(y=alt.Y("tokens_per_s:Q", title="tokens / s"),
                                             tooltip=["n_gpus", "layout", "tokens_per_s", "mfu"])
    mfu = base.mark_line(point=True, color="orange").encode(y=alt.Y("mfu:Q", title="MFU", axis=alt.Axis(format="%")))
    return alt.hconcat(tput.properties(title="throughput", width=320, height=220),
                       mfu.properties(title="MFU", width=320, height=220))


__all__ = ["scaling_chart", "scaling_curve"]
