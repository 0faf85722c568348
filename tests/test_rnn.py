"""Fused recurrences (LSTM / GRU as cuDNN and ATen run them): bounds on a GPU, the CPU path, and the
published single-layer DeepBench timings they are judged on (validation/runs_rnn_gpu.csv)."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.api import estimate, estimate_graph
from perfmodel.compute.ops import op_cost
from perfmodel.compute.recurrence import (
    RNN_STEP_BWD_CUDNN9_S,
    RNN_STEP_BWD_SMALL_H_S,
    RNN_STEP_FWD_CUDNN9_S,
    RNN_STEP_FWD_S,
    RNN_STEP_FWD_SMALL_H_S,
    rnn_step_latency_s,
)
from perfmodel.hardware.catalog import load_catalog
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.validation.rnn_kernels import judge, judge_h200, predict_layer_s
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.graph import Graph, Op

WL = load_workloads()


def _unfused(graph: Graph) -> Graph:
    """The per-step path: every step's recurrent GEMM and gate kernel issued by the host."""
    layers = []
    for layer in graph.layers:
        ops: list[Op] = []
        for o in layer.ops:
            if o.kind != "recurrence":
                ops.append(o)
                continue
            s = o.repeat
            gemm = dataclasses.replace(o, kind="gemm", bytes=o.k * o.n * 2 * s, kernels=s, bwd_kernels=2 * s)
            gates = Op(f"{o.name}_gates", "elementwise", flop=0.0, bytes=o.bytes - o.k * o.n * 2, kernels=s,
                       bwd_kernels=s, bwd_flop_factor=1.0)
            ops += [gemm, gates]
        layers.append(dataclasses.replace(layer, ops=tuple(ops)))
    return dataclasses.replace(graph, layers=tuple(layers))


@pytest.mark.parametrize("wid, b, s", [("cpu-lstm", 32, 128), ("lstm-deepar", 64, 360), ("cpu-lstm", 256, 64)])
def test_gpu_rnn_between_latency_floor_and_unfused_path(wid: str, b: int, s: int) -> None:
    spec = WL[wid]
    plan = ParallelPlan(micro_batch=b, global_batch=b, seq_len=s)
    fused = estimate(spec, "h100-sxm5-80gb", plan).step_time_s
    acc = load_catalog().accelerator("h100-sxm5-80gb")
    floor = spec.num_layers * s * (rnn_step_latency_s(acc, spec.hidden, False) + rnn_step_latency_s(acc, spec.hidden, True))
    unfused = estimate_graph(_unfused(build_graph(spec, micro_batch=b, seq_len=s)), "h100-sxm5-80gb", plan).step_time_s
    assert floor < fused < unfused


def test_recurrence_is_one_host_call_and_s_dependent_steps() -> None:
    acc = load_catalog().accelerator("h100-sxm5-80gb")
    g = build_graph(WL["cpu-lstm"], micro_batch=32, seq_len=128)
    rec = next(o for o in g.layers[0].ops if o.kind == "recurrence")
    assert (rec.kernels, rec.bwd_kernels, rec.repeat) == (1, 2, 128)
    # a tiny [32, 256] x [256, 1024] step adds little to the per-step latency it follows (hidden 256:
    # the standard algorithm, at cuDNN 9's measured latency on a Hopper part)
    fwd = op_cost(acc, rec, "fwd").time_s
    assert 128 * RNN_STEP_FWD_CUDNN9_S < fwd < 1.2 * 128 * RNN_STEP_FWD_CUDNN9_S
    assert op_cost(acc, rec, "bwd").time_s > 128 * RNN_STEP_BWD_CUDNN9_S  # plus the weight-gradient GEMM
    # linear in the number of steps
    g2 = build_graph(WL["cpu-lstm"], micro_batch=32, seq_len=256)
    rec2 = next(o for o in g2.layers[0].ops if o.kind == "recurrence")
    assert op_cost(acc, rec2, "fwd").time_s == pytest.approx(2 * op_cost(acc, rec, "fwd").time_s)


def test_gru_has_three_gates() -> None:
    spec = WL["cpu-lstm"].with_(family="gru")
    g = build_graph(spec, micro_batch=4, seq_len=16)
    H, x = 256, 32
    assert g.layers[0].params_full == 3 * H * (x + H) + 6 * H  # torch.nn.GRU: W_ih, W_hh, b_ih, b_hh
    rec = next(o for o in g.layers[0].ops if o.kind == "recurrence")
    assert rec.flop == 2 * 4 * 3 * H * H * 16


