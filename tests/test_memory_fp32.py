"""Pure fp32 training keeps one 4 B copy of the weights (the master); mixed precision keeps a 2 B
model copy beside the fp32 master. Per parameter with AdamW, unsharded: weights 4 + grads 4 +
moments 8 = 16 B in fp32 against 2 + 4 + (4 master + 8 moments) = 18 B in bf16."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.memory import MemoryBreakdown
from perfmodel.parallel.plan import ParallelPlan


def _memory(precision: str, zero: int) -> MemoryBreakdown:
    plan = ParallelPlan(precision=precision, global_batch=8, micro_batch=4, dp=2, zero_stage=zero)
    return perfmodel.estimate("gpt2-124m", "a100-sxm4-80gb", plan, calibration="none").memory


def test_fp32_keeps_no_second_master_copy() -> None:
    fp32, bf16 = _memory("fp32", 0), _memory("bf16", 0)
    params = bf16.weights_bytes / 2.0
    assert fp32.weights_bytes == pytest.approx(4 * params, rel=1e-12)
    assert fp32.grads_bytes == pytest.approx(4 * params, rel=1e-12)
    assert fp32.optimizer_bytes == pytest.approx(8 * params, rel=1e-12)
    assert bf16.optimizer_bytes == pytest.approx(12 * params, rel=1e-12)
    states = fp32.weights_bytes + fp32.grads_bytes + fp32.optimizer_bytes
    assert states == pytest.approx(16 * params, rel=1e-12)


def test_zero1_shards_the_fp32_moments_by_dp() -> None:
    full, z1 = _memory("fp32", 0), _memory("fp32", 1)
    assert z1.optimizer_bytes == pytest.approx(full.optimizer_bytes / 2, rel=1e-12)
    assert z1.weights_bytes == full.weights_bytes


def test_fp32_zero3_pipeline_holds_its_stage_gathered_at_4_bytes() -> None:
    # ZeRO-3 under a pipeline keeps the stage's weights gathered: at the model copy's width, 4 B in
    # fp32 against 2 B in bf16, on top of the sharded copy of the same width
    def weights(precision: str) -> float:
        plan = ParallelPlan(precision=precision, global_batch=8, micro_batch=1, dp=2, pp=2, zero_stage=3)
        return perfmodel.estimate("gpt2-124m", "a100-sxm4-80gb", plan, calibration="none").memory.weights_bytes

    assert weights("fp32") == pytest.approx(2 * weights("bf16"), rel=1e-12)
