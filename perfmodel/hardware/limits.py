"""What every number in a hardware spec may be: its dimension and its allowed range.

The spec models (specs.py) keep each number as written (`Sourced.value`, `GemmPoint.achieved`)
and parse it where it is used; this table lets the loader parse every one of them once, at load,
so that a zero rate, a negative latency, an efficiency of 0 or 1.5, or a power written `80 GB`
is refused with the file and the field instead of surfacing later as a ZeroDivisionError or a
silent wrong number. Rules are keyed by the field's own name (the last part of its path, dict
keys and list positions skipped); tests/test_bad_inputs.py holds that every number-valued field
of the spec models has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from perfmodel.errors import SpecError, quote
from perfmodel.hardware.specs import Sourced
from perfmodel.units import Dimension, ambiguity, parse_quantity


@dataclass(frozen=True)
class Rule:
    dim: Dimension
    low: float = 0.0
    high: float = math.inf
    low_inclusive: bool = False

    def allowed(self) -> str:
        lo = f"{'>=' if self.low_inclusive else '>'} {self.low:g}"
        return f"{lo}" if self.high == math.inf else f"in ({self.low:g}, {self.high:g}]"


_RATE = Rule("flop_per_s")
_BW = Rule("bytes_per_s")
_SIZE = Rule("bytes")
_TIME = Rule("seconds")
_FRACTION = Rule("dimensionless", 0.0, 1.0)

RULES: dict[str, Rule] = {
    # FLOP/s: datasheet peaks and measured kernel rates
    "matrix_peak": _RATE, "vector_peak": _RATE, "gemm_max_achievable": _RATE, "achieved": _RATE,
    # bytes/s
    "hbm_bandwidth": _BW, "hbm_achieved": _BW, "elementwise_achieved": _BW, "bandwidth": _BW,
    "link_bandwidth": _BW, "nic_bandwidth": _BW, "busbw": _BW, "pcie": _BW, "h2d": _BW, "d2h": _BW,
    # bytes
    "hbm_capacity": _SIZE, "l2_cache": _SIZE, "host_memory": _SIZE, "size": _SIZE,
    # seconds
    "latency": _TIME, "per_hop_latency": _TIME, "kernel_launch": _TIME, "host_op_overhead": _TIME,
    "optimizer_step_per_param": _TIME, "gemm_fixed": _TIME,
    # the rest
    "clock": Rule("hertz"), "compute_units": Rule("dimensionless", 1.0, low_inclusive=True),
    "leaf_nodes": Rule("dimensionless", 1.0, low_inclusive=True),
    "tdp": Rule("watts"), "power": Rule("watts"),
    "in_model_efficiency": _FRACTION, "attention_in_step": _FRACTION, "collective_efficiency": _FRACTION, "best_published_mfu": _FRACTION,
    "attention_fallback_ratio": _FRACTION,
    "purchase": Rule("usd"), "hourly": Rule("usd_per_hour"),
}


def check_quantities(obj: BaseModel) -> list[str]:
    """Parse every number of a loaded spec against RULES; raise SpecError (field, value, allowed
    range) on the first bad one. Returns the ambiguity notes ("80 Gb is read as bits") as
    'field: note' strings for the loader to warn about."""
    notes: list[str] = []
    _walk(obj, "", "", notes)
    return notes


def _walk(value: Any, path: str, name: str, notes: list[str]) -> None:
    if isinstance(value, Sourced):
        _check(value.value, path, name, notes)
    elif isinstance(value, BaseModel):
        for field in type(value).model_fields:
            _walk(getattr(value, field), f"{path}.{field}" if path else field, field, notes)
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}.{k}", name, notes)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{path}.{i}", name, notes)
    elif isinstance(value, str) and name in RULES:
        _check(value, path, name, notes)


def _check(raw: object, path: str, name: str, notes: list[str]) -> None:
    rule = RULES.get(name)
    if rule is None:
        return
    v = parse_quantity(raw, rule.dim, path)
    ok_low = v >= rule.low if rule.low_inclusive else v > rule.low
    if not (ok_low and v <= rule.high):
        raise SpecError(path, f"{quote(raw)} is outside the allowed range", f"a value {rule.allowed()}")
    note = ambiguity(raw, rule.dim)
    if note:
        notes.append(f"{path}: {note}")
