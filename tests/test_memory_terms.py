"""Memory terms with hand-computed values: weights, gradients and optimizer states against
Megatron-LM's own estimator (megatron/training/theoretical_memory_usage.py,
compute_weight_and_optimizer_memory: 6 + 12/dp bytes per parameter under the distributed
optimizer, 6 + 12/edp for expert parameters), the micro-batches each pipeline rank holds
(Megatron-LM schedules.py warm-up counts, checked against every schedule's own order), selective
recompute (Korthikanti et al. 2022 Table 2) and the 'does not fit' message."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import perfmodel
from perfmodel.engines.step import plan_graph
from perfmodel.memory import (
    MemoryBreakdown,
    fit_message,
    layer_activation_bytes,
    layer_saved_bytes,
    memory_per_rank,
    peak_memory,
)
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.parallel.schedules import SCHEDULES
from perfmodel.parallel.split import stage_layers
from perfmodel.units import fmt
from perfmodel.validation.predict import predict_row
from perfmodel.validation.runs import COLUMNS
from perfmodel.workload.catalog import get_workload, load_workloads
from perfmodel.workload.graph import Layer

# Llama-3-8B (config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads of 128, FFN 14336, vocab
# 128256, untied head): embedding and head 128256·4096 each, per layer q and o 4096², k and v
# 4096·1024, SwiGLU 3·4096·14336, two RMSNorm 4096; plus the final norm
LLAMA3_8B_PARAMS = 2 * 128256 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096


def _static(mem: MemoryBreakdown) -> float:
    return mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes


def test_llama3_8b_has_its_published_parameter_count() -> None:
    assert LLAMA3_8B_PARAMS == 8_030_261_248


def test_distributed_optimizer_matches_megatrons_estimator_dense() -> None:
    # Megatron-LM theoretical_memory_usage.py: bf16 params, fp32 main grads, fp32 master + Adam
    # sharded over dp: 6 + 12/dp bytes per parameter; dp 8 -> 7.5 B
    plan = ParallelPlan(dp=8, zero_stage=1, micro_batch=1, global_batch=8, seq_len=8192)
    mem = perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan, calibration="none").memory
    assert _static(mem) == pytest.approx(LLAMA3_8B_PARAMS * (6 + 12 / 8), rel=1e-9)


def test_distributed_optimizer_matches_megatrons_estimator_experts() -> None:
    # Mixtral-8x7B, ep 8 over dp 8: expert data-parallel size world/(etp·ep·pp) = 1, so each
    # rank's eighth of the experts keeps its whole optimizer state: 6 + 12/1 B; the dense part
    # 6 + 12/8 B (Megatron-LM theoretical_memory_usage.py, num_bytes_per_parameter(edp)).
    # Experts: 32 layers x 8 x SwiGLU 3·4096·14336; dense: embedding and untied head 32000·4096,
    # attention 2·4096² + 2·4096·1024 per layer, two norms per layer and the final one, router 4096·8
    expert = 32 * 8 * 3 * 4096 * 14336
    dense = 2 * 32000 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 2 * 4096 + 4096 * 8) + 4096
    plan = ParallelPlan(dp=8, ep=8, zero_stage=1, micro_batch=1, global_batch=8, seq_len=4096)
    mem = peak_memory(plan_graph(get_workload("mixtral-8x7b"), plan), plan)
    assert _static(mem) == pytest.approx(dense * (6 + 12 / 8) + expert / 8 * (6 + 12 / 1), rel=1e-9)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_in_flight_per_rank_is_what_the_schedule_order_holds(name: str) -> None:
    # a forward's activations stay until its backward (its weight-gradient phase, for a schedule
    # that defers it); a chunk of a v-chunk rank is 1/v of the rank's layers
    # (DualPipe: a rank holds two stages and a micro-batch's activations fill one, so a rank's
    # unit is two of its chunks; it runs only even p and m >= 2p)
    sched = SCHEDULES[name]
    frees = "W" if sched.defers_wgrad else "B"
    per_rank = len(sched.rank_stages(2, 1, 0)) if not sched.chunked else None
    for p in (2, 3, 4, 8):
        for m in (1, 2, 3, 4, 6, 8, 12, 16):
            if name == "dualpipe" and (p % 2 or m % 2 or m < 2 * p):
                continue
            for v in ((2, 3, 4) if sched.chunked else (1,)):
                for s in range(p):
                    held = peak = 0
                    for kind, _, _ in sched.order(p, m, v, s):
                        held += (kind == "F") - (kind == frees)
                        peak = max(peak, held)
                    assert float(sched.in_flight(m, p, v, s)) == pytest.approx(peak / (per_rank or v)), (p, m, v, s)


def test_in_flight_hand_values() -> None:
    one_f_one_b, inter = SCHEDULES["1f1b"], SCHEDULES["interleaved"]
    # 1F1B, p 4, m 8: rank s runs p - s - 1 warm-up forwards and holds p - s micro-batches
    assert [float(one_f_one_b.in_flight(8, 4, 1, s)) for s in range(4)] == [4, 3, 2, 1]
    # interleaved, p 4, v 2, m 8: (2(p - s - 1) + (v - 1)p + 1)/v = 11/2 on rank 0, 5/2 on rank 3;
    # rank 0 is Narayanan et al.'s p(1 + (p - 1)/(pv)) = 4·(1 + 3/8) = 5.5
    assert [float(inter.in_flight(8, 4, 2, s)) for s in range(4)] == [5.5, 4.5, 3.5, 2.5]
    # m not a multiple of p: every forward runs first, all 12 held
    assert float(inter.in_flight(12, 8, 2, 0)) == 12


def test_last_pipeline_rank_holds_one_micro_batch_under_1f1b() -> None:
    # its activations (the fp32 logits among them) are those of the one micro-batch between its
    # forward and its backward, not stage 0's p
    plan = ParallelPlan(pp=4, micro_batch=1, global_batch=8, seq_len=1024)
    g = plan_graph(get_workload("gpt2-124m"), plan)

    def per_micro_batch(stage: int) -> float:
        return sum(layer_activation_bytes(layer, plan) * n for layer, n in stage_layers(g, 4, stage, 1))

    assert memory_per_rank(g, plan, 3).activations_bytes == pytest.approx(1 * per_micro_batch(3), rel=1e-12)
    assert memory_per_rank(g, plan, 0).activations_bytes == pytest.approx(4 * per_micro_batch(0), rel=1e-12)


def _transformer(attention_impl: str) -> tuple[Layer, ParallelPlan, ParallelPlan]:
    plan = ParallelPlan(micro_batch=1, global_batch=1, seq_len=1024, attention_impl=attention_impl)  # type: ignore[arg-type]
    layer = next(layer for layer in plan_graph(get_workload("gpt2-124m"), plan).layers if layer.recomputable)
    return layer, plan, plan.model_copy(update={"recompute": "selective"})


def test_selective_recompute_frees_the_s_squared_terms_only() -> None:
    # GPT-2 124M, s 1024, b 1, 12 heads, unfused core: selective recompute frees the softmax output
    # (2 B) and the dropout mask and output (1 + 2 B) per score, 12·1024² scores: 5·12·1024² B.
    # Q, K and V stay: they are the checkpointed core's inputs (Korthikanti et al. 2022 Table 2)
    unfused, none, selective = _transformer("unfused")
    freed = layer_activation_bytes(unfused, none) - layer_activation_bytes(unfused, selective)
    assert freed == pytest.approx(5 * 12 * 1024**2, rel=1e-12)
    # a fused (flash) kernel keeps no s² term: selective recompute frees nothing
    flash, none, selective = _transformer("flash")
    assert layer_activation_bytes(flash, selective) == layer_activation_bytes(flash, none)


@pytest.mark.parametrize(("precision", "recipe", "element_bytes"),
                         [("fp8", "delayed", 1.0), ("mxfp8", "mxfp8", 1 + 1 / 32), ("nvfp4", "nvfp4", 0.5 + 1 / 16)])
def test_te_keeps_quantized_gemm_inputs(precision: str, recipe: str, element_bytes: float) -> None:
    # Llama-3-8B layer, 1024 tokens: its weight GEMMs save their inputs, 4096 (QKV) + 4096 (out) +
    # 4096 (FC1) + 14336 (FC2, the SwiGLU output) = 26624 elements per token, 2 B each in bf16;
    # Transformer Engine keeps them quantized (element + scale share), torchao's casts do not
    def layer(plan: ParallelPlan) -> Layer:
        return next(x for x in plan_graph(get_workload("llama3-8b"), plan).layers if x.recomputable)

    bf16 = ParallelPlan(micro_batch=1, global_batch=1, seq_len=1024)
    te = bf16.model_copy(update={"precision": precision, "fp8_recipe": recipe, "fp8_fused_casts": True})
    plain = te.model_copy(update={"fp8_fused_casts": False})
    saved = 1024 * 26624 * (2 - element_bytes)
    assert layer_saved_bytes(layer(bf16), bf16) - layer_saved_bytes(layer(te), te) == pytest.approx(saved, rel=1e-12)
    assert layer_saved_bytes(layer(plain), plain) == layer_saved_bytes(layer(bf16), bf16) == layer(bf16).saved_bytes


def _over_plan() -> tuple[ParallelPlan, float]:
    # Llama-3-8B, dp 8, 2 x 8192 tokens per micro-batch without recompute on an 80 GB H100:
    # 60.2 GB of states (7.5 B x 8.03 B) plus 32 layers of activations does not fit
    plan = ParallelPlan(dp=8, zero_stage=1, micro_batch=2, global_batch=16, seq_len=8192)
    return plan, 80e9


def test_message_names_the_recompute_that_fits() -> None:
    plan, hbm = _over_plan()
    g = plan_graph(get_workload("llama3-8b"), plan)
    need = peak_memory(g, plan).total_bytes
    full = peak_memory(g, plan.model_copy(update={"recompute": "full"})).total_bytes
    assert need > hbm > full
    # and the fewest layers per chunk Megatron-Core's block recompute needs (31 of 32 here)
    block = plan.model_copy(update={"recompute": "full", "recompute_method": "block", "recompute_num_layers": 31})
    fewer = block.model_copy(update={"recompute_num_layers": 30})
    assert peak_memory(g, fewer).total_bytes > hbm >= peak_memory(g, block).total_bytes
    assert fit_message(g, plan, hbm) == (f"does not fit: {fmt(need, 'B')} per GPU > {fmt(hbm, 'B')} of HBM "
                                         f"(with full recompute {fmt(full, 'B')}; or block recompute of the first 31 "
                                         f"layers per model chunk {fmt(peak_memory(g, block).total_bytes, 'B')})")
    assert fit_message(g, plan.model_copy(update={"recompute": "full"}), hbm) is None


def test_message_says_still_over_when_nothing_fits() -> None:
    # Llama-3-8B unsharded: 18 B x 8.03 B = 145 GB of states before any activation
    plan = ParallelPlan(micro_batch=1, global_batch=1, seq_len=8192)
    g = plan_graph(get_workload("llama3-8b"), plan)
    msg = fit_message(g, plan, 80e9)
    assert msg is not None and msg.endswith(", still over)") and "with full recompute" in msg
    full_plan = plan.model_copy(update={"recompute": "full"})
    assert fit_message(g, full_plan, 80e9) == (
        f"does not fit: {fmt(peak_memory(g, full_plan).total_bytes, 'B')} per GPU > 80 GB of HBM")


def _row(recompute: str) -> dict[str, str]:
    row = {c: "" for c in COLUMNS}
    row.update(run_id="r", model="llama3-8b", seq_len="8192", global_batch="16", micro_batch="2", tp="1", pp="1",
               dp="8", zero_stage="1", recompute=recompute, precision="bf16", accelerator="h100-sxm5-80gb",
               n_gpus="8", step_time_s="10")
    return row


def test_validate_names_a_defaulted_recompute() -> None:
    wl = load_workloads()
    defaulted = predict_row(_row(""), wl)["message"]
    stated = predict_row(_row("none"), wl)["message"]
    assert "does not fit with the defaulted recompute=none: " in defaulted and "(with full recompute " in defaulted
    assert "does not fit: " in stated and "defaulted recompute" not in stated
    # the same prediction either way: the message changes, not the numbers
    assert predict_row(_row(""), wl)["predicted_step_time_s"] == predict_row(_row("none"), wl)["predicted_step_time_s"]


def test_validate_output_is_still_csv_safe(tmp_path: Path) -> None:
    out = predict_row(_row(""), load_workloads())
    path = tmp_path / "o.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out))
        w.writeheader()
        w.writerow(out)
    with open(path, newline="") as f:
        assert next(csv.DictReader(f))["message"] == out["message"]


@pytest.mark.parametrize("workload", ["gpt2-124m", "llama3-8b", "mixtral-8x7b", "patchtst-electricity"])
@pytest.mark.parametrize("layers", [1, 2, None])
def test_recompute_never_keeps_more_than_no_recompute(workload: str, layers: int | None) -> None:
    """Recompute trades time for memory: with one micro-batch in flight, full recompute and each
    selective policy keep at most what no recompute keeps, however few layers the model has.
    The rebuilt layer used to count its checkpointed input a second time, so a one-layer model
    under full recompute kept its input more than without recompute."""
    spec = get_workload(workload)
    if layers is not None:
        spec = spec.model_copy(update={"num_layers": layers})
    base = dict(micro_batch=1, global_batch=1, seq_len=min(spec.seq_len, 1024))
    none = memory_per_rank(plan_graph(spec, ParallelPlan(**base)), ParallelPlan(**base)).activations_bytes
    for kw in ({"recompute": "full"}, {"recompute": "selective"},
               {"recompute": "selective", "selective_recompute": "op"}):
        plan = ParallelPlan(**base, **kw)
        assert memory_per_rank(plan_graph(spec, plan), plan).activations_bytes <= none * (1 + 1e-12), kw


def test_layer_saved_bytes_remembered_per_plan_setting():
    """layer_saved_bytes is remembered per layer object and the plan fields op_saved_bytes reads:
    a plan that changes one of them (Transformer Engine's fp8 casts keep a GEMM's input in 1 B)
    gets its own sum, and a plan that changes something else (the global batch) the same one."""
    from perfmodel.memory import op_saved_bytes

    spec = perfmodel.get_workload("llama3-8b")
    base = ParallelPlan(global_batch=8, precision="fp8")
    layer = next(layer for layer in plan_graph(spec, base).layers if layer.recomputable)
    te = base.model_copy(update={"fp8_fused_casts": True})
    for plan in (base, te, base, base.model_copy(update={"global_batch": 16}), te):
        assert layer_saved_bytes(layer, plan) == sum(op_saved_bytes(o, plan) for o in layer.ops)
    assert layer_saved_bytes(layer, te) < layer_saved_bytes(layer, base)
