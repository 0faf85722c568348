"""Read an nccl-tests log (``all_reduce_perf`` ...) into the bus-bandwidth points of one
collective, and turn them into a node's CollectiveCurve mapping (``perfmodel calibrate
--nccl-log LOG.txt --node ID``; calibration/trace_import.py writes it into the spec)."""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from typing import Any

_NCCL_BINARIES = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "send_recv", "send_recv": "send_recv",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "hypercube": "hypercube",
}
SUPPORTED_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
_PERF_RE = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|reduce|gather|scatter|hypercube)_perf")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\b")
_NTHREAD_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")


def _norm_collective(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    key = key[:-5] if key.endswith("_perf") else key
    return _NCCL_BINARIES.get(key, key)


def parse_nccl_tests(text: str, collective: str | None = None,
                     group_size: int | None = None) -> tuple[str, int, list[tuple[float, float]]]:
    """Parse nccl-tests stdout into (collective, group_size, [(size_bytes, busbw_Bps), ...]).

    The collective comes from `collective`, else from the binary's name in the log (the command
    line, or ``# Collective test starting: all_reduce_perf``). The group size comes from
    `group_size`, else the distinct ``#  Rank N`` lines under ``# Using devices``, else
    nThread x nGpus from the header. The busbw is the out-of-place column (GB/s, decimal);
    sizes measured more than once keep their median, and zero or N/A bandwidths (sizes too
    small for nccl-tests' two decimals) are dropped.
    """
    found = {_norm_collective(m.group(1)) for m in _PERF_RE.finditer(text)}
    if collective is not None:
        coll = _norm_collective(collective)
        if found and coll not in found:
            raise ValueError(f"--collective {collective} contradicts the log, which ran {', '.join(sorted(found))}")
    elif len(found) == 1:
        coll = found.pop()
    elif found:
        raise ValueError(f"the log names several collectives ({', '.join(sorted(found))}); pass collective= (--collective)")
    else:
        raise ValueError("cannot tell the collective from the log (no *_perf command line): not an nccl-tests "
                         "log, or one without its command line; pass collective= (--collective)")
    if coll not in SUPPORTED_COLLECTIVES:
        raise ValueError(f"collective {coll!r} is not modelled; one of {', '.join(SUPPORTED_COLLECTIVES)}")

    ranks: set[int] = set()
    busbw_col: int | None = None
    rows: dict[int, list[float]] = defaultdict(list)
    nthread_ngpus: int | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = _RANK_RE.match(s)
            if m:
                ranks.add(int(m.group(1)))
                continue
            m = _NTHREAD_RE.search(s)
            if m and nthread_ngpus is None:
                nthread_ngpus = int(m.group(1)) * int(m.group(2))
            toks = s.lstrip("#").split()
            if "size" in toks and "busbw" in toks:
                busbw_col = toks.index("busbw")  # first occurrence: out-of-place
            continue
        toks = s.split()
        if len(toks) < 7 or not toks[0].isdigit() or not toks[1].isdigit():
            continue
        col = busbw_col
        if col is None:  # no header: nccl-tests >= 2.10 prints a root column, older ones do not
            col = 7 if len(toks) >= 13 else 6
        if col >= len(toks):
            continue
        try:
            bw = float(toks[col])
        except ValueError:
            continue
        if math.isfinite(bw) and bw > 0:
            rows[int(toks[0])].append(bw * 1e9)
    if not rows:
        raise ValueError("no nccl-tests data rows with a positive busbw found")
    logged = len(ranks) or nthread_ngpus
    if group_size and logged and group_size != logged:
        raise ValueError(f"--group-size {group_size} contradicts the log, which ran on {logged} ranks")
    n = group_size or logged
    if not n or n < 2:
        raise ValueError("cannot tell the number of ranks from the log (need the '# Using devices' lines); pass group_size=")
    pts = [(float(size), statistics.median(v)) for size, v in sorted(rows.items())]
    return coll, int(n), pts


def _size_str(size: float) -> str:
    n = int(size)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def curve_from_nccl(collective: str, group_size: int, points: list[tuple[float, float]], source: str,
                    algorithm: str = "ring") -> dict[str, Any]:
    """A CollectiveCurve mapping (YAML-ready) from parse_nccl_tests' output."""
    return {
        "collective": collective, "algorithm": algorithm, "group_size": int(group_size), "source": source,
        "points": [{"size": _size_str(s), "busbw": f"{bw / 1e9:.6g} GB/s"} for s, bw in points],
    }


__all__ = ["SUPPORTED_COLLECTIVES", "curve_from_nccl", "parse_nccl_tests"]
