"""`perfmodel calibrate`: microbenchmark this host, or import a torch.profiler trace / nccl-tests log
as calibration of a spec. Output goes where the user says (--out) or to the user's data directory;
the repository's committed specs are never rewritten by default."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.reading import read_yaml


class CalibrateError(PerfmodelError):
    """A `perfmodel calibrate` invocation that cannot run; the message says which option."""


def calibrate_main(a: argparse.Namespace) -> int:
    from perfmodel.calibration.microbench import _stderr_progress, default_out_dir, run_calibration, summary_line

    if getattr(a, "dataset", None):
        from perfmodel.planning.input_pipeline import measure_dataset

        print(json.dumps(measure_dataset(a.dataset, a.dataset_samples).to_dict(), indent=2))
        return 0
    if not (a.trace or a.nccl_log):
        r = run_calibration(Path(a.out) if a.out else None, quick=not a.full, progress=_stderr_progress(time.monotonic()))
        if a.json:
            print(json.dumps(r, indent=2, default=str))
        else:
            print(summary_line(r))
            print("wrote", r["paths"]["accelerator"], r["paths"]["node"])
        return 0
    out = Path(a.out) if a.out else default_out_dir()
    summary: dict[str, Any] = {}
    if a.trace:
        summary.update(import_trace(a.trace, a.accelerator, out))
    if a.nccl_log:
        summary.update(import_nccl(a.nccl_log, a.node, out, a.collective, a.group_size, a.algorithm))
    print(json.dumps(summary, indent=2, default=str))
    return 0


def _dest(out: Path, kind: str, spec_id: str) -> Path:
    """`out` is a file path (.yaml) or a specs directory (then out/kind/ID.yaml)."""
    return out if out.suffix in (".yaml", ".yml") else out / kind / f"{spec_id}.yaml"


def import_trace(trace: str, accelerator: str | None, out: Path) -> dict[str, Any]:
    """Achieved GEMM / attention rates of a torch.profiler trace into a copy of spec `accelerator`."""
    from perfmodel.calibration.trace_import import apply_to_spec, read_torch_trace
    from perfmodel.hardware.catalog import specs_dir

    if not accelerator:
        raise CalibrateError("--trace needs --accelerator ID (the spec to calibrate)")
    acc_path = specs_dir() / "accelerators" / f"{accelerator}.yaml"
    if not acc_path.exists():
        raise CalibrateError(f"--accelerator {accelerator!r}: no spec {acc_path}")
    gemm, attention = read_torch_trace(trace)
    if not gemm and not attention:
        raise CalibrateError(f"{trace}: no GEMM or attention ops with shapes (record with record_shapes=True)")
    written = apply_to_spec(acc_path, gemm=gemm, attention=attention, out=_dest(out, "accelerators", accelerator),
                            source_note=f"torch.profiler trace {Path(trace).name}")
    keys = ("kernel", "direction", "causal", "head_dim", "seq_len", "precision", "calls", "achieved")
    return {"accelerator": written["accelerator"],
            "gemm": [{k: g[k] for k in ("precision", "m", "n", "k", "batch", "calls", "achieved")} for g in gemm],
            "attention": [{k: x[k] for k in keys} for x in attention]}


def import_nccl(log: str, node: str | None, out: Path, collective: str | None, group_size: int | None,
                algorithm: str) -> dict[str, Any]:
    """An nccl-tests bus-bandwidth curve into a copy of node spec `node`."""
    from perfmodel.calibration.nccl_tests import curve_from_nccl, parse_nccl_tests
    from perfmodel.calibration.trace_import import apply_to_spec
    from perfmodel.hardware.catalog import specs_dir

    if not node:
        raise CalibrateError("--nccl-log needs --node ID (the spec to calibrate)")
    node_path = specs_dir() / "nodes" / f"{node}.yaml"
    if not node_path.exists():
        raise CalibrateError(f"--node {node!r}: no spec {node_path}")
    coll, n, pts = parse_nccl_tests(Path(log).read_text(), collective=collective, group_size=group_size)
    per_node = int(read_yaml(node_path).get("accelerators_per_node") or 0)
    if per_node and n > per_node:
        raise CalibrateError(f"the log ran on {n} ranks but a {node} node has {per_node} GPUs: a node spec holds its "
                             "scale-up curves; give a log of at most one node's GPUs")
    curve = curve_from_nccl(coll, n, pts, source="", algorithm=algorithm)
    written = apply_to_spec(curve=curve, node_yaml_path=node_path, node_out=_dest(out, "nodes", node),
                            source_note=f"nccl-tests log {Path(log).name} ({coll}, {n} ranks)")
    return {"node": written["node"], "curve": {k: curve[k] for k in ("collective", "algorithm", "group_size", "points")}}
