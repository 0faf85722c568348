"""`perfmodel validate`: the DESIGN.md contract, row by row."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.validation.runs import COLUMNS, OUTPUT_COLUMNS

BASE = {c: "" for c in COLUMNS}
PUBLIC = Path(__file__).resolve().parents[1] / "validation" / "runs_public.csv"


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**BASE, **r})


def _read(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


ROWS = [
    # GPT-3 175B, Megatron layout of Narayanan et al. 2021, all columns given
    {"run_id": "ok-full", "model": "gpt3-175b", "arch": "gpt", "seq_len": "2048", "global_batch": "1536", "micro_batch": "1",
     "tp": "8", "pp": "8", "dp": "16", "cp": "1", "ep": "1", "vp": "1", "sequence_parallel": "false", "zero_stage": "0",
     "recompute": "full", "precision": "bf16", "accelerator": "a100-sxm4-80gb", "n_gpus": "1024", "gpus_per_node": "8",
     "step_time_s": "25"},
    # architecture from columns, most cells empty -> documented defaults
    {"run_id": "defaults", "arch": "gpt", "n_layers": "12", "hidden": "768", "n_heads": "12", "vocab": "50257",
     "seq_len": "1024", "global_batch": "8", "n_gpus": "8"},
    {"run_id": "bad-tp", "arch": "gpt", "n_layers": "12", "hidden": "768", "n_heads": "12", "vocab": "50257",
     "seq_len": "1024", "global_batch": "8", "tp": "5", "n_gpus": "5"},
    {"run_id": "bad-acc", "model": "gpt3-175b", "seq_len": "2048", "global_batch": "8", "tp": "8", "n_gpus": "8",
     "accelerator": "no-such-gpu"},
    {"run_id": "unknown-system", "model": "gpt3-175b", "seq_len": "2048", "global_batch": "8", "tp": "8", "n_gpus": "8",
     "accelerator": "a100-sxm4-80gb", "system": "nowhere-cluster"},
    {"run_id": "no-fit", "model": "gpt3-175b", "seq_len": "2048", "global_batch": "8", "n_gpus": "8",
     "accelerator": "a100-sxm4-80gb"},
    {"run_id": "bad-precision", "model": "gpt3-175b", "seq_len": "2048", "global_batch": "8", "tp": "8", "n_gpus": "8",
     "precision": "int3"},
]


@pytest.fixture()
def result(tmp_path):
    runs, out = tmp_path / "runs.csv", tmp_path / "pred.csv"
    _write(runs, ROWS)
    rc = main(["validate", "--runs", str(runs), "--out", str(out)])
    header, rows = _read(out)
    return rc, header, {r["run_id"]: r for r in rows}


def test_exit_zero_and_exact_columns(result):
    rc, header, rows = result
    assert rc == 0
    assert header == OUTPUT_COLUMNS
    assert list(rows) == [r["run_id"] for r in ROWS]  # one output row per input row, in order


def test_ok_row_has_numbers(result):
    _, _, rows = result
    r = rows["ok-full"]
    assert r["status"] == "ok"
    t = float(r["predicted_step_time_s"])
    assert 15 < t < 40  # Narayanan et al. measured about 25 s for this layout (not a tuned check)
    assert float(r["predicted_tokens_per_s"]) == pytest.approx(1536 * 2048 / t, rel=1e-4)
    assert 0 < float(r["predicted_mfu"]) < 1
    assert float(r["predicted_memory_per_gpu_bytes"]) > 1e9


def test_defaults_are_named(result):
    _, _, rows = result
    msg = rows["defaults"]["message"]
    assert rows["defaults"]["status"] == "ok"
    for d in ("micro_batch=1", "precision=bf16", "recompute=none", "zero_stage=0", "accelerator=a100-sxm4-80gb", "dp=8"):
        assert d in msg


def test_error_rows_say_why(result):
    _, _, rows = result
    assert rows["bad-tp"]["status"] == "error" and "tp 5" in rows["bad-tp"]["message"]
    assert rows["bad-acc"]["status"] == "error" and "no-such-gpu" in rows["bad-acc"]["message"]
    assert rows["bad-precision"]["status"] == "error" and "allowed values" in rows["bad-precision"]["message"]
    assert rows["bad-tp"]["predicted_step_time_s"] == ""


def test_unknown_system_falls_back_with_message(result):
    _, _, rows = result
    r = rows["unknown-system"]
    assert r["status"] == "ok" and "unknown system 'nowhere-cluster'" in r["message"]


def test_layout_that_does_not_fit_is_still_predicted(result):
    _, _, rows = result
    r = rows["no-fit"]
    assert r["status"] == "ok" and "does not fit" in r["message"]


def test_report_written(tmp_path):
    runs, out, rep = tmp_path / "runs.csv", tmp_path / "pred.csv", tmp_path / "report"
    more = [{**ROWS[0], "run_id": "ok-2", "global_batch": "768", "dp": "8", "n_gpus": "512", "step_time_s": "24"},
            {**ROWS[0], "run_id": "ok-3", "global_batch": "384", "dp": "4", "n_gpus": "256", "step_time_s": "23"}]
    _write(runs, [*ROWS[:2], *more])
    assert main(["validate", "--runs", str(runs), "--out", str(out), "--report", str(rep)]) == 0
    text = (rep / "report.md").read_text()
    assert "| overall |" in text and "Kendall" in text
    assert (rep / "validation.html").exists()


@pytest.mark.parametrize("only", ["error", "unmeasured"])
def test_report_of_rows_it_cannot_score_names_them(tmp_path, capsys, only):
    """A runs file whose one row is an error row (tp not dividing the heads) or has no measured
    step time: the report used to crash adding float NaN to text; now it says what it left out."""
    runs, out, rep = tmp_path / "runs.csv", tmp_path / "pred.csv", tmp_path / "report"
    row = {**ROWS[0], "run_id": "only", "model": "", "arch": "gpt", "n_layers": "2", "hidden": "128",
           "ffn_hidden": "512", "n_heads": "3" if only == "error" else "4", "n_kv_heads": "4", "vocab": "8192",
           "tp": "1", "pp": "1", "dp": "1", "cp": "1", "ep": "1", "vp": "1", "n_gpus": "1", "global_batch": "4",
           "micro_batch": "4", "seq_len": "64", "step_time_s": "" if only == "unmeasured" else "1.0"}
    _write(runs, [row])
    assert main(["validate", "--runs", str(runs), "--out", str(out)]) == 0
    with out.open() as f:
        pred = next(csv.DictReader(f))
    if only == "error":
        assert pred["message"] == ("RowError: architecture columns: field 'num_kv_heads': 4 does not divide num_heads 3; "
                                   "expected a divisor of num_heads")
    capsys.readouterr()
    assert main(["report", "--runs", str(runs), "--pred", str(out), "--out", str(rep)]) == 0
    text = (rep / "report.md").read_text()
    assert "| overall | 0 | n/a |" in text and "nan" not in text
    assert ("1 not predicted" if only == "error" else "1 without a measured step time") in text


def test_public_rows_predicted(tmp_path):
    """Every public row is read; the known-unpredictable ones say why."""
    out = tmp_path / "pred.csv"
    assert main(["validate", "--runs", str(PUBLIC), "--out", str(out)]) == 0
    _, rows = _read(out)
    assert len(rows) == 1260
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) >= 1200
    assert all(r["message"] for r in rows if r["status"] == "error")
    # the error summary of the report is computed on every public row (CI's validation subset)
    from perfmodel.validation.report import joined, metrics

    met = metrics(joined([PUBLIC], [out]))
    overall = met[met["source"] == "overall"].iloc[0]
    assert overall["rows"] == len(ok) and 0 < overall["mape"] < 1
    assert set(met["source"]) >= {"overall", "vTrain (MICRO'24) measured dataset"}


NEW_IDS = [  # issue 14: a runs file naming the new workloads predicts every row (Megatron-Bridge-like layouts)
    ("qwen3-30b-a3b", 8, {"dp": "8", "ep": "8"}), ("gpt-oss-120b", 64, {"dp": "64", "ep": "8"}),
    ("llama4-maverick", 256, {"tp": "4", "pp": "8", "dp": "8", "ep": "8", "sequence_parallel": "true"}),
    ("kimi-k2", 256, {"pp": "16", "dp": "16", "ep": "16"}), ("nemotron-h-56b", 64, {"tp": "8", "pp": "4", "dp": "2"}),
    ("nemotron3.5-lightning", 16, {"dp": "8", "cp": "2", "ep": "8"}), ("nemotron4-340b", 128, {"tp": "8", "pp": "8", "dp": "2"}),
]


def test_new_workload_ids_are_predicted(tmp_path):
    runs, out = tmp_path / "runs.csv", tmp_path / "pred.csv"
    _write(runs, [{"run_id": m, "model": m, "seq_len": "4096", "global_batch": "256", "micro_batch": "1",
                   "accelerator": "h100-sxm5-80gb", "n_gpus": str(n), "gpus_per_node": "8", "step_time_s": "1", **lay}
                  for m, n, lay in NEW_IDS])
    assert main(["validate", "--runs", str(runs), "--out", str(out)]) == 0
    _, rows = _read(out)
    assert [r["status"] for r in rows] == ["ok"] * len(NEW_IDS)
    assert all(float(r["predicted_step_time_s"]) > 0 for r in rows)


def test_framework_written_another_way_or_unknown_still_predicts(tmp_path):
    """'NeMo' is Megatron-Core's stack; a stack perfmodel has no mechanisms for runs as an empty
    framework, and each row's message says which it was."""
    base = {"model": "llama3-8b", "seq_len": "8192", "global_batch": "64", "n_gpus": "8", "precision": "bf16",
            "accelerator": "h100-sxm5-80gb", "recompute": "full"}
    rows = [{"run_id": "nemo", "framework": "NeMo", **base}, {"run_id": "mcore", "framework": "megatron-core", **base},
            {"run_id": "unknown", "framework": "primus", **base}, {"run_id": "empty", **base},
            {"run_id": "versioned", "framework": "NeMo 2.0 (24.07 container)", **base}]
    runs, out = tmp_path / "runs.csv", tmp_path / "pred.csv"
    _write(runs, rows)
    assert main(["validate", "--runs", str(runs), "--out", str(out)]) == 0
    got = {r["run_id"]: r for r in _read(out)[1]}
    assert all(r["status"] == "ok" for r in got.values())
    assert got["nemo"]["predicted_step_time_s"] == got["mcore"]["predicted_step_time_s"]
    assert "framework 'NeMo' read as megatron-core" in got["nemo"]["message"]
    # a version or a bracketed note says nothing about the mechanisms
    assert got["versioned"]["predicted_step_time_s"] == got["mcore"]["predicted_step_time_s"]
    assert "framework 'NeMo 2.0 (24.07 container)' read as megatron-core" in got["versioned"]["message"]
    assert got["unknown"]["predicted_step_time_s"] == got["empty"]["predicted_step_time_s"]
    assert "framework 'primus' is not one perfmodel models" in got["unknown"]["message"]


