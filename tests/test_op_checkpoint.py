"""torchtitan's per-op selective activation checkpointing (workload/op_checkpoint.py) against hand
counts on a Llama-3-8B block, and Megatron's attention-core meaning left as it was for the other
stacks. Llama-3-8B: h 4096, 32 heads, 8 KV heads of 128, FFN 14336 (workloads/llama3-8b.yaml).

A torchtitan Llama block runs seven matmuls, counted 1..7 per block forward (torchtitan @ 6b03ffa3
models/llama/model.py:189, :253): wq (saved), wk (recomputed), wv (saved), wo (recomputed), w1
(saved), w3 (recomputed), w2 (saved); SDPA is saved, every element-wise op rerun."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework, framework
from perfmodel.calibration.profile import NONE, calibrated_system
from perfmodel.compute.ops import op_cost
from perfmodel.engines.costs import comm_s, layer_time
from perfmodel.engines.stages import model_flop_per_step, plan_graph
from perfmodel.errors import LayoutError
from perfmodel.hardware.system import resolve_system
from perfmodel.memory import layer_saved_bytes, memory_per_rank
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.evaluate import Evaluator
from perfmodel.planning.space import SCHEDULE_LIST, SearchSpace, layout_grid
from perfmodel.workload.graph import Layer
from perfmodel.workload.op_checkpoint import op_checkpoint
from perfmodel.workload.op_make import gemm_op

H, KV, F, HEADS, D = 4096, 1024, 14336, 32, 128
S = 256  # one sequence of 256 tokens: T = 256


def _plan(**kw: object) -> ParallelPlan:
    base: dict[str, object] = dict(dp=8, zero_stage=3, micro_batch=1, global_batch=8, seq_len=S,
                                   recompute="selective", selective_recompute="op")
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _block(plan: ParallelPlan) -> Layer:
    g = plan_graph(perfmodel.get_workload("llama3-8b"), plan)
    return next(layer for layer in g.layers if layer.recomputable)


def test_llama_block_recomputes_wk_wo_w3_and_the_elementwise_ops() -> None:
    layer = _block(_plan())
    rec = op_checkpoint(layer).recomputed
    assert [o.name for o in rec] == ["norm1", "qkv_proj", "rope", "out_proj", "attn_residual", "norm2", "mlp_fc1",
                                     "mlp_act", "mlp_residual"]
    gemms = {o.name: o for o in rec if o.kind == "gemm"}
    assert (gemms["qkv_proj"].n, gemms["out_proj"].n, gemms["mlp_fc1"].n) == (KV, H, F)  # wk, wo, w3
    # 2·T·h·(wk 1024 + wo 4096 + w3 14336) = 2·256·4096·19456 = 40 802 189 312 FLOP
    assert sum(o.flop for o in gemms.values()) == 2 * S * H * (KV + H + F) == 40_802_189_312
    # of the block's 2·T·h·(4096 + 1024 + 1024 + 4096 + 2·14336 + 14336) = 2·T·h·53248 forward GEMM FLOPs
    fwd = sum(o.flop for o in layer.ops if o.kind == "gemm")
    assert fwd == 2 * S * H * 53248
    assert sum(o.flop for o in gemms.values()) / fwd == pytest.approx(19456 / 53248)


def test_llama_block_keeps_its_input_and_the_saved_outputs() -> None:
    # input h, wq h, wv 1024, SDPA output h, w1 14336, w2 h at 2 B, + SDPA's fp32 log-sum-exp per head
    # = 256·2·31744 + 256·32·4 = 16 285 696 B
    assert op_checkpoint(_block(_plan())).saved_bytes == S * 2 * (H + H + KV + H + F + H) + S * HEADS * 4 == 16_285_696


def test_recompute_seconds_are_the_separate_projections_own_gemms() -> None:
    """The recomputed wk, wo and w3 cost as GEMMs of their own shapes (T x N x h), the element-wise
    ops as in the forward: the split of the fused QKV and FC1 ops is exact."""
    plan = _plan()
    system = resolve_system("h100-sxm5-80gb", None, 8)[0]
    layer = _block(plan)
    by_hand = [gemm_op("wk", S, KV, H, "bf16"), gemm_op("wo", S, H, H, "bf16"), gemm_op("w3", S, F, H, "bf16")]
    by_hand += [o for o in layer.ops if o.kind in ("norm", "elementwise")]
    acc = system.accelerator
    want = sum(op_cost(acc, o, "fwd", plan.fp8_recipe_name).time_s for o in by_hand)
    lt = layer_time(system, plan, layer, world=1)
    assert lt.recompute_gpu_s == pytest.approx(want, rel=1e-12)
    assert lt.recompute_comm_s == 0.0


def test_tensor_parallel_block_keeps_the_reduce_scatters_and_reruns_the_all_gathers() -> None:
    plan = _plan(dp=4, tp=2, sequence_parallel=True, global_batch=4)
    system = resolve_system("h100-sxm5-80gb", None, 8)[0]
    layer = _block(plan)
    # per rank, T = 256 gathered, 128 local: input 128·h; wq 256·2048, wv 256·512, SDPA 256·16·128 (+ lse
    # 16·256·4), w1 256·7168, w2 256·4096 (partial sums); two reduce-scatter outputs 128·4096
    want = (128 * H + S * 2048 + S * 512 + S * 16 * D + S * 7168 + S * H + 2 * 128 * H) * 2 + 16 * S * 4
    per_op = op_checkpoint(layer, tp=2)
    assert per_op.saved_bytes == want
    gathers = [c for c in layer.comms if c.kind == "all_gather" and c.group == "tp"]
    assert per_op.comms == tuple(gathers) and gathers[0].fwd == 2
    assert layer_time(system, plan, layer).recompute_comm_s == pytest.approx(2 * comm_s(system, plan, gathers[0]))


def test_memory_keeps_the_policys_bytes_plus_one_rebuilt_layer() -> None:
    op, none = _plan(), _plan(recompute="none")
    g = plan_graph(perfmodel.get_workload("llama3-8b"), op)
    block = next(layer for layer in g.layers if layer.recomputable)
    diff = memory_per_rank(g, op).activations_bytes - memory_per_rank(g, none).activations_bytes
    # 32 layers keep the policy's 16,285,696 B each instead of everything; the one layer rebuilt
    # at a time adds only what the policy did not keep (the rerun reads the kept outputs from its cache)
    saved = layer_saved_bytes(block, none)
    assert diff == pytest.approx(32 * (16_285_696 - saved) + (saved - 16_285_696))


def test_hardware_flops_count_the_recomputed_projections() -> None:
    spec = perfmodel.get_workload("llama3-8b")
    model, hw = model_flop_per_step(spec, _plan())
    elementwise = sum(o.flop for o in _block(_plan()).ops if o.kind in ("norm", "elementwise"))
    assert hw - model == pytest.approx(8 * 32 * (40_802_189_312 + elementwise))


def test_only_torchtitan_selects_the_op_policy() -> None:
    base = ParallelPlan(dp=8, global_batch=8, recompute="selective")
    for name in FRAMEWORKS:
        want = "op" if name == "torchtitan" else "core_attn"
        assert apply_framework(base, framework(name)).selective_recompute == want, name
    named = ParallelPlan(dp=8, global_batch=8, recompute="selective", selective_recompute="core_attn")
    assert apply_framework(named, framework("torchtitan")).selective_recompute == "core_attn"  # the plan's stays


def test_megatron_meaning_is_unchanged() -> None:
    """Under core_attn the recompute is the fused attention kernel's forward, as before."""
    plan = _plan(selective_recompute="core_attn")
    system = resolve_system("h100-sxm5-80gb", None, 8)[0]
    layer = _block(plan)
    flash = next(o for o in layer.ops if o.kind == "attention")
    assert layer_time(system, plan, layer, world=1).recompute_gpu_s == op_cost(system.accelerator, flash, "fwd").time_s


