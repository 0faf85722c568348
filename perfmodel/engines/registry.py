"""The one place an engine is chosen by name: the library (api.py), the CLI, validation and the
planner all dispatch here, so an unknown name is the same error everywhere.

An engine is a function (spec | None, system, plan, messages, graph=...) -> Estimate; each is
imported on first use (the DES needs simpy)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from perfmodel.errors import PerfmodelError
from perfmodel.estimate import Estimate
from perfmodel.hardware.system import System
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.graph import Graph
from perfmodel.workload.spec import ModelSpec

# name -> (module, function, what it is)
ENGINES: dict[str, tuple[str, str, str]] = {
    "analytic": ("perfmodel.engines.analytic", "analytic_estimate", "closed forms, microseconds per estimate"),
    "des": ("perfmodel.engines.des", "des_estimate", "simpy discrete-event simulation with a timeline"),
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
DEFAULT_ENGINE = "analytic"


class UnknownEngineError(PerfmodelError, ValueError):
    """An engine name that is not in ENGINES."""


def get_engine(name: str) -> Callable[..., Estimate]:
    try:
        module, func, _ = ENGINES[name]
    except (KeyError, TypeError):
        raise UnknownEngineError(f"unknown engine {name!r}; valid engines: {', '.join(ENGINE_NAMES)}") from None
    fn: Callable[..., Estimate] = getattr(importlib.import_module(module), func)
    return fn


def run_engine(name: str, spec: ModelSpec | None, system: System, plan: ParallelPlan, messages: list[str] | None = None,
               *, graph: Graph | None = None, **options: Any) -> Estimate:
    """Estimate with engine `name`; `options` go to the engine (e.g. the DES's jitter_sigma)."""
    return get_engine(name)(spec, system, plan, messages, graph=graph, **options)


__all__ = ["DEFAULT_ENGINE", "ENGINES", "ENGINE_NAMES", "UnknownEngineError", "get_engine", "run_engine"]
