"""The hardware catalogue: every id the design names loads, datasheet arithmetic comes out right,
calibration never beats physics, and a malformed spec fails with a message that names the file,
the field and what is allowed."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import yaml

from perfmodel.compute.ops import gemm_fixed_s
from perfmodel.errors import PrecisionError, SpecError
from perfmodel.hardware import catalog, host_cpu
from perfmodel.hardware.catalog import load_catalog, specs_dir
from perfmodel.hardware.specs import Accelerator, Sourced
from perfmodel.hardware.system import resolve_system
from perfmodel.units import parse_quantity

# DESIGN.md, "Hardware specs": the identifiers the validation files use.
DESIGN_ACCELERATORS = [
    "v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-hbm2e-96gb-500w",
    "h200-sxm-141gb", "b200", "b300", "gb200", "gb300", "mi300x", "tpu-v4", "tpu-v5p", "host-cpu",
]
DESIGN_SYSTEMS = ["nvl72", "jean-zay-a100-80gb"]
# Brief for the catalogue: the rest of what it covers.
MORE_ACCELERATORS = ["mi325x", "gaudi3"]
FABRICS = ["ib-edr", "ib-hdr", "ib-ndr", "ib-xdr", "roce", "omni-path"]

T, G = 1e12, 1e9


@pytest.fixture(scope="module")
def cat() -> catalog.Catalog:
    return load_catalog()


# --- every id loads ------------------------------------------------------------------------
@pytest.mark.parametrize("acc_id", DESIGN_ACCELERATORS + MORE_ACCELERATORS)
def test_design_accelerator_ids_load(cat: catalog.Catalog, acc_id: str) -> None:
    acc = cat.accelerator(acc_id)
    # host-cpu stands for the spec calibrated on this machine's CPU (catalog.host_cpu_alias)
    assert acc.id == acc_id or (acc_id == "host-cpu" and acc.kind == "cpu" and acc.id == cat.host_cpu[0])
    assert acc.matrix_peak_flop_per_s("bf16" if "bf16" in acc.matrix_peak else "fp32") > 0
    assert acc.hbm_bytes > 0 and acc.hbm_Bps > 0


@pytest.mark.parametrize("system", DESIGN_SYSTEMS)
def test_design_system_ids_are_clusters(cat: catalog.Catalog, system: str) -> None:
    assert system in cat.clusters
    assert system in cat.system_ids()


@pytest.mark.parametrize("fabric", FABRICS)
def test_fabrics_load(cat: catalog.Catalog, fabric: str) -> None:
    f = cat.fabric(fabric)
    assert f.per_hop_latency.si("seconds") > 0


def test_whole_catalogue_loads() -> None:
    # how long it takes is a benchmark (benchmarks/bench_estimate.py), not a test: CI machines are shared
    catalog._load.cache_clear()
    c = catalog._load(str(specs_dir()))
    assert len(c.accelerators) >= 15 and len(c.nodes) >= 15 and len(c.fabrics) >= 6


# --- links between specs ---------------------------------------------------------------------
def test_every_gpu_has_a_reference_node_holding_it(cat: catalog.Catalog) -> None:
    for acc in cat.accelerators.values():
        if acc.kind == "cpu":
            continue
        assert acc.reference_node, acc.id
        assert cat.node(acc.reference_node).accelerator == acc.id, acc.id


def test_nodes_name_known_fabrics(cat: catalog.Catalog) -> None:
    for node in cat.nodes.values():
        if node.default_fabric:
            assert node.default_fabric in cat.fabrics, node.id


def _sourced_leaves(obj: object, path: str = ""):
    from pydantic import BaseModel

    if isinstance(obj, BaseModel):
        if hasattr(obj, "source") and isinstance(obj.source, str):
            yield path, obj
        for name in type(obj).model_fields:
            yield from _sourced_leaves(getattr(obj, name), f"{path}.{name}" if path else name)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _sourced_leaves(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _sourced_leaves(v, f"{path}[{i}]")


def test_every_number_in_this_catalogue_cites_a_references_key(cat: catalog.Catalog) -> None:
    """Stricter than the loader (which also takes a free-text citation): the files here name a
    references key whose value says precisely which document the number came from."""
    objs = [*cat.accelerators.values(), *cat.nodes.values(), *cat.fabrics.values(), *cat.clusters.values()]
    checked = 0
    for obj in objs:
        if obj.id.startswith(("host-cpu", "host-node")):  # written by the calibration helper
            continue
        for path, leaf in _sourced_leaves(obj):
            assert leaf.source in obj.references, f"{obj.id}: {path}.source = {leaf.source!r}"
            assert len(obj.references[leaf.source]) > 30, f"{obj.id}: reference {leaf.source!r} is too vague"
            checked += 1
    assert checked > 400


# --- datasheet arithmetic --------------------------------------------------------------------
@pytest.mark.parametrize("written, acc_id", [
    ("H100", "h100-sxm5-80gb"), ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"), ("H100_SXM5_80GB", "h100-sxm5-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"), ("A100", "a100-sxm4-80gb"), ("B200", "b200"), ("GB200", "gb200"),
    ("AMD Instinct MI300X", "mi300x"), ("h200", "h200-sxm-141gb"), ("NVIDIA H800", "h800-sxm5-80gb"),
    ("H20", "h20-96gb"), ("NVIDIA A800-SXM4-80GB", "a800-sxm4-80gb"), ("A800", "a800-sxm4-80gb"),
    ("GH200", "gh200-96gb-hbm3"), ("NVIDIA GH200 120GB", "gh200-96gb-hbm3"), ("AMD Instinct MI250X", "mi250x-gcd"),
    ("TPU v5e", "tpu-v5e"), ("v5litepod", "tpu-v5e"), ("Trillium", "tpu-v6e"), ("TPU v6e", "tpu-v6e"),
    ("TPUv4", "tpu-v4"), ("NVIDIA DGX B200", "b200"), ("HGX H100", "h100-sxm5-80gb"),
    ("h100-pcie", "h100-pcie-80gb"), ("NVIDIA H100 PCIe", "h100-pcie-80gb"), ("H100 NVL", "h100-nvl-94gb"),
    ("H200 NVL", "h200-nvl-141gb"), ("NVIDIA H200 NVL", "h200-nvl-141gb"),
    # words in another order, a bracketed note, the capacity as sold
    ("A100 80GB SXM", "a100-sxm4-80gb"), ("SXM H100", "h100-sxm5-80gb"), ("B200 (DGX)", "b200"), ("B200 192GB", "b200"),
    # a GPU count, the memory technology or 'GPU' added to the name
    ("8x H100", "h100-sxm5-80gb"), ("H100 SXM5 80GB HBM3", "h100-sxm5-80gb"), ("MI300X GPU", "mi300x"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("a100-pcie", "a100-pcie-80gb"), ("NVIDIA L40S", "l40s"),
    # the rack named with the chip: NVL and a GPU count is the NVLink domain, bare NVL a part
    ("DGX GB300 NVL72", "gb300"), ("GB200 NVL36", "gb200"), ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"), ("V100 32GB", "v100-sxm2-32gb"),
])
def test_an_accelerator_written_another_way_is_found_and_said(written: str, acc_id: str) -> None:
    system, msgs = resolve_system(written, None, 8)
    assert system.accelerator.id == acc_id
    assert f"accelerator {written!r} read as {acc_id}" in msgs[0]


@pytest.mark.parametrize("written", ["l20", "B100", "A100-PCIE-40GB", "A2", "RTX 2080 Ti", "P100", "H800 PCIe", "HBM3"])
def test_a_chip_the_catalogue_lacks_is_not_guessed(written: str) -> None:
    with pytest.raises(catalog.UnknownIdError, match=f"unknown accelerator '{written}'; known: a10, a100-pcie-80gb, a100-sxm4-40gb"):
        resolve_system(written, None, 8)


def test_aliases_name_one_chip_each(cat: catalog.Catalog) -> None:
    owner: dict[str, str] = {}
    for acc in cat.accelerators.values():
        for key in {catalog.name_key(acc.id), *(catalog.name_key(a) for a in acc.aliases)}:
            assert owner.setdefault(key, acc.id) == acc.id or acc.id.startswith("host-") or \
                owner[key].startswith("host-"), f"{key!r} names both {owner[key]} and {acc.id}"


def test_an_accelerator_cell_naming_a_system_runs_that_system() -> None:
    system, msgs = resolve_system("gb200-nvl72", None, 64)
    assert (system.accelerator.id, system.node.id) == ("gb200", "gb200-nvl72")
    assert "is a system id" in msgs[0]
    # as a datasheet writes it
    system, msgs = resolve_system("GB200 NVL72", None, 64)
    assert (system.accelerator.id, system.node.id) == ("gb200", "gb200-nvl72")
    assert msgs[0].startswith("accelerator 'GB200 NVL72' (gb200-nvl72) is a system id")


def test_a_system_cell_written_another_way_is_read_and_said() -> None:
    system, msgs = resolve_system("gb300", "GB300 NVL72", 64)
    assert system.node.id == "gb300-nvl72"
    assert "system 'GB300 NVL72' read as gb300-nvl72" in msgs


def test_h100_sxm_dense_peaks(cat: catalog.Catalog) -> None:
    h100 = cat.accelerator("h100-sxm5-80gb")
    assert h100.matrix_peak_flop_per_s("bf16") == pytest.approx(989.4 * T)
    # 132 SMs x 4096 dense FLOP/clk x 1.83 GHz
    assert h100.num_compute_units * 4096 * h100.clock.si("hertz") == pytest.approx(989.4 * T, rel=1e-3)
    assert h100.matrix_peak_flop_per_s("fp8") == pytest.approx(1978.9 * T)
    assert h100.matrix_peak_flop_per_s("fp8") == pytest.approx(2 * h100.matrix_peak_flop_per_s("bf16"), rel=1e-4)
    assert h100.hbm_bytes == 80e9 and h100.hbm_Bps == 3.35e12


def test_nvlink4_900_bidirectional_is_450_one_way(cat: catalog.Catalog) -> None:
    for node_id in ("dgx-h100", "dgx-h200", "grand-teton-h100-96gb"):
        bw = cat.node(node_id).intra_node.bandwidth
        assert bw.direction == "bidirectional"
        assert bw.one_way_Bps() == 450e9


def test_nvlink5_and_other_scale_up_fabrics_one_way(cat: catalog.Catalog) -> None:
    assert cat.node("hgx-b200").intra_node.bandwidth.one_way_Bps() == 900e9
    assert cat.node("gb200-nvl72").intra_node.bandwidth.one_way_Bps() == 900e9
    assert cat.node("mi300x-platform").intra_node.bandwidth.one_way_Bps() == 7 * 64e9
    assert cat.node("gaudi3-hls").intra_node.bandwidth.one_way_Bps() == 21 * 200e9 / 8
    assert cat.node("tpu-v5p-slice").intra_node.bandwidth.one_way_Bps() == 6 * 1e11
    assert cat.node("tpu-v4-slice").intra_node.bandwidth.one_way_Bps() == 6 * 4.5e10
    assert cat.node("dgx1-v100").intra_node.bandwidth.one_way_Bps() == 6 * 25e9


def test_gib_and_gb_are_distinct() -> None:
    assert parse_quantity("80 GiB", "bytes") == 80 * 2**30 == 85_899_345_920
    assert parse_quantity("80 GB", "bytes") == 80e9
    assert parse_quantity("400 Gb/s", "bytes_per_s") == 50e9


def test_capacities_keep_their_prefixes(cat: catalog.Catalog) -> None:
    assert cat.accelerator("tpu-v4").hbm_bytes == 32 * 2**30
    assert cat.accelerator("b200").hbm_bytes == 182631 * 2**20  # driver-reported MiB
    assert cat.accelerator("h200-sxm-141gb").hbm_bytes == 141e9
    assert cat.accelerator("v100-sxm2-32gb").l2_cache.si("bytes") == 6144 * 2**10


def test_blackwell_peaks_are_half_the_sparse_datasheet(cat: catalog.Catalog) -> None:
    b200, gb200, gb300, b300 = (cat.accelerator(a) for a in ("b200", "gb200", "gb300", "b300"))
    assert b200.matrix_peak_flop_per_s("bf16") == 36e15 / 8 / 2  # HGX B200: 36 PF sparse, 8 GPUs
    assert b200.matrix_peak_flop_per_s("fp4") == 72e15 / 8  # dense FP4 printed as such
    assert gb200.matrix_peak_flop_per_s("fp8") == 720e15 / 72 / 2  # NVL72: 720 PF sparse
    assert gb300.matrix_peak_flop_per_s("fp4") == 1080e15 / 72  # NVL72 GB300: 1080 PF dense
    assert b300.matrix_peak_flop_per_s("fp4") == 105e15 / 8
    assert b300.matrix_peak_flop_per_s("fp64") == pytest.approx(10e12 / 8)


def test_blackwell_ultra_measured_rates(cat: catalog.Catalog) -> None:
    """GB300's MAMF is the best of aiconfigurator's TRT-LLM sweep on GB300 (bf16 32768x5120x16384
    in 2.6094 ms, fp8 16384x65536x6144 in 3.5192 ms): 2 m n k / t = 2106.8 and 3749.2 TFLOP/s,
    0.843 and 0.750 of the 2500 / 5000 dense peaks. Its SM count (152) and B300's (148) are
    driver reads; the clock stays the one the peaks imply."""
    gb300, b300 = cat.accelerator("gb300"), cat.accelerator("b300")
    assert pytest.approx(2106.8 * T, rel=1e-4) == 2 * 32768 * 5120 * 16384 / 2.6094e-3
    assert pytest.approx(3749.2 * T, rel=1e-4) == 2 * 16384 * 65536 * 6144 / 3.5192e-3
    cal = gb300.calibration.gemm_max_achievable
    assert cal["bf16"].si("flop_per_s") == cal["fp16"].si("flop_per_s") == 2106.8 * T
    assert cal["fp8"].si("flop_per_s") == 3749.2 * T
    assert {cal[f].source for f in ("bf16", "fp16", "fp8")} == {"aic-gemm"}
    assert "fp4" not in cal  # the TRT-LLM nvfp4 sweep includes quantization; no raw fp4 GEMM
    assert cal["bf16"].si("flop_per_s") / gb300.matrix_peak_flop_per_s("bf16") == pytest.approx(0.84272)
    assert [(g.precision, g.m, g.n, g.k) for g in gb300.calibration.gemm_shapes] == [
        ("bf16", 32768, 5120, 16384), ("fp8", 16384, 65536, 6144),
        ("bf16", 1024, 1024, 1024), ("bf16", 2048, 2048, 2048), ("bf16", 4096, 4096, 4096)]
    assert not gb300.calibration.attention  # no fwd+bwd attention measured on SM103
    assert (gb300.num_compute_units, gb300.compute_units.source) == (152, "gb300-sm-reports")
    assert (b300.num_compute_units, b300.compute_units.source) == (148, "quickruncuda")
    assert gb300.clock.si("hertz", "clock") == 2008e6  # 2.5 PF / (152 x 8192) = 2008 MHz
    assert pytest.approx(2008e6, rel=1e-3) == 2.5e15 / (152 * 8192)
    assert b300.calibration.gemm_max_achievable["bf16"].si("flop_per_s") == 1769.0 * T  # Bekman's stays


def test_gb300_gemm_fill_drain_from_its_small_squares(cat: catalog.Catalog) -> None:
    """t0 = mean over the shapes with an ideal time under 200 us of t_measured - ideal, ideal =
    sqrt(t_compute^2 + t_memory^2) at the MAMF (2106.8 TFLOP/s) and the carried HBM rate (6.70 TB/s:
    the median of B200's and B300's measured fractions of 8 TB/s, 0.840 and 0.835): 1024^3
    4.346 - 1.386 = 2.960 us, 2048^3 12.873 - 8.978 = 3.895 us, 4096^3 73.422 - 66.943 = 6.479 us,
    mean 4.445 us (was the 10 us A100 default). The two MAMF shapes (2.61 and 3.52 ms) measure the
    asymptote and are left out."""
    gb300 = cat.accelerator("gb300")
    hbm = gb300.hbm_achieved_Bps
    residuals = []
    for n, tflops in ((1024, 494.1), (2048, 1334.6), (4096, 1871.9)):
        flop = 2.0 * n**3
        ideal = math.hypot(flop / 2106.8e12, 3 * n * n * 2 / hbm)
        residuals.append(flop / (tflops * T) - ideal)
    assert [round(r * 1e6, 3) for r in residuals] == [2.96, 3.895, 6.479]
    assert gemm_fixed_s(gb300) == pytest.approx(sum(residuals) / 3, rel=1e-9)
    assert gemm_fixed_s(gb300) == pytest.approx(4.445e-6, rel=1e-3)
    assert 2 * 32768 * 5120 * 16384 / 2106.8e12 > 200e-6 and 2 * 16384 * 65536 * 6144 / 3749.2e12 > 200e-6


def test_other_vendors_peaks(cat: catalog.Catalog) -> None:
    assert cat.accelerator("mi300x").matrix_peak_flop_per_s("bf16") == pytest.approx(1307.4 * T)
    assert cat.accelerator("mi325x").hbm_Bps == 6e12
    assert cat.accelerator("tpu-v5p").matrix_peak_flop_per_s("bf16") == 459 * T
    assert cat.accelerator("tpu-v5p").matrix_peak_flop_per_s("int8") == 918 * T
    gaudi = cat.accelerator("gaudi3")
    assert gaudi.matrix_peak_flop_per_s("fp8") == gaudi.matrix_peak_flop_per_s("bf16") == 1835 * T
    # only a BF16 vector rate is published: it serves fp32 lookups instead of a KeyError
    assert gaudi.vector_peak_flop_per_s("fp32") == 28.7 * T


def test_power_capped_h100_differs_only_where_published(cat: catalog.Catalog) -> None:
    capped, sxm = cat.accelerator("h100-hbm2e-96gb-500w"), cat.accelerator("h100-sxm5-80gb")
    assert capped.tdp_w == 500 and sxm.tdp_w == 700
    assert capped.hbm_bytes == 96e9 and capped.hbm_Bps == 2.4e12
    assert capped.matrix_peak_flop_per_s("bf16") == sxm.matrix_peak_flop_per_s("bf16")
    assert capped.calibration.gemm_max_achievable == {}  # nothing measured: physics fallback


def test_unpublished_tdp_raises_instead_of_guessing(cat: catalog.Catalog) -> None:
    v5p = cat.accelerator("tpu-v5p")
    assert not v5p.has_tdp
    with pytest.raises(SpecError, match="tdp"):
        _ = v5p.tdp_w


def test_v100_has_no_bf16_unit_and_says_so(cat: catalog.Catalog) -> None:
    """Volta's tensor cores multiply fp16 only: bf16 is an error, not the fp16 rate (issue 13.6)."""
    v100 = cat.accelerator("v100-sxm2-32gb")
    assert not v100.has_matrix_precision("bf16")
    assert v100.matrix_peak_flop_per_s("fp16") == 125 * T
    with pytest.raises(PrecisionError, match=r"v100-sxm2-32gb.*lists fp16, fp32"):
        v100.matrix_peak_flop_per_s("bf16")


