"""Eager element-wise ops (perfmodel/compute/eager.py): RMSNorm, SwiGLU and RoPE as the ATen
chains a model written in PyTorch ops runs, by hand; torch's own single kernels unchanged; the
stacks that select it; the CLI flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import perfmodel
from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework
from perfmodel.cli import main as cli_main
from perfmodel.compute.eager import RMSNORM, ROPE, SWIGLU, with_elementwise
from perfmodel.compute.ops import op_cost
from perfmodel.engines.stages import cached_graph
from perfmodel.hardware.system import resolve_system
from perfmodel.workload.catalog import get_workload

SEQ = 4096


def _layer(graph):
    return next(layer for layer in graph.layers if layer.kind == "transformer")


def _ops(workload: str, impl: str, tp: int = 1):
    spec = get_workload(workload)
    g = cached_graph(spec, 1, SEQ, tp, 1, 1, tp > 1, "bf16", "flash", elementwise=impl)
    return {o.name: o for o in _layer(g).ops}


def test_llama_chains_by_hand():
    """Llama-3-8B, 4096 tokens: RMSNorm over T·h moves 36 B per element forward and 96 B
    backward (fused 4 / 8) and keeps 6 B; SwiGLU over T·f 10 / 18 B (fused 6 / 12) and keeps 6 B;
    RoPE over the q and k heads' T·(32 + 8)·128 elements 20 / 22 B (fused 4 / 8)."""
    spec = get_workload("llama3-8b")
    fused, eager = _ops("llama3-8b", "fused"), _ops("llama3-8b", "eager")
    th, tf, tr = SEQ * spec.hidden, SEQ * spec.ffn_hidden, SEQ * (spec.num_heads + spec.kv_heads) * spec.dhead
    assert fused["norm1"].bytes == pytest.approx(4 * th)
    assert eager["norm1"].bytes == pytest.approx(36 * th)
    assert eager["norm1"].bytes * eager["norm1"].bwd_bytes_factor == pytest.approx(96 * th)
    assert eager["norm1"].saved_bytes == pytest.approx(6 * th) and fused["norm1"].saved_bytes == pytest.approx(2 * th)
    assert fused["mlp_act"].bytes == pytest.approx(6 * tf)
    assert eager["mlp_act"].bytes == pytest.approx(10 * tf)
    assert eager["mlp_act"].bytes * eager["mlp_act"].bwd_bytes_factor == pytest.approx(18 * tf)
    assert eager["mlp_act"].saved_bytes == pytest.approx(6 * tf)
    assert eager["rope"].bytes == pytest.approx(20 * tr) and fused["rope"].bytes == pytest.approx(4 * tr)
    assert eager["rope"].bytes * eager["rope"].bwd_bytes_factor == pytest.approx(22 * tr)
    # kernel counts (the host limit) and FLOPs stay the graph's
    for name in ("norm1", "mlp_act", "rope", "qkv_proj", "attn_residual"):
        assert (eager[name].kernels, eager[name].bwd_kernels, eager[name].flop) == \
               (fused[name].kernels, fused[name].bwd_kernels, fused[name].flop)
    # GEMMs, attention and the residual add are the same ops
    for name in ("qkv_proj", "flash_attention", "out_proj", "mlp_fc1", "mlp_fc2", "attn_residual"):
        assert eager[name] == fused[name]


def test_eager_bytes_follow_the_rank_shape():
    """Applied after sharding: at tp 4 with sequence parallelism each chain moves a quarter."""
    one, four = _ops("llama3-8b", "eager"), _ops("llama3-8b", "eager", tp=4)
    for name in ("norm1", "mlp_act", "rope"):
        assert four[name].bytes == pytest.approx(one[name].bytes / 4)


