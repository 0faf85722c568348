"""Shared fixtures: the real catalogue, resolved systems."""

from __future__ import annotations

import pytest

from perfmodel.hardware.system import resolve_system


@pytest.fixture(scope="session")
def a100_system():
    def make(n_gpus: int = 8, gpus_per_node: int | None = None):
        return resolve_system("a100-sxm4-80gb", None, n_gpus, gpus_per_node)[0]

    return make