@pytest.mark.parametrize(("acc_id", "precision", "supported"), [
    ("a100-sxm4-80gb", "fp8", "fp32, bf16, fp16"),
    ("h100-sxm5-80gb", "nvfp4", "fp32, bf16, fp16, fp8"),
    ("h100-sxm5-80gb", "mxfp8", "fp32, bf16, fp16, fp8"),
    ("mi300x", "nvfp4", "fp32, bf16, fp16, fp8"),
    ("v100-sxm2-32gb", "bf16", "fp32, fp16"),
    ("tpu-v5p", "fp32", "bf16"),
    ("gaudi3", "fp32", "bf16, fp8"),
])
def test_unsupported_precision_is_an_error_naming_the_chip(acc_id: str, precision: str, supported: str) -> None:
    """Issue 13.6: each of these ran silently at another format's rate or ended in KeyError."""
    from perfmodel.api import estimate
    from perfmodel.parallel.plan import ParallelPlan

    with pytest.raises(PrecisionError, match=rf"\({acc_id}\) has no {precision} matrix format; it supports {supported}"):
        estimate("gpt2-124m", acc_id, ParallelPlan(precision=precision, global_batch=8, micro_batch=8))


def test_blackwell_runs_block_scaled_formats(cat: catalog.Catalog) -> None:
    b200 = cat.accelerator("b200")
    assert {"fp8", "mxfp8", "nvfp4"} <= set(b200.supported_precisions)
    assert b200.matrix_peak_flop_per_s("nvfp4") == b200.matrix_peak_flop_per_s("fp4")