def test_deepbench_rows_judged_not_fitted() -> None:
    rows = judge()
    assert len(rows) == 41
    errs = sorted(abs(r.error) for r in rows)
    # what the model reaches today (median 12.6 %, mean 16.8 %, worst +82 % on LSTM h4096 b128;
    # 20 %, 24 %, +111 % while latency and step GEMM took a max and the backward ran two GEMMs a
    # step); a change that makes these worse fails here
    assert errs[len(errs) // 2] < 0.13 and sum(errs) / len(errs) < 0.17 and errs[-1] < 0.85
    # the latency's own row (LSTM h512 b16 t25): its per-step time is the latency, to which the
    # model adds that row's own small step GEMM and input projection (3.6 us a step): +10 %
    anchor = next(r for r in rows if r.run_id == "deepbench-v100-fp16-lstm-h512-b16-t25")
    assert 0.0 < anchor.error < 0.12


def test_longer_sequences_cost_proportionally_more() -> None:
    f1, b1 = predict_layer_s("v100-sxm2-32gb", "gru", 1024, 1024, 32, 750, "fp16")
    f2, b2 = predict_layer_s("v100-sxm2-32gb", "gru", 1024, 1024, 32, 1500, "fp16")
    assert (f2 + b2) / (f1 + b1) == pytest.approx(2.0, rel=0.02)




def test_imported_gru_transformer_forecaster_is_not_host_bound_on_gpu() -> None:
    # the issue-14 example: before the fused recurrence, 512 steps x 2 GRU layers issued one kernel
    # per step and gate, 2.57 s per step on an H100 with 97 % host overhead (b 64, s 512)
    import sys
    from pathlib import Path

    import torch

    from perfmodel.workload.torch_import import from_torch

    sys.path.insert(0, str(Path(__file__).parent))
    import torch_import_models as M

    b, s = 64, 512
    g = from_torch(lambda: M.GRUTransformerForecaster(), torch.zeros(b, s, 32))
    recs = [o for layer in g.layers for o in layer.ops if o.kind == "recurrence"]
    assert [(o.m, o.n, o.k, o.repeat, o.kernels) for o in recs] == [(b, 768, 256, s, 1)] * 2
    est = estimate_graph(g, "h100-sxm5-80gb", ParallelPlan(micro_batch=b, global_batch=b))
    floor = 2 * s * (RNN_STEP_FWD_CUDNN9_S + RNN_STEP_BWD_CUDNN9_S)  # hidden 256: the standard algorithm
    assert floor < est.step_time_s < 2 * floor  # 49 ms against a 36 ms floor
    assert est.breakdown_s["host_overhead_s"] < 0.1 * est.step_time_s  # 3 %


def test_cpu_backward_is_two_step_gemms_without_a_merged_weight_gradient() -> None:
    # oneDNN's RNN backward (ATen's mkldnn_rnn_layer_backward) accumulates each step's weight
    # gradient in the loop: backward = s x (2 t_step + t0), with no [k, s·m] x [s·m, n] GEMM after it
    # (a 2 x 256 LSTM at b 32: measured 49.4 ms backward on a Zen 4 core; the merged form said 61.4)
    from perfmodel.compute.ops import gemm_cost, gemm_fixed_s

    cpu = load_catalog().accelerator("host-cpu-zen4")
    gpu = load_catalog().accelerator("h100-sxm5-80gb")
    g = build_graph(WL["cpu-lstm"], micro_batch=32, seq_len=64)
    rec = next(o for o in g.layers[1].ops if o.kind == "recurrence")
    fwd, bwd = op_cost(cpu, rec, "fwd").time_s, op_cost(cpu, rec, "bwd").time_s
    t0 = gemm_fixed_s(cpu)
    t_step = fwd / 64 - t0
    assert bwd == pytest.approx(64 * (2 * t_step + t0), rel=1e-9)
    # the GPU keeps cuDNN's form: one data-gradient GEMM a step after its latency, then one
    # weight-gradient GEMM for all steps
    g_step = op_cost(gpu, rec, "fwd").time_s / 64 - RNN_STEP_FWD_CUDNN9_S
    merged = gemm_cost(gpu, rec.k, rec.n, 64 * rec.m, rec.precision).time_s
    assert op_cost(gpu, rec, "bwd").time_s == pytest.approx(64 * (RNN_STEP_BWD_CUDNN9_S + g_step) + merged, rel=1e-9)


def test_pytorch_picks_the_small_hidden_persistent_kernel_by_size_and_direction():
    # aten/src/ATen/native/cudnn/RNN.cpp use_rnn_persist_small_h: LSTM / GRU hidden <= 192 forward,
    # <= 128 backward; else the standard algorithm (cuDNN 7 figures on Volta, cuDNN 9 later)
    h200 = load_catalog().accelerator("h200-sxm-141gb")
    v100 = load_catalog().accelerator("v100-sxm2-32gb")
    assert rnn_step_latency_s(h200, 128, False) == RNN_STEP_FWD_SMALL_H_S
    assert rnn_step_latency_s(h200, 128, True) == RNN_STEP_BWD_SMALL_H_S
    assert rnn_step_latency_s(h200, 192, False) == RNN_STEP_FWD_SMALL_H_S
    assert rnn_step_latency_s(h200, 192, True) == RNN_STEP_BWD_CUDNN9_S
    assert rnn_step_latency_s(h200, 512, False) == RNN_STEP_FWD_CUDNN9_S
    assert rnn_step_latency_s(v100, 512, False) == RNN_STEP_FWD_S
    assert rnn_step_latency_s(v100, 40, True) == RNN_STEP_BWD_SMALL_H_S


def test_h200_cudnn_rnn_measurements_judged():
    """validation/device/h200-2026-12-04 `rnn`: eight two-layer fp32 nn.LSTM / nn.GRU, forward and
    forward+backward. Two rows set the latencies (LSTM h40: small-hidden; the fastest standard steps);
    the model reaches MAPE 15 % on forward+backward, worst -37 % (LSTM h128, whose small-hidden step
    costs 2.8 us against the 1.0 us of h40). Before the small-hidden kernel was modelled, every
    hidden-40 / -128 row came out 6-20x too slow (a 17.6 us step for a 1-3 us kernel)."""
    rows = judge_h200()
    assert len(rows) == 8
    errs = [abs(r.error) for r in rows]
    assert sum(errs) / len(errs) < 0.16 and max(errs) < 0.40
