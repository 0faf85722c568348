"""Full recompute under PyTorch's non-reentrant checkpoint (workload/early_stop.py): the rerun stops
once the block's last saved tensor is packed, so a Llama block's w2 GEMM and residual add do not
rerun. Llama-3-8B: h 4096, FFN 14336 (workloads/llama3-8b.yaml)."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework
from perfmodel.calibration.profile import NONE, calibrated_system
from perfmodel.compute.ops import op_cost
from perfmodel.engines.costs import layer_time
from perfmodel.engines.stages import plan_graph
from perfmodel.hardware.system import resolve_system
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.workload.early_stop import early_stop_tail
from perfmodel.workload.graph import Layer

H, F, S = 4096, 14336, 2048


def _plan(**kw: object) -> ParallelPlan:
    base: dict[str, object] = dict(dp=8, zero_stage=3, micro_batch=1, global_batch=8, seq_len=S, recompute="full")
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _layers(model: str, plan: ParallelPlan) -> list[Layer]:
    return [layer for layer in plan_graph(perfmodel.get_workload(model), plan).layers if layer.recomputable]


def test_the_tail_is_the_last_gemm_and_the_residual_add() -> None:
    (block,) = _layers("llama3-8b", _plan())
    tail = early_stop_tail(block)
    assert [o.name for o in tail] == ["mlp_fc2", "mlp_residual"]
    # w2: 2·T·f·h = 2·2048·14336·4096 FLOP, of the block's 2·T·h·(4096 + 2·1024 + 4096 + 3·14336) GEMM FLOPs
    assert tail[0].flop == 2 * S * F * H
    gemm = sum(o.flop for o in block.ops if o.kind == "gemm")
    assert tail[0].flop / gemm == pytest.approx(14336 / (4096 + 2048 + 4096 + 3 * 14336))


def test_a_routed_expert_tail_reruns_its_unpermute() -> None:
    # the combine weights the expert outputs: not a plain GEMM, so only the residual add is skipped
    (moe,) = _layers("mixtral-8x7b", _plan(ep=8))
    assert [o.name for o in early_stop_tail(moe)] == ["mlp_residual"]


def test_rerun_is_the_forward_less_its_tail() -> None:
    system = calibrated_system(resolve_system("h100-sxm5-80gb", None, 8)[0], NONE)
    acc = system.accelerator
    full = _plan()
    stop = _plan(recompute_early_stop=True)
    (block,) = _layers("llama3-8b", stop)
    plain, early = layer_time(system, full, block, world=1), layer_time(system, stop, block, world=1)
    assert plain.recompute_gpu_s == pytest.approx(plain.fwd_gpu_s)
    tail = sum(op_cost(acc, o, "fwd").time_s for o in early_stop_tail(block))
    assert tail > 0.2 * plain.fwd_gpu_s  # w2 is a quarter of the block's forward GEMM FLOPs
    assert early.recompute_gpu_s == pytest.approx(plain.fwd_gpu_s - tail)
    assert (early.fwd_gpu_s, early.bwd_gpu_s) == (plain.fwd_gpu_s, plain.bwd_gpu_s)
    # only full recompute has a tail to skip
    sel = layer_time(system, _plan(recompute="selective", recompute_early_stop=True), block)
    assert sel.recompute_gpu_s == layer_time(system, _plan(recompute="selective"), block).recompute_gpu_s


def test_torchtitan_selects_it_and_megatron_does_not() -> None:
    assert apply_framework(_plan(), FRAMEWORKS["torchtitan"]).recompute_early_stop
    for name in ("megatron-core", "megatron-lm", "deepspeed", "pytorch", "composer", "jax", "llm.c"):
        assert not apply_framework(_plan(), FRAMEWORKS[name]).recompute_early_stop, name
    # a plan that says no keeps it
    assert not apply_framework(_plan(recompute_early_stop=False), FRAMEWORKS["torchtitan"]).recompute_early_stop


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
def test_early_stop_never_makes_a_step_slower(model: str) -> None:
    spec = perfmodel.get_workload(model)
    system = resolve_system("h100-sxm5-80gb", None, 8)[0]
    kw = dict(ep=8) if model.startswith("mixtral") else {}
    plain = perfmodel.estimate(spec, system, _plan(**kw), calibration="none")
    early = perfmodel.estimate(spec, system, _plan(recompute_early_stop=True, **kw), calibration="none")
    assert early.step_time_s < plain.step_time_s
    assert early.breakdown_s["recompute_s"] < plain.breakdown_s["recompute_s"]
    assert early.memory_per_gpu_bytes == plain.memory_per_gpu_bytes