def test_training_precisions_must_have_a_matrix_peak(cat: catalog.Catalog) -> None:
    a100 = cat.accelerator("a100-sxm4-80gb")
    with pytest.raises(SpecError, match=r"training_precisions\.fp8"):
        catalog.parse_model(Accelerator, {**a100.model_dump(), "training_precisions": ["bf16", "fp8"]}, "a100.yaml")


def test_a_spec_without_an_fp32_vector_peak_is_refused_at_load(cat: catalog.Catalog) -> None:
    """The memory-bound ops' arithmetic runs at the FP32 vector peak: a spec without it is an
    error naming the file and field, not a KeyError in the middle of an estimate."""
    a100 = cat.accelerator("a100-sxm4-80gb").model_dump()
    vec = {k: v for k, v in a100["vector_peak"].items() if k not in ("fp32", "bf16", "fp16")}
    with pytest.raises(SpecError, match=r"vector_peak\.fp32") as e:
        catalog.parse_model(Accelerator, {**a100, "vector_peak": vec}, "a100.yaml")
    assert "a100.yaml" in str(e.value)


def test_mi355x_peaks_follow_from_the_per_cu_rate(cat: catalog.Catalog) -> None:
    """256 CUs x 8192 FP8 FLOP per clock x 2.4 GHz = 5.033 PFLOP/s; bf16 half of it."""
    mi355x = cat.accelerator("mi355x")
    assert mi355x.matrix_peak_flop_per_s("fp8") == pytest.approx(256 * 8192 * 2.4e9, rel=1e-3)
    assert mi355x.matrix_peak_flop_per_s("bf16") == pytest.approx(256 * 4096 * 2.4e9, rel=1e-3)
    system, msgs = resolve_system("AMD Instinct MI355X", None, 16)
    assert system.accelerator.id == "mi355x" and system.node.id == "mi355x-platform"
    assert "read as mi355x" in msgs[0]


