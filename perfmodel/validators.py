"""Validators the spec models share."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from perfmodel.errors import SpecError


def _takes_int(annotation: Any) -> bool:
    """The field is an int, or an int or None (a bool field is its own type and stays)."""
    if annotation is int:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return int in typing.get_args(annotation) and bool not in typing.get_args(annotation)
    return False


def reject_bool_ints(cls: type[BaseModel], data: Any) -> Any:
    """pydantic's lax mode reads true / false as 1 / 0 for an int field, so `num_layers: true` in a
    workload YAML built a one-layer model and ParallelPlan(dp=True) a dp of 1: a boolean where an
    integer belongs is refused, naming the field (use as a `model_validator(mode="before")`)."""
    if isinstance(data, dict):
        for name, f in cls.model_fields.items():
            v = data.get(name, data.get(f.alias) if f.alias else None)
            if isinstance(v, bool) and _takes_int(f.annotation):
                raise SpecError(name, f"{str(v).lower()} is a boolean", "an integer")
    return data


__all__ = ["reject_bool_ints"]
