"""Issue 14.6: optimizers with their own state and step cost (perfmodel/compute/optimizers.py)."""

from __future__ import annotations

import json

import pytest

import perfmodel
from perfmodel.cli import main
from perfmodel.compute.optimizers import (
    STATE_BYTES_PER_PARAM,
    STEP_BYTES_PER_PARAM,
    newton_schulz_flop,
    newton_schulz_s,
    weight_matrices,
)
from perfmodel.engines.stages import model_graph
from perfmodel.memory import RUNTIME_BYTES
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.split import stage_layers
from perfmodel.workload.catalog import get_workload


def test_newton_schulz_flop_by_hand():
    # square 8192: 5 x (4 + 2) x 8192^3
    assert newton_schulz_flop(8192, 8192) == 30 * 8192**3
    # [4096, 1024] is orthogonalised as its [1024, 4096] transpose: 5 (4 r^2 c + 2 r^3), r = 1024
    assert newton_schulz_flop(4096, 1024) == newton_schulz_flop(1024, 4096) == 5 * (4 * 1024**2 * 4096 + 2 * 1024**3)


def test_newton_schulz_flop_matches_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    a, b, c = 3.4445, -4.7750, 2.0315  # KellerJordan/Muon zeropower_via_newtonschulz5 coefficients
    x = torch.randn(64, 256)
    with FlopCounterMode(display=False) as counter:
        for _ in range(5):
            A = x @ x.T
            B = b * A + c * A @ A
            x = a * x + B @ x
    assert counter.get_total_flops() == newton_schulz_flop(64, 256)


@pytest.mark.parametrize("optimizer", sorted(STATE_BYTES_PER_PARAM))
def test_state_memory_is_params_times_state_bytes(optimizer):
    spec = get_workload("gpt2-124m")
    plan = ParallelPlan(global_batch=1, optimizer=optimizer)
    est = perfmodel.estimate(spec, "h100-sxm5-80gb", plan)
    params = sum(layer.params * n for layer, n in stage_layers(model_graph(spec, plan), 1, 0))
    assert est.memory.optimizer_bytes == pytest.approx(STATE_BYTES_PER_PARAM[optimizer] * params)
    # ZeRO-1 over 8 ranks keeps an eighth
    z1 = perfmodel.estimate(spec, "h100-sxm5-80gb", ParallelPlan(dp=8, global_batch=8, zero_stage=1, optimizer=optimizer))
    assert z1.memory.optimizer_bytes == pytest.approx(est.memory.optimizer_bytes / 8)
    assert est.memory.runtime_bytes == RUNTIME_BYTES


def test_elementwise_step_is_bytes_over_bandwidth():
    """H100 has no measured optimizer step: bytes per parameter / achieved HBM bandwidth."""
    spec = get_workload("gpt2-124m")
    t = {o: perfmodel.estimate(spec, "h100-sxm5-80gb", ParallelPlan(global_batch=1, optimizer=o)).breakdown_s["optimizer_s"]
         for o in ("adam", "adamw", "adamw-bf16", "sgd", "adafactor", "adam8bit")}
    assert t["adam"] == t["adamw"]
    assert t["adamw-bf16"] / t["adam"] == pytest.approx(30.0 / 38.0)  # moments 2 + 2 B each way, not 4 + 4
    assert t["sgd"] / t["adam"] == pytest.approx(STEP_BYTES_PER_PARAM["sgd"] / 38.0)
    assert t["adam8bit"] / t["adam"] == pytest.approx(26.0 / 38.0)
    assert t["adafactor"] == t["sgd"]


def test_muon_adds_newton_schulz_on_every_2d_weight():
    # physics only: Newton-Schulz is computed below from the spec's own GEMM rates, which a
    # calibration profile would scale (its GEMMs run at the fitted in-model efficiency)
    spec = get_workload("gpt2-124m")
    one = ParallelPlan(global_batch=1, optimizer="muon")
    sgd = perfmodel.estimate(spec, "h100-sxm5-80gb", one.model_copy(update={"optimizer": "sgd"}), calibration="none")
    muon = perfmodel.estimate(spec, "h100-sxm5-80gb", one, calibration="none")
    mats = weight_matrices(stage_layers(model_graph(spec, one), 1, 0))
    # GPT-2 small: 12 layers x (qkv, proj, fc1, fc2); embedding and head run AdamW
    assert sorted((m.rows, m.cols) for m in mats) == sorted([(768, 2304), (768, 768), (768, 3072), (3072, 768)])
    assert sum(m.count for m in mats) == 48
    acc = perfmodel.hardware.catalog.load_catalog().accelerator("h100-sxm5-80gb")
    ns = sum(newton_schulz_s(acc, m) for m in mats)
    # one GPU: the same element-wise bytes as SGD with momentum, plus Newton-Schulz, no gathers
    assert muon.breakdown_s["optimizer_s"] - sgd.breakdown_s["optimizer_s"] == pytest.approx(ns)
    # over 8 data-parallel ranks each orthogonalises an eighth, then all-gathers the updates
    dp8 = ParallelPlan(dp=8, global_batch=8, zero_stage=1)
    m8 = perfmodel.estimate(spec, "h100-sxm5-80gb", dp8.model_copy(update={"optimizer": "muon"}), calibration="none")
    s8 = perfmodel.estimate(spec, "h100-sxm5-80gb", dp8.model_copy(update={"optimizer": "sgd"}), calibration="none")
    extra = m8.breakdown_s["optimizer_s"] - s8.breakdown_s["optimizer_s"]
    assert extra > ns / 8


def test_cli_optimizer(capsys):
    assert main(["estimate", "gpt2-124m", "--hardware", "h100-sxm5-80gb", "--n-gpus", "1", "--optimizer", "muon",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["optimizer"] == "muon"
    with pytest.raises(SystemExit):
        main(["estimate", "gpt2-124m", "--hardware", "h100-sxm5-80gb", "--n-gpus", "1", "--optimizer", "lion"])


def test_bf16_moments_keep_eight_bytes_and_scale_a_measured_step():
    """AdamW with bf16 moments (DeepSeek-V3 §3.3.3): fp32 master 4 B + two 2 B moments; where the
    accelerator measured its AdamW step, that step times 30 / 38 of the bytes (8-bit moments: 26 / 38)."""
    from perfmodel.compute.optimizers import elementwise_step_s
    from perfmodel.hardware.catalog import load_catalog

    assert STATE_BYTES_PER_PARAM["adamw-bf16"] == 8.0
    measured = [a for a in load_catalog().accelerators.values() if a.calibration.optimizer_step_per_param is not None]
    assert measured
    acc = measured[0]
    assert elementwise_step_s(acc, "adamw-bf16", 1e9) == pytest.approx(elementwise_step_s(acc, "adamw", 1e9) * 30 / 38)
    assert elementwise_step_s(acc, "adam8bit", 1e9) == pytest.approx(elementwise_step_s(acc, "adamw", 1e9) * 26 / 38)
