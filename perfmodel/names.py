"""How a name a person wrote is compared with the ids perfmodel knows (accelerators, precisions,
training stacks, workloads, the enumerated runs-file columns): case, surrounding spaces, and
whether words are joined by spaces, '_' or '-' do not matter."""

from __future__ import annotations

import re


def spelling(name: str) -> str:
    """`name` in lower case with every run of spaces or '_' made one '-': 'FULL_SHARD' ->
    'full-shard', 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


_NOTE = re.compile(r"\([^)]*\)|\[[^]]*\]")


def spelling_without_notes(name: str) -> str:
    """spelling() of `name` with its bracketed notes dropped: 'MaxText (JAX)' -> 'maxtext',
    'selective (attention)' -> 'selective'."""
    return spelling(_NOTE.sub(" ", name)).strip("-")


__all__ = ["spelling", "spelling_without_notes"]
