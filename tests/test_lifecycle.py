"""The whole training run: time to a target, input pipeline, checkpoints and goodput, held to
hand-computed closed forms."""

import json
import math

import pytest

import perfmodel
from perfmodel.cli import main
from perfmodel.errors import SpecError
from perfmodel.hardware.system import resolve_hardware
from perfmodel.planning.checkpoint import PCIE5_X16_ONE_WAY_BPS, StorageSpec, checkpoint_cost, goodput_from_model, load_storage
from perfmodel.planning.converge import (
    CHINCHILLA,
    ConvergeError,
    fit_loss_curve,
    kaplan_noise_scale_tokens,
    noise_scale_from_log,
    steps_and_tokens,
    time_to_target,
)
from perfmodel.planning.input_pipeline import (
    InputPipelineSpec,
    apply_input_pipeline,
    bounded_step_s,
    load_input_pipeline,
    simulate,
    stage_times,
)

# -- time to a target -----------------------------------------------------------------------------

def test_steps_and_tokens_twice_their_minima_at_the_noise_scale():
    e_min, b_noise = 1e11, 4e6
    s, e = steps_and_tokens(e_min, b_noise, b_noise)
    assert e == pytest.approx(2 * e_min)
    assert s == pytest.approx(2 * e_min / b_noise)  # S_min = E_min / B_noise
    # and the McCandlish trade-off (S/S_min - 1)(E/E_min - 1) = 1 at any batch
    s, e = steps_and_tokens(e_min, b_noise, 3.7e5)
    assert (s / (e_min / b_noise) - 1) * (e / e_min - 1) == pytest.approx(1.0)


def test_chinchilla_law_inverts():
    n = 70e9
    d = CHINCHILLA.tokens_to_loss(n, 2.0)
    # by hand: 1.69 + 406.4 / 70e9^0.34 + 410.7 / D^0.28 = 2.0
    assert 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 == pytest.approx(2.0)
    with pytest.raises(ConvergeError, match="below what"):
        CHINCHILLA.tokens_to_loss(n, 1.7)


def test_kaplan_noise_scale_by_hand():
    assert kaplan_noise_scale_tokens(2.0) == pytest.approx(2e8 / 2.0 ** (1 / 0.21))


def test_noise_scale_estimator_recovers_exact_statistics(tmp_path):
    # E|G_B|^2 = |G|^2 + tr(Sigma)/B; with exact expectations the estimator returns B_simple exactly
    g2, trace = 3.0, 1.2e4
    rows = ["batch_size,grad_norm_sq"]
    for b in (64, 1024):
        rows += [f"{b},{g2 + trace / b}"] * 5
    log = tmp_path / "log.csv"
    log.write_text("\n".join(rows))
    r = noise_scale_from_log(log)
    assert r.b_noise == pytest.approx(trace / g2)
    assert (r.n_small, r.n_big) == (5, 5)
    assert main(["noise-scale", str(log), "--json"]) == 0


