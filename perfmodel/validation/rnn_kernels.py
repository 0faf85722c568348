"""Judge the fused-recurrence cost model on published single-layer RNN timings on GPUs.

validation/runs_rnn_gpu.csv holds DeepBench's measured cuDNN LSTM / GRU training kernels (one
layer, input size = hidden: forward, backward w.r.t. inputs, backward w.r.t. weights). Each row
is predicted from the layer's graph (builder._rnn: the input-projection GEMM and the fused
recurrence) with the shared op cost functions; nothing is fitted to the table. The Volta-era
per-step latency the recurrence cost uses comes from one of its rows (LSTM h512 b16 t25, see
compute.recurrence); that row's own small step GEMM adds to it, so it comes out +10 %, and the
other rows judge it. judge_h200 does the same for measure_gpu.py's eight two-layer RNNs on an
H200, two of which set the cuDNN 9 latencies.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from perfmodel.compute.ops import op_cost
from perfmodel.hardware.catalog import load_catalog
from perfmodel.workload.builder import build_graph
from perfmodel.workload.spec import ModelSpec

RNN_RUNS = Path(__file__).resolve().parents[2] / "validation" / "runs_rnn_gpu.csv"
# measure_gpu.py's `rnn` section on a lent H200 (validation/device/README.md): two-layer fp32
# torch.nn.LSTM / GRU, input size = hidden, forward and forward+backward wall clock
H200_RNN = Path(__file__).resolve().parents[2] / "validation" / "device" / "h200-2026-12-04" / "gpu_measurements.json"


@dataclass(frozen=True)
class RnnRow:
    run_id: str
    measured_s: float
    predicted_s: float
    predicted_fwd_s: float
    measured_fwd_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def predict_layer_s(accelerator: str, cell: str, hidden: int, input_size: int, batch: int, steps: int,
                    precision: str) -> tuple[float, float]:
    """(forward, backward) seconds of one fused RNN layer on `accelerator`."""
    spec = ModelSpec(id=f"{cell}-layer", name=f"one {cell} layer", family=cell, source="validation/runs_rnn_gpu.csv",
                     num_layers=1, hidden=hidden, input_size=input_size, output_size=1, seq_len=steps)
    acc = load_catalog().accelerator(accelerator)
    layer = build_graph(spec, micro_batch=batch, precision=precision).layers[0]
    fwd = sum(op_cost(acc, o, "fwd").time_s for o in layer.ops)
    bwd = sum(op_cost(acc, o, "bwd").time_s for o in layer.ops)
    return fwd, bwd


def judge(path: Path = RNN_RUNS) -> list[RnnRow]:
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            f, b = predict_layer_s(r["accelerator"], r["cell"], int(r["hidden"]), int(r["input_size"]),
                                   int(r["batch"]), int(r["steps"]), r["precision"])
            out.append(RnnRow(r["run_id"], float(r["step_time_s"]), f + b, f, float(r["fwd_s"])))
    return out


def judge_h200(path: Path = H200_RNN) -> list[RnnRow]:
    """The H200's cuDNN RNN measurements against the model: forward+backward of both layers (the
    second layer's input is the first's hidden, as in the first: input size = hidden)."""
    out = []
    for r in json.loads(path.read_text())["rnn"]:
        f, b = predict_layer_s("h200-sxm-141gb", r["cell"].lower(), r["hidden"], r["hidden"], r["batch"], r["steps"],
                               r["dtype"])
        layers = r["layers"]
        run_id = f"h200-{r['dtype']}-{r['cell'].lower()}-h{r['hidden']}-b{r['batch']}-t{r['steps']}"
        out.append(RnnRow(run_id, r["fwd_bwd_seconds"], layers * (f + b), layers * f, r["fwd_seconds"]))
    return out
