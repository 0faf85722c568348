"""The network as a list of dimensions: levels derived from the specs, hierarchical collectives
computed by hand, fixed-cluster capacity and repeated building blocks (NVL72 racks)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.comm.collectives import collective_time_s, intra_time_s, placement
from perfmodel.errors import LayoutError
from perfmodel.hardware.network import NetworkLevel
from perfmodel.hardware.system import System, resolve_hardware, resolve_system


def _with_levels(system: System, *levels: NetworkLevel) -> System:
    return dataclasses.replace(system, levels=levels)


# --- levels derived from today's node / fabric / cluster YAML --------------------------------
def test_reference_node_is_scale_up_plus_scale_out(a100_system) -> None:
    """DGX A100: 8 GPUs on NVSwitch (300 GB/s one-way, 0.78 achieved, 8.4 us) under 8 HDR NICs
    (8 x 25 GB/s / 8 GPUs = 25 GB/s per GPU, 0.96 achieved), 3 hops of 0.6 us."""
    s = a100_system(64)
    up, out = s.levels
    assert (up.kind, up.span_gpus, up.bandwidth_Bps, up.efficiency, up.latency_s) == ("scale-up", 8, 300e9, 0.78, 8.4e-6)
    assert up.curves and up.curves[0].group_size == 8
    assert (out.kind, out.name, out.span_gpus, out.bandwidth_Bps) == ("scale-out", "ib-hdr", None, 25e9)
    assert out.efficiency == 0.96 and out.latency_s == pytest.approx(3 * 0.6e-6)
    assert not out.in_network_reduction and out.oversubscription == 1.0


def test_rack_and_torus_levels() -> None:
    rack, _ = resolve_system("gb200", "nvl72", 72)
    assert rack.levels[0].kind == "rack" and rack.levels[0].span_gpus == 72
    assert rack.levels[0].in_network_reduction  # NVLink SHARP
    assert rack.levels[1].kind == "rail" and rack.levels[1].bandwidth_Bps == 50e9  # one 400 Gb/s NIC per GPU
    tpu, _ = resolve_system("tpu-v5p", None, 256)
    assert tpu.levels[0].kind == "torus" and tpu.levels[0].span_gpus == 8960
    assert tpu.levels[1].bandwidth_Bps == 25e9 / 4  # one 200 Gb/s DCN link per 4-chip host


# --- hand-computed collectives -----------------------------------------------------------------
def test_ring_all_reduce_on_one_dimension(a100_system) -> None:
    """Alpha-beta ring on one level, no curve: t = alpha + 2(n-1)/n * S / (B * eff).
    4 ranks, 100 MB, B = 300 GB/s, eff 0.78, alpha 8.4 us:
    1.5 * 1e8 / 2.34e11 = 641.0256 us, + 8.4 us = 649.4256 us."""
    s = a100_system(8)
    up = dataclasses.replace(s.levels[0], curves=())
    s = _with_levels(s, up, s.levels[1])
    assert collective_time_s(s, "all_reduce", 1e8, 4) == pytest.approx(649.4256e-6, rel=1e-6)
    # all-gather and reduce-scatter move (n-1)/n: 0.75 * 1e8 / 2.34e11 + 8.4 us = 328.9128 us
    assert collective_time_s(s, "all_gather", 1e8, 4) == pytest.approx(328.9128e-6, rel=1e-6)


def test_hierarchical_all_reduce_across_two_dimensions(a100_system) -> None:
    """dp 16 (tp 1) over two DGX A100 nodes, 1 GiB, no curve. g_0 = 8 ranks per node.
    inside:  (8.4 us + 1.75 * 2^30 / 234e9) * 15/16           = 7.5360 ms
    across:  2 * 15/16 * 2^30 / (8 ranks * 25 GB/s * 0.96)    = 1.875 * 2^30 / 192e9 = 10.4858 ms
    latency: 8.4 us + 2 * ceil(log2 2) * (3 hops * 0.6 us)     = 12.0 us
    t = max(inside, across) + latency = 10.4978 ms"""
    s = a100_system(16)
    s = _with_levels(s, dataclasses.replace(s.levels[0], curves=()), s.levels[1])
    size = 2.0**30
    inside = (8.4e-6 + 1.75 * size / 234e9) * 15 / 16
    across = 1.875 * size / 192e9
    assert inside == pytest.approx(7.5360e-3, rel=1e-4) and across == pytest.approx(10.4858e-3, rel=1e-4)
    assert collective_time_s(s, "all_reduce", size, 16, 1) == pytest.approx(across + 12.0e-6, rel=1e-9)
    assert collective_time_s(s, "all_reduce", size, 16, 1) == pytest.approx(10.4978e-3, rel=1e-4)


def test_three_levels_leaf_and_oversubscribed_spine(a100_system) -> None:
    """8-GPU nodes (300 GB/s, 10 us), a leaf of 4 nodes (25 GB/s per GPU, 1 us), a spine above it
    (25 GB/s per GPU, 3 us) at oversubscription 2 or 8. dp 64 with tp 8 (stride 8), 1 GB:
    g = (1, 4, 8); F = 2*7/8 = 1.75.
      leaf:  1.75e9 / (1 * 25e9)          = 70 ms
      spine: 1.75e9 / (4 * 25e9 / 2)      = 35 ms   (at 8:1: 1.75e9 / (4 * 3.125e9) = 140 ms)
      latency: 10 us + 2*ceil(log2 4)*1 us + 2*ceil(log2 2)*3 us = 20 us"""
    s = a100_system(64)
    node = NetworkLevel("scale-up", "nvswitch", 8, 300e9, 1.0, 10e-6, False)
    leaf = NetworkLevel("leaf", "ib", 32, 25e9, 1.0, 1e-6, False)
    spine = NetworkLevel("spine", "ib", None, 25e9, 1.0, 3e-6, False, oversubscription=2.0)
    s2 = _with_levels(s, node, leaf, spine)
    assert placement(s2, 8, 8).per_unit == (1, 4, 8)
    assert collective_time_s(s2, "all_reduce", 1e9, 8, 8) == pytest.approx(70e-3 + 20e-6, rel=1e-9)
    s8 = _with_levels(s, node, leaf, dataclasses.replace(spine, oversubscription=8.0))
    assert collective_time_s(s8, "all_reduce", 1e9, 8, 8) == pytest.approx(140e-3 + 20e-6, rel=1e-9)
    # a group inside one leaf never pays the spine: dp 4 with tp 8 -> 1.5e9 / 25e9 + 10 us + 4 us
    assert collective_time_s(s8, "all_reduce", 1e9, 4, 8) == pytest.approx(60e-3 + 14e-6, rel=1e-9)
    # SHARP on the leaf: each node sends its buffer once, 1e9 / 25e9 = 40 ms
    sharp = _with_levels(s, node, dataclasses.replace(leaf, in_network_reduction=True), spine)
    assert collective_time_s(sharp, "all_reduce", 1e9, 4, 8) == pytest.approx(40e-3 + 14e-6, rel=1e-9)


def test_cluster_leaf_nodes_builds_a_spine(tmp_path, monkeypatch) -> None:
    """A cluster that publishes its leaf size gets leaf + spine levels; oversubscription sits on
    the spine; a leaf that is not a whole number of scale-up domains is a SpecError."""
    import shutil

    import yaml

    from perfmodel.errors import SpecError
    from perfmodel.hardware import catalog

    src = catalog.REPO_ROOT / "hardware_specs"
    shutil.copytree(src, tmp_path / "specs")
    path = tmp_path / "specs" / "clusters" / "jean-zay-a100-80gb.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(leaf_nodes={"value": 4, "source": "bloom-paper"}, oversubscription=2.0)
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("PERFMODEL_SPECS", str(tmp_path / "specs"))
    s, _ = resolve_system("a100-sxm4-80gb", "jean-zay-a100-80gb", 64)
    assert [(lv.kind, lv.span_gpus, lv.oversubscription) for lv in s.levels] == [
        ("scale-up", 8, 1.0), ("leaf", 32, 1.0), ("spine", None, 2.0)]
    assert s.levels[1].latency_s == pytest.approx(0.5e-6) and s.levels[2].latency_s == pytest.approx(1.5e-6)
    data["leaf_nodes"]["value"] = 2.5
    path.write_text(yaml.safe_dump(data))
    catalog._load.cache_clear()
    with pytest.raises(SpecError, match="leaf_nodes"):
        resolve_system("a100-sxm4-80gb", "jean-zay-a100-80gb", 64)
    catalog._load.cache_clear()


# --- capacity and building blocks --------------------------------------------------------------
def test_fixed_cluster_capacity_is_enforced() -> None:
    with pytest.raises(LayoutError) as err:
        resolve_system("a100-sxm4-80gb", "jean-zay-a100-80gb", 100_000)
    text = str(err.value)
    assert "jean-zay-a100-80gb has 384 GPUs (48 nodes x 8 a100-sxm4-80gb); the run needs 100000" in text
    assert "'jean-zay-a100-80gb-node'" in text  # the nearest valid choice: its node, repeated
    system, msgs = resolve_system("a100-sxm4-80gb", "jean-zay-a100-80gb", 384)
    assert system.num_gpus == 384 and system.capacity_gpus == 384 and msgs == []
    # the node alone repeats as needed
    system, _ = resolve_system(None, "jean-zay-a100-80gb-node", 100_000)
    assert system.num_nodes == 12_500 and system.capacity_gpus is None


def test_capacity_error_reaches_the_library_face() -> None:
    import perfmodel

    plan = perfmodel.ParallelPlan(tp=8, pp=1, dp=64, global_batch=64)
    with pytest.raises(LayoutError, match="has 384 GPUs"):
        perfmodel.estimate("llama3-8b", "jean-zay-a100-80gb", plan)


def test_nvl72_is_racks_repeated_as_needed() -> None:
    """256 GPUs on nvl72: ceil(256 / 72) = 4 racks, the last holding 256 - 3 * 72 = 40."""
    system, msgs = resolve_system("gb200", "nvl72", 256)
    assert system.num_gpus == 256 and system.num_nodes == 64 and system.capacity_gpus is None
    assert msgs == ["nvl72: 256 GPUs span 4 racks of 72 joined by ib-ndr; the last rack is partial (40 of 72 GPUs)"]
    _, msgs = resolve_system("gb300", "nvl72", 144)
    assert msgs == ["nvl72: 144 GPUs span 2 racks of 72 joined by ib-ndr"]
    _, msgs = resolve_system("gb200", "nvl72", 72)
    assert msgs == []
    # the messages travel with the resolved System
    assert resolve_hardware(system, 256)[1] == list(system.notes)


def test_tp8_on_nvl72_stays_in_nvlink_while_dp_spans_racks() -> None:
    """tp 8, dp 32 on 256 GB200: the tp group is inside the rack; a dp group (stride 8) has
    72 / 8 = 9 ranks per rack and spans ceil(32 / 9) = 4 racks. For 1 GB, with the ConnectX-7
    NICs at 0.95 of 50 GB/s:
      across: 2*31/32 * 1e9 / (9 ranks * 47.5 GB/s)         = 4.53216 ms
      inside: NVLS all-reduce over 9: (8.4 us + 1e9 / (900e9 * 0.756)) * 31/32 = 1.43193 ms
      latency: 8.4 us + 2 * ceil(log2 4) * (3 * 0.6 us)     = 15.6 us"""
    system, _ = resolve_system("gb200", "nvl72", 256)
    tp = placement(system, 8, 1)
    assert tp.intra_only
    assert collective_time_s(system, "all_reduce", 1e9, 8, 1) == pytest.approx(intra_time_s(system, "all_reduce", 1e9, 8))
    dp = placement(system, 32, 8)
    assert dp.per_unit == (9, 32) and dp.domains == 4
    expected = 2 * 31 / 32 * 1e9 / (9 * 0.95 * 50e9) + 8.4e-6 + 4 * 1.8e-6
    assert collective_time_s(system, "all_reduce", 1e9, 32, 8) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(4.5478e-3, rel=1e-4)


def test_no_nics_means_one_domain() -> None:
    with pytest.raises(LayoutError, match="no scale-out NICs"):
        resolve_system("host-cpu", None, 4)


def test_validate_row_on_an_oversized_cluster_is_an_error_row(tmp_path) -> None:
    """The validation contract: one row out per row in; the oversized one says why."""
    import csv

    from perfmodel.validation.predict import validate_file

    runs = tmp_path / "runs.csv"
    cols = ["run_id", "model", "tp", "pp", "dp", "global_batch", "accelerator", "n_gpus", "system", "step_time_s"]
    rows = [["fits", "llama3-8b", 8, 1, 48, 48, "a100-sxm4-80gb", 384, "jean-zay-a100-80gb", 1.0],
            ["too-big", "llama3-8b", 8, 1, 12500, 12500, "a100-sxm4-80gb", 100000, "jean-zay-a100-80gb", 1.0],
            ["racks", "llama3-8b", 8, 1, 32, 32, "gb200", 256, "nvl72", 1.0]]
    with runs.open("w", newline="") as f:
        csv.writer(f).writerows([cols, *rows])
    out = tmp_path / "pred.csv"
    validate_file(str(runs), str(out), "analytic", "flash")
    with out.open() as f:
        pred = {r["run_id"]: r for r in csv.DictReader(f)}
    assert pred["fits"]["status"] == "ok"
    assert pred["too-big"]["status"] == "error"
    assert "jean-zay-a100-80gb has 384 GPUs (48 nodes x 8 a100-sxm4-80gb); the run needs 100000" in pred["too-big"]["message"]
    assert pred["racks"]["status"] == "ok"
    assert "256 GPUs span 4 racks of 72" in pred["racks"]["message"]
    assert "the last rack is partial (40 of 72 GPUs)" in pred["racks"]["message"]


_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(_KINDS), degree=st.integers(2, 256), stride=st.sampled_from([1, 2, 4, 8, 16, 64]),
       size=st.floats(1e3, 1e10), level=st.integers(0, 2), factor=st.floats(1.01, 8.0))
def test_hierarchical_collectives_are_monotone_in_every_level(kind, degree, stride, size, level, factor) -> None:
    """On a three-level network (8-GPU node, 4-node leaf, 2:1 spine), more bandwidth or less
    latency on any one level never makes any collective slower."""
    base_sys, _ = resolve_system("a100-sxm4-80gb", None, 8)
    levels = (NetworkLevel("scale-up", "nvswitch", 8, 300e9, 0.8, 8e-6, False),
              NetworkLevel("leaf", "ib", 32, 25e9, 0.95, 1e-6, False),
              NetworkLevel("spine", "ib", None, 25e9, 0.95, 3e-6, False, oversubscription=2.0))
    s = _with_levels(base_sys, *levels)
    base = collective_time_s(s, kind, size, degree, stride)
    assert base > 0
    faster = list(levels)
    faster[level] = levels[level].scaled(bandwidth=factor)
    assert collective_time_s(_with_levels(s, *faster), kind, size, degree, stride) <= base * (1 + 1e-12)
    quicker = list(levels)
    quicker[level] = levels[level].scaled(latency=1 / factor)
    assert collective_time_s(_with_levels(s, *quicker), kind, size, degree, stride) <= base * (1 + 1e-12)