def test_report_names_a_pred_file_it_cannot_use(tmp_path, capsys):
    runs, rep = tmp_path / "runs.csv", tmp_path / "report"
    _write(runs, ROWS[:1])
    empty, other = tmp_path / "empty.csv", tmp_path / "other.csv"
    empty.write_text("")
    other.write_text("a,b\n1,2\n")
    assert main(["report", "--runs", str(runs), "--pred", str(empty), "--out", str(rep)]) == 2
    assert f"{empty}: field '(file)': is empty; expected the output of perfmodel validate" in capsys.readouterr().err
    assert main(["report", "--runs", str(runs), "--pred", str(other), "--out", str(rep)]) == 2
    assert (f"{other}: field 'run_id': missing column; expected the output of perfmodel validate, with columns "
            "run_id, status, predicted_step_time_s") in capsys.readouterr().err


def test_spreadsheet_numbers_are_read_and_a_minimal_file_is_reported(tmp_path):
    """Digit grouping ("1,024") and an mfu percentage are what a spreadsheet export writes; they
    predict as the plain numbers do. A runs file with only run_id, model, the layout and the
    measured time (no source, arch or recompute column) is reported, one source per file."""
    runs, out, rep = tmp_path / "mine.csv", tmp_path / "pred.csv", tmp_path / "report"
    with open(runs, "w", newline="") as f:
        f.write("run_id,model,seq_len,global_batch,tp,dp,accelerator,n_gpus,step_time_s,mfu,tokens_per_s\n"
                'plain,llama3-8b,8192,1024,8,8,h100,64,10,0.45,838861\n'
                'grouped,llama3-8b,8192,"1,024",8,8,h100,64,10,45%,"838,861"\n'
                'kilo,llama3-8b,8K,1024,8,8,h100,64,10,0.45,838861\n'
                'units,llama3-8b,8192,1024,8,8,h100,64,10000 ms,0.45,838.861k\n'
                'hours,llama3-8b,8192,1024,8,8,h100,64,0.003 h,0.45,838861\n')
    assert main(["validate", "--runs", str(runs), "--out", str(out)]) == 0
    rows = {r["run_id"]: r for r in _read(out)[1]}
    assert rows["grouped"]["status"] == "ok"
    assert rows["grouped"]["predicted_step_time_s"] == rows["plain"]["predicted_step_time_s"]
    # a sequence length as papers write it: 8K tokens = 8192, and the row says so
    assert rows["kilo"]["predicted_step_time_s"] == rows["plain"]["predicted_step_time_s"]
    assert "seq_len '8K' read as 8192 tokens" in rows["kilo"]["message"]
    # a measured value with its unit is that value; a unit the column does not take is an error naming them
    assert rows["units"]["status"] == "ok"
    assert rows["units"]["predicted_step_time_s"] == rows["plain"]["predicted_step_time_s"]
    assert rows["hours"]["status"] == "error"
    assert "column step_time_s: '0.003 h' is not a number (a number, or one followed by s / sec / secs / seconds / ms / msec)" \
        in rows["hours"]["message"]
    assert main(["report", "--runs", str(runs), "--pred", str(out), "--out", str(rep)]) == 0
    text = (rep / "report.md").read_text()
    assert "| mine.csv | 4 |" in text
    assert "nan" not in text.split("Worst rows:")[1] and "| tp8 dp8 gb1024 " in text  # blank cells stay blank


