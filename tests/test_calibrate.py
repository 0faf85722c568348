"""perfmodel.calibration (host facts, microbenchmarks): the CPU-fact arithmetic, and a quick real calibration that must write
host-cpu / host-node specs the strict schema accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.calibration import host, microbench
from perfmodel.hardware.catalog import _check_sources, parse_model, read_yaml
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system_specs import Node

REPO = Path(__file__).resolve().parents[1]


def _facts(vendor: str, *flags: str) -> dict:
    return {"vendor": vendor, "flags": set(flags)}


def test_flop_per_cycle_zen4_avx512():
    # Zen 4: 16 fp32 lanes x 2 (FMA) x 1 zmm FMA per cycle = 32; bf16 dot product doubles it
    f = host.flop_per_cycle(_facts("AuthenticAMD", "avx2", "fma", "avx512f", "avx512_bf16"))
    assert f["fp32"][0] == 32.0
    assert f["bf16"][0] == 64.0


def test_flop_per_cycle_zen5_full_width_except_mobile():
    # Zen 5 server / desktop: two 512-bit FMA pipes, 16 x 2 x 2 = 64; mobile Zen 5 splits as Zen 4
    turin = {**_facts("AuthenticAMD", "avx2", "fma", "avx512f", "avx512_bf16"), "family": 26, "model": 2}
    assert host.flop_per_cycle(turin)["fp32"][0] == 64.0
    assert host.flop_per_cycle(turin)["bf16"][0] == 128.0
    strix = {**turin, "model": 0x24}
    assert host.flop_per_cycle(strix)["fp32"][0] == 32.0


def test_flop_per_cycle_avx2_and_intel_avx512():
    assert host.flop_per_cycle(_facts("AuthenticAMD", "avx2", "fma"))["fp32"][0] == 8 * 2 * 2
    assert host.flop_per_cycle(_facts("GenuineIntel", "avx2", "fma", "avx512f"))["fp32"][0] == 16 * 2 * 2
    # no bf16 instruction: bf16 GEMMs widen to fp32 on the same FMA pipes (a Zen 3 host's calibrated spec
    # must still carry a bf16 peak, or every bf16-autocast run on it would be refused)
    assert host.flop_per_cycle(_facts("GenuineIntel", "avx2", "fma"))["bf16"][0] == 8 * 2 * 2


@pytest.mark.parametrize("cpu", ["zen3", "zen4", "zen5"])
def test_committed_host_specs_parse(cpu: str):
    """The host specs in hardware_specs/ (each written by a full calibration on one CPU) obey the
    strict schema, name the CPU `host-cpu` matches on, and point at each other."""
    acc_path = REPO / f"hardware_specs/accelerators/host-cpu-{cpu}.yaml"
    node_path = REPO / f"hardware_specs/nodes/host-node-{cpu}.yaml"
    acc = parse_model(Accelerator, read_yaml(acc_path), acc_path)
    node = parse_model(Node, read_yaml(node_path), node_path)
    for obj, path in ((acc, acc_path), (node, node_path)):
        _check_sources(obj, obj.references, path)
        assert obj.id == path.stem
    assert acc.reference_node == node.id and node.accelerator == acc.id
    assert acc.host_cpu is not None and acc.host_cpu.vendor == "AuthenticAMD"
    assert (acc.host_cpu.family, acc.host_cpu.model) == {"zen3": (25, 1), "zen4": (25, 17), "zen5": (26, 2)}[cpu]


@pytest.mark.slow
def test_quick_calibration_writes_valid_specs(tmp_path: Path):
    r = microbench.run_calibration(tmp_path, quick=True)
    acc = parse_model(Accelerator, read_yaml(tmp_path / "accelerators/host-cpu.yaml"), "host-cpu.yaml")
    node = parse_model(Node, read_yaml(tmp_path / "nodes/host-node.yaml"), "host-node.yaml")
    _check_sources(acc, acc.references, tmp_path)
    _check_sources(node, node.references, tmp_path)
    assert acc.kind == "cpu" and acc.reference_node == node.id == "host-node"
    assert acc.host_cpu is not None and acc.host_cpu.vendor == r["facts"]["vendor"]  # what host-cpu matches on
    assert node.accelerator == acc.id and node.accelerators_per_node >= 1
    # measured GEMM rates are positive and below the theoretical peak written beside them
    for prec, s in acc.calibration.gemm_max_achievable.items():
        achieved = s.si("flop_per_s")
        assert 0 < achieved <= 1.05 * acc.matrix_peak_flop_per_s(prec), (prec, achieved)
    assert acc.hbm_achieved_Bps > 1e8
    assert 0 < acc.calibration.host_op_overhead.si("seconds") < 1e-3
    # gloo curves exist for both collectives, at the sizes measured
    kinds = {c.collective: c for c in node.intra_node.curves}
    assert set(kinds) == {"all_reduce", "send_recv"}
    assert [p.size_bytes for p in kinds["all_reduce"].points] == [float(s) for s in microbench._AR_SIZES_QUICK]
    assert r["quick"] is True and len(r["t1"]["gemm_fp32"]) == len(microbench._GEMM_SHAPES_QUICK)


def test_calibrate_defaults_to_the_user_data_dir(monkeypatch, tmp_path: Path):
    """`perfmodel calibrate` without --out never writes the committed hardware_specs/."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert microbench.default_out_dir() == tmp_path / "perfmodel" / "hardware_specs"
    assert REPO / "hardware_specs" not in microbench.default_out_dir().parents


