"""Group tables of the judged-only runs (`runs_published_extra.csv`, `runs_judged_dgxc.csv`): MAPE,
median signed error and how often the 80 % interval held, per source family, precision, stack, dense
/ MoE and accelerator, for the shipped profile and physics only. Nothing is fitted here; the files
are never fitted on.

    python validation/extra_groups.py [--runs validation/runs_published_extra.csv | validation/runs_judged_dgxc.csv]

Writes the markdown table to stdout, after a line with the file's Kendall tau of layouts and its
ceiling (perfmodel/validation/report.tau_ceiling: what the runs' columns can tell apart);
validation/report/extra/report.md quotes both.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from perfmodel.validation.predict import validate_file
from perfmodel.validation.report import group_tau, tau_ceiling

HERE = Path(__file__).resolve().parent
GROUPS = ("family", "precision", "framework", "kind", "accelerator")
# rows that name an MoE model by its workload id carry no n_experts cell
MOE_MODELS = "deepseek|mixtral|qwen3-235b|qwen3-30b|gpt-oss|nemotron3|kimi|grok|llama4|dbrx|olmoe"


def predictions(runs: Path, calibration: str) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pred.csv"
        validate_file(runs, out, calibration=calibration)
        return pd.read_csv(out)


def joined(runs: Path) -> pd.DataFrame:
    measured = pd.read_csv(runs)
    shipped, physics = predictions(runs, "default"), predictions(runs, "none")
    d = measured.merge(shipped, on="run_id").merge(physics[["run_id", "predicted_step_time_s"]], on="run_id",
                                                    suffixes=("", "_physics"))
    d = d[d["status"] == "ok"].copy()
    d["err"] = d["predicted_step_time_s"] / d["step_time_s"] - 1
    d["err_physics"] = d["predicted_step_time_s_physics"] / d["step_time_s"] - 1
    d["held"] = (d["step_time_s"] >= d["predicted_step_time_lo_s"]) & (d["step_time_s"] <= d["predicted_step_time_hi_s"])
    d["family"] = d["run_id"].str.split("-").str[0]
    moe = d["n_experts"].notna() | d["model"].fillna("").str.contains(MOE_MODELS)
    d["kind"] = moe.map({True: "moe", False: "dense"})
    return d


def tau_line(d: pd.DataFrame) -> str:
    """The shipped profile's Kendall tau of layouts (per model x hardware, as `perfmodel validate
    --report` computes it) against the ceiling of an exact model that reads only the runs' columns."""
    physics = group_tau(d.assign(predicted_step_time_s=d["predicted_step_time_s_physics"]))
    return (f"Kendall tau {group_tau(d):.3f} (physics only {physics:.3f}); ceiling {tau_ceiling(d):.3f}: "
            "an exact model that reads only these columns, runs that agree on all of them tied\n\n")


def table(d: pd.DataFrame) -> str:
    rows = [("overall", "", d)]
    for col in GROUPS:
        rows += [(col, str(k), g) for k, g in d.groupby(col, dropna=False)]
    lines = ["| group | rows | MAPE | median | 80 % interval held | physics-only MAPE | physics-only median |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for col, key, g in rows:
        name = "overall" if col == "overall" else f"{col}: {key}"
        lines.append(f"| {name} | {len(g)} | {g['err'].abs().mean():.1%} | {g['err'].median():+.1%} | "
                     f"{g['held'].mean():.0%} | {g['err_physics'].abs().mean():.1%} | {g['err_physics'].median():+.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=HERE / "runs_published_extra.csv")
    a = ap.parse_args(argv)
    d = joined(a.runs)
    print(tau_line(d) + table(d), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
