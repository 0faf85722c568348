"""`perfmodel calibrate --trace / --nccl-log`: a user's own measurements become calibration."""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import pytest

from perfmodel.calibration.nccl_tests import curve_from_nccl, parse_nccl_tests
from perfmodel.calibration.trace_import import apply_to_spec, parse_torch_trace, read_torch_trace
from perfmodel.hardware.catalog import REPO_ROOT, parse_model, read_yaml
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system_specs import Node

DATA = Path(__file__).parent / "data"
SPECS = REPO_ROOT / "hardware_specs"
NCCL_LOG = DATA / "nccl_all_reduce_8gpu.txt"

# out-of-place busbw column of the fixture (GB/s); 8 and 64 B print 0.00 and are dropped
NCCL_BUSBW = {512: 0.03, 4096: 0.24, 32768: 1.71, 262144: 10.98, 2097152: 53.64,
              16777216: 169.12, 134217728: 211.93, 1073741824: 223.74}


def test_nccl_log_parses_to_its_numbers():
    coll, n, pts = parse_nccl_tests(NCCL_LOG.read_text())
    assert coll == "all_reduce" and n == 8
    assert [int(s) for s, _ in pts] == sorted(NCCL_BUSBW)
    for size, bw in pts:
        assert bw == pytest.approx(NCCL_BUSBW[int(size)] * 1e9)


def test_nccl_log_without_command_line_needs_collective():
    text = "\n".join(line for line in NCCL_LOG.read_text().splitlines() if "_perf" not in line)
    with pytest.raises(ValueError, match="collective"):
        parse_nccl_tests(text)
    coll, n, pts = parse_nccl_tests(text, collective="all_gather")
    assert (coll, n, len(pts)) == ("all_gather", 8, len(NCCL_BUSBW))


def test_nccl_options_that_contradict_the_log_are_refused(tmp_path):
    """An all_reduce_perf log on 8 ranks was imported as an all_to_all curve of 1000 ranks."""
    with pytest.raises(ValueError, match="--collective all_to_all contradicts the log, which ran all_reduce"):
        parse_nccl_tests(NCCL_LOG.read_text(), collective="all_to_all")
    with pytest.raises(ValueError, match="--group-size 1000 contradicts the log, which ran on 8 ranks"):
        parse_nccl_tests(NCCL_LOG.read_text(), group_size=1000)
    assert parse_nccl_tests(NCCL_LOG.read_text(), collective="all_reduce", group_size=8)[:2] == ("all_reduce", 8)


def test_synthetic_gpu_trace_uses_linked_kernel_durations():
    gemm, attn = read_torch_trace(DATA / "gpu_trace_synthetic.json")
    by = {(g["precision"], g["m"], g["n"], g["k"], g["batch"]): g for g in gemm}
    # mm's kernel is linked through the nested cudaLaunchKernel (correlation): 1500 us; the
    # matmul/linear wrappers around it do not count again
    mm = by[("bf16", 4096, 11008, 4096, 1)]
    assert mm["calls"] == 1 and mm["ops"] == ["aten::mm"]
    assert mm["achieved_flop_per_s"] == pytest.approx(2 * 4096 * 11008 * 4096 / 1500e-6)
    # bmm's kernel is linked by External id only: 100 us
    bmm = by[("fp16", 1024, 1024, 128, 32)]
    assert bmm["achieved_flop_per_s"] == pytest.approx(2 * 1024 * 1024 * 128 * 32 / 100e-6)
    # the fp32 mm has no kernel in the trace: skipped, not timed by its CPU launch
    assert len(gemm) == 2
    assert len(attn) == 1
    a = attn[0]
    assert (a["kernel"], a["direction"], a["causal"], a["head_dim"], a["seq_len"]) == ("sdpa-flash", "fwd", True, 128, 2048)
    assert a["achieved_flop_per_s"] == pytest.approx(4 * 4 * 32 * 2048 * 2048 * 128 * 0.5 / 1000e-6)


def test_real_cpu_trace_matches_direct_timing(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    m, k, n = 384, 512, 256
    a, b = torch.randn(m, k), torch.randn(k, n)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: steadier on a shared CI core than a thread pool
    try:
        for _ in range(5):
            torch.mm(a, b)
        times = []

        def direct_timing() -> None:
            for _ in range(30):
                t0 = time.perf_counter()
                torch.mm(a, b)
                times.append(time.perf_counter() - t0)

        direct_timing()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(30):
                torch.mm(a, b)
                torch.nn.functional.scaled_dot_product_attention(*(torch.randn(1, 2, 64, 32) for _ in range(3)))
        direct_timing()  # before and after the profiled loop, so a noisy moment hits both
    finally:
        torch.set_num_threads(threads)
    direct = 2 * m * n * k / statistics.median(times)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))

    gemm = parse_torch_trace(trace)
    mm = [g for g in gemm if (g["m"], g["n"], g["k"]) == (m, n, k)]
    assert len(mm) == 1, gemm
    g = mm[0]
    assert g["precision"] == "fp32" and g["batch"] == 1 and g["calls"] == 30
    assert direct / 2 <= g["achieved_flop_per_s"] <= direct * 2, (g["achieved"], direct)
    attn = read_torch_trace(trace)[1]
    assert attn and attn[0]["head_dim"] == 32 and attn[0]["seq_len"] == 64 and attn[0]["direction"] == "fwd"


