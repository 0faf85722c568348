"""perfmodel: predict deep-learning training step time, memory, throughput and cost."""

from perfmodel.api import estimate, estimate_graph, resolve
from perfmodel.errors import LayoutError, PerfmodelError, SpecError, UnknownIdError
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import add_specs_dir, load_catalog, resolve_system
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning import compare, search, time_to_train
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import add_workloads_dir, get_workload, load_workloads

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