# --- calibration never beats the datasheet ----------------------------------------------------
def _peak(acc: Accelerator, precision: str) -> float:
    return acc.matrix_peak_flop_per_s(precision)


def test_calibration_is_below_physics(cat: catalog.Catalog) -> None:
    for acc in cat.accelerators.values():
        cal = acc.calibration
        for prec, s in cal.gemm_max_achievable.items():
            assert s.si("flop_per_s") <= _peak(acc, prec), (acc.id, prec)
        for g in cal.gemm_shapes:
            assert g.achieved_flop_per_s <= _peak(acc, g.precision), (acc.id, g)
        for a in cal.attention:
            assert a.achieved_flop_per_s <= _peak(acc, a.precision), (acc.id, a)
        if cal.hbm_achieved:
            assert acc.hbm_achieved_Bps <= acc.hbm_Bps, acc.id


def test_published_microbenchmarks_are_carried(cat: catalog.Catalog) -> None:
    h100 = cat.accelerator("h100-sxm5-80gb").calibration
    assert h100.gemm_max_achievable["bf16"].si("flop_per_s") == 794.5 * T
    assert h100.hbm_achieved is not None and h100.hbm_achieved.si("bytes_per_s") == 2.97e12
    gb200 = cat.accelerator("gb200").calibration
    assert gb200.gemm_max_achievable["fp4"].si("flop_per_s") == 7627.6 * T
    assert cat.accelerator("h200-sxm-141gb").calibration.kernel_launch.si("seconds") == pytest.approx(2.433e-6)
    assert cat.accelerator("mi300x").calibration.hbm_achieved.si("bytes_per_s") == 4.09e12
    assert len(cat.accelerator("b200").calibration.attention) == 4


