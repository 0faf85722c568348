"""The public-set error of the default model may not get worse than the figures recorded in
validation/accuracy_floor.json (a regression from 26 % to 90 % must fail CI, not stay green)."""

import json
from pathlib import Path

from perfmodel.cli import main
from perfmodel.validation.report import joined, metrics

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "validation" / "runs_public.csv"
FLOOR = json.loads((ROOT / "validation" / "accuracy_floor.json").read_text())
MAPE_SLACK = 0.002  # rounding of the recorded figures, not a tolerance for regressions
TAU_SLACK = 0.002


def test_public_accuracy_not_worse_than_recorded(tmp_path):
    out = tmp_path / "pred.csv"
    assert main(["validate", "--runs", str(PUBLIC), "--out", str(out)]) == 0
    met = metrics(joined([PUBLIC], [out]))
    overall = met[met["source"] == "overall"].iloc[0]
    assert overall["rows"] >= FLOOR["public_rows_ok"], f"{overall['rows']} rows predicted, recorded {FLOOR['public_rows_ok']}"
    assert overall["mape"] <= FLOOR["public_mape"] + MAPE_SLACK, (
        f"public MAPE {overall['mape']:.4f} is worse than the recorded {FLOOR['public_mape']:.4f}")
    assert overall["kendall_tau"] >= FLOOR["public_kendall_tau"] - TAU_SLACK, (
        f"public Kendall tau {overall['kendall_tau']:.4f} is worse than the recorded {FLOOR['public_kendall_tau']:.4f}")
