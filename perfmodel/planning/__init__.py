"""Planning: layout search, time-to-train, cost, energy, goodput, hardware comparison, scaling."""

from perfmodel.planning.compare import compare, sensitivity, write_report
from perfmodel.planning.goodput import Goodput, goodput, system_mtbf_s, young_daly_interval_s
from perfmodel.planning.scaling import scaling_curve
from perfmodel.planning.search import SearchResult, search
from perfmodel.planning.space import DEFAULT_SCHEDULES, SEARCHED_SCHEDULES, SearchSpace
from perfmodel.planning.train import NoPriceError, TrainingRun, time_to_train

__all__ = [
           "DEFAULT_SCHEDULES",
           "SEARCHED_SCHEDULES",
           "Goodput",
           "NoPriceError",
           "SearchResult",
           "SearchSpace",
           "TrainingRun",
           "compare",
           "goodput",
           "scaling_curve",
           "search",
           "sensitivity",
           "system_mtbf_s",
           "time_to_train",
           "write_report",
           "young_daly_interval_s",
]
