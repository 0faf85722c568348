"""The explorer's calibration selector, without a browser: an uploaded profile (a YAML written by
`perfmodel fit`) is validated and becomes the path every page passes as `calibration=`, and the
library calls behind the pages that used to ignore the selector (the Compare page's layout
sensitivity, the RL page's policy timings) follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfmodel
from perfmodel.app_fixes import add_uploaded_profile, profile_summary
from perfmodel.calibration.fit import fit
from perfmodel.calibration.profile import ProfileError, load_profile, save_profile
from perfmodel.parallel.plan import ParallelPlan

ROOT = Path(__file__).resolve().parents[1]
PLAN = ParallelPlan(dp=16, tp=8, pp=8, sequence_parallel=True, zero_stage=1, micro_batch=1, global_batch=1536,
                    recompute="selective", precision="bf16")  # the app's default sidebar on 1024 GPUs


def small_profile(out_dir: Path, rows: int = 8) -> Path:
    """A profile fitted by `perfmodel fit` on the first `rows` CPU runs measured here (about a second)."""
    runs = out_dir / "cpu-runs.csv"
    runs.write_text("".join((ROOT / "validation" / "runs_cpu.csv").read_text().splitlines(keepends=True)[: rows + 1]))
    res = fit([runs], "my-cluster")
    out = out_dir / "my-cluster.yaml"
    save_profile(res.profile, out, res.table)
    return out


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_profile(tmp_path_factory.mktemp("profile"))


def test_uploaded_profile_is_the_calibration_every_page_uses(fitted: Path, tmp_path: Path) -> None:
    data = fitted.read_bytes()
    path = add_uploaded_profile("my-cluster.yaml", data, tmp_path)
    assert Path(path).read_bytes() == data
    assert add_uploaded_profile("my-cluster.yaml", data, tmp_path) == path  # the same upload twice: one cache key
    changed = data.replace(b"name: my-cluster", b"name: my-cluster-2")
    assert changed != data and add_uploaded_profile("my-cluster.yaml", changed, tmp_path) != path  # a new upload: a new key
    up = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", PLAN, calibration=path)
    direct = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", PLAN, calibration=str(fitted))
    default = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", PLAN, calibration="default")
    assert up.step_time_s == direct.step_time_s and up.calibration == "my-cluster"
    assert up.step_time_s != pytest.approx(default.step_time_s, rel=1e-3)  # the fit moved the factors
    assert up.step_time_lo_s is not None and up.step_time_lo_s <= up.step_time_s <= up.step_time_hi_s


BAD = {
    "out of bounds": (b"parameters:\n  memory_bound: {fitted: 7.0}\n", "parameters.memory_bound.fitted"),
    "unknown parameter": (b"parameters:\n  warp_drive: {fitted: 1.0}\n", "parameters.warp_drive"),
    "not a number": (b"parameters:\n  memory_bound: {fitted: fast}\n", "parameters.memory_bound.fitted"),
    "no parameters": (b"name: x\nprovenance: {}\n", "`parameters:`"),
    "provenance a list": (b"parameters: {}\nprovenance: [a, b]\n", "provenance"),
    "bad interval": (b"parameters: {}\nintervals:\n  all: [0.2, -0.1]\n", "intervals.all"),
    "not YAML": (b"parameters: [unclosed\n", "not valid YAML"),
    "not UTF-8": (b"\xff\xfe\x00parameters", "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_profile_upload_names_the_upload_and_the_field(case: str, tmp_path: Path) -> None:
    data, field = BAD[case]
    with pytest.raises(ProfileError) as e:
        add_uploaded_profile("cluster-b.yaml", data, tmp_path)
    msg = str(e.value)
    assert msg.startswith("cluster-b.yaml: ") and field in msg, msg
    assert str(tmp_path) not in msg  # the upload's name, never the server's temporary path
    assert not any(p.is_file() for p in tmp_path.rglob("*"))  # a rejected file is not kept


def test_profile_summary_reports_the_fit_provenance(fitted: Path) -> None:
    prof = load_profile(str(fitted))
    s = profile_summary(prof)
    assert s["rows"] == 8 and "cpu-runs.csv" in s["fitted on"]
    loso = prof.provenance["leave_one_source_out_error"]
    assert s["cross-validated MAPE"] == f"{loso['mape']:.1%}"
    assert s["80 % interval held"] == f"{loso['interval_coverage']:.0%} of held-out runs"
    default = profile_summary(load_profile("default"))
    assert {"fitted on", "rows", "cross-validated MAPE"} <= set(default)
    # the shipped fit ran dense transformers and the CPU models, no MoE or Mamba-2 mixer
    assert default["mechanisms seen (families, token mixers)"] == "dense, lstm, mlp, tcn"
    assert profile_summary(load_profile("none")) == {}


def test_layout_sensitivity_follows_the_calibration(fitted: Path) -> None:
    from perfmodel.hardware.system import resolve_system
    from perfmodel.planning.purchase import layout_sensitivity
    from perfmodel.workload.catalog import get_workload

    spec, plan = get_workload("llama3-8b"), ParallelPlan(dp=8, tp=8, global_batch=256, micro_batch=1)
    system, _ = resolve_system("h100-sxm5-80gb", None, 64)
    bases = {}
    for cal in ("none", "default", str(fitted)):
        sens = layout_sensitivity(spec, system, plan, 20.0, calibration=cal)
        base = float(sens[sens["knob"] == "price"]["step_time_s"].iloc[0])  # the price rows hold the baseline step
        assert base == pytest.approx(perfmodel.estimate(spec, system, plan, engine="analytic", calibration=cal).step_time_s)
        bases[cal] = base
    assert len({round(b, 9) for b in bases.values()}) == 3


def test_rl_policy_timings_follow_the_calibration(fitted: Path) -> None:
    from perfmodel.engines.registry import DEFAULT_ENGINE
    from perfmodel.planning.rl import RLPipelineSpec, policy_timings

    spec = RLPipelineSpec(actor_workers=8, env_step_s=1e-3, unroll_length=16, learner_batch=8)
    plan = ParallelPlan(dp=1, global_batch=128, micro_batch=128)
    learn, infer = {}, {}
    for cal in ("none", "default", str(fitted)):
        inference_s, learn[cal] = policy_timings("ppo-mlp-humanoid", "h100-sxm5-80gb", spec, calibration=cal)
        infer[cal] = inference_s(64)
        est = perfmodel.estimate("ppo-mlp-humanoid", "h100-sxm5-80gb", plan, engine=DEFAULT_ENGINE, calibration=cal)
        assert learn[cal] == pytest.approx(est.step_time_s)  # the learner step is the calibrated estimate
    assert learn["none"] != pytest.approx(learn["default"], rel=1e-4)
    assert infer["none"] != pytest.approx(infer["default"], rel=1e-4)