def test_memory_bound_seconds_by_hand():
    """An eager RMSNorm forward streams its 36 B per element at the part's element-wise rate."""
    acc = resolve_system("h100-sxm5-80gb", None, 1)[0].accelerator
    norm = _ops("llama3-8b", "eager")["norm1"]
    elems = SEQ * get_workload("llama3-8b").hidden
    assert op_cost(acc, norm, "fwd").memory_s == pytest.approx(elems * 36 / acc.elementwise_achieved_Bps)
    assert op_cost(acc, norm, "bwd").memory_s == pytest.approx(elems * 96 / acc.elementwise_achieved_Bps)


def test_layernorm_gelu_models_are_unchanged():
    """GPT-style models (LayerNorm, GELU, learned positions) run torch's own single kernels."""
    spec = get_workload("gpt3-1.3b")
    g = cached_graph(spec, 1, 2048, 1, 1, 1, False, "bf16", "flash")
    assert with_elementwise(spec, g, "eager") == g
    plan = perfmodel.ParallelPlan(seq_len=2048)
    a = perfmodel.estimate(spec, "dgx-a100-80gb", plan, calibration="none")
    b = perfmodel.estimate(spec, "dgx-a100-80gb", plan.model_copy(update={"elementwise": "eager"}), calibration="none")
    assert b.step_time_s == a.step_time_s


def test_eager_llama_step_is_slower_and_holds_more():
    plan = perfmodel.ParallelPlan(seq_len=8192)
    fused = perfmodel.estimate("llama3.1-8b", "dgx-h200", plan, calibration="none")
    eager = perfmodel.estimate("llama3.1-8b", "dgx-h200", plan.model_copy(update={"elementwise": "eager"}),
                               calibration="none")
    assert 1.03 < eager.step_time_s / fused.step_time_s < 1.3
    assert eager.memory_per_gpu_bytes > fused.memory_per_gpu_bytes
    assert "eager element-wise ops" in eager.summary()


@pytest.mark.parametrize(("name", "impl"), [("pytorch", "eager"), ("deepspeed", "eager"), ("composer", "eager"),
                                            ("megatron-core", "fused"), ("megatron-lm", "fused"),
                                            ("torchtitan", "fused"), ("llm.c", "fused"), ("jax", "fused")])
def test_stacks_select_it(name, impl):
    assert apply_framework(perfmodel.ParallelPlan(), FRAMEWORKS[name]).elementwise == impl
    # a plan that names it keeps it
    named = perfmodel.ParallelPlan(elementwise="fused" if impl == "eager" else "eager")
    assert apply_framework(named, FRAMEWORKS[name]).elementwise == named.elementwise


def test_unknown_value_is_refused():
    with pytest.raises(perfmodel.LayoutError, match="elementwise"):
        perfmodel.ParallelPlan(elementwise="compiled")


def test_cli_flag(capsys):
    args = ["estimate", "llama3.1-8b", "--hardware", "dgx-h200", "--n-gpus", "1", "--seq-len", "8192",
            "--calibration", "none", "--framework", "torchtitan"]
    assert cli_main(args) == 0
    fused = capsys.readouterr().out
    assert cli_main([*args, "--elementwise", "eager"]) == 0
    eager = capsys.readouterr().out
    assert "eager element-wise ops" in eager and "eager element-wise ops" not in fused


def test_chain_constants_match_the_docstring():
    assert (RMSNORM.fwd, RMSNORM.bwd, RMSNORM.saved) == (36.0, 96.0, 6.0)
    assert (SWIGLU.fwd, SWIGLU.bwd, SWIGLU.saved) == (10.0, 18.0, 6.0)
    assert (ROPE.fwd, ROPE.bwd) == (20.0, 22.0)


H200_RUN = Path(__file__).resolve().parents[1] / "validation" / "device" / "h200-2026-12-04" / "eager_ops.json"


def _measured(op: str, mode: str) -> float:
    rec = next(r for r in json.loads(H200_RUN.read_text())["ops"] if r["op"] == op and r["mode"] == mode)
    return float(rec["fwd_bwd_seconds"])


