"""validation/runs_published_extra.csv (judged only, never fitted): the file is well formed and
`perfmodel validate` reads every row of it. No accuracy is asserted here: the file judges the model."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.validation.runs import COLUMNS, OPTIONAL_COLUMNS, OUTPUT_COLUMNS

EXTRA = Path(__file__).resolve().parents[1] / "validation" / "runs_published_extra.csv"
SOURCES = EXTRA.with_name("SOURCES_extra.md")
PREFIXES = ("mbridge-", "nemo2407-", "torchtitan-", "mleng-", "llmq-", "nemolong-")


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_extra_file_has_the_contract_columns_and_unique_ids() -> None:
    header, rows = _rows(EXTRA)
    public_header, _ = _rows(EXTRA.with_name("runs_public.csv"))
    # the public file's columns, then optional ones the contract reads (the `attention` kernel)
    assert header[:len(public_header)] == public_header
    assert set(header[len(public_header):]) <= set(OPTIONAL_COLUMNS)
    assert set(COLUMNS) <= set(header)
    ids = [r["run_id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert all(i.startswith(PREFIXES) for i in ids)
    assert 30 <= len(rows) <= 250
    text = SOURCES.read_text()
    for p in PREFIXES:
        assert f"`{p}" in text, f"SOURCES_extra.md does not describe the {p} rows"


def test_extra_step_time_is_the_published_throughput_inverted() -> None:
    # every row's step time was derived as global_batch * seq_len / tokens_per_s (both from the source)
    _, rows = _rows(EXTRA)
    for r in rows:
        step, tps = float(r["step_time_s"]), float(r["tokens_per_s"])
        tokens = int(r["global_batch"]) * int(r["seq_len"])
        assert step > 0 and tps > 0
        assert step * tps == pytest.approx(tokens, rel=2e-5), r["run_id"]
        assert r["source_detail"] and r["notes"], r["run_id"]


def test_validate_reads_every_extra_row(tmp_path: Path) -> None:
    out = tmp_path / "pred.csv"
    assert main(["validate", "--runs", str(EXTRA), "--out", str(out)]) == 0
    _, runs = _rows(EXTRA)
    header, pred = _rows(out)
    assert header[: len(OUTPUT_COLUMNS)] == OUTPUT_COLUMNS
    assert [p["run_id"] for p in pred] == [r["run_id"] for r in runs]
    for p in pred:
        assert p["status"] in ("ok", "error"), p
        if p["status"] == "ok":
            assert float(p["predicted_step_time_s"]) > 0, p["run_id"]
        else:
            assert p["message"].strip(), f"{p['run_id']}: error without a reason"


def test_nemolong_step_time_is_nemo_flop_count_over_published_tflops() -> None:
    # NeMo's llama3 model-FLOP formula as of the table's container (no causal halving), Llama 3 8B:
    # L 32, h 4096, ffn 14336, 32 heads, 8 groups, vocab 128256; step = F / (TFLOPS/GPU x GPUs)
    _, rows = _rows(EXTRA)
    long_rows = [r for r in rows if r["run_id"].startswith("nemolong-")]
    assert len(long_rows) == 8
    for r in long_rows:
        gbs, s, n = int(r["global_batch"]), int(r["seq_len"]), int(r["n_gpus"])
        flop = gbs * s * 32 * 4096**2 * (12 + 12 * 8 / 32 + 18 * 14336 / 4096 + 12 * s / 4096 + 6 * 128256 / (32 * 4096))
        assert float(r["step_time_s"]) == pytest.approx(flop / (float(r["tflops_per_gpu"]) * 1e12 * n), rel=1e-5)
        assert n == int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"])
    # the 1024K row by hand: 4 x 2^20 tokens, 3155.87 h^2-units per token-layer, 1608 TFLOPS on 256 GPUs
    last = long_rows[-1]
    assert float(last["step_time_s"]) == pytest.approx(4 * 2**20 * 32 * 4096**2 * 3155.87109375 / (1608e12 * 256), rel=1e-5)


def test_committed_cpu_runs_name_the_cpu_they_ran_on() -> None:
    # `host-cpu` means whatever CPU runs `perfmodel validate`: a committed file measured on one CPU
    # names that CPU's spec, or it is judged against another (a Zen 5 file once read as Zen 3, +31 %)
    from perfmodel.hardware.catalog import load_catalog

    cat = load_catalog()
    root = EXTRA.parent
    files = [root / "runs_cpu.csv", root / "runs_cpu_zen3.csv", root / "runs_cpu_zen5.csv",
             root / "cpu" / "runs_cpu_zen3_fp32.csv", root / "cpu" / "runs_cpu_zen5_fp32.csv"]
    for f in files:
        for r in _rows(f)[1]:
            assert r["accelerator"] != "host-cpu" and r["system"] != "host-node", (f.name, r["run_id"])
            acc = cat.accelerators[r["accelerator"]]
            assert acc.kind == "cpu" and acc.reference_node == r["system"], (f.name, r["run_id"])


def test_a_second_zen4_vm_is_predicted_through_its_own_quick_calibration(tmp_path) -> None:
    """validation/cpu/runs_cpu_zen4b.csv ran on another Zen 4 VM than host-cpu-zen4 describes (clock
    3.67 vs 3.40 GHz, triad 32.8 vs 24.5 GB/s): its rows name the spec its own `perfmodel calibrate`
    wrote (validation/cpu/specs_zen4b), which loads beside the catalogue, and through it every row is
    predicted, within the CPU target (15 %) on average."""
    from perfmodel.hardware.catalog import add_specs_dir, clear_added_specs, load_catalog
    from perfmodel.validation.predict import validate_file

    root = EXTRA.parent / "cpu"
    assert not add_specs_dir(root / "specs_zen4b")
    try:
        cat = load_catalog()
        rows = _rows(root / "runs_cpu_zen4b.csv")[1]
        for r in rows:
            assert cat.accelerators[r["accelerator"]].reference_node == r["system"] == "host-node-zen4b"
        out = tmp_path / "pred.csv"
        validate_file(root / "runs_cpu_zen4b.csv", out)
        pred = {r["run_id"]: r for r in _rows(out)[1]}
        errs = [float(pred[r["run_id"]]["predicted_step_time_s"]) / float(r["step_time_s"]) - 1 for r in rows]
        assert len(errs) == 28 and sum(map(abs, errs)) / len(errs) < 0.15
    finally:
        clear_added_specs()


DGXC = EXTRA.with_name("runs_judged_dgxc.csv")


def test_dgxc_file_has_the_contract_columns_and_predicts_every_row(tmp_path: Path) -> None:
    """validation/runs_judged_dgxc.csv (NVIDIA's DGX Cloud benchmarking recipes, judged only): the
    public file's columns then optional ones, unique dgxc- ids, a measured step time and where it
    came from on every row, a consistent layout, and `perfmodel validate` predicting every row."""
    header, rows = _rows(DGXC)
    public_header, _ = _rows(EXTRA.with_name("runs_public.csv"))
    assert header[: len(public_header)] == public_header
    assert set(header[len(public_header):]) <= set(OPTIONAL_COLUMNS)
    ids = [r["run_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 326 and all(i.startswith("dgxc-") for i in ids)
    for r in rows:
        assert float(r["step_time_s"]) > 0 and r["source_detail"] and r["notes"], r["run_id"]
        assert int(r["n_gpus"]) == int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"] or 1), r["run_id"]
    assert "`dgxc-0001` to `dgxc-0326`" in EXTRA.with_name("SOURCES_dgxc.md").read_text()
    out = tmp_path / "pred.csv"
    assert main(["validate", "--runs", str(DGXC), "--out", str(out)]) == 0
    pred = _rows(out)[1]
    assert [p["run_id"] for p in pred] == ids
    assert all(p["status"] == "ok" and float(p["predicted_step_time_s"]) > 0 for p in pred)
