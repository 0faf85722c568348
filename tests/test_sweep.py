"""`perfmodel sweep`: the rows are the planner's own top layouts, identical on the local (processes)
and Ray backends; re-running skips finished points; `perfmodel report` renders the Parquet."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfmodel.cli import main
from perfmodel.errors import SpecError
from perfmodel.planning import search
from perfmodel.planning.space import SearchSpace
from perfmodel.planning.sweep import KEY, Sweep, load_sweep, points, run_point, run_sweep

SWEEP_YAML = """\
workloads: [gpt3-125m, llama3.2-1b]
hardware: [h100-sxm5-80gb, a100-sxm4-80gb]
n_gpus: [8, 16]
global_batch: 64
seq_len: 2048
top: 3
space: {micro_batch: [1, 2], vp: [1, 2]}
"""


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(SWEEP_YAML)
    return p


def test_rows_are_the_planners_top_layouts(sweep_file: Path) -> None:
    sweep = load_sweep(sweep_file)
    pts = points(sweep)
    assert len(pts) == 2 * 2 * 2 and pts[0].key == ("gpt3-125m", "h100-sxm5-80gb", 8, 64, 2048, "bf16")
    rows = run_point(pts[0], sweep)
    res = search("gpt3-125m", "h100-sxm5-80gb", 8, 64, seq_len=2048, space=SearchSpace(micro_batch=(1, 2), vp=(1, 2)))
    assert list(rows["rank"]) == [0, 1, 2] and (rows["status"] == "ok").all()
    assert list(rows["step_time_s"]) == list(res.table["step_time_s"].head(3))
    assert list(rows["tp"]) == list(res.table["tp"].head(3)) and (rows["n_layouts"] == res.n_layouts).all()
    assert rows["params"].iloc[0] > 1.2e8


def test_local_processes_equal_serial_and_rerun_skips(sweep_file: Path, tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file)
    serial = pd.concat([run_point(p, sweep) for p in points(sweep)], ignore_index=True)
    out = tmp_path / "r.parquet"
    summary = run_sweep(sweep, out, workers=2, progress=False)
    assert summary.startswith("8 points run (0 already")
    got = pd.read_parquet(out)
    pd.testing.assert_frame_equal(got, serial)
    again = run_sweep(sweep, out, workers=2, progress=False)
    assert again.startswith("0 points run (8 already")
    pd.testing.assert_frame_equal(pd.read_parquet(out), serial)


def test_interrupted_sweep_finishes_only_the_rest(sweep_file: Path, tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file)
    out = tmp_path / "r.parquet"
    run_sweep(sweep.model_copy(update={"n_gpus": (8,)}), out, workers=1, progress=False)
    assert run_sweep(sweep, out, workers=1, progress=False).startswith("4 points run (4 already")
    full = pd.read_parquet(out)
    assert len(full.drop_duplicates(KEY)) == 8 and len(full) == 8 * 3


def test_ray_backend_gives_identical_rows(sweep_file: Path, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    sweep = load_sweep(sweep_file)
    local, remote = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    run_sweep(sweep, local, backend="local", workers=2, progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_sweep(sweep, remote, backend="ray", progress=False)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(pd.read_parquet(remote), pd.read_parquet(local))


def test_des_seeds_and_points_without_a_fit(tmp_path: Path) -> None:
    sweep = Sweep(workloads=("llama3-70b",), hardware=("h100-sxm5-80gb",), n_gpus=(1, 64), global_batch=(64,),
                  seq_len=(4096,), top=2, space=SearchSpace(micro_batch=(1,), vp=(1,), zero_stage=(1,)),
                  des={"seeds": (0, 1, 2), "jitter_sigma": 0.1, "top": 1})
    out = tmp_path / "r.parquet"
    run_sweep(sweep, out, workers=1, progress=False)
    df = pd.read_parquet(out)
    none = df[df["n_gpus"] == 1]
    assert list(none["status"]) == ["no_layout_fits"] and list(none["rank"]) == [-1]  # 70B in one 80 GB GPU
    ok = df[df["n_gpus"] == 64].reset_index(drop=True)
    assert len(ok) == 2
    lo, mean, hi = ok.loc[0, ["des_step_time_min_s", "des_step_time_mean_s", "des_step_time_max_s"]]
    assert lo < hi and lo <= mean <= hi  # three seeds of 10 % jitter differ
    assert pd.isna(ok.loc[1, "des_step_time_mean_s"])  # only the best layout re-scored (des.top 1)
    slow = tmp_path / "slow.parquet"  # the same seeds with the last stage's compute 1.5x slower: every run slower
    assert sweep.des is not None
    run_sweep(sweep.model_copy(update={"des": sweep.des.model_copy(update={"straggler_factor": 1.5})}), slow,
              workers=1, progress=False)
    slow_ok = pd.read_parquet(slow).query("n_gpus == 64").reset_index(drop=True)
    assert slow_ok.loc[0, "des_step_time_min_s"] > hi
    assert slow_ok.loc[0, "step_time_s"] == ok.loc[0, "step_time_s"]  # the analytic ranking is untouched


def test_bad_sweep_files_are_named(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("workloads: [gpt3-125m]\nhardware: [h100-typo]\nn_gpus: 8\nglobal_batch: 8\n")
    with pytest.raises(SpecError, match="h100-typo"):
        points(load_sweep(p))
    p.write_text("workloads: [gpt3-125m]\nhardware: [h100-sxm5-80gb]\nn_gpus: 8\nglobal_batch: 8\ngpus: 3\n")
    with pytest.raises(SpecError, match="gpus"):
        load_sweep(p)


@pytest.mark.parametrize(("line", "message"), [
    ("seq_len: [0]", r"field 'seq_len': \[0\]; expected integers > 0, or null: the workload's own"),
    ("seq_len: [-5]", r"field 'seq_len': \[-5\]; expected integers > 0"),
    ("n_gpus: [true]", r"field 'n_gpus': \[True\]; expected integers > 0"),
    ("calibration: nosuch", r"field 'calibration': 'nosuch': .*no such file"),
    ("precision: [bf16", r"not valid YAML: line \d+, column \d+: .*\(while parsing a flow sequence from line 5\)"),
])
def test_sweep_file_checked_up_front(tmp_path: Path, line: str, message: str) -> None:
    """Each of these used to run: seq_len 0 silently as the workload's own 1024, -5 and an
    unknown profile as an error row per point in the Parquet file, true as n_gpus 1."""
    p = tmp_path / "s.yaml"
    base = {"workloads": "[gpt3-125m]", "hardware": "[h100-sxm5-80gb]", "n_gpus": "[8]", "global_batch": "[8]"}
    key = line.split(":")[0]
    p.write_text("".join(f"{k}: {v}\n" for k, v in base.items() if k != key) + line + "\n")
    with pytest.raises(SpecError, match=message):
        load_sweep(p)


def test_cli_sweep_and_report(sweep_file: Path, tmp_path: Path) -> None:
    out, page = tmp_path / "r.parquet", tmp_path / "r.html"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert main(["report", str(out), "--out", str(page)]) == 0
    text = page.read_text()
    assert "gpt3-125m, global batch 64, sequence 2048, bf16" in text and "a100-sxm4-80gb" in text
    assert text.count("<tr>") == 2 * (1 + 4)  # two sections (one per workload), each a header and 4 best rows


def test_best_view_is_what_the_app_shows(tmp_path):
    """The Compare page opens a sweep's Parquet through best_view: rank-0 rows only, fastest first
    within a workload and batch, memory in decimal GB; a file without the sweep columns names one."""
    import pandas as pd

    from perfmodel.errors import SpecError
    from perfmodel.planning.sweep_report import best_view

    rows = [dict(workload="w", hardware=h, n_gpus=8, global_batch=64, seq_len=2048, precision="bf16", rank=r,
                 status="ok", step_time_s=t, memory_bytes=40e9) for h, r, t in
            (("a100", 0, 2.0), ("a100", 1, 2.5), ("h100", 0, 1.0), ("h100", 1, 1.2))]
    path = tmp_path / "res.parquet"
    pd.DataFrame(rows).to_parquet(path)
    best, view = best_view(path)
    assert len(best) == 2 and list(view["hardware"]) == ["h100", "a100"]
    assert list(view["memory_gb"]) == [40.0, 40.0]
    pd.DataFrame([{"x": 1}]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(SpecError, match="missing column"):
        best_view(tmp_path / "bad.parquet")
