"""perfmodel: predict deep-learning training step time, memory, throughput and cost."""

from typing import TYPE_CHECKING, Any

from perfmodel.api import estimate, estimate_graph, resolve
from perfmodel.errors import LayoutError, PerfmodelError, SpecError, UnknownIdError
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import add_specs_dir, load_catalog
from perfmodel.hardware.system import resolve_system
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import add_workloads_dir, get_workload, load_workloads

if TYPE_CHECKING:  # the planner's entry points, imported on first use (see __getattr__)
    from perfmodel.planning.compare import compare as compare
    from perfmodel.planning.search import search as search
    from perfmodel.planning.train import time_to_train as time_to_train

__all__ = [
    "Estimate",
    "LayoutError",
    "ParallelPlan",
    "PerfmodelError",
    "SpecError",
    "UnknownIdError",
    "add_specs_dir",
    "add_workloads_dir",
    "build_graph",
    "compare",
    "estimate",
    "estimate_graph",
    "get_workload",
    "load_catalog",
    "load_workloads",
    "resolve",
    "resolve_system",
    "search",
    "time_to_train",
]
__version__ = "0.1.0"

_PLANNING = ("compare", "search", "time_to_train")


def __getattr__(name: str) -> Any:
    """The planner's entry points, imported on first use: `import perfmodel` for one estimate (the
    explorer's first page) does not pay for the planner's modules."""
    if name in _PLANNING:
        import perfmodel.planning as planning

        return getattr(planning, name)
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