def test_intra_node_curves_are_monotone_and_under_line_rate(cat: catalog.Catalog) -> None:
    for node in cat.nodes.values():
        if node.id.startswith("host-node"):  # measured on a host by the calibration helper; noisy
            continue
        line = node.intra_node.bandwidth.one_way_Bps()
        for c in node.intra_node.curves:
            pts = sorted((p.size_bytes, p.busbw_Bps) for p in c.points)
            assert len(pts) >= 5, node.id  # a one-point curve would wreck interpolation
            assert all(b1 <= b2 * 1.02 for (_, b1), (_, b2) in itertools.pairwise(pts)), node.id
            bound = line * (1.0 / 0.74 if c.algorithm == "nvls" else 1.0)  # NVLS moves half the bytes
            assert pts[-1][1] <= bound, node.id
        eff = node.intra_node.collective_efficiency
        if eff:
            # NVLink / xGMI rings reach 0.6-0.9 of line rate; PCIe rings through the CPUs 0.4-0.65
            low = 0.3 if node.intra_node.fabric.startswith("pcie") else 0.5
            assert low < eff.si("dimensionless") < 1.0, node.id


# --- systems ----------------------------------------------------------------------------------
def test_nvl72_cluster_covers_gb200_and_gb300(cat: catalog.Catalog) -> None:
    rack = cat.clusters["nvl72"]
    assert rack.num_nodes * cat.node(rack.node).accelerators_per_node == 72
    assert set(rack.nodes_by_accelerator) == {"gb200", "gb300", "vr200"}
    for acc_id, node_id in rack.nodes_by_accelerator.items():
        node = cat.node(node_id)
        assert node.accelerator == acc_id
        assert node.domain_size == 72 and node.accelerators_per_node == 4
        assert rack.node_for(acc_id) == node_id
    system, msgs = resolve_system("gb200", "nvl72", 72)
    assert system.domain_size == 72 and system.intra_Bps == 900e9 and system.num_nodes == 18
    assert msgs == []
    system, _ = resolve_system("gb300", "nvl72", 72)
    assert system.node.id == "gb300-nvl72" and system.domain_size == 72
    assert system.levels[1].bandwidth_Bps == 100e9  # one ConnectX-8 (800 Gb/s) per GPU


