"""Pipeline schedules are one file each: the package finds them, the plan, both engines and the
planner take them by name, and an unknown one is an error naming the valid ones."""

from __future__ import annotations

import pkgutil

import numpy as np
import pytest

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.errors import LayoutError
from perfmodel.parallel import schedules
from perfmodel.parallel.schedules import SCHEDULES, PipelineSchedule
from perfmodel.parallel.schedules.one_f_one_b import OneFOneB
from perfmodel.planning.space import SearchSpace


def test_every_module_of_the_package_is_a_schedule() -> None:
    modules = {m.name for m in pkgutil.iter_modules(schedules.__path__)} - {"base"}
    assert len(modules) == len(SCHEDULES) == 5
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"}


def test_unknown_schedule_names_the_valid_ones() -> None:
    with pytest.raises(LayoutError, match="unknown pipeline schedule 'chimera'; valid: 1f1b, dualpipe, gpipe, "
                                          "interleaved, zb-h1"):
        ParallelPlan(pp=2, global_batch=4, schedule="chimera")
    with pytest.raises(ValueError, match=r"unknown pipeline schedule\(s\) \['chimera'\]; valid: 1f1b, dualpipe"):
        SearchSpace(schedules=("1f1b", "chimera"))
    # DualPipe is searched on request only (DeepSeek's own pipeline, in no stack perfmodel models)
    assert "dualpipe" not in SearchSpace().schedules
    assert SearchSpace(schedules=("1f1b", "dualpipe")).schedules == ("1f1b", "dualpipe")


def test_a_schedule_the_search_does_not_model_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfmodel.planning import space

    monkeypatch.setattr(space, "SEARCHED_SCHEDULES", ("1f1b", "interleaved"))
    with pytest.raises(ValueError, match=r"does not evaluate schedule\(s\) \['dualpipe'\]"):
        SearchSpace(schedules=("1f1b", "dualpipe"))


def test_a_new_schedule_needs_nothing_but_its_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule registered under a new name (what a new file in parallel/schedules/ does) runs
    in the plan validator, memory, the analytic engine and the DES with no other change."""

    class Clone(OneFOneB):
        name = "1f1b-clone"

    monkeypatch.setitem(SCHEDULES, "1f1b-clone", Clone())
    assert isinstance(SCHEDULES["1f1b-clone"], PipelineSchedule)
    spec = perfmodel.get_workload("gpt2-124m")
    ref = ParallelPlan(pp=4, global_batch=8)
    new = ref.model_copy(update={"schedule": "1f1b-clone"})
    ParallelPlan(pp=4, global_batch=8, schedule="1f1b-clone")  # validates
    for engine in ("analytic", "des"):
        a = perfmodel.estimate(spec, "a100-sxm4-80gb", ref, engine=engine)
        b = perfmodel.estimate(spec, "a100-sxm4-80gb", new, engine=engine)
        assert b.step_time_s == a.step_time_s and b.memory == a.memory


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("engine", ["analytic", "des"])
def test_breakdown_adds_up_for_every_schedule(schedule: str, engine: str) -> None:
    """ZB-H1 runs the two backward phases apart, each bounded by the host on a small model: the
    overlap lost between them is host time, so the breakdown still sums to the step."""
    vp = 2 if SCHEDULES[schedule].chunked else 1
    plan = ParallelPlan(pp=4, vp=vp, micro_batch=2, global_batch=16, schedule=schedule)
    for workload, hw in (("gpt2-124m", "a100-sxm4-80gb"), ("gpt3-1.3b", "h100-sxm5-80gb")):
        e = perfmodel.estimate(workload, hw, plan, engine=engine)
        assert sum(e.breakdown_s.values()) == pytest.approx(e.step_time_s, rel=1e-9)
        assert all(v >= -1e-15 for v in e.breakdown_s.values()), e.breakdown_s


@pytest.mark.parametrize("p", [2, 4, 6, 8, 16])
def test_dualpipe_bubble_pieces_equal_the_played_order(p: int) -> None:
    """The layout search's DualPipe bubble (max over the order's undominated path counts, on
    columns) equals the longest path played on the order itself, for any F, B, W >= 0."""
    from perfmodel.parallel.schedules.dualpipe import bubble_pieces, uniform_bubble_columns, uniform_bubble_s

    rng = np.random.default_rng(p)
    fbw = rng.uniform(0.0, 1.0, (200, 3)) * rng.choice([1.0, 0.0, 0.01], (200, 3))
    fbw[:, 0] += 1e-3
    got = uniform_bubble_columns(p, fbw[:, 0], fbw[:, 1], fbw[:, 2])
    want = [uniform_bubble_s(p, float(f), float(b), float(w)) for f, b, w in fbw]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert uniform_bubble_columns(p, 1.0, 1.0, 1.0) == pytest.approx((p / 2 - 1) * 1.0, abs=1e-12)  # F = B = W
    assert (bubble_pieces(p) >= 0).all()


def test_gpipe_waits_for_the_slowest_forward_and_the_slowest_backward() -> None:
    """Ranks of t = 3, 3, 4 with forwards 2, 1, 1 (backwards 1, 2, 3), 4 micro-batches: GPipe's
    forward flow shop ends after Σf + 3·max f = 4 + 6, its backward one takes Σb + 3·max b = 6 + 9:
    25, where alternating (1F1B) takes 4·4 + (10 − 4) = 22."""
    t, f = [3.0, 3.0, 4.0], [2.0, 1.0, 1.0]
    assert SCHEDULES["gpipe"].pipeline_s(t, f, [0.0] * 3, 4, 1) == pytest.approx(25.0)
    assert SCHEDULES["1f1b"].pipeline_s(t, f, [0.0] * 3, 4, 1) == pytest.approx(22.0)
    # one rank slowest in both phases: the two agree
    assert SCHEDULES["gpipe"].pipeline_s([3.0, 3.0, 4.0], [1.0, 1.0, 2.0], [0.0] * 3, 4, 1) == pytest.approx(22.0)