def test_calibration_package_has_no_import_cycle():
    """Each calibration module imports only modules below it (commands -> microbench ->
    trace_import -> nccl_tests -> spec_writer -> host), read from the source."""
    import ast

    order = ["host", "spec_writer", "nccl_tests", "trace_import", "microbench", "commands"]
    pkg = REPO / "perfmodel" / "calibration"
    for i, name in enumerate(order):
        tree = ast.parse((pkg / f"{name}.py").read_text())
        imported = {n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("perfmodel.calibration.")}
        assert imported <= set(order[:i]), (name, imported - set(order[:i]))


def _t1(bf16_rates: dict[tuple[int, int, int], float]) -> dict:
    return {"gemm_fp32": [{"m": 256, "n": 256, "k": 256, "flop_per_s": 9e10}],
            "gemm_bf16": [{"m": m, "n": n, "k": k, "flop_per_s": r} for (m, n, k), r in bf16_rates.items()]}


def test_calibration_asks_for_per_shape_rates_only_where_one_rate_cannot_serve():
    from perfmodel.calibration.spec_writer import shape_dependent

    # Zen 3 (torch 2.14, AVX2 only): bf16 256^3 3.36 GFLOP/s, 256 x 2048 x 2048 0.83 (measured 2026-12-05)
    assert shape_dependent(_t1({(256, 256, 256): 3.36e9, (256, 2048, 2048): 0.83e9}))
    # Zen 4 (AVX512_BF16): 177-213 GFLOP/s over nine shapes
    assert not shape_dependent(_t1({(256, 256, 256): 196.3e9, (512, 512, 512): 213.3e9, (8192, 256, 256): 176.7e9}))


def test_gemm_by_shape_runs_each_gemm_at_its_nearest_measured_shape():
    """A CPU spec whose bf16 rates differ 4x by shape: with gemm_by_shape a GEMM takes the rate of
    the measured shape whose weight is within 2x of its own; without it (or out of reach) every
    GEMM takes the best (the MAMF)."""
    from perfmodel.compute.ops import gemm_cost, gemm_rate_flop_per_s, shape_rate_flop_per_s
    from perfmodel.hardware.catalog import load_catalog

    base = load_catalog().accelerator("host-cpu-zen3")
    d = base.model_dump()
    d["calibration"]["gemm_shapes"] = [
        {"precision": "bf16", "m": 256, "n": 256, "k": 256, "achieved": "3.2 GFLOP/s", "source": "calib"},
        {"precision": "bf16", "m": 256, "n": 2048, "k": 2048, "achieved": "0.8 GFLOP/s", "source": "calib"},
    ]
    d["calibration"]["gemm_max_achievable"]["bf16"]["value"] = "3.2 GFLOP/s"
    d["calibration"]["gemm_by_shape"] = False
    flat = Accelerator.model_validate(d)
    by_shape = Accelerator.model_validate({**d, "calibration": {**d["calibration"], "gemm_by_shape": True}})
    e = by_shape.in_model_efficiency
    assert shape_rate_flop_per_s(flat, 256, 2048, 2048, "bf16") is None
    assert shape_rate_flop_per_s(by_shape, 200, 2048, 1800, "bf16") == pytest.approx(0.8e9 * e)
    assert shape_rate_flop_per_s(by_shape, 300, 300, 200, "bf16") == pytest.approx(3.2e9 * e)
    # a weight more than 2x from every measured one (8192 x 128): no point is carried that far
    assert shape_rate_flop_per_s(by_shape, 1024, 8192, 128, "bf16") is None
    assert gemm_rate_flop_per_s(by_shape, "bf16") == pytest.approx(3.2e9 * e)
    # a 256 x 2048 x 2048 GEMM: 2.147 GFLOP, compute-bound on this core
    slow, fast = gemm_cost(by_shape, 256, 2048, 2048, "bf16"), gemm_cost(flat, 256, 2048, 2048, "bf16")
    assert slow.compute_s == pytest.approx(2 * 256 * 2048 * 2048 / (0.8e9 * e))
    assert slow.compute_s == pytest.approx(4 * fast.compute_s)
