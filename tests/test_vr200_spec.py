"""The Vera Rubin GPU (vr200) and its NVL72 tray: the names Megatron-Bridge and NVIDIA use resolve to
it, its peaks are the dense per-package figures, and a run on it is faster than on GB300."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.errors import SpecError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.system import resolve_system

P = 1e15


def test_vr200_dense_peaks_per_package() -> None:
    acc = load_catalog().accelerator("vr200")
    assert acc.generation == "rubin" and acc.kind == "gpu" and acc.vendor == "nvidia"
    assert acc.matrix_peak_flop_per_s("bf16") == 4 * P
    assert acc.matrix_peak_flop_per_s("fp8") == acc.matrix_peak_flop_per_s("mxfp8") == 17.5 * P
    # NVFP4 "training" (35 PF, 2.5 EF / 72), not the 50 PF "inference" figure
    assert acc.matrix_peak_flop_per_s("nvfp4") == 35 * P
    assert acc.matrix_peak_flop_per_s("fp32") == 2 * P  # tf32
    assert acc.hbm_bytes == 288e9 and acc.hbm_Bps == 22e12
    assert acc.num_compute_units == 224
    assert acc.fp8_any_layout
    assert set(acc.supported_precisions) == {"fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4"}
    assert not acc.calibration.gemm_max_achievable  # nothing measured: the derating rule's peers
    assert not acc.has_tdp
    with pytest.raises(SpecError, match="tdp"):
        _ = acc.tdp_w


@pytest.mark.parametrize("written", ["VR200", "vr200", "Vera Rubin", "Rubin", "NVIDIA Rubin GPU", "VR200 NVL144",
                                     "Vera Rubin NVL72", "VRNVL72"])
def test_rubin_names_resolve(written: str) -> None:
    system, msgs = resolve_system(written, None, 8)
    assert system.accelerator.id == "vr200" and system.node.id == "vr200-nvl72"
    if written != "vr200":
        assert "read as vr200" in msgs[0]


def test_vr200_nvl72_tray_counts_packages() -> None:
    node = load_catalog().node("vr200-nvl72")
    assert node.accelerator == "vr200" and node.accelerators_per_node == 4 and node.domain_size == 72
    system, msgs = resolve_system("vr200", "vr200-nvl72", 144)
    assert msgs == [] and system.num_nodes == 36
    assert system.intra_Bps == 1.8e12  # NVLink 6: 3.6 TB/s bidirectional per GPU
    assert system.levels[1].bandwidth_Bps == 200e9  # two 800 Gb/s ConnectX-9 per GPU: 1.6 Tb/s


def test_a_run_on_vr200_beats_gb300() -> None:
    plan = perfmodel.ParallelPlan(dp=8, global_batch=64, precision="mxfp8")
    times = {}
    for acc in ("vr200", "gb300"):
        system, _ = resolve_system(acc, None, plan.world)
        times[acc] = perfmodel.estimate("llama3-70b", system, plan).step_time_s
    assert times["vr200"] < times["gb300"]
