"""The report's Kendall tau and its ceiling (perfmodel/validation/report.py), on hand-made frames."""

import math

import pandas as pd
import pytest

from perfmodel.validation.report import group_tau, tau_ceiling
from perfmodel.validation.runs import COLUMNS


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as the report's joined frame holds them: every contract column, blank unless given."""
    base = {c: None for c in COLUMNS} | {"model": "llama3-8b", "accelerator": "h100-sxm5-80gb", "tp": 1, "pp": 1,
                                         "precision": "bf16", "notes": "", "source_detail": "", "source": "s"}
    return pd.DataFrame([{**base, **r} for r in rows], columns=[*COLUMNS, "predicted_step_time_s"])


def test_distinct_layouts_reach_one():
    # every run has its own layout: an exact model ranks them all
    g = frame([{"tp": t, "step_time_s": s, "predicted_step_time_s": 9.0} for t, s in ((1, 3.0), (2, 2.0), (4, 1.0))])
    assert tau_ceiling(g) == pytest.approx(1.0)


def test_one_layout_measured_twice_is_a_tie():
    # runs 1 and 2 share every input column (only the notes, a release say, differ): predicted
    # alike, their pair counts as a tie. tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)) with n0 = 6 pairs,
    # n1 = 1 tie in the prediction, none in the measurement, C = 5, D = 0: 5 / sqrt(30)
    g = frame([{"tp": 1, "notes": "release A", "step_time_s": 1.0},
               {"tp": 1, "notes": "release B", "step_time_s": 2.0},
               {"tp": 2, "step_time_s": 3.0},
               {"tp": 4, "step_time_s": 4.0}])
    g["predicted_step_time_s"] = [4.0, 3.0, 2.0, 1.0]  # a model that ranks everything backwards
    assert tau_ceiling(g) == pytest.approx(5 / math.sqrt(30))
    assert group_tau(g) == pytest.approx(-1.0)  # the ceiling never reads the predictions


def test_measured_figures_are_not_inputs():
    # tokens/s and MFU follow from the step time: they must not tell two runs of one layout apart
    g = frame([{"tp": 1, "step_time_s": 1.0, "tokens_per_s": 2.0, "mfu": 0.5},
               {"tp": 1, "step_time_s": 2.0, "tokens_per_s": 1.0, "mfu": 0.25},
               {"tp": 2, "step_time_s": 3.0, "tokens_per_s": 0.7, "mfu": 0.2}])
    # pairs: (1,2) tied by the ceiling, (1,3) and (2,3) concordant: 2 / sqrt((3 - 1) x 3)
    assert tau_ceiling(g) == pytest.approx(2 / math.sqrt(6))


def test_groups_weighted_by_size_and_small_groups_skipped():
    a = frame([{"tp": t, "step_time_s": s} for t, s in ((1, 1.0), (1, 2.0), (2, 3.0), (4, 4.0))])
    b = frame([{"model": "llama3-70b", "tp": t, "step_time_s": s} for t, s in ((2, 1.0), (4, 2.0), (8, 3.0))])
    tiny = frame([{"model": "gpt3-175b", "tp": 1, "step_time_s": 1.0}, {"model": "gpt3-175b", "tp": 1, "step_time_s": 5.0}])
    g = pd.concat([a, b, tiny], ignore_index=True)
    # a: 5/sqrt(30) over 4 rows, b: 1 over 3 rows, the two-row group below the 3-run minimum
    assert tau_ceiling(g) == pytest.approx((4 * 5 / math.sqrt(30) + 3 * 1.0) / 7)


def test_empty_is_nan():
    assert math.isnan(tau_ceiling(frame([]).iloc[0:0]))