def test_jean_zay_is_four_omni_path_links_per_node(cat: catalog.Catalog) -> None:
    jz = cat.clusters["jean-zay-a100-80gb"]
    assert cat.node(jz.node).accelerator == "a100-sxm4-80gb"
    assert cat.node(jz.node).accelerators_per_node == 8
    assert jz.fabric == "omni-path" and jz.nics_per_node == 4
    system, msgs = resolve_system("a100-sxm4-80gb", "jean-zay-a100-80gb", 384, 8)
    assert msgs == []
    assert system.num_nodes == 48 and system.capacity_gpus == 384
    assert system.levels[1].bandwidth_Bps == 6.25e9  # 4 links x 100 Gb/s (12.5 GB/s) / 8 GPUs


def test_tpu_slice_is_one_ici_domain(cat: catalog.Catalog) -> None:
    system, _ = resolve_system("tpu-v5p", None, 256)
    assert system.domain_size == 8960 and system.gpus_per_node == 4
    assert system.intra_Bps == 600e9


# --- malformed specs fail loudly ---------------------------------------------------------------
def _mini_catalogue(root: Path) -> None:
    """A three-file catalogue: A100 80GB, its DGX node and the HDR fabric."""
    src = Path(catalog.REPO_ROOT) / "hardware_specs"
    for sub, name in (("accelerators", "a100-sxm4-80gb"), ("nodes", "dgx-a100-80gb"), ("fabrics", "ib-hdr")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / f"{name}.yaml").write_text((src / sub / f"{name}.yaml").read_text())
    (root / "clusters").mkdir(exist_ok=True)