def test_unknown_policy_names_the_allowed_values() -> None:
    with pytest.raises(LayoutError, match=r"selective_recompute 'layer': unknown 'layer'; allowed: 'op'.*core_attn, "
                       r"moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts"):
        ParallelPlan(selective_recompute="layer")


def test_planner_equals_estimate_under_torchtitans_selective_recompute() -> None:
    fw = framework("torchtitan")
    spec = perfmodel.get_workload("llama3-8b")
    system = resolve_system("h100-sxm5-80gb", None, 64)[0]
    g = layout_grid(spec, system, [64], 128, 4096, SearchSpace(recompute=("selective",), zero_stage=(1, 3)))
    out = Evaluator(spec, calibrated_system(system, NONE, fw), 4096, "bf16", framework=fw).evaluate(g)
    megatron = Evaluator(spec, system, 4096, "bf16").evaluate(g)
    for i in np.random.default_rng(5).choice(len(g["tp"]), size=10, replace=False):
        r = {k: int(v[i]) for k, v in g.items()}
        plan = ParallelPlan(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], vp=r["vp"], sequence_parallel=bool(r["sp"]),
                            zero_stage=r["zero"], micro_batch=r["mb"], global_batch=128, seq_len=4096,
                            recompute="selective", schedule=SCHEDULE_LIST[r["sched"]] if r["pp"] > 1 else None)  # type: ignore[arg-type]
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework="torchtitan")
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=1e-9), plan
        assert out["memory_bytes"][i] == pytest.approx(est.memory.total_bytes, rel=1e-9), plan
    # the op policy keeps far less than the attention-core one (which with flash frees almost nothing)
    assert (out["memory_bytes"] < megatron["memory_bytes"]).all()
