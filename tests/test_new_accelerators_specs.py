"""TPU7x (Ironwood): the names runs and JAX use resolve to tpu-v7, its peaks and memory are the
per-chip figures of Google's TPU7x page, its host is a 4-chip tpu7x-standard-4t VM in a 9216-chip
3D-torus pod, and it runs the fp8 it has a matrix rate for."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.errors import PrecisionError, SpecError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.system import resolve_system

T = 1e12


def test_tpu_v7_per_chip_figures() -> None:
    acc = load_catalog().accelerator("tpu-v7")
    assert (acc.vendor, acc.kind, acc.generation) == ("google", "tpu", "tpu-v7")
    assert acc.matrix_peak_flop_per_s("bf16") == 2307 * T
    assert acc.matrix_peak_flop_per_s("fp8") == 4614 * T
    assert acc.hbm_bytes == 192 * 2**30 and acc.hbm_Bps == 7380e9
    assert acc.num_compute_units == 2  # TensorCores, one per chiplet
    assert acc.supported_precisions == ("bf16", "fp8")
    with pytest.raises(PrecisionError, match="tpu-v7"):
        acc.check_precision("fp16")
    # tpu-recipes' Ironwood GEMM table, per TensorCore (JAX device): 956.38 TFLOP/s at 32768^3, two per chip
    assert acc.calibration.gemm_max_achievable["bf16"].si("flop_per_s") == pytest.approx(1912.8 * T)  # 2 x 956.38, rounded
    assert not acc.has_tdp  # Google publishes no TPU7x chip power
    with pytest.raises(SpecError, match="tdp"):
        _ = acc.tdp_w


@pytest.mark.parametrize("written", ["TPU v7", "TPUv7", "Ironwood", "TPU7x", "v7", "Google TPU v7"])
def test_ironwood_names_resolve(written: str) -> None:
    system, msgs = resolve_system(written, None, 8)
    assert system.accelerator.id == "tpu-v7" and system.node.id == "tpu-v7-slice"
    assert "read as tpu-v7" in msgs[0]


def test_tpu_v7_slice_is_one_ici_domain_of_4_chip_hosts() -> None:
    system, msgs = resolve_system("tpu-v7", None, 256)
    assert msgs == []
    assert system.domain_size == 9216 and system.gpus_per_node == 4
    assert system.intra_Bps == 600e9  # 1200 GB/s bidirectional ICI per chip
    assert system.levels[0].kind == "torus" and system.levels[0].span_gpus == 9216
    assert system.levels[1].bandwidth_Bps == 12.5e9  # 100 Gb/s DCN per chip


def test_a_run_on_tpu_v7_beats_v6e_and_fp8_beats_bf16() -> None:
    times = {}
    for acc, precision in (("tpu-v6e", "bf16"), ("tpu-v7", "bf16"), ("tpu-v7", "fp8")):
        plan = perfmodel.ParallelPlan(dp=8, global_batch=64, precision=precision)
        system, _ = resolve_system(acc, None, plan.world)
        times[acc, precision] = perfmodel.estimate("llama3-8b", system, plan).step_time_s
    assert times["tpu-v7", "bf16"] < times["tpu-v6e", "bf16"]
    assert times["tpu-v7", "fp8"] < times["tpu-v7", "bf16"]
