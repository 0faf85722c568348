"""A sweep of >= 1e7 layouts on the local (processes) and the Ray backend, and their agreement.

    python benchmarks/bench_sweep.py [SWEEP.yaml] [--workers N] [--ray-address ADDR]

Runs benchmarks/sweep_1e7.yaml (120 points, 11.1 M layouts) once per backend into a temporary
directory, prints layouts, wall time, layouts/s and whether the two Parquet files hold identical
rows. Ray starts a local cluster with N CPUs (default every core) unless --ray-address is given.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from perfmodel.planning.sweep import load_sweep, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", nargs="?", default=str(Path(__file__).with_name("sweep_1e7.yaml")))
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--backends", nargs="+", default=["local", "ray"])
    a = ap.parse_args()
    sweep = load_sweep(a.sweep)
    tables = {}
    with tempfile.TemporaryDirectory() as d:
        for backend in a.backends:
            out = Path(d) / f"{backend}.parquet"
            t0 = time.perf_counter()
            line = run_sweep(sweep, out, backend=backend, workers=a.workers, ray_address=a.ray_address, progress=False)
            print(f"{backend:5s} {time.perf_counter() - t0:7.1f} s wall (incl. start-up)  {line}")
            tables[backend] = pd.read_parquet(out)
    if len(tables) == 2:
        same = tables["local"].equals(tables["ray"])
        print(f"identical rows on both backends: {same} ({len(tables['local'])} rows)")


if __name__ == "__main__":
    main()