def test_arch_written_as_a_family_name_reads_as_its_arch(tmp_path):
    """`Llama` / `llama`, `GPT` / `gpt`, `Mixtral` / `moe` build the same model; an arch no family
    names (an encoder) stays an error that lists the spellings."""
    runs, out = tmp_path / "arch.csv", tmp_path / "pred.csv"
    cols = ("run_id,model,arch,n_layers,hidden,ffn_hidden,n_heads,n_kv_heads,vocab,n_experts,top_k,moe_ffn_hidden,"
            "seq_len,global_batch,dp,ep,accelerator,n_gpus\n")
    dense, moe = "16,2048,8192,16,8,32000,,,", "8,1024,4096,8,8,32000,8,2,2048"
    with open(runs, "w", newline="") as f:
        f.write(cols + "".join(f"{rid},m-{rid},{arch},{sizes},2048,64,8,{ep},h100,8\n" for rid, arch, sizes, ep in (
            ("a", "llama", dense, ""), ("b", "Llama-3", dense, ""), ("c", "moe", moe, "8"), ("d", "Mixtral", moe, "8"),
            ("e", "bert", dense, ""))))
    assert main(["validate", "--runs", str(runs), "--out", str(out)]) == 0
    rows = {r["run_id"]: r for r in _read(out)[1]}
    assert rows["a"]["predicted_step_time_s"] == rows["b"]["predicted_step_time_s"] != ""
    assert rows["c"]["predicted_step_time_s"] == rows["d"]["predicted_step_time_s"] != ""
    assert "arch 'Llama-3' read as llama" in rows["b"]["message"] and "arch 'Mixtral' read as moe" in rows["d"]["message"]
    assert rows["e"]["status"] == "error" and "allowed values: gpt, llama, moe" in rows["e"]["message"]


