"""Judge the fused-recurrence cost model on published single-layer RNN timings on GPUs.

validation/runs_rnn_gpu.csv holds DeepBench's measured cuDNN LSTM / GRU training kernels (one
layer, input size = hidden: forward, backward w.r.t. inputs, backward w.r.t. weights). Each row
is predicted from the layer's graph (builder._rnn: the input-projection GEMM and the fused
recurrence) with the shared op cost functions; nothing is fitted to the table. The per-step
floor the recurrence cost uses comes from one of its rows (LSTM h512 b16 t25, see
compute.ops), which is therefore predicted exactly by construction; the other rows judge it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from perfmodel.compute.ops import op_cost
from perfmodel.hardware.catalog import load_catalog
from perfmodel.workload.builder import build_graph
from perfmodel.workload.spec import ModelSpec

RNN_RUNS = Path(__file__).resolve().parents[2] / "validation" / "runs_rnn_gpu.csv"


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
