"""Pipeline schedules, one module each: a module of this package that defines `SCHEDULE` (a
`PipelineSchedule`) is a schedule, found here by name. Adding a schedule is adding one file."""

from __future__ import annotations

import importlib
import pkgutil

from perfmodel.errors import LayoutError
from perfmodel.parallel.schedules.base import Num, PipelineSchedule, Work


def _discover() -> dict[str, PipelineSchedule]:
    found: dict[str, PipelineSchedule] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "base" or info.name.startswith("_"):
            continue
        sched = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SCHEDULE", None)
        if isinstance(sched, PipelineSchedule):
            found[sched.name] = sched
    return dict(sorted(found.items()))


SCHEDULES: dict[str, PipelineSchedule] = _discover()
SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)
# the layout search's: the schedules it can evaluate, and those it tries unless told (planning/space.py)
SEARCHED_SCHEDULES: tuple[str, ...] = tuple(n for n, s in SCHEDULES.items() if s.searched)
DEFAULT_SEARCHED_SCHEDULES: tuple[str, ...] = tuple(n for n in SEARCHED_SCHEDULES if SCHEDULES[n].searched_by_default)


def get_schedule(name: str) -> PipelineSchedule:
    try:
        return SCHEDULES[name]
    except KeyError:
        raise LayoutError(f"unknown pipeline schedule {name!r}; valid: {', '.join(SCHEDULES)}") from None


def rank_chunks(schedule: str, pp: int, vp: int, s: int) -> tuple[int, ...]:
    """The model chunks pipeline rank s holds, as indices of the plan's pp·vp chunks: the
    schedule's rank_stages (Megatron's c·pp + s; DualPipe's s and pp − 1 − s); without a pipeline
    the rank's own chunks, whatever schedule the plan names."""
    return get_schedule(schedule).rank_stages(pp, vp, s) if pp > 1 else tuple(range(vp))


__all__ = ["DEFAULT_SEARCHED_SCHEDULES", "SCHEDULES", "SCHEDULE_NAMES", "SEARCHED_SCHEDULES", "Num",
            "PipelineSchedule", "Work", "get_schedule", "rank_chunks"]