def test_a_column_the_format_does_not_read_is_named_with_the_one_it_means(tmp_path, capsys):
    # 'micro_batch_size' is not the format's micro_batch: its value is ignored and micro_batch
    # defaults to 1, which the warning says instead of predicting it without a word
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,model,micro_batch_size,global_batch,dp,n_gpus,accelerator,step_time_s,GBS,cost_usd\n"
                    "r1,llama3-8b,2,64,8,8,h100-sxm5-80gb,5.0,64,12.5\n")
    assert main(["validate", "--runs", str(runs), "--out", str(tmp_path / "pred.csv")]) == 0
    err = capsys.readouterr().err
    assert "column 'micro_batch_size' is not in the runs format and is ignored; did you mean 'micro_batch'?" in err
    # a spelling of a column the file also has is named without a guess; a free column is only named
    assert "column 'GBS' is not in the runs format and is ignored (columns" in err
    assert "column 'cost_usd' is not in the runs format and is ignored (columns" in err
    _, rows = _read(tmp_path / "pred.csv")
    assert rows[0]["status"] == "ok" and "micro_batch=1" in rows[0]["message"]


def test_the_format_s_own_files_draw_no_column_warning():
    from perfmodel.validation.runs import column_warnings

    root = Path(__file__).resolve().parents[1] / "validation"
    for name in ("runs_public.csv", "runs_published_extra.csv", "runs_judged_dgxc.csv", "runs_cpu.csv"):
        assert column_warnings(root / name) == [], name