def _edit(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _load_from(root: Path, monkeypatch: pytest.MonkeyPatch) -> catalog.Catalog:
    """The catalogue under `root`, raising its first problem: a bad file is left out of the
    catalogue (the rest still loads) and its error is kept in `Catalog.problems`."""
    monkeypatch.setenv("PERFMODEL_SPECS", str(root))
    catalog._load.cache_clear()
    return load_catalog().strict()


@pytest.fixture(autouse=False)
def mini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _mini_catalogue(tmp_path)
    yield tmp_path
    catalog._load.cache_clear()


def test_mini_catalogue_loads(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _load_from(mini, monkeypatch)
    assert list(c.accelerators) == ["a100-sxm4-80gb"]


def test_unknown_field_names_file_field_and_allowed(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d.update(hbm_bw={"value": "2 TB/s", "source": "datasheet"}))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    msg = str(e.value)
    assert str(acc) in msg and "'hbm_bw'" in msg and "unknown field" in msg
    assert "hbm_bandwidth" in msg and "matrix_peak" in msg  # the allowed fields are listed
    assert e.value.field == "hbm_bw" and e.value.file == str(acc)


def test_missing_field_names_file_and_field(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d.pop("hbm_bandwidth"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert e.value.field == "hbm_bandwidth" and e.value.file == str(acc)
    assert "missing" in str(e.value)


def test_size_given_for_a_bandwidth_is_refused(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = mini / "nodes" / "dgx-a100-80gb.yaml"
    _edit(node, lambda d: d["intra_node"]["bandwidth"].update(value="900 GB"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    msg = str(e.value)
    assert str(node) in msg and "intra_node.bandwidth" in msg
    assert "'900 GB'" in msg and "a bandwidth, e.g." in msg and "400 Gb/s" in msg


def test_bandwidth_without_direction_is_refused(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = mini / "nodes" / "dgx-a100-80gb.yaml"
    _edit(node, lambda d: d["intra_node"]["bandwidth"].pop("direction"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert "direction" in str(e.value) and "one-way or bidirectional" in str(e.value)
    assert e.value.file == str(node)


def test_unknown_source_key_names_the_allowed_keys(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d["hbm_bandwidth"].update(source="datasheeet"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    msg = str(e.value)
    assert str(acc) in msg and e.value.field == "hbm_bandwidth.source"
    assert "'datasheeet'" in msg and "'datasheet'" in msg and "'whitepaper'" in msg


def test_bare_number_is_refused(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d["matrix_peak"]["bf16"].update(value=3.12e14))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert "matrix_peak.bf16" in str(e.value) and "no unit" in str(e.value)
    assert "989 TFLOP/s" in str(e.value)


def test_unknown_precision_lists_the_choices(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d["matrix_peak"].update(bf32={"value": "1 TFLOP/s", "source": "datasheet"}))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert "matrix_peak.bf32" in str(e.value) and "'bf16'" in str(e.value) and "'fp8'" in str(e.value)


def test_reference_node_must_exist(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = mini / "accelerators" / "a100-sxm4-80gb.yaml"
    _edit(acc, lambda d: d.update(reference_node="dgx-a100-81gb"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert e.value.field == "reference_node" and "dgx-a100-80gb" in str(e.value)


def test_file_name_must_match_id(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fab = mini / "fabrics" / "ib-hdr.yaml"
    _edit(fab, lambda d: d.update(id="ib-hdr2"))
    with pytest.raises(SpecError) as e:
        _load_from(mini, monkeypatch)
    assert e.value.field == "id" and "'ib-hdr'" in str(e.value) and str(fab) in str(e.value)


def test_sourced_leaf_keeps_its_text() -> None:
    s = Sourced(value="900 GB/s", source="datasheet", direction="bidirectional")
    assert s.one_way_Bps() == 450e9 and s.value == "900 GB/s"


# --- host-cpu: the CPU of the machine perfmodel runs on ------------------------------------------
def _cpu_cat(monkeypatch: pytest.MonkeyPatch, cpu: object) -> catalog.Catalog:
    monkeypatch.delenv("PERFMODEL_HOST_CPU", raising=False)
    monkeypatch.setattr(host_cpu, "this_host_cpu", lambda: cpu)
    catalog._load.cache_clear()
    return load_catalog()


@pytest.mark.parametrize(("family", "model", "spec"), [(25, 17, "host-cpu-zen4"), (26, 2, "host-cpu-zen5")])
def test_host_cpu_is_the_spec_calibrated_on_this_machines_cpu(monkeypatch: pytest.MonkeyPatch, family: int, model: int,
                                                              spec: str) -> None:
    from perfmodel.hardware.specs import HostCpu

    try:
        cat = _cpu_cat(monkeypatch, HostCpu(vendor="AuthenticAMD", family=family, model=model))
        assert cat.accelerator("host-cpu").id == spec
        assert cat.node("host-node").accelerator == spec
        system, _ = resolve_system("host-cpu", None, 2)
        assert system.accelerator.id == spec and system.node.id == spec.replace("cpu", "node")
        assert any(f"calibrated as {spec}" in m for m in system.notes)
    finally:
        catalog._load.cache_clear()


def test_host_cpu_on_an_uncalibrated_machine_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """No committed spec has this CPU: the fallback is named in a message, never silently used."""
    from perfmodel.hardware.specs import HostCpu

    try:
        cat = _cpu_cat(monkeypatch, HostCpu(vendor="GenuineIntel", family=6, model=143))
        assert cat.accelerator("host-cpu").id == host_cpu.HOST_CPU_FALLBACK
        _, msgs = resolve_system("host-cpu", None, 1)
        assert any("no spec is calibrated on this machine's CPU (GenuineIntel family 6 model 143)" in m
                   and "perfmodel calibrate" in m for m in msgs)
        # the stand-in's prediction is the same number, with an interval as wide as CPUs differ
        import perfmodel

        plan = perfmodel.ParallelPlan(dp=1, micro_batch=4, global_batch=4, seq_len=256)
        stand_in = perfmodel.estimate("gpt2-124m", "host-cpu", plan)
        named = perfmodel.estimate("gpt2-124m", "host-cpu-zen4", plan)
        assert stand_in.step_time_s == named.step_time_s
        assert stand_in.step_time_hi_s / stand_in.step_time_s > 2.0 > named.step_time_hi_s / named.step_time_s
        assert stand_in.step_time_lo_s / stand_in.step_time_s < 0.5 < named.step_time_lo_s / named.step_time_s
        # pinned by the environment: runs measured on another machine
        monkeypatch.setenv("PERFMODEL_HOST_CPU", "host-cpu-zen5")
        catalog._load.cache_clear()
        assert load_catalog().accelerator("host-cpu").id == "host-cpu-zen5"
        monkeypatch.setenv("PERFMODEL_HOST_CPU", "b200")
        catalog._load.cache_clear()
        with pytest.raises(SpecError, match="PERFMODEL_HOST_CPU"):
            load_catalog()
    finally:
        monkeypatch.delenv("PERFMODEL_HOST_CPU", raising=False)
        catalog._load.cache_clear()


def test_host_cpu_prefers_this_machines_own_calibration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What `perfmodel calibrate` wrote to the data directory is this machine, when its CPU matches."""
    from perfmodel.hardware.specs import HostCpu

    specs = tmp_path / "perfmodel" / "hardware_specs"
    for kind, src, dst in (("accelerators", "host-cpu-zen5", "host-cpu"), ("nodes", "host-node-zen5", "host-node")):
        (specs / kind).mkdir(parents=True)
        text = (specs_dir() / kind / f"{src}.yaml").read_text().replace("host-cpu-zen5", "host-cpu").replace(
            "host-node-zen5", "host-node")
        (specs / kind / f"{dst}.yaml").write_text(text)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    try:
        cat = _cpu_cat(monkeypatch, HostCpu(vendor="AuthenticAMD", family=26, model=2))
        assert cat.accelerator("host-cpu").id == "host-cpu" and "perfmodel calibrate" in cat.host_cpu[1]
        assert cat.node("host-node").accelerator == "host-cpu"
        # measured on another CPU: not this machine, the committed specs decide
        cat = _cpu_cat(monkeypatch, HostCpu(vendor="AuthenticAMD", family=25, model=17))
        assert cat.accelerator("host-cpu").id == "host-cpu-zen4"
    finally:
        catalog._load.cache_clear()


def test_h800_is_h100_compute_on_a_narrower_nvlink() -> None:
    """H800 keeps H100 SXM5's die (same dense peaks, HBM and derived GEMM rate) and cuts NVLink to
    400 GB/s bidirectional: 200 GB/s one-way x 0.80 (DeepSeek's 160 GB/s) for a ring, so an
    8-GPU ring all-reduce of 1 GB takes 2 * 7/8 * 1e9 / 160e9 + 8.4 us."""
    from perfmodel.comm.collectives import intra_time_s
    from perfmodel.compute.ops import gemm_rate_flop_per_s

    h800, _ = resolve_system("h800", None, 8)
    h100, _ = resolve_system("h100", None, 8)
    assert h800.node.id == "hgx-h800"
    assert h800.accelerator.matrix_peak_flop_per_s("bf16") == h100.accelerator.matrix_peak_flop_per_s("bf16")
    assert gemm_rate_flop_per_s(h800.accelerator, "fp8") == pytest.approx(gemm_rate_flop_per_s(h100.accelerator, "fp8"), rel=0.03)
    assert intra_time_s(h800, "all_reduce", 1e9, 8) == pytest.approx(2 * 7 / 8 * 1e9 / 160e9 + 8.4e-6, rel=1e-9)
    assert intra_time_s(h800, "all_reduce", 1e9, 8) > 2 * intra_time_s(h100, "all_reduce", 1e9, 8)


@pytest.mark.parametrize(("written", "acc_id"), [("Tesla V100", "v100-sxm2-32gb"), ("NVIDIA Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
                                                 ("AMD Instinct MI300X", "mi300x"), ("Habana Gaudi 3", "gaudi3"),
                                                 ("HPU Gaudi3", "gaudi3"), ("Intel Gaudi 3", "gaudi3")])
def test_a_brand_word_before_the_chip_is_dropped(written: str, acc_id: str) -> None:
    """nvidia-smi and vendor tables prefix a brand (Tesla, Instinct, Habana) that names no part."""
    assert resolve_system(written, None, 8)[0].accelerator.id == acc_id