def test_apply_to_spec_writes_loadable_calibration(tmp_path):
    src = tmp_path / "a100-sxm4-80gb.yaml"
    shutil.copy(SPECS / "accelerators" / "a100-sxm4-80gb.yaml", src)
    gemm, attn = read_torch_trace(DATA / "gpu_trace_synthetic.json")
    out = tmp_path / "out" / "a100-sxm4-80gb.yaml"
    written = apply_to_spec(src, gemm=gemm, attention=attn, out=out, source_note="test trace", date="2025-01-02")
    assert written == {"accelerator": str(out)}
    assert src.read_text() == (SPECS / "accelerators" / "a100-sxm4-80gb.yaml").read_text()  # --out: original untouched
    acc = parse_model(Accelerator, read_yaml(out), out)
    assert "user-trace-2025-01-02" in acc.references
    pts = {(p.precision, p.m, p.n, p.k): p for p in acc.calibration.gemm_shapes}
    assert pts[("bf16", 4096, 11008, 4096)].achieved_flop_per_s == pytest.approx(246.2e12, rel=1e-3)
    assert pts[("fp16", 32 * 1024, 1024, 128)].source == "user-trace-2025-01-02"  # batch folded into m
    assert len(acc.calibration.gemm_shapes) == 7 + 2  # the azure points are kept
    user_attn = [p for p in acc.calibration.attention if p.source == "user-trace-2025-01-02"]
    assert [(p.kernel, p.direction, p.causal, p.seq_len) for p in user_attn] == [("sdpa-flash", "fwd", True, 2048)]
    assert out.read_text().startswith("# NVIDIA A100 SXM4 80GB")  # leading comment kept

    # a second import of the same shape replaces the point instead of adding one
    apply_to_spec(out, gemm=[{**gemm[0], "achieved": "200 TFLOP/s"}], source_note="again", date="2025-01-03")
    acc2 = parse_model(Accelerator, read_yaml(out), out)
    same = [p for p in acc2.calibration.gemm_shapes if (p.precision, p.m, p.n, p.k) == ("bf16", 4096, 11008, 4096)]
    assert len(same) == 1 and same[0].achieved == "200 TFLOP/s"


def test_apply_nccl_curve_and_catalogue_loads_it(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    shutil.copytree(SPECS, specs)
    coll, n, pts = parse_nccl_tests(NCCL_LOG.read_text())
    curve = curve_from_nccl(coll, n, pts, source="")
    node_path = specs / "nodes" / "dgx-a100-80gb.yaml"
    apply_to_spec(curve=curve, node_yaml_path=node_path, source_note="fixture log", date="2025-01-02")
    node = parse_model(Node, read_yaml(node_path), node_path)
    c = node.intra_node.curves[0]
    assert (c.collective, c.group_size, c.source) == ("all_reduce", 8, "user-nccl-2025-01-02")
    assert len(node.intra_node.curves) == 1  # the old 8-rank all_reduce curve is replaced
    assert [p.size for p in c.points][:2] == ["512 B", "4 KiB"] and c.points[-1].size == "1 GiB"
    assert c.points[-1].busbw_Bps == pytest.approx(223.74e9)

    from perfmodel.hardware import catalog

    monkeypatch.setenv("PERFMODEL_SPECS", str(specs))
    cat = catalog._load(str(specs))  # the whole edited catalogue still loads, ids and links checked
    assert cat.nodes["dgx-a100-80gb"].intra_node.curves[0].points[-1].busbw == "223.74 GB/s"


def test_cli_trace_and_nccl_log(tmp_path, capsys):
    from perfmodel.cli import main

    out = tmp_path / "acc.yaml"
    assert main(["calibrate", "--trace", str(DATA / "gpu_trace_synthetic.json"), "--accelerator", "a100-sxm4-80gb",
                 "--out", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["accelerator"] == str(out) and len(res["gemm"]) == 2
    acc = parse_model(Accelerator, read_yaml(out), out)
    assert any(p.m == 4096 and p.n == 11008 for p in acc.calibration.gemm_shapes)

    nout = tmp_path / "node.yaml"
    assert main(["calibrate", "--nccl-log", str(NCCL_LOG), "--node", "dgx-a100-80gb", "--out", str(nout)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["curve"]["group_size"] == 8 and res["curve"]["collective"] == "all_reduce"
    node = parse_model(Node, read_yaml(nout), nout)
    assert node.intra_node.curves[0].points[-1].busbw_Bps == pytest.approx(223.74e9)

    assert main(["calibrate", "--trace", str(DATA / "gpu_trace_synthetic.json")]) == 2  # no --accelerator
