"""Megatron-Core's selective recompute modules (workload/module_recompute.py) against hand counts on
DeepSeek-V3 layers (workloads/deepseek-v3.yaml: h 7168, 128 heads, MLA q_lora 1536, kv_lora 512,
qk 128 + 64 rope, v 128; 256 routed experts top-8 of width 2048, one shared expert; dense FFN
18432 in the first three layers), one sequence of 1024 tokens, bf16, ep 8."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest

import perfmodel
from perfmodel.compute.ops import op_cost
from perfmodel.engines.costs import comm_s, layer_time
from perfmodel.engines.stages import model_flop_per_step, plan_graph
from perfmodel.errors import LayoutError, SpecError
from perfmodel.hardware.system import resolve_system
from perfmodel.memory import layer_activation_bytes, peak_memory, recompute_working_bytes
from perfmodel.parallel.plan import MOE_IMBALANCE_DEFAULT, ParallelPlan
from perfmodel.workload.graph import Layer
from perfmodel.workload.megatron_args import parse_megatron_args
from perfmodel.workload.module_recompute import MODULES, module_recompute, parse_selective

T, H, HEADS, DQK, DV, E, K, F, DENSE_F = 1024, 7168, 128, 192, 128, 256, 8, 2048, 18432
EP = 8
SPEC = perfmodel.get_workload("deepseek-v3")
SYSTEM = resolve_system("h100-sxm5-80gb", None, 8)[0]


def _plan(selective: str = "core_attn", recompute: str = "selective", **kw: object) -> ParallelPlan:
    base: dict[str, object] = dict(dp=8, ep=EP, micro_batch=1, global_batch=8, seq_len=T, precision="bf16",
                                   recompute=recompute, selective_recompute=selective)
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _layer(plan: ParallelPlan, name: str) -> Layer:
    return next(layer for layer in plan_graph(SPEC, plan).layers if layer.name == name)


def _op(layer: Layer, name: str):  # type: ignore[no-untyped-def]
    return next(o for o in layer.ops if o.name == name)


def _freed(selective: str, name: str = "moe_layers") -> float:
    """Activation bytes a layer keeps under core_attn less those it keeps under `selective`."""
    base = _plan("core_attn")
    return layer_activation_bytes(_layer(base, name), base) - layer_activation_bytes(_layer(_plan(selective), name),
                                                                                     _plan(selective))


def test_parse_canonical_order_and_forms() -> None:
    assert parse_selective("layernorm, moe_act") == "moe_act,layernorm"  # Megatron's order
    assert parse_selective(["mlp", "core_attn"]) == "core_attn,mlp"
    assert parse_selective("mla_up_proj+layernorm") == "layernorm,mla_up_proj"
    assert parse_selective("op") == "op"
    assert _plan("moe_act, core_attn").selective_recompute == "core_attn,moe_act"


@pytest.mark.parametrize("bad", ["", "op,mlp", "attention", "core_attn,full"])
def test_bad_modules_name_the_allowed_values(bad: str) -> None:
    with pytest.raises(LayoutError, match="allowed: 'op'.*" + ", ".join(MODULES)):
        _plan(bad)


def test_mla_up_proj_needs_mla_as_in_megatron() -> None:
    plan = _plan("mla_up_proj", ep=1)
    with pytest.raises(LayoutError, match=r"'mla_up_proj' needs multi-latent attention.*llama3-8b"):
        plan_graph(perfmodel.get_workload("llama3-8b"), plan)


def test_layernorm_frees_the_separate_norms_outputs_only() -> None:
    """MoE layer: the MLA input norm (read by q_down and kv_down) and the pre-MLP norm (router and
    dispatch) each free one T x h bf16 output; the dense layer's pre-MLP norm is fused into FC1
    (TELayerNormColumnParallelLinear), so only its input norm counts."""
    assert _freed("core_attn,layernorm") == pytest.approx(2 * T * H * 2, rel=1e-12)
    assert _freed("core_attn,layernorm", "layers") == pytest.approx(T * H * 2, rel=1e-12)


def test_moe_act_frees_the_second_expert_gemms_input() -> None:
    """expert_fc2 keeps its input: rows per local expert x local experts x width, bf16, the rows
    those of the busiest rank (imbalance x T x top-k over the 32 local experts)."""
    rows = math.ceil(MOE_IMBALANCE_DEFAULT * T * K / (E // EP))
    assert _freed("core_attn,moe_act") == pytest.approx(rows * (E // EP) * F * 2, rel=1e-12)
    assert _freed("core_attn,moe_act", "layers") == 0.0  # a dense layer has no routed experts


def test_mla_up_proj_frees_q_k_v() -> None:
    """The fused kernel keeps Q and K (192 per head) and V (128 per head) for 128 heads, bf16; its
    fp32 log-sum-exp stays."""
    assert _freed("core_attn,mla_up_proj") == pytest.approx(T * HEADS * (2 * DQK + DV) * 2, rel=1e-9)


def test_mlp_frees_the_dense_mlp_but_its_input() -> None:
    plan = _plan("core_attn,mlp")
    dense = _layer(plan, "layers")
    kept = sum(_op(dense, n).saved_bytes for n in ("mlp_fc1", "mlp_act", "mlp_fc2"))
    assert _op(dense, "mlp_fc1").saved_bytes == T * H * 2 and _op(dense, "mlp_fc2").saved_bytes == T * DENSE_F * 2
    assert _freed("core_attn,mlp", "layers") == pytest.approx(kept, rel=1e-12)
    assert _freed("core_attn,mlp") == 0.0  # not an MoE layer's (Megatron: 'mlp' is the dense MLP)


def test_moe_keeps_only_the_routers_input_and_rebuilds_the_block() -> None:
    plan = _plan("core_attn,moe")
    layer = _layer(plan, "moe_layers")
    names = [o.name for o in layer.ops]
    block = layer.ops[names.index("router") + 1:names.index("mlp_residual")]
    freed = sum(o.saved_bytes for o in block)
    assert _freed("core_attn,moe") == pytest.approx(freed, rel=1e-12)
    # while its backward runs, the block's tensors exist again
    assert recompute_working_bytes(layer, plan) == pytest.approx(freed, rel=1e-12)


def test_moe_subsumes_moe_act_and_shared_experts() -> None:
    assert _freed("core_attn,moe,moe_act,shared_experts") == pytest.approx(_freed("core_attn,moe"), rel=1e-12)


def test_recompute_time_is_the_rerun_ops_forward() -> None:
    acc = SYSTEM.accelerator
    plan = _plan("moe_act,mla_up_proj")  # no core_attn: the attention core does not rerun
    layer = _layer(plan, "moe_layers")
    want = sum(op_cost(acc, _op(layer, n), "fwd").time_s for n in ("q_up", "kv_up", "rope", "expert_act"))
    assert layer_time(SYSTEM, plan, layer, world=1).recompute_gpu_s == pytest.approx(want, rel=1e-12)
    with_core = _plan("core_attn,moe_act,mla_up_proj")
    flash = next(o for o in layer.ops if o.kind == "attention")
    assert layer_time(SYSTEM, with_core, layer, world=1).recompute_gpu_s == pytest.approx(
        want + op_cost(acc, flash, "fwd").time_s, rel=1e-12)


def test_moe_module_reruns_the_expert_parallel_exchange() -> None:
    plan = _plan("moe")
    layer = _layer(plan, "moe_layers")
    ep = [c for c in layer.comms if c.group == "ep" and c.fwd]
    assert ep and {c.name for c in module_recompute(layer, "moe").comms} >= {c.name for c in ep}
    assert layer_time(SYSTEM, plan, layer).recompute_comm_s == pytest.approx(
        sum(comm_s(SYSTEM, plan, c) * c.fwd for c in ep), rel=1e-12)


def test_hardware_flops_count_the_rerun_ops() -> None:
    """HFU's FLOPs: model FLOPs plus the forward FLOPs recomputed; moe_act adds the experts'
    activation (8 FLOPs per element of the gated output, 58 MoE layers)."""
    model, hw = model_flop_per_step(SPEC, _plan("moe_act"))
    full = perfmodel.engines.stages.model_graph(SPEC, _plan("moe_act"))
    act = next(o for layer in full.layers if layer.name == "moe_layers" for o in layer.ops if o.name == "expert_act")
    n_moe = next(layer.count for layer in full.layers if layer.name == "moe_layers")
    assert hw - model == pytest.approx(act.mflop * n_moe * 8, rel=1e-9)


def test_more_modules_never_keep_more_or_run_faster() -> None:
    chain = ["core_attn", "core_attn,moe_act", "core_attn,moe_act,layernorm", "core_attn,moe_act,layernorm,mla_up_proj",
             "core_attn,moe_act,layernorm,mla_up_proj,mlp", "core_attn,moe_act,layernorm,mla_up_proj,mlp,moe"]
    mems, steps = [], []
    for sel in chain:
        est = perfmodel.estimate(SPEC, "h100-sxm5-80gb", _plan(sel), calibration="none")
        mems.append(est.memory.activations_bytes)
        steps.append(est.step_time_s)
    assert all(b <= a for a, b in itertools.pairwise(mems)), mems
    assert all(b >= a for a, b in itertools.pairwise(steps)), steps
    none = peak_memory(plan_graph(SPEC, _plan(recompute="none")), _plan(recompute="none")).activations_bytes
    full = peak_memory(plan_graph(SPEC, _plan(recompute="full")), _plan(recompute="full")).activations_bytes
    assert full < mems[-1] < none


def test_analytic_and_discrete_event_engines_agree() -> None:
    plan = _plan("moe_act,layernorm,mla_up_proj", pp=2, dp=4, ep=4, global_batch=16)
    a = perfmodel.estimate(SPEC, "h100-sxm5-80gb", plan, engine="analytic", calibration="none")
    d = perfmodel.estimate(SPEC, "h100-sxm5-80gb", plan, engine="des", calibration="none")
    assert a.breakdown_s["recompute_s"] > 0
    assert d.step_time_s == pytest.approx(a.step_time_s, rel=0.02)


def test_megatron_arguments_read_the_modules() -> None:
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --vocab-size 32000 "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 ")
    job = parse_megatron_args(base + "--recompute-granularity selective --recompute-modules layernorm moe_act")
    assert (job.layout["recompute"], job.layout["recompute_modules"]) == ("selective", "moe_act,layernorm")
    job = parse_megatron_args(base + "model.recompute_granularity=selective model.recompute_modules=['mlp','core_attn']")
    assert job.layout["recompute_modules"] == "core_attn,mlp"
    with pytest.raises(SpecError, match=r"--recompute-modules.*'bogus'"):
        parse_megatron_args(base + "--recompute-granularity selective --recompute-modules bogus")


def test_cli_states_the_modules() -> None:
    run = [sys.executable, "-m", "perfmodel", "estimate", "deepseek-v3", "--hardware", "h100-sxm5-80gb",
           "--n-gpus", "8", "--ep", "8", "--seq-len", "1024", "--calibration", "none"]
    out = subprocess.run([*run, "--recompute-modules", "moe_act,mla_up_proj"], capture_output=True, text=True, check=True)
    assert "recompute selective (moe_act,mla_up_proj)" in out.stdout
    bad = subprocess.run([*run, "--recompute", "full", "--recompute-modules", "mlp"], capture_output=True, text=True)
    assert bad.returncode != 0 and "needs --recompute selective" in bad.stderr and "Traceback" not in bad.stderr


def test_modules_with_nothing_to_rerun_are_said() -> None:
    dense = ParallelPlan(dp=8, global_batch=8, seq_len=T, recompute="selective", selective_recompute="moe_act,mlp")
    notes = dense.validate_for(perfmodel.get_workload("llama3-8b"), 8)
    assert "recompute module 'moe_act' has nothing to rerun in llama3-8b (no MoE layers)" in notes
    assert not any("'mlp'" in n for n in notes)
    qwen = _plan("shared_experts,moe_act").validate_for(perfmodel.get_workload("qwen3-30b-a3b"), 8)
    assert [n for n in qwen if "recompute module" in n] == [
        "recompute module 'shared_experts' has nothing to rerun in qwen3-30b-a3b (no shared experts)"]
    with pytest.raises(LayoutError, match=r"'mla_up_proj' needs multi-latent attention"):
        dense.model_copy(update={"selective_recompute": "mla_up_proj"}).validate_for(perfmodel.get_workload("llama3-8b"))