def test_noise_scale_needs_two_batch_sizes(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("batch_size,grad_norm\n64,1.0\n64,1.1\n")
    with pytest.raises(ConvergeError, match="one batch size"):
        noise_scale_from_log(log)


def test_loss_curve_fit_recovers_a_power_law(tmp_path):
    e, b, beta = 1.9, 60.0, 0.3
    toks = [1e8 * 2**k for k in range(12)]
    path = tmp_path / "curve.csv"
    path.write_text("tokens,loss\n" + "\n".join(f"{t},{e + b / t**beta}" for t in toks))
    law = fit_loss_curve(path)
    fitted_floor, fitted_beta = law.E, law.beta
    assert fitted_floor == pytest.approx(e, rel=1e-3)
    assert fitted_beta == pytest.approx(beta, rel=1e-2)
    assert law.tokens_to_loss(1.0, 2.1) == pytest.approx((b / 0.2) ** (1 / beta), rel=1e-2)


def test_time_to_target_curve_and_best():
    res = time_to_target("gpt2-124m", "a100-sxm4-80gb", 8, e_min_tokens=2e9, noise_scale_tokens=2**20,
                         global_batches=[8, 64, 512, 4096])
    assert [p.global_batch for p in res.curve] == [8, 64, 512, 4096]
    for p in res.curve:
        s, e = steps_and_tokens(2e9, 2**20, p.global_batch * 1024)
        assert p.steps == pytest.approx(s) and p.tokens == pytest.approx(e)
        assert p.time_s == pytest.approx(p.steps * p.step_time_s)
        assert p.gpu_hours == pytest.approx(8 * p.time_s / 3600)
    assert res.best.time_s == min(p.time_s for p in res.curve)
    # more data is never needed at a smaller batch
    toks = [p.tokens for p in res.curve]
    assert toks == sorted(toks)


def test_converge_cli_json_has_curve_and_best(capsys):
    assert main(["converge", "gpt2-124m", "--hardware", "a100-sxm4-80gb", "--n-gpus", "8", "--target-loss", "3.3",
                 "--global-batch", "64", "512", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"curve", "best"} <= set(out)
    assert {"global_batch", "steps", "tokens", "time_s", "layout"} <= set(out["best"])
    assert len(out["curve"]) == 2


# -- input pipeline -----------------------------------------------------------------------------

SPEC = InputPipelineSpec(storage_read_Bps=8e9, sample_bytes=1e6, cpu_s_per_sample=0.01, workers_per_gpu=4,
                         h2d_Bps=20e9, prefetch=2)


def test_input_stage_times_by_hand():
    st = stage_times(SPEC, global_batch=256, dp=8, gpus_per_node=8)
    n = 32  # samples per GPU per step
    assert st.storage_s == pytest.approx(n * 1e6 / (8e9 / 8))  # 32 ms
    assert st.cpu_s == pytest.approx(n * 0.01 / 4)  # 80 ms
    assert st.h2d_s == pytest.approx(n * 1e6 / 20e9)  # 1.6 ms
    assert st.bottleneck == "cpu"
    assert bounded_step_s(0.05, st, prefetch=2) == pytest.approx(0.08)
    assert bounded_step_s(0.05, st, prefetch=0) == pytest.approx(0.05 + 0.032 + 0.08 + 0.0016)


@pytest.mark.parametrize("compute_s", [0.02, 0.05, 0.2])
@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_des_input_pipeline_agrees_with_the_closed_form(compute_s, prefetch):
    st = stage_times(SPEC, 256, 8, 8)
    sim = simulate(compute_s, st, prefetch)
    assert sim.step_time_s == pytest.approx(bounded_step_s(compute_s, st, prefetch), rel=1e-9)


def test_estimate_is_bounded_by_the_input_pipeline():
    plan = perfmodel.ParallelPlan(dp=8, global_batch=256, micro_batch=4)
    est = perfmodel.estimate("gpt2-124m", "a100-sxm4-80gb", plan)
    slow = SPEC.model_copy(update={"cpu_s_per_sample": 1.0})
    bound = apply_input_pipeline(est, slow, 8)
    assert bound.input_bound and bound.step_time_s == pytest.approx(32 * 1.0 / 4)
    assert bound.breakdown_s["data_wait_s"] == pytest.approx(bound.step_time_s - est.step_time_s)
    assert sum(bound.breakdown_s.values()) == pytest.approx(bound.step_time_s)
    fast = SPEC.model_copy(update={"cpu_s_per_sample": 1e-7, "sample_bytes": 1.0})
    free = apply_input_pipeline(est, fast, 8)
    assert not free.input_bound and free.step_time_s == est.step_time_s


def test_input_pipeline_yaml(tmp_path):
    p = tmp_path / "pipe.yaml"
    p.write_text("storage_read_bandwidth: 8 GB/s\nsample_bytes: 1 MB\ncpu_time_per_sample: 10 ms\nworkers_per_gpu: 4\n"
                 "h2d_bandwidth: 20 GB/s\nprefetch: 2\n")
    assert load_input_pipeline(p) == SPEC
    p.write_text("storage_read_bandwidth: 8 GB/s\nsample_bytes: 1 MB\ncpu_time_per_sample: 10 ms\nworkers_per_gpu: 4\n"
                 "h2d_bandwidth: 20 GB\n")
    with pytest.raises(SpecError, match="h2d_bandwidth"):
        load_input_pipeline(p)
    p.write_text("storage_bandwidth: 8 GB/s\n")
    with pytest.raises(SpecError, match="unknown field"):
        load_input_pipeline(p)


def test_estimate_cli_with_input_pipeline(tmp_path, capsys):
    p = tmp_path / "pipe.yaml"
    p.write_text("storage_read_bandwidth: 8 GB/s\nsample_bytes: 1 MB\ncpu_time_per_sample: 1 s\nworkers_per_gpu: 4\n"
                 "h2d_bandwidth: 20 GB/s\n")
    assert main(["estimate", "gpt2-124m", "--hardware", "a100-sxm4-80gb", "--n-gpus", "8", "--global-batch", "256",
                 "--micro-batch", "4", "--input-pipeline", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["input_bound"] is True and out["step_time_s"] == pytest.approx(8.0)


# -- checkpoints and goodput --------------------------------------------------------------------

def _llama8b_64():
    plan = perfmodel.ParallelPlan(dp=8, tp=8, global_batch=64, sequence_parallel=True)
    system, _ = resolve_hardware("h100-sxm5-80gb", 64)
    return perfmodel.estimate("llama3-8b", system, plan), system


def test_checkpoint_bytes_and_write_time_by_hand():
    est, system = _llama8b_64()
    storage = StorageSpec(id="t", name="test", aggregate_write_bandwidth={"value": "10 GB/s", "source": "test figure"},
                          per_node_write_bandwidth={"value": "0.5 GB/s", "source": "test figure"})
    params = 8.0e9
    ck = checkpoint_cost(est, system, storage, params)
    assert ck.total_bytes == pytest.approx(14 * params)  # 2 bf16 + 4 master + 8 Adam
    assert ck.nodes == 8
    # aggregate: 112 GB / 10 GB/s = 11.2 s; per node: 14 GB / 0.5 GB/s = 28 s -> 28 s
    assert ck.write_s == pytest.approx(28.0)
    assert ck.read_s == pytest.approx(28.0)  # reads fall back on the write bounds
    assert ck.snapshot_s == pytest.approx(14 * params / 64 / PCIE5_X16_ONE_WAY_BPS)
    assert not ck.asynchronous and ck.stall_s == ck.write_s


def test_goodput_uses_the_model_and_young_daly():
    est, system = _llama8b_64()
    storage = load_storage("tectonic-llama3")
    rows = goodput_from_model(est, system, storage, 8.0e9, intervals_s=[600.0])
    yd, fixed = rows
    ck = yd.checkpoint
    # 2 TB/s aggregate (0.056 s) against 8 nodes x 8 NICs x 50 GB/s (14 GB / 400 GB/s = 0.035 s)
    assert ck.write_s == pytest.approx(14 * 8e9 / 2e12)
    m = yd.result.mtbf_s
    assert yd.interval_s == pytest.approx(math.sqrt(2 * ck.write_s * m))
    assert yd.restart_s == pytest.approx(300.0 + ck.read_s + 10 * est.step_time_s)
    assert fixed.result.fraction == pytest.approx(1 - ck.write_s / 600 - (yd.restart_s + 300) / m)
    assert yd.result.fraction >= fixed.result.fraction  # the optimum is optimal
    asy = goodput_from_model(est, system, storage, 8.0e9, asynchronous=True)[0]
    assert asy.checkpoint.stall_s < ck.write_s and asy.result.fraction > yd.result.fraction


def test_goodput_cli(capsys):
    assert main(["goodput", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--n-gpus", "64", "--tp", "8",
                 "--global-batch", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"][0]["young_daly"] and 0 < out["rows"][0]["goodput"] < 1


# -- reinforcement-learning pipelines -----------------------------------------------------------

def test_rl_actor_bound_reaches_the_cpu_rate():
    from perfmodel.planning.rl import RLPipelineSpec, simulate_rl

    spec = RLPipelineSpec(actor_workers=16, envs_per_worker=4, env_step_s=1e-3, unroll_length=32, learner_batch=8)
    r = simulate_rl(spec, lambda b: 1e-7, 1e-6)
    # by hand: each worker steps 4 envs in 4 ms -> 1,000 env steps/s per worker, 16,000 in all
    assert r.env_steps_per_s == pytest.approx(16 / 1e-3, rel=0.01)
    assert r.bottleneck == "actors" and r.actor_busy > 0.99


def test_rl_learner_bound_reaches_the_learner_rate():
    from perfmodel.planning.rl import RLPipelineSpec, simulate_rl

    spec = RLPipelineSpec(actor_workers=16, envs_per_worker=4, env_step_s=1e-4, unroll_length=32, learner_batch=8)
    r = simulate_rl(spec, lambda b: 1e-7, 0.05)
    # by hand: a learner step consumes 8 trajectories x 32 steps = 256 env steps every 50 ms
    assert r.env_steps_per_s == pytest.approx(8 * 32 / 0.05, rel=0.03)
    assert r.bottleneck == "learner" and r.learner_busy > 0.95  # the step running at the end is not counted


def test_rl_inference_bound_batches_and_the_cli(capsys):
    from perfmodel.planning.rl import RLPipelineSpec, simulate_rl

    spec = RLPipelineSpec(actor_workers=32, envs_per_worker=1, env_step_s=1e-5, unroll_length=16, learner_batch=4,
                          inference_max_batch=64)
    r = simulate_rl(spec, lambda b: 1e-3, 1e-6)  # fixed-latency forward: batching is all that helps
    assert r.bottleneck == "inference"
    # the server is always busy, so the rate is its mean batch per millisecond (the 32 actors settle
    # into two groups of 16 that alternate: one steps while the other is served)
    assert r.env_steps_per_s == pytest.approx(r.mean_inference_batch / 1e-3, rel=0.02)
    assert 8 <= r.mean_inference_batch <= 32
    assert main(["rl", "ppo-mlp-humanoid", "--hardware", "h100-sxm5-80gb", "--actor-workers", "8",
                 "--env-step-ms", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bottleneck"] in ("actors", "inference", "learner") and out["env_steps_per_s"] > 0


def test_calibrate_dataset_measures_a_user_dataset(tmp_path, capsys):
    pytest.importorskip("torch")
    src = tmp_path / "my_data.py"
    src.write_text(
        "import time\nimport torch\n\n"
        "class Windows(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 100\n"
        "    def __getitem__(self, i):\n        time.sleep(0.002)\n"
        "        return torch.zeros(336, 8), torch.zeros(96, 8)\n\n"
        "def make():\n    return Windows()\n")
    assert main(["calibrate", "--dataset", f"{src}:make", "--dataset-samples", "10"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 10
    assert out["device_sample_bytes"] == f"{(336 + 96) * 8 * 4 / 1e3:.4g} kB"  # two fp32 tensors
    ms = float(out["cpu_time_per_sample"].split()[0])
    assert 2.0 <= ms < 20.0  # the 2 ms sleep, plus overhead on a busy machine
