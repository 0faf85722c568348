"""Calibration parameters, profiles, frameworks, the fit and the prediction intervals."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

import perfmodel
from perfmodel.calibration.fit import fit, read_fit_rows
from perfmodel.calibration.frameworks import FRAMEWORKS, NATIVE_HOST_FACTOR, FrameworkError, apply_framework, framework
from perfmodel.calibration.parameters import KNOBS, REGISTRY
from perfmodel.calibration.profile import (
    NONE,
    Profile,
    ProfileError,
    calibrated_system,
    load_profile,
    save_profile,
    step_time_interval,
    system_with_knobs,
)
from perfmodel.cli import main
from perfmodel.comm.collectives import intra_time_s
from perfmodel.compute.ops import attention_rate_flop_per_s, gemm_rate_flop_per_s
from perfmodel.engines.costs import host_op_s
from perfmodel.hardware.system import resolve_system

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "validation" / "runs_public.csv"


def _a100(n: int = 8):
    return resolve_system("a100-sxm4-80gb", None, n)[0]


def test_registry_is_a_dozen_sourced_parameters_within_bounds():
    assert 6 <= len(REGISTRY) <= 15
    for p in REGISTRY:
        assert p.lower < p.prior < p.upper, p.name
        assert p.knob in KNOBS and p.source and p.reads and p.prior_sigma_log > 0
    assert {p.knob for p in REGISTRY} == set(KNOBS)  # every knob is read by some parameter


def test_physics_only_profile_changes_nothing():
    s = _a100()
    assert calibrated_system(s, NONE) is s
    assert all(v == 1.0 for v in NONE.knobs(s.accelerator).values())


def test_each_knob_moves_exactly_its_rate():
    """A knob of 0.5 halves the rate it reads and nothing else (hand arithmetic: rate x 0.5)."""
    s = _a100()
    acc = s.accelerator
    one = dict.fromkeys(KNOBS, 1.0)
    g = system_with_knobs(s, {**one, "gemm": 0.5}).accelerator
    assert gemm_rate_flop_per_s(g, "bf16") == pytest.approx(0.5 * gemm_rate_flop_per_s(acc, "bf16"), rel=1e-9)
    # attention has its own knob: the gemm knob is divided out of the attention points
    assert attention_rate_flop_per_s(g, 128, 2048, True, "bf16") == pytest.approx(
        attention_rate_flop_per_s(acc, 128, 2048, True, "bf16"), rel=1e-6)
    at = system_with_knobs(s, {**one, "attention": 0.5}).accelerator
    assert attention_rate_flop_per_s(at, 128, 2048, True, "bf16") == pytest.approx(
        0.5 * attention_rate_flop_per_s(acc, 128, 2048, True, "bf16"), rel=1e-6)
    mb = system_with_knobs(s, {**one, "memory_bound": 0.5}).accelerator
    assert mb.elementwise_achieved_Bps == pytest.approx(0.5 * acc.elementwise_achieved_Bps, rel=1e-6)
    h = system_with_knobs(s, {**one, "host": 2.0}).accelerator
    assert host_op_s(h)[0] == pytest.approx(2.0 * host_op_s(acc)[0], rel=1e-6)
    su = system_with_knobs(s, {**one, "scale_up": 0.5})
    # dgx-a100 has a measured all-reduce curve: a 1 GiB all-reduce takes twice as long
    assert intra_time_s(su, "all_reduce", 2**30, 8) == pytest.approx(2 * intra_time_s(s, "all_reduce", 2**30, 8), rel=1e-6)
    so = system_with_knobs(s, {**one, "scale_out": 0.5})
    assert so.levels[1].efficiency == pytest.approx(0.5 * s.levels[1].efficiency)
    assert so.levels[1].achieved_Bps == pytest.approx(0.5 * s.levels[1].achieved_Bps)


def test_measured_in_model_efficiency_is_kept():
    """B200 measured its whole-model efficiency (0.68 on GEMMs), and GB200 inherits it from its generation:
    the fitted gemm and attention knobs replace neither."""
    for acc_id in ("b200", "gb200"):
        s = resolve_system(acc_id, None, 8)[0]
        g = system_with_knobs(s, {**dict.fromkeys(KNOBS, 1.0), "gemm": 0.5, "attention": 0.5}).accelerator
        assert g.in_model_efficiency == s.accelerator.in_model_efficiency == pytest.approx(0.68)
        assert gemm_rate_flop_per_s(g, "bf16") == pytest.approx(gemm_rate_flop_per_s(s.accelerator, "bf16"))
        assert attention_rate_flop_per_s(g, 128, 4096, True, "bf16") == pytest.approx(
            attention_rate_flop_per_s(s.accelerator, 128, 4096, True, "bf16"))


def test_frameworks_select_mechanisms_only():
    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    assert apply_framework(plan, framework("megatron-lm")).attention_impl == "unfused"
    assert apply_framework(plan, framework("megatron-core")).attention_impl == "fused"  # TE: cuDNN / FA3
    assert framework(None).name == "pytorch" and framework("") is FRAMEWORKS["pytorch"]
    # llm.c launches kernels from C: host cost per kernel = launch gap 2.5 us / eager 44.5 us
    assert pytest.approx(2.5e-6 / (8.1e-3 / 182)) == NATIVE_HOST_FACTOR
    assert NONE.knobs(_a100().accelerator, framework("llm.c"))["host"] == pytest.approx(NATIVE_HOST_FACTOR)
    # other names of the same stacks (NeMo 2 trains with Megatron-Core; MaxText is JAX), case and '_' aside
    assert framework("NeMo_2") is FRAMEWORKS["megatron-core"] and framework("MaxText") is FRAMEWORKS["jax"]
    assert framework("Megatron-DeepSpeed") is FRAMEWORKS["megatron-lm"]
    assert framework("Hugging Face") is framework("HF Trainer") is FRAMEWORKS["pytorch"]
    assert framework("LLMQ") is FRAMEWORKS["llm.c"]
    assert framework("TRL") is framework("axolotl") is FRAMEWORKS["pytorch"]  # both train through HF Trainer
    # eager PyTorch trainers with their own parallel modules, and HF Trainer under LLaMA-Factory
    assert framework("nanotron") is framework("Picotron") is framework("LLaMA-Factory") is FRAMEWORKS["pytorch"]
    assert framework("JAX/XLA") is framework("praxis") is FRAMEWORKS["jax"]
    assert framework("MosaicML Composer") is FRAMEWORKS["composer"]
    assert framework("NVIDIA NeMo Framework") is framework("NVIDIA Megatron-Bridge") is FRAMEWORKS["megatron-core"]
    assert framework("DeepSpeed ZeRO-3") is framework("deepspeed_zero2") is FRAMEWORKS["deepspeed"]
    with pytest.raises(FrameworkError, match="megatron-core"):
        framework("Primus")  # AMD's front end runs Megatron or torchtitan: no one stack
    for fw in FRAMEWORKS.values():
        assert len(fw.evidence) > 40, fw.name


def _synthetic_runs(tmp_path: Path, knobs: dict[str, float], n: int = 16) -> Path:
    """Single-node public llm-foundry and vTrain rows whose step_time_s is the engine's prediction with `knobs`."""
    from perfmodel.calibration.fit import _predict

    rows = [r for r in read_fit_rows([PUBLIC]) if r.plan.world <= 8]  # one node: no NIC traffic
    picked = [r for r in rows if r.source.startswith("mosaicml")][: n // 2] + [r for r in rows if r.source.startswith("vTrain")][: n // 2]
    with open(PUBLIC, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        by_id = {r["run_id"]: r for r in reader}
    out = tmp_path / "runs.csv"
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in picked:
            row = dict(by_id[r.run_id])
            k = {name: knobs.get(name, 1.0) for name in KNOBS}
            row["step_time_s"] = f"{_predict(r, k):.9g}"
            w.writerow(row)
    return out


def test_fit_recovers_a_known_gemm_efficiency(tmp_path):
    """Runs made with GEMMs at 0.6 of the microbenchmark (and every other knob at its prior):
    the fitted gemm knob (global x ampere) comes back within 5 %, and the fit explains the runs."""
    priors = {p.knob: p.prior for p in REGISTRY if p.scope != "generation"}
    truth = {**priors, "gemm": 0.6}
    res = fit([_synthetic_runs(tmp_path, truth)], loso=False)
    v = res.profile.values
    assert v["gemm_in_model"] * v["gemm_generation[ampere]"] == pytest.approx(0.6, rel=0.05)
    assert res.after["mape"] < 0.02


def test_parameter_without_data_stays_at_its_prior(tmp_path):
    """Single-node runs never cross a NIC: scale_out_collective keeps its prior exactly."""
    res = fit([_synthetic_runs(tmp_path, {"gemm": 0.7})], loso=False)
    so = next(p for p in REGISTRY if p.name == "scale_out_collective")
    assert res.profile.values["scale_out_collective"] == pytest.approx(so.prior, rel=1e-6)
    row = next(t for t in res.table if t["key"] == "scale_out_collective")
    assert row["sigma_log"] == pytest.approx(so.prior_sigma_log)


def test_profile_round_trip_and_bad_files(tmp_path):
    prof = Profile("t", {"gemm_in_model": 0.7, "gemm_generation[hopper]": 0.9}, {}, {"all": (-0.2, 0.1)},
                   {"generations": ["hopper"], "families": ["dense"]})
    path = tmp_path / "p.yaml"
    save_profile(prof, path)
    back = load_profile(path)
    assert back.values == prof.values and back.intervals == prof.intervals
    bad = tmp_path / "bad.yaml"
    bad.write_text("parameters:\n  gemm_in_model: {fitted: 7}\n")
    with pytest.raises(ProfileError, match=r"gemm_in_model.*allowed"):
        load_profile(bad)
    bad.write_text("parameters:\n  gemm_speedup: {fitted: 0.5}\n")
    with pytest.raises(ProfileError, match="known: gemm_in_model"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="no such file"):
        load_profile(tmp_path / "missing.yaml")


def test_interval_widens_where_the_fit_has_no_data():
    """80 % interval = step x exp(q10 .. q90); an unseen generation adds 1.28 x 0.10 in quadrature."""
    prof = Profile("t", {}, {}, {"all": (-0.2, 0.1)}, {"generations": ["ampere"], "families": ["dense"]})
    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    spec = perfmodel.get_workload("gpt3-1.3b")
    lo, hi = step_time_interval(prof, _a100().accelerator, spec, plan, 10.0) or (0, 0)
    assert (lo, hi) == pytest.approx((10 * math.exp(-0.2), 10 * math.exp(0.1)))
    h100 = resolve_system("h100-sxm5-80gb", None, 8)[0].accelerator
    lo2, hi2 = step_time_interval(prof, h100, spec, plan, 10.0) or (0, 0)
    extra = (1.2816 * 0.10) ** 2
    assert lo2 == pytest.approx(10 * math.exp(-math.sqrt(0.04 + extra)))
    assert hi2 == pytest.approx(10 * math.exp(math.sqrt(0.01 + extra)))
    assert step_time_interval(NONE, h100, spec, plan, 10.0) is None


def test_each_unseen_mechanism_widens_the_interval_once():
    """An MoE the fit never saw adds 1.28 x 0.20 in quadrature; a hybrid Mamba-2 MoE (Nemotron 3)
    adds it twice (its experts and its Mamba-2 mixers), a latent-attention MoE (DeepSeek-V3) too."""
    prof = Profile("t", {}, {}, {"all": (-0.2, 0.1)}, {"generations": ["ampere"], "families": ["dense"]})
    plan = perfmodel.ParallelPlan(dp=8, global_batch=8)
    acc = _a100().accelerator
    unit = (1.2816 * 0.20) ** 2
    for wid, n in (("gpt3-1.3b", 0), ("mixtral-8x7b", 1), ("nemotron3-nano", 2), ("deepseek-v3", 2), ("nemotron-h-8b", 1)):
        lo, hi = step_time_interval(prof, acc, perfmodel.get_workload(wid), plan, 10.0) or (0, 0)
        assert hi == pytest.approx(10 * math.exp(math.sqrt(0.01 + n * unit))), wid
        assert lo == pytest.approx(10 * math.exp(-math.sqrt(0.04 + n * unit))), wid
    # a profile whose fit ran Mamba-2 models records the mixer and narrows them again
    seen = Profile("t", {}, {}, {"all": (-0.2, 0.1)}, {"generations": ["ampere"], "mechanisms": ["dense", "mamba"]})
    hi = (step_time_interval(seen, acc, perfmodel.get_workload("nemotron-h-8b"), plan, 10.0) or (0, 0))[1]
    assert hi == pytest.approx(10 * math.exp(0.1))


def test_default_profile_is_shipped_with_provenance():
    prof = load_profile("default")
    prov = prof.provenance
    assert prof.name == "default" and prov["rows"] >= 1200
    assert {"ampere", "hopper"} <= prof.generations_seen
    assert "leave_one_source_out" in prov and len(prov["leave_one_source_out"]) >= 4
    assert "all" in prof.intervals


def test_estimate_carries_interval_and_calibration_name():
    plan = perfmodel.ParallelPlan(dp=8, global_batch=64, micro_batch=1)
    cal = perfmodel.estimate("gpt3-1.3b", "a100-sxm4-80gb", plan)
    phys = perfmodel.estimate("gpt3-1.3b", "a100-sxm4-80gb", plan, calibration="none")
    assert cal.calibration == "default" and phys.calibration == "none"
    assert phys.step_time_lo_s is None
    assert cal.step_time_lo_s is not None and cal.step_time_hi_s is not None
    assert cal.step_time_lo_s < cal.step_time_s < cal.step_time_hi_s
    assert cal.step_time_s > phys.step_time_s  # the fitted efficiencies are below the microbenchmarks
    assert cal.to_dict()["step_time_interval_80_s"] == [cal.step_time_lo_s, cal.step_time_hi_s]


def test_cli_fit_then_validate_with_the_profile(tmp_path, capsys):
    runs = _synthetic_runs(tmp_path, {"gemm": 0.7}, n=8)
    prof = tmp_path / "mine.yaml"
    assert main(["fit", "--runs", str(runs), "--out", str(prof), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "gemm_in_model" in text and "leave-one-source-out" in text  # two sources: held out by source
    out = tmp_path / "pred.csv"
    assert main(["validate", "--runs", str(runs), "--out", str(out), "--calibration", str(prof)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(r["status"] == "ok" for r in rows)
    for r in rows:
        assert float(r["predicted_step_time_lo_s"]) < float(r["predicted_step_time_s"]) < float(r["predicted_step_time_hi_s"])
    assert main(["estimate", "gpt3-1.3b", "--n-gpus", "8", "--calibration", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_framework_column_selects_the_attention_kernel(tmp_path):
    """A megatron-lm row is predicted with unfused attention (its s x s scores through HBM: slower),
    the same row under DeepSpeed with flash (plain PyTorch would add its autocast casts too); a
    framework perfmodel has no mechanisms for is predicted without any, with a message naming the known ones."""
    from perfmodel.validation.predict import predict_row
    from perfmodel.workload.catalog import load_workloads

    with open(PUBLIC, newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["run_id"].startswith("bloom"))
    wl = load_workloads()
    meg = predict_row({**row, "framework": "megatron-lm"}, wl, profile=NONE)
    flash = predict_row({**row, "framework": "deepspeed"}, wl, profile=NONE)
    assert meg["status"] == flash["status"] == "ok"
    assert float(meg["predicted_step_time_s"]) > float(flash["predicted_step_time_s"])
    unknown = predict_row({**row, "framework": "primus"}, wl, profile=NONE)
    assert unknown["status"] == "ok" and "not one perfmodel models (known: megatron-lm" in unknown["message"]


def test_one_source_is_held_out_run_by_run(tmp_path):
    """A user's own cluster is one source: the fit holds out one run at a time and still gives
    intervals."""
    runs = _synthetic_runs(tmp_path, {"gemm": 0.7}, n=8)
    text = runs.read_text().replace("mosaicml/llm-foundry benchmarking README", "my cluster")
    text = text.replace("vTrain (MICRO'24) measured dataset", "my cluster")
    one = tmp_path / "one.csv"
    one.write_text(text)
    res = fit([one])
    assert res.profile.provenance["held_out_by"].startswith("run")
    assert len(res.loso) == 8 and "all" in res.profile.intervals


def test_interval_widens_for_a_stack_the_fit_never_saw():
    """A run from a training stack absent from the fit's rows gets a wider 80 % interval: the
    between-source spread of the profile's own held-out medians, added in quadrature."""
    import math

    import perfmodel
    from perfmodel.calibration.profile import Z80, load_profile

    prof = load_profile("default")
    assert "megatron-lm" in prof.frameworks_seen and "megatron-core" not in prof.frameworks_seen
    plan = perfmodel.ParallelPlan(dp=16, tp=8, pp=8, global_batch=1536, sequence_parallel=True)
    seen = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan, framework="megatron-lm")
    new = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan, framework="megatron-core")
    lo_s, hi_s = math.log(seen.step_time_lo_s / seen.step_time_s), math.log(seen.step_time_hi_s / seen.step_time_s)
    extra = (Z80 * prof.between_source_sigma) ** 2
    assert math.log(new.step_time_hi_s / new.step_time_s) == pytest.approx(math.sqrt(hi_s**2 + extra))
    assert math.log(new.step_time_lo_s / new.step_time_s) == pytest.approx(-math.sqrt(lo_s**2 + extra))
    assert 0.05 < prof.between_source_sigma < 0.5


def _synthetic_moe_runs(tmp_path: Path, knobs: dict[str, float]) -> Path:
    """Hand-made MoE runs on 4 DGX H100 nodes (64 experts, top-8, ep 8 to 32 under both
    dispatchers, pp 1 and 2) whose step_time_s is the engine's prediction with `knobs`."""
    from perfmodel.calibration.fit import _predict
    from perfmodel.validation.runs import COLUMNS

    arch = {"arch": "moe", "n_layers": "8", "hidden": "2048", "ffn_hidden": "8192", "n_heads": "16",
            "n_kv_heads": "4", "vocab": "32000", "n_experts": "64", "top_k": "8", "moe_ffn_hidden": "1024",
            "seq_len": "4096", "micro_batch": "1", "tp": "1", "cp": "1", "precision": "bf16",
            "accelerator": "h100-sxm5-80gb", "n_gpus": "32", "gpus_per_node": "8", "source": "synthetic-moe"}
    rows = []
    for i, (ep, pp, fw) in enumerate((ep, pp, fw) for ep in (8, 16, 32) for pp in (1, 2)
                                     for fw in ("megatron-core", "pytorch")):
        dp = 32 // pp
        if dp % ep:
            continue
        rows.append({**arch, "run_id": f"moe-{i}", "ep": str(ep), "pp": str(pp), "dp": str(dp),
                     "global_batch": str(4 * dp), "framework": fw, "step_time_s": "1"})
    path = tmp_path / "moe_runs.csv"

    def write() -> None:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(COLUMNS))
            w.writeheader()
            w.writerows({c: r.get(c, "") for c in COLUMNS} for r in rows)

    write()
    k = {name: knobs.get(name, 1.0) for name in KNOBS}
    for r, fr in zip(rows, read_fit_rows([path]), strict=True):
        r["step_time_s"] = f"{_predict(fr, k):.9g}"
    write()
    return path


def test_fit_moves_the_moe_dispatch_efficiency_where_runs_exchange_tokens(tmp_path):
    """Runs whose dispatch and combine reach half the modelled bandwidth (every other knob at its
    prior): the fit moves moe_dispatch far below its prior 0.9 and explains the runs. Runs made
    only of MoE layers cannot tell the NIC's collective efficiency from the dispatch's on the
    scale-out leg, so the fit shares it between them: their product comes back at 0.9 x 0.5."""
    priors = {p.knob: p.prior for p in REGISTRY if p.scope != "generation"}
    res = fit([_synthetic_moe_runs(tmp_path, {**priors, "moe_dispatch": 0.5})], loso=False)
    v = res.profile.values
    assert v["moe_dispatch"] < 0.75
    assert v["moe_dispatch"] * v["scale_out_collective"] == pytest.approx(0.9 * 0.5, rel=0.10)
    assert res.before["mape"] > 0.2 and res.after["mape"] < 0.03


def test_host_per_kernel_pools_accelerator_hosts_only():
    """A CPU run's host factor is host_generation[host-cpu] alone (its dispatching thread shares
    the cores that compute); host_per_kernel multiplies GPU runs only. With host_per_kernel 2 and
    host_generation[host-cpu] 1.5: an A100 run's host knob is 2 x (its generation's 1), a CPU
    run's 1.5. The fit's membership matrix says the same."""
    from perfmodel.calibration.fit import Problem
    from perfmodel.calibration.parameters import BY_NAME

    prof = Profile("t", {"host_per_kernel": 2.0, "host_generation[host-cpu]": 1.5})
    a100, cpu = _a100().accelerator, resolve_system("host-cpu", None, 1)[0].accelerator
    assert prof.knobs(a100)["host"] == pytest.approx(2.0)
    assert prof.knobs(cpu)["host"] == pytest.approx(1.5)
    assert not BY_NAME["host_per_kernel"].applies(cpu) and BY_NAME["host_per_kernel"].applies(a100)
    assert BY_NAME["gemm_in_model"].applies(cpu)  # the GEMM pool stays shared
    rows = [r for r in read_fit_rows([ROOT / "validation" / "runs_cpu.csv"])][:2]
    prob = Problem(rows)
    k = prob.keys.index("host_per_kernel")
    assert prob.member[:, KNOBS.index("host"), k].sum() == 0
    assert prob.member[:, KNOBS.index("host"), prob.keys.index("host_generation[host-cpu]")].sum() == len(rows)


def test_fit_reads_a_row_as_validate_does(tmp_path):
    """An empty `framework` applies no stack in the fit as in `validate` (fused element-wise ops,
    16-bit weights); a named one applies its mechanisms in both."""
    from perfmodel.validation.predict import validate_file

    src = ROOT / "validation" / "runs_cpu.csv"
    with src.open() as f:
        rows = list(csv.DictReader(f))
    llama = next(r for r in rows if r["arch"] == "llama" and r["precision"] == "bf16")
    named = {**llama, "run_id": llama["run_id"] + "-pytorch", "framework": "pytorch"}
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0].keys(), "framework"])
        w.writeheader()
        w.writerows([{**llama, "framework": ""}, named])
    empty, stack = read_fit_rows([path])
    assert (empty.plan.elementwise, empty.plan.autocast_weights) == ("fused", False)
    assert (stack.plan.elementwise, stack.plan.autocast_weights) == ("eager", True)
    validate_file(path, tmp_path / "pred.csv", calibration="none")
    with (tmp_path / "pred.csv").open() as f:
        pred = {r["run_id"]: float(r["predicted_step_time_s"]) for r in csv.DictReader(f)}
    for row in (empty, stack):
        est = perfmodel.estimate(row.spec, row.system, row.plan, calibration="none")
        assert est.step_time_s == pytest.approx(pred[row.run_id], rel=1e-3)


def test_native_stacks_take_gemm_native_in_place_of_gemm_in_model():
    """The in-model GEMM factor splits by host dispatch: Python stacks (eager, compiled) take
    gemm_in_model, native C/CUDA trainers (llm.c) gemm_native; the generation factor applies to both.
    With gemm_in_model 0.8, gemm_native 0.95 and hopper 0.9: an H100 run's gemm knob is 0.72 under
    megatron-lm, pytorch, jax or no stack, and 0.855 under llm.c. The fit's membership matrix says
    the same for the public llm.c rows."""
    from perfmodel.calibration.fit import Problem

    prof = Profile("t", {"gemm_in_model": 0.8, "gemm_native": 0.95, "gemm_generation[hopper]": 0.9})
    h100 = resolve_system("h100-sxm5-80gb", None, 8)[0].accelerator
    for name in ("megatron-lm", "pytorch", "jax"):
        assert prof.knobs(h100, framework(name))["gemm"] == pytest.approx(0.72)
    assert prof.knobs(h100)["gemm"] == pytest.approx(0.72)
    assert prof.knobs(h100, framework("llm.c"))["gemm"] == pytest.approx(0.855)
    rows = [r for r in read_fit_rows([ROOT / "validation" / "runs_public.csv"]) if r.fw.name in ("llm.c", "composer")]
    prob = Problem(rows)
    native = [i for i, r in enumerate(rows) if r.fw.name == "llm.c"]
    assert native and len(native) < len(rows)
    g = KNOBS.index("gemm")
    for i in range(len(rows)):
        is_native = i in native
        assert prob.member[i, g, prob.keys.index("gemm_native")] == float(is_native)
        assert prob.member[i, g, prob.keys.index("gemm_in_model")] == float(not is_native)