def test_eager_extra_matches_the_h200_measurement():
    """validation/device/h200-2026-12-04/eager_ops.json (one H200, torch 2.11, Llama-3-8B layer,
    8192 tokens): Hugging Face's RMSNorm (twice per layer), SwiGLU and RoPE cost 2.66 ms more
    forward+backward eager than torch.compile'd. The chains at the H200's streaming rate (no
    calibration) predict the extra within 35 %, and neither side is near zero: the mechanism is
    real on this part (against Liger-Kernel's report of <= 1.5 % per step, docs/CALIBRATION.md)."""
    measured = sum(n * (_measured(op, "eager") - _measured(op, "compiled"))
                   for op, n in (("rmsnorm", 2), ("swiglu", 1), ("rope", 1)))
    assert measured == pytest.approx(2.66e-3, abs=0.01e-3)
    acc = resolve_system("h200-sxm-141gb", None, 1)[0].accelerator
    spec = get_workload("llama3-8b")
    graphs = {impl: cached_graph(spec, 1, 8192, 1, 1, 1, False, "bf16", "flash", elementwise=impl)
              for impl in ("fused", "eager")}
    ops = {impl: {o.name: o for o in _layer(g).ops} for impl, g in graphs.items()}
    predicted = sum(op_cost(acc, ops["eager"][n], d).time_s - op_cost(acc, ops["fused"][n], d).time_s
                    for n in ("norm1", "norm2", "mlp_act", "rope") for d in ("fwd", "bwd"))
    assert predicted == pytest.approx(measured, rel=0.35)


def test_one_eager_layer_against_the_hugging_face_layer():
    """The same file's transformers LlamaDecoderLayer (eager, sdpa) ran forward+backward over 8192
    tokens in 24.07 ms on the H200. A one-layer Llama-3-8B with a 128-token vocabulary (so the
    head is negligible), eager, physics only, predicts it within 10 %; fused it is >= 10 % faster."""
    hf = json.loads(H200_RUN.read_text())["hf_layer"]
    assert hf["fwd_bwd_seconds"] == pytest.approx(24.07e-3, abs=0.01e-3)
    spec = get_workload("llama3-8b").model_copy(update={"num_layers": 1, "vocab": 128})
    plan = perfmodel.ParallelPlan(seq_len=8192, micro_batch=1, global_batch=1)

    def layer_s(impl: str) -> float:
        e = perfmodel.estimate(spec, "h200-sxm-141gb", plan.model_copy(update={"elementwise": impl}),
                               calibration="none")
        return e.breakdown_s["compute_fwd_s"] + e.breakdown_s["compute_bwd_s"]

    eager, fused = layer_s("eager"), layer_s("fused")
    assert eager == pytest.approx(hf["fwd_bwd_seconds"], rel=0.10)
    assert fused < 0.9 * eager



def test_compiled_layer_against_the_fused_prediction():
    """probe5.json (same H200, another call): the transformers layer eager 23.94 ms, under
    torch.compile 20.58 ms forward+backward. The one-layer prediction, physics only, eager minus
    fused (3.50 ms) is the measured saving (3.36 ms) within 10 %, and fused is within 5 % of compiled."""
    rec = json.loads((H200_RUN.parent / "probe5.json").read_text())
    saved = rec["eager_fwd_bwd_s"] - rec["compiled_fwd_bwd_s"]
    assert saved == pytest.approx(3.36e-3, abs=0.01e-3)
    spec = get_workload("llama3-8b").model_copy(update={"num_layers": 1, "vocab": 128})
    plan = perfmodel.ParallelPlan(seq_len=8192, micro_batch=1, global_batch=1)
    s = {}
    for impl in ("eager", "fused"):
        e = perfmodel.estimate(spec, "h200-sxm-141gb", plan.model_copy(update={"elementwise": impl}), calibration="none")
        s[impl] = e.breakdown_s["compute_fwd_s"] + e.breakdown_s["compute_bwd_s"]
    assert s["eager"] - s["fused"] == pytest.approx(saved, rel=0.10)
    assert s["fused"] == pytest.approx(rec["compiled_fwd_bwd_s"], rel=0.05)
