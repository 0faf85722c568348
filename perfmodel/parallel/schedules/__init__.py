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


def get_schedule(name: str) -> PipelineSchedule:
    try:
        return SCHEDULES[name]
    except KeyError:
        raise LayoutError(f"unknown pipeline schedule {name!r}; valid: {', '.join(SCHEDULES)}") from None


__all__ = ["SCHEDULES", "SCHEDULE_NAMES", "Num", "PipelineSchedule", "Work", "get_schedule"]
