"""The corpus of bad inputs (tests/bad_inputs/): every one gets its expected message and none a
traceback. Command lines exit 2 with one error line (a JSON object on stdout with --json); a
damaged spec or workload file is left out with its file, field and allowed range while the
others load; a damaged runs row becomes an error row while every other row is still predicted."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel import cli
from perfmodel.errors import SpecError, UnitWarning, UnknownIdError, quote
from perfmodel.hardware import catalog
from perfmodel.hardware.limits import RULES
from perfmodel.hardware.specs import Accelerator, Sourced
from perfmodel.hardware.system_specs import Cluster, Fabric, Node
from perfmodel.validation.predict import validate_file
from perfmodel.validation.runs import OUTPUT_COLUMNS
from perfmodel.workload import catalog as wcatalog

CORPUS = Path(__file__).parent / "bad_inputs"
REPO = Path(__file__).resolve().parents[1]
HUGE = "x" * 1_000_000


@pytest.fixture(autouse=True)
def _fresh_catalogues():
    """Every test starts and ends with the built-in catalogues only."""
    catalog.clear_added_specs()
    wcatalog.clear_added_workloads()
    yield
    catalog.clear_added_specs()
    wcatalog.clear_added_workloads()
    catalog._load.cache_clear()
    wcatalog._load.cache_clear()


def _main(args: list[str]) -> int:
    """cli.main's exit status: argument errors exit through SystemExit(2), as argparse's do."""
    try:
        return cli.main(args)
    except SystemExit as e:
        return int(e.code or 0)


def _load(name: str) -> Any:
    return yaml.safe_load((CORPUS / name).read_text())


# ---- command lines ---------------------------------------------------------------------------
CLI_CASES = _load("cli.yaml")


@pytest.mark.parametrize("case", CLI_CASES, ids=[" ".join(c["args"]) or "(none)" for c in CLI_CASES])
def test_cli_argument_is_refused_with_its_message(case: dict[str, Any], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = _main(list(case["args"]))
    out, err = capsys.readouterr()
    assert rc == 2
    assert case["message"] in err, err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "out.json").exists()  # --trace with the analytic engine writes nothing


@pytest.mark.parametrize("case", CLI_CASES, ids=[" ".join(c["args"]) or "(none)" for c in CLI_CASES])
def test_cli_error_with_json_is_a_json_object_on_stdout(case: dict[str, Any], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = _main([*case["args"], "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    payload = json.loads(out)
    assert set(payload) == {"error"} and payload["error"]["type"] and payload["error"]["message"]
    if case["args"] and case["args"][0] in ("estimate", "search", "compare"):  # the commands that take --json
        assert case["message"] in payload["error"]["message"]


def test_json_spec_error_names_file_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text("id: m\nname: m\nname: m2\n")
    assert _main(["estimate", str(bad), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err == {"type": "SpecError", "message": err["message"], "file": str(bad), "field": "name"}
    assert "appears twice (lines 2 and 3)" in err["message"]


def test_gpus_is_the_gpu_count_and_no_option_is_taken_by_its_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's abbreviations had read `--gpus 8` as `--gpus-per-node 8`: one GPU, silently
    assert _main(["estimate", "gpt2-124m", "--gpus", "8", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["plan"]
    assert gpus["dp"] * gpus["tp"] * gpus["pp"] * gpus["cp"] == 8


def test_version_and_broken_pipe_end_without_a_traceback() -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    v = subprocess.run([sys.executable, "-m", "perfmodel", "--version"], capture_output=True, text=True, env=env, check=False)
    assert v.returncode == 0 and v.stdout.strip() == f"perfmodel {perfmodel.__version__}"
    # `perfmodel list | head -0`: the reader is gone before the first line is written
    with subprocess.Popen([sys.executable, "-m", "perfmodel", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env) as p:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait() == 141 and "Traceback" not in err and "BrokenPipe" not in err


def test_trace_with_des_writes_the_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    assert _main(["estimate", "gpt2-124m", "--engine", "des", "--n-gpus", "2", "--trace", str(trace)]) == 0
    spans = [e for e in json.loads(trace.read_text()) if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)


def test_n_gpus_and_dp_that_agree_run_on_that_many(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["estimate", "gpt2-124m", "--n-gpus", "8", "--dp", "4", "--tp", "2", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["n_gpus"] == 8 and (est["plan"]["dp"], est["plan"]["tp"]) == (4, 2)


# ---- hardware specs ---------------------------------------------------------------------------
MINI = {"accelerators": "a100-sxm4-80gb", "nodes": "dgx-a100-80gb", "fabrics": "ib-hdr"}
# what still loads when one file of the mini catalogue is bad (a node needs its accelerator and fabric)
SURVIVORS = {"accelerators": ["fabrics"], "nodes": ["accelerators", "fabrics"], "fabrics": ["accelerators"]}
SPEC_CASES = _load("specs.yaml")


def _mini(root: Path) -> None:
    for kind in catalog.KINDS:
        (root / kind).mkdir(parents=True)
    for kind, name in MINI.items():
        shutil.copy(REPO / "hardware_specs" / kind / f"{name}.yaml", root / kind / f"{name}.yaml")


def _set(data: Any, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        data = data[int(part)] if isinstance(data, list) else data[part]
    value = [HUGE if v == "HUGE" else v for v in value] if isinstance(value, list) else value
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = HUGE if value == "HUGE" else value


def _damage(path: Path, case: dict[str, Any]) -> None:
    if "set" in case:
        data = yaml.safe_load(path.read_text())
        for k, v in case["set"].items():
            _set(data, k, v)
        path.write_text(yaml.safe_dump(data, sort_keys=False, width=10**9))
    if "append" in case:
        path.write_bytes(path.read_bytes() + case["append"].encode(case.get("encoding", "utf-8")))
    if "replace" in case:
        old, new = case["replace"]
        path.write_bytes(path.read_text().replace(old, new).encode(case.get("encoding", "utf-8")))
    if "text" in case:
        path.write_text(case["text"])


def _lookup(cat: catalog.Catalog, kind: str, spec_id: str) -> Any:
    return {"accelerators": cat.accelerator, "nodes": cat.node, "fabrics": cat.fabric}[kind](spec_id)


@pytest.mark.parametrize("case", SPEC_CASES, ids=[c["name"] for c in SPEC_CASES])
def test_bad_spec_file_is_left_out_with_file_field_and_range(case: dict[str, Any], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _mini(tmp_path)
    path = tmp_path / case["file"]
    _damage(path, case)
    monkeypatch.setenv("PERFMODEL_SPECS", str(tmp_path))
    catalog._load.cache_clear()
    cat = catalog.load_catalog()
    first = cat.problems[0]
    assert (first.file, first.field) == (str(path), case["field"]), str(first)
    assert case["message"] in str(first)
    assert len(str(first)) <= case.get("max_message_chars", 3000)
    kind = case["file"].split("/")[0]
    for other in SURVIVORS[kind]:
        assert MINI[other] in getattr(cat, other), f"{other} should still load"
    with pytest.raises(SpecError) as e:  # asking for the bad id raises its own error
        _lookup(cat, kind, path.stem)
    assert e.value.file == str(path)


def test_oversized_spec_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: " + "x" * (5 * 2**20) + "\n")
    with pytest.raises(SpecError, match=r"big\.yaml: field '\(file\)': is 5,242,887 bytes"):
        catalog.read_yaml(path)


def test_size_in_bits_warns_naming_file_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _mini(tmp_path)
    path = tmp_path / "accelerators" / "a100-sxm4-80gb.yaml"
    _damage(path, {"set": {"hbm_capacity.value": "640 Gb"}})
    monkeypatch.setenv("PERFMODEL_SPECS", str(tmp_path))
    catalog._load.cache_clear()
    with pytest.warns(UnitWarning) as rec:
        cat = catalog.load_catalog()
    msg = str(rec[0].message)
    assert str(path) in msg and "hbm_capacity: '640 Gb' is read as bits (80 GB)" in msg and "write 'GB'" in msg
    assert cat.accelerator("a100-sxm4-80gb").hbm_bytes == 80e9  # read as written, but not without a word


def test_every_number_field_of_the_spec_models_has_a_rule() -> None:
    """A new Sourced field must say its dimension and range (hardware/limits.py RULES)."""
    def sourced_fields(cls: Any, seen: set[Any]) -> set[str]:
        names: set[str] = set()
        if cls in seen:
            return names
        seen.add(cls)
        for name, f in cls.model_fields.items():
            inner = catalog._inner_model(f.annotation)
            if inner is Sourced:
                names.add(name)
            elif inner is not None:
                names |= sourced_fields(inner, seen)
        return names

    names = set().union(*(sourced_fields(c, set()) for c in (Accelerator, Node, Fabric, Cluster)))
    assert names and not names - set(RULES), f"fields without a rule in hardware/limits.py: {sorted(names - set(RULES))}"


def test_shipped_catalogues_have_no_problems() -> None:
    assert catalog.load_catalog().problems == []
    assert wcatalog.workload_problems() == []


# ---- user catalogues: --specs / --workloads ----------------------------------------------------------
def _user_specs(root: Path) -> Path:
    """A user directory with a renamed A100 (my-a100), one bad accelerator and one clashing id."""
    acc = yaml.safe_load((REPO / "hardware_specs/accelerators/a100-sxm4-80gb.yaml").read_text())
    (root / "accelerators").mkdir(parents=True)
    acc.update(id="my-a100", name="my A100 with half the memory")
    acc["hbm_capacity"]["value"] = "40 GB"
    (root / "accelerators" / "my-a100.yaml").write_text(yaml.safe_dump(acc))
    bad = dict(acc, id="bad-gpu", tdp={"value": "80 GB", "source": "datasheet"})
    (root / "accelerators" / "bad-gpu.yaml").write_text(yaml.safe_dump(bad))
    (root / "accelerators" / "h100-sxm5-80gb.yaml").write_text(yaml.safe_dump(dict(acc, id="h100-sxm5-80gb")))
    return root


def test_specs_dir_adds_to_the_builtin_catalogue(tmp_path: Path) -> None:
    root = _user_specs(tmp_path / "mine")
    problems = perfmodel.add_specs_dir(root)
    assert sorted(Path(p.file or "").name for p in problems) == ["bad-gpu.yaml", "h100-sxm5-80gb.yaml"]
    bad = next(p for p in problems if "bad-gpu" in (p.file or ""))
    assert bad.field == "tdp" and "'80 GB' is a size, not a power" in str(bad)
    clash = next(p for p in problems if "h100" in (p.file or ""))
    assert "already defined by" in str(clash) and "hardware_specs" in str(clash)
    cat = catalog.load_catalog()
    assert "my-a100" in cat.accelerators and "a100-sxm4-80gb" in cat.accelerators
    assert cat.accelerator("h100-sxm5-80gb").name.startswith("NVIDIA")  # the built-in one is kept
    with pytest.raises(SpecError, match=r"bad-gpu\.yaml: field 'tdp'"):
        cat.accelerator("bad-gpu")
    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    mine = perfmodel.estimate("gpt2-124m", "my-a100", plan)
    base = perfmodel.estimate("gpt2-124m", "a100-sxm4-80gb", plan)
    assert (mine.accelerator, mine.hbm_bytes, base.hbm_bytes) == ("my-a100", 40e9, 80e9)


def test_specs_dir_without_spec_folders_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="has none of the sub-folders"):
        perfmodel.add_specs_dir(tmp_path)


def test_cli_specs_and_workloads_dirs_and_a_workload_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = _user_specs(tmp_path / "specs")
    wl = tmp_path / "wl"
    wl.mkdir()
    base = _load("workloads.yaml")["base"]
    (wl / "tiny.yaml").write_text(yaml.safe_dump(dict(base, id="tiny")))
    (wl / "broken.yaml").write_text(yaml.safe_dump(dict(base, id="broken", hidden=0)))
    rc = _main(["estimate", "tiny", "--hardware", "my-a100", "--specs", str(specs), "--workloads", str(wl), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["accelerator"] == "my-a100" and json.loads(out)["workload"] == "tiny"
    assert "warning: left out" in err and "bad-gpu.yaml: field 'tdp'" in err and "broken.yaml: field 'hidden'" in err
    assert "Traceback" not in err
    rc = _main(["estimate", str(wl / "tiny.yaml"), "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["workload"] == "tiny"
    rc = _main(["estimate", "broken", "--workloads", str(wl)])
    assert rc == 2 and "broken.yaml: field 'hidden'" in capsys.readouterr().err


# ---- workloads ----------------------------------------------------------------------------------------
WL_CORPUS = _load("workloads.yaml")


@pytest.mark.parametrize("case", WL_CORPUS["cases"], ids=[c["name"] for c in WL_CORPUS["cases"]])
def test_bad_workload_file_is_left_out_with_file_and_field(case: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(dict(WL_CORPUS["base"], id="good")))
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(WL_CORPUS["base"], sort_keys=False))
    _damage(path, case)
    problems = wcatalog.add_workloads_dir(tmp_path)
    assert len(problems) == 1 and problems[0].file == str(path) and problems[0].field == case["field"], problems
    assert case["message"] in str(problems[0])
    assert len(str(problems[0])) <= case.get("max_message_chars", 3000)
    assert "good" in wcatalog.load_workloads()
    with pytest.raises(SpecError):
        wcatalog.get_workload("t")


def test_unknown_workload_is_still_unknown() -> None:
    with pytest.raises(UnknownIdError, match="or the path of a workload YAML file"):
        wcatalog.get_workload("no-such")


# ---- runs files ---------------------------------------------------------------------------------------
EXPECTED_ROWS = _load("runs_expected.yaml")


def _check_rows(preds: list[dict[str, str]], expected: list[dict[str, str]]) -> None:
    assert len(preds) == len(expected)
    for p, e in zip(preds, expected, strict=True):
        assert (p["run_id"], p["status"]) == (e["run_id"], e["status"]), p
        assert e["message"] in p["message"], (e, p)


def _read_out(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        r = csv.DictReader(f)
        assert r.fieldnames == OUTPUT_COLUMNS
        return list(r)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16"])
def test_damaged_runs_rows_become_error_rows(encoding: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_bytes((CORPUS / "runs_damaged.csv").read_text().encode(encoding))
    out = tmp_path / "pred.csv"
    preds = validate_file(runs, out)
    _check_rows(preds, EXPECTED_ROWS)
    _check_rows(_read_out(out), EXPECTED_ROWS)


def test_latin1_byte_spoils_only_its_own_row(tmp_path: Path) -> None:
    text = (CORPUS / "runs_damaged.csv").read_text()
    lines = text.splitlines(keepends=True)
    header, control = lines[0], lines[1]
    data = (header + control.replace("control row", "contr\xf4le row")  # in notes: not read, row still ok
            + control.replace("ok-control", "latin1-accelerator").replace("a100-sxm4-80gb", "a100-sxm4-80gb\xe9")
            + control.replace("ok-control", "caf\xe9-run"))
    runs = tmp_path / "runs.csv"
    runs.write_bytes(data.encode("latin-1"))
    preds = validate_file(runs, tmp_path / "pred.csv")
    assert [p["status"] for p in preds] == ["ok", "error", "error"]
    assert "column accelerator: byte 0xe9" in preds[1]["message"] and "save the file as UTF-8" in preds[1]["message"]
    assert preds[2]["run_id"] == "caf\ufffd-run" and "column run_id: byte 0xe9" in preds[2]["message"]
    assert len(_read_out(tmp_path / "pred.csv")) == 3


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_validate_with_report_on_damaged_runs_exits_0(encoding: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_bytes((CORPUS / "runs_damaged.csv").read_text().encode(encoding))
    rc = _main(["validate", "--runs", str(runs), "--out", str(tmp_path / "p.csv"), "--report", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err
    assert f"{len(EXPECTED_ROWS)} rows read, 1 predicted, {len(EXPECTED_ROWS) - 1} errors" in err


@pytest.mark.parametrize("text, message", [
    ("source,model\nx,gpt2-124m\n", "header lacks the required column run_id"),
    ("run_id,tp,tp\nx,1,2\n", "header repeats column(s) ['tp']"),
    ("run_id,notes\nx," + "n" * 200_000 + "\n", "after line 1: not readable as CSV (field larger than field limit"),
])
def test_runs_file_that_cannot_be_read_names_why(text: str, message: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(text)
    rc = _main(["validate", "--runs", str(runs), "--out", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and str(runs) in err and "Traceback" not in err


# ---- units: one convention per output -------------------------------------------------------------------
def test_summary_quotes_memory_in_one_unit(capsys: pytest.CaptureFixture[str]) -> None:
    est = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", perfmodel.ParallelPlan(dp=8, global_batch=8))
    text = est.summary()
    assert not est.fits and "GiB" not in text and "MiB" not in text
    assert "80 GB of HBM" in text and f"{est.memory_per_gpu_bytes / 1e9:.3g} GB per GPU" in text


def test_quote_clips_huge_values() -> None:
    assert len(quote(HUGE)) < 500 and "(1,000,000 characters in all)" in quote(HUGE)
    assert len(quote({"a": [HUGE] * 1000})) < 1000


def test_ambiguous_units_are_named() -> None:
    from perfmodel.units import ambiguity

    assert "read as bits (10 GB)" in (ambiguity("80 Gb", "bytes") or "")
    assert "'KB' is read as 1000 B" in (ambiguity("64 KB", "bytes") or "")
    assert ambiguity("400 Gb/s", "bytes_per_s") is None  # network rates are quoted in bits
    assert ambiguity("80 GiB", "bytes") is None and ambiguity("80 GB", "bytes") is None


# ---- property: no cell value costs the row its output row, or raises ----------------------------------
_CONTROL = next(csv.DictReader((CORPUS / "runs_damaged.csv").read_text().splitlines()))
_CELL = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["0", "-1", "1e400", "inf", "-inf", "nan", "2.5", "1e12", "  7 ", "1_000", "0x10", "\udce9"]),
    st.integers(-10, 10**8).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(col=st.sampled_from([c for c in _CONTROL if c not in ("notes", "source")]), value=_CELL)
def test_any_cell_value_gives_an_ok_or_error_row(col: str, value: str) -> None:
    from perfmodel.validation.predict import predict_row

    row = dict(_CONTROL, **{col: value.strip()})
    out = predict_row(row, wcatalog.load_workloads())
    assert list(out) == OUTPUT_COLUMNS and out["status"] in ("ok", "error")
    assert "internal error" not in out["message"], out
    if out["status"] == "error":
        assert out["message"] and len(out["message"]) < 2000
    else:
        assert float(out["predicted_step_time_s"]) > 0


@settings(max_examples=300, deadline=None)
@example(value="1e308 PFLOP/s", dim="flop_per_s")
@given(value=st.one_of(st.text(max_size=30), st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                       st.from_regex(r"-?[0-9.e+]{1,8} ?[kKMGTPE]?i?(FLOP/s|B/s|b/s|B|b|W|us|GHz)", fullmatch=True)),
       dim=st.sampled_from(["flop_per_s", "bytes_per_s", "bytes", "seconds", "watts", "hertz", "dimensionless"]))
def test_any_quantity_text_parses_finite_or_raises_spec_error(value: object, dim: Any) -> None:
    from perfmodel.units import parse_quantity

    try:
        v = parse_quantity(value, dim, "f")
    except SpecError as e:
        assert e.field == "f" and len(str(e)) < 1500
    else:
        assert math.isfinite(v)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=st.fixed_dictionaries({k: st.integers(1, 16) for k in ("--tp", "--pp", "--cp", "--dp", "--micro-batch", "--vp")}),
       gb=st.integers(1, 64), n=st.one_of(st.none(), st.integers(1, 64)),
       engine=st.sampled_from(["analytic", "des"]))
def test_any_estimate_layout_gives_a_result_or_one_error_line(layout: dict[str, int], gb: int, n: int | None,
                                                              engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "gpt2-124m", "--global-batch", str(gb), "--engine", engine, "--json"]
    args += [x for k, v in layout.items() for x in (k, str(v))] + (["--n-gpus", str(n)] if n else [])
    rc = _main(args)
    out = json.loads(capsys.readouterr().out)
    assert (rc, set(out) == {"error"}) in ((0, False), (2, True)), out
    if rc == 0:
        assert out["step_time_s"] > 0 and out["n_gpus"] == layout["--dp"] * layout["--tp"] * layout["--pp"] * layout["--cp"]


def test_list_names_each_file_left_out_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = _user_specs(tmp_path / "specs")
    assert _main(["list", "hardware", "--specs", str(specs)]) == 0
    out, err = capsys.readouterr()
    assert "my-a100" in out and "bad-gpu" not in out
    assert err.count("bad-gpu.yaml") == 1 and err.count("h100-sxm5-80gb.yaml: field 'id'") == 1


def test_a_boolean_is_not_an_integer(tmp_path: Path) -> None:
    """pydantic's lax mode read true as 1: `num_layers: true` built a one-layer model and
    ParallelPlan(dp=True) ran dp 1. Both are refused, naming the field."""
    with pytest.raises(perfmodel.LayoutError, match=r"invalid parallel plan: dp: true is a boolean; allowed: an integer"):
        perfmodel.ParallelPlan(dp=True)
    assert perfmodel.ParallelPlan(sequence_parallel=True, tp=2).sequence_parallel  # a bool field stays a bool
    spec = yaml.safe_load((REPO / "workloads" / "gpt2-124m.yaml").read_text())
    bad = tmp_path / "m.yaml"
    bad.write_text(yaml.safe_dump({**spec, "num_layers": True}))
    with pytest.raises(SpecError, match=r"m.yaml: field 'num_layers': true is a boolean; expected an integer"):
        wcatalog.load_workload_file(bad)


@pytest.mark.parametrize(("args", "message"), [
    (("gpt2-124m", "h100-sxm5-80gb", None),
     "plan must be a perfmodel.ParallelPlan, e.g. ParallelPlan(dp=8, global_batch=64); got NoneType"),
    (("gpt2-124m", "h100-sxm5-80gb", {"dp": 2}),
     "plan must be a perfmodel.ParallelPlan, e.g. ParallelPlan(dp=8, global_batch=64); got dict"),
    (("gpt2-124m", None, "plan"), "plan must be a perfmodel.ParallelPlan"),
    (("gpt2-124m", None, perfmodel.ParallelPlan()), "cluster must be an accelerator, node or cluster id or a System; got NoneType"),
    ((123, "h100-sxm5-80gb", perfmodel.ParallelPlan()), "workload must be a workload id, a YAML path or a ModelSpec; got int"),
])
def test_library_arguments_of_the_wrong_kind_are_a_type_error(args: tuple[Any, ...], message: str) -> None:
    """They used to be AttributeErrors from deep inside ('NoneType' object has no attribute 'world')."""
    with pytest.raises(TypeError) as e:
        perfmodel.estimate(*args)
    assert str(e.value).startswith(message)
