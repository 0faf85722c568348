"""MoE as Megatron-Core runs it: parallel folding, router, permutation, dispatch, grouped GEMMs,
imbalance, shared-expert overlap, expert-data-parallel gradient reduction."""

from __future__ import annotations

import csv
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.compute.ops import grouped_gemm_cost, op_cost
from perfmodel.engines.analytic import analytic_estimate
from perfmodel.engines.costs import (
    a2a_contention_fraction,
    combined_1f1b_pair_s,
    combined_1f1b_paired_fraction,
    comm_s,
    layer_time,
)
from perfmodel.engines.stages import dp_collectives, moe_options, plan_graph
from perfmodel.errors import LayoutError
from perfmodel.memory import memory_per_rank
from perfmodel.parallel.ranks import group_stride
from perfmodel.parallel.shard import sharded_graph
from perfmodel.validation.predict import validate_file
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.graph import Graph, Layer
from perfmodel.workload.moe import FP8_DISPATCH_BYTES, MoEOptions

WL = load_workloads()
MIXTRAL, DSV3 = WL["mixtral-8x7b"], WL["deepseek-v3"]


def moe_layer(g: Graph) -> Layer:
    return next(layer for layer in g.layers if layer.kind == "moe")


def ops(layer: Layer) -> dict:
    return {o.name: o for o in layer.ops}


def comms(layer: Layer) -> dict:
    return {c.name: c for c in layer.comms}


def h100(n: int):
    return perfmodel.resolve_system("h100-sxm5-80gb", None, n)[0]


# ---------------------------------------------------------------- FLOPs against torch
@pytest.mark.parametrize("tp, ep, etp, dp, score", [(1, 1, 1, 1, "softmax"), (2, 4, 1, 2, "sigmoid"),
                                                    (2, 2, 2, 2, "softmax"), (1, 4, 2, 8, "softmax")])
def test_moe_flops_with_permutation_equal_flop_counter(tp: int, ep: int, etp: int, dp: int, score: str) -> None:
    """The tp·dp ranks of a layout together compute what one permuting torch module computes
    for all their tokens: router (fp32) + every expert's chunk + the shared expert."""
    torch = pytest.importorskip("torch")
    import torch_reference as R

    spec = DSV3.with_(num_experts=16, top_k=4, moe_ffn_hidden=256, hidden=512, num_heads=8, first_dense_layers=0,
                      num_layers=1, mla=None, attention="mha")
    b, s = 1, 256  # tokens per attention group; (dp·b·s)·k divisible by E: balanced chunks are exact
    with torch.device("meta"):
        ref = R.PermutedMoEFFN(512, 16, 4, 256, shared=1, score=score)
        x = torch.zeros(dp * b, s, 512)
    want = R.count_flop(ref, x)
    layer = moe_layer(sharded_graph(spec, micro_batch=b, seq_len=s, tp=tp, ep=ep, sp=tp > 1, moe=MoEOptions(etp=etp)))
    names = ("router", "expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2")
    per_rank = sum(o.mflop for o in layer.ops if o.name in names)
    assert per_rank * tp * dp == want
    # the permutation moves T/tp·k rows of h on each rank, forward; un-permutation reads them back
    o = ops(layer)
    assert o["permute"].bytes == (b * s // tp) * 4 * 512 * 2 * 2


def test_flex_dispatcher_permutes_the_received_rows_once_each_way() -> None:
    """Megatron-Core's flex dispatcher (DeepEP) dispatches tokens in place and permutes the rows it
    receives into expert order inside the experts' node: no pre-dispatch permute, no sort_chunks.
    16 experts top-4 over ep 4, T = 256 tokens, h 512, balanced (imbalance 1): each rank receives
    R = 256·4 rows; one read + one write of R·h bf16 elements each way."""
    spec = DSV3.with_(num_experts=16, top_k=4, moe_ffn_hidden=256, hidden=512, num_heads=8, first_dense_layers=0,
                      num_layers=1, mla=None, attention="mha")
    alltoall = ops(moe_layer(sharded_graph(spec, micro_batch=1, seq_len=256, ep=4, moe=MoEOptions())))
    flex = ops(moe_layer(sharded_graph(spec, micro_batch=1, seq_len=256, ep=4, moe=MoEOptions(flex=True))))
    assert {"permute", "sort_chunks", "unsort_chunks", "unpermute"} <= set(alltoall)
    assert not {"permute", "sort_chunks", "unsort_chunks", "unpermute"} & set(flex)
    R, h = 256 * 4, 512
    assert flex["expert_permute"].bytes == R * h * 2 * 2
    assert flex["expert_unpermute"].bytes == pytest.approx(R * h * (2 * (1 + 1 / 4) + 4 / h))
    moved = {n: o.bytes for n, o in alltoall.items() if n in ("permute", "sort_chunks", "unsort_chunks", "unpermute")}
    assert sum(moved.values()) == pytest.approx(R * h * (2 * 2 + 2 * 2 + 2 * 2) + R * h * (2 * (1 + 1 / 4) + 4 / h))
    # same expert work, same saved activations: only the permutation traffic differs
    for name in ("expert_fc1", "expert_act", "expert_fc2"):
        assert flex[name] == alltoall[name]
    assert sum(o.saved_bytes for o in flex.values()) == sum(o.saved_bytes for o in alltoall.values())
    plan = ParallelPlan(dp=4, ep=4, global_batch=4, moe_dispatcher="flex")
    assert moe_options(plan).flex and not moe_options(plan.model_copy(update={"moe_dispatcher": None})).flex


# ---------------------------------------------------------------- folding
def test_folding_accepts_ep_over_tp_cp_dp_and_names_valid_choices() -> None:
    # ep 32 over tp 4 x dp 8 = 32 ranks: valid under folding (the pre-folding check wanted ep | dp x cp = 8)
    plan = ParallelPlan(tp=4, dp=8, ep=32, sequence_parallel=True, global_batch=64)
    assert plan.edp == 1
    with pytest.raises(LayoutError, match=r"ep 32 x etp 1 = 32 must divide tp 2 x cp 1 x dp 8 = 16.*"
                                          r"valid ep with etp 1: \[1, 2, 4, 8, 16\]"):
        ParallelPlan(tp=2, dp=8, ep=32, global_batch=64)
    with pytest.raises(LayoutError, match=r"ep 8 x etp 4 = 32 must divide .* = 16.*valid ep with etp 4: \[1, 2, 4\]"):
        ParallelPlan(tp=2, dp=8, ep=8, etp=4, global_batch=64)
    with pytest.raises(LayoutError, match="etp 3 does not divide moe_ffn_hidden 14336"):
        ParallelPlan(tp=1, dp=6, ep=2, etp=3, global_batch=6).validate_for(MIXTRAL)
    with pytest.raises(LayoutError, match="ep 16 does not divide num_experts 8"):
        ParallelPlan(dp=16, ep=16, global_batch=16).validate_for(MIXTRAL)


def test_folded_groups_and_expert_data_parallel_reduction() -> None:
    # tp 2, cp 2, dp 4 = 16 ranks per stage; experts as etp 2 x ep 4 x edp 2
    plan = ParallelPlan(tp=2, cp=2, dp=4, ep=4, etp=2, sequence_parallel=True, global_batch=8)
    assert plan.edp == 2
    assert group_stride(plan, "etp") == (2, 1)
    assert group_stride(plan, "ep") == (4, 2)
    assert group_stride(plan, "edp") == (2, 8)
    # each rank holds E/ep = 2 experts of width f/etp: 2 x 3·h·(14336/2) parameters
    g = plan_graph(MIXTRAL, plan)
    layer = moe_layer(g)
    assert layer.expert_params == 2 * 3 * 4096 * 7168
    # ZeRO-1 shards the 12 B/param of expert optimizer state over edp = 2 ranks
    z1 = memory_per_rank(g, plan.model_copy(update={"zero_stage": 1}))
    z0 = memory_per_rank(g, plan)
    dense = (layer.params - layer.expert_params) * layer.count + sum(
        lyr.params for lyr in g.layers if lyr.kind in ("embedding", "head"))
    expert = layer.expert_params * layer.count
    assert z0.optimizer_bytes - z1.optimizer_bytes == pytest.approx(12 * (dense * (1 - 1 / 8) + expert * (1 - 1 / 2)))
    # the expert gradient all-reduce runs over edp = 2 ranks 8 apart (the first 8 ranks hold one copy)
    sys_ = h100(16 * 4)
    from perfmodel.comm.collectives import collective_time_s
    assert dp_collectives(sys_, plan, 0.0, 1e9).all_reduce_s == pytest.approx(collective_time_s(sys_, "all_reduce", 4e9, 2, 8))


def test_runs_file_with_folded_ep_and_etp_column_is_predicted(tmp_path) -> None:
    cols = ["run_id", "model", "seq_len", "global_batch", "micro_batch", "tp", "pp", "dp", "cp", "ep",
            "sequence_parallel", "precision", "accelerator", "n_gpus", "step_time_s", "notes", "framework", "etp"]
    rows = [
        # ep 8 over tp 2 x dp 4: rejected before folding (ep must divide dp x cp = 4)
        ["fold-ep", "mixtral-8x7b", 4096, 64, 1, 2, 1, 4, 1, 8, "true", "bf16", "h100-sxm5-80gb", 8, 1.0, "", "megatron-core", ""],
        ["fold-etp", "mixtral-8x7b", 4096, 64, 1, 2, 1, 4, 1, 4, "true", "bf16", "h100-sxm5-80gb", 8, 1.0, "", "megatron-core", 2],
        ["bad-etp", "mixtral-8x7b", 4096, 64, 1, 2, 1, 4, 1, 8, "true", "bf16", "h100-sxm5-80gb", 8, 1.0, "", "megatron-core", 2],
    ]
    runs = tmp_path / "runs.csv"
    with open(runs, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)
    out = {r["run_id"]: r for r in validate_file(runs, tmp_path / "pred.csv")}
    assert out["fold-ep"]["status"] == "ok" and out["fold-etp"]["status"] == "ok"
    assert "etp=1" in out["fold-ep"]["message"] and "etp=1" not in out["fold-etp"]["message"]
    assert out["fold-ep"]["predicted_step_time_s"] != out["fold-etp"]["predicted_step_time_s"]
    assert out["bad-etp"]["status"] == "error"
    assert "ep 8 x etp 2 = 16 must divide tp 2 x cp 1 x dp 4 = 8" in out["bad-etp"]["message"]


# ---------------------------------------------------------------- dispatch all-to-all
def test_dispatch_all_to_all_time_by_hand() -> None:
    """Mixtral, T = 4096 tokens, top-2, h 4096: each rank sends T·k·h·2 B = 64 MiB per all-to-all.
    Inside one DGX H100 (ep 8, NVLink 450 GB/s per direction at 0.82, 8.4 us base latency):
        t = 8.4 us + 7/8 · 67,108,864 B / (450e9 · 0.82 B/s) = 8.4 + 159.1 = 167.5 us.
    Over two nodes (ep 16, 8 ranks per node): (16-8)/16 of the buffer crosses the NICs at
    8 x 50 GB/s x 0.95 / 8 = 47.5 GB/s per GPU: t = (1.8 + 8.4) us + 33,554,432 B / 47.5 GB/s
    = 10.2 + 706.4 = 716.6 us (the 8-rank NVLink part, 88 us, runs beside it)."""
    T, k, h = 4096, 2, 4096
    S = T * k * h * 2
    plan8 = ParallelPlan(dp=8, ep=8, global_batch=8, moe_imbalance=1.0)
    layer = moe_layer(plan_graph(MIXTRAL.with_(seq_len=T), plan8))
    d = comms(layer)["moe_dispatch"]
    assert (d.kind, d.group, d.bytes, d.fwd, d.bwd) == ("all_to_all", "ep", S, 1, 1)
    # 8.4 us + 7/8 x 67,108,864 B / (450e9 x 0.82 B/s)
    assert comm_s(h100(8), plan8, d) == pytest.approx(8.4e-6 + 7 / 8 * S / (450e9 * 0.82), rel=1e-9)
    assert comm_s(h100(8), plan8, d) == pytest.approx(167.5e-6, rel=1e-3)
    plan16 = ParallelPlan(dp=16, ep=16, global_batch=16, moe_imbalance=1.0)
    layer16 = moe_layer(plan_graph(MIXTRAL.with_(seq_len=T, num_experts=16), plan16))
    d16 = comms(layer16)["moe_dispatch"]
    # (1.8 + 8.4) us + 8/16 x 67,108,864 B / 47.5e9 B/s
    assert comm_s(h100(16), plan16, d16) == pytest.approx(10.2e-6 + S / 2 / 47.5e9, rel=1e-9)
    assert comm_s(h100(16), plan16, d16) == pytest.approx(716.6e-6, rel=1e-3)


def test_fp8_dispatch_sends_one_byte_and_a_scale_per_128() -> None:
    plan = ParallelPlan(dp=8, ep=8, global_batch=8, precision="fp8", moe_fp8_dispatch=True, moe_imbalance=1.0)
    c = comms(moe_layer(plan_graph(MIXTRAL.with_(seq_len=4096), plan)))
    assert c["moe_dispatch"].bytes == pytest.approx(4096 * 2 * 4096 * (1 + 4 / 128))
    assert FP8_DISPATCH_BYTES == 1.03125
    assert (c["moe_dispatch"].bwd, c["moe_dispatch_grad"].bwd) == (0, 1)  # gradients return in bf16
    assert c["moe_dispatch_grad"].bytes == 4096 * 2 * 4096 * 2


# ---------------------------------------------------------------- imbalance, grouped GEMM
def test_imbalance_scales_the_expert_gemms_of_the_busiest_rank() -> None:
    acc = h100(8).accelerator
    base = ParallelPlan(dp=8, ep=8, global_batch=8, moe_imbalance=1.0)
    skew = base.model_copy(update={"moe_imbalance": 1.5})
    o1 = ops(moe_layer(plan_graph(MIXTRAL.with_(seq_len=4096), base)))
    o2 = ops(moe_layer(plan_graph(MIXTRAL.with_(seq_len=4096), skew)))
    # 4096 tokens x top-2 over 8 ranks of one expert each: 8192 rows balanced, 12288 on the busiest
    assert (o1["expert_fc1"].m, o2["expert_fc1"].m) == (8192, 12288)
    assert o2["expert_fc1"].mflop == o1["expert_fc1"].mflop  # model FLOPs stay the balanced ones
    for name in ("expert_fc1", "expert_fc2"):
        for d in ("fwd", "bwd"):  # compute bound at these sizes: time scales with the rows
            ratio = op_cost(acc, o2[name], d).time_s / op_cost(acc, o1[name], d).time_s
            assert ratio == pytest.approx(1.5, rel=0.02)
    # one rank holding every expert (ep 1) processes all copies whatever the routing
    one = ParallelPlan(dp=8, global_batch=8, moe_imbalance=1.5)
    assert ops(moe_layer(plan_graph(MIXTRAL.with_(seq_len=4096), one)))["expert_fc1"].m == 4096 * 2 // 8
    # the default: FEPLB's 18.6 % of MoE-layer GPU time lost to the busiest rank, 1 / (1 - 0.186)
    assert ParallelPlan().moe_imbalance == pytest.approx(1.2285, abs=1e-4)
    dflt = ops(moe_layer(plan_graph(MIXTRAL.with_(seq_len=4096), ParallelPlan(dp=8, ep=8, global_batch=8))))
    assert dflt["expert_fc1"].m == math.ceil(8192 * ParallelPlan().moe_imbalance)


DEEPGEMM_H800_FP8 = [  # deepseek-ai/DeepGEMM README @ 55ab91f: groups, m per group, n, k, TFLOP/s
    (4, 8192, 4096, 7168, 1346), (4, 8192, 7168, 2048, 1214), (8, 4096, 4096, 7168, 1346), (8, 4096, 7168, 2048, 1214),
    (1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925), (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916),
    (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815),
]


def test_grouped_gemm_reproduces_measured_rates_by_shape() -> None:
    """H800 SXM5 has the H100 SXM5's SMs, clocks and HBM3 (only NVLink is cut): its measured
    grouped GEMM rates are the H100 model's to reproduce."""
    acc = h100(1).accelerator
    errs = []
    for g, m, n, k, tflops in DEEPGEMM_H800_FP8:
        c = grouped_gemm_cost(acc, m, n, k, g, "fp8")
        errs.append(2.0 * g * m * n * k / c.time_s / 1e12 / tflops - 1)
    assert max(map(abs, errs)) < 0.15
    assert sum(map(abs, errs)) / len(errs) < 0.05


def test_fine_grained_experts_run_below_dense_rate() -> None:
    """Qwen3-30B-A3B-like: 128 experts of width 768; 4096 tokens x top-8 over ep 8 -> 16 local
    experts of 256 rows. Per FLOP the grouped kernels (and their wgrad of depth 256) are slower
    than one dense GEMM of the same total work."""
    acc = h100(1).accelerator
    fwd = grouped_gemm_cost(acc, 256, 2 * 768, 2048, 16, "bf16")
    dense = grouped_gemm_cost(acc, 16 * 256, 2 * 768, 2048, 1, "bf16")
    assert fwd.time_s > 1.1 * dense.time_s
    bwd = grouped_gemm_cost(acc, 256, 2 * 768, 2048, 16, "bf16", "bwd")
    assert bwd.time_s > 2.0 * fwd.time_s  # wgrad's reduction depth is only 256 rows
    # a partial tile costs a full one: 129 rows take as long as 256
    assert grouped_gemm_cost(acc, 129, 1536, 2048, 16, "bf16").time_s == grouped_gemm_cost(acc, 256, 1536, 2048, 16, "bf16").time_s


# ---------------------------------------------------------------- shared experts, end to end
def test_shared_expert_overlap_hides_the_all_to_all() -> None:
    sys_ = h100(64)
    plan = ParallelPlan(dp=64, ep=64, global_batch=64, seq_len=4096)
    over = plan.model_copy(update={"moe_shared_expert_overlap": True})
    spec = DSV3.with_(seq_len=4096)
    t0 = layer_time(sys_, plan, moe_layer(plan_graph(spec, plan)), world=1)
    t1 = layer_time(sys_, over, moe_layer(plan_graph(spec, over)), world=1)
    assert t1.fwd_comm_s < t0.fwd_comm_s and t1.bwd_comm_s < t0.bwd_comm_s
    layer = moe_layer(plan_graph(spec, over))
    acc = sys_.accelerator
    # the dispatch hides behind the shared FC1, the combine behind its FC2 (forward), while NCCL's
    # 16 all-to-all CTAs hold 16 of the H100's 132 SMs: the hidden seconds come back x 16/132
    fc1, fc2 = (op_cost(acc, ops(layer)[n], "fwd").time_s for n in ("shared_fc1", "shared_fc2"))
    disp, comb = (comm_s(sys_, over, comms(layer)[n]) for n in ("moe_dispatch", "moe_combine"))
    assert a2a_contention_fraction(acc, over) == pytest.approx(16 / 132)
    hidden = min(fc1, disp) + min(fc2, comb)
    assert t0.fwd_comm_s - t1.fwd_comm_s == pytest.approx(hidden * (1 - 16 / 132), rel=1e-9)


def test_moe_estimate_breaks_down_and_des_agrees() -> None:
    sys_ = h100(16)
    # ep 8 over tp 2 x dp 4: a folded layout (ep > dp)
    plan = ParallelPlan(tp=2, pp=2, dp=4, ep=8, etp=1, sequence_parallel=True, micro_batch=1, global_batch=64,
                        seq_len=4096, moe_imbalance=1.2)
    est = analytic_estimate(MIXTRAL, sys_, plan)
    assert est.step_time_s == pytest.approx(sum(est.breakdown_s.values()), rel=1e-9)
    from perfmodel.engines.des import des_estimate
    assert des_estimate(MIXTRAL, sys_, plan).step_time_s == pytest.approx(est.step_time_s, rel=0.05)
    # the hashable options the graphs are cached on carry the plan's MoE settings
    assert moe_options(plan) == MoEOptions(1, 1.2, False, False)
    assert math.isfinite(est.mfu) and 0 < est.mfu < 1


def test_combined_1f1b_pair_by_hand() -> None:
    """Megatron-Core's combined 1F1B (model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run):
    comm combine_b | dispatch_f -> dispatch_b | combine_f beside comp pre_f | mlp_b -> mlp_w -> mlp_f |
    pre_b -> pre_w. Seconds: pre_f 2, mlp_f 3, pre_b 4, pre_w 1, mlp_b 3, mlp_w 2 (compute 15);
    dispatch_f 5, combine_f 1, dispatch_b 2, combine_b 1:
        s1 = max(2, 1) = 2; mlp_b ends 5; dispatch_f ends 7; dispatch_b ends max(7, 5) + 2 = 9
        mlp_f ends max(5 + 2, 7) + 3 = 10; combine_f ends max(9, 10) + 1 = 11
        pre_b + pre_w end max(10, 9) + 4 + 1 = 15 -> pair 15: every all-to-all hidden.
    With dispatch_f 10: dispatch_f ends 12, dispatch_b 14, mlp_f max(7, 12) + 3 = 15, combine_f 16,
    pre_b + pre_w max(15, 14) + 5 = 20 -> pair 20, 5 s exposed (the old 'each direction behind the
    other's whole compute' gave max(0, 11 - 10) + max(0, 3 - 5) = 1 s)."""
    assert combined_1f1b_pair_s(2, 3, 4, 1, 3, 2, 5, 1, 2, 1) == pytest.approx(15.0)
    assert combined_1f1b_pair_s(2, 3, 4, 1, 3, 2, 10, 1, 2, 1) == pytest.approx(20.0)
    # no communication: the compute alone
    assert combined_1f1b_pair_s(2, 3, 4, 1, 3, 2, 0, 0, 0, 0) == pytest.approx(15.0)


@given(st.lists(st.floats(0.0, 10.0), min_size=10, max_size=10))
def test_combined_1f1b_pair_between_compute_and_serial(x: list[float]) -> None:
    """A pair is never shorter than its compute (one compute stream) nor than its transfers (one
    communication stream), and never longer than running both one after the other."""
    comp, comm = sum(x[:6]), sum(x[6:])
    pair = combined_1f1b_pair_s(*x)
    assert max(comp, comm) - 1e-9 <= pair <= comp + comm + 1e-9


def test_combined_1f1b_paired_fraction_by_hand() -> None:
    """No pipelining: m - 1 of m forwards are paired (combined_1f1b_schedule_for_no_pipelining).
    Interleaved pp 8, vp 2, 128 micro-batches: 256 chunk forwards, warmup on average
    (8 - 1) + (2 - 1)·8 + 1 = 16 -> 240 / 256 paired."""
    assert combined_1f1b_paired_fraction(ParallelPlan(dp=64, ep=64, global_batch=4096)) == pytest.approx(63 / 64)
    plan = ParallelPlan(pp=8, vp=2, dp=32, ep=32, global_batch=4096)
    assert plan.num_micro_batches == 128
    assert combined_1f1b_paired_fraction(plan) == pytest.approx(240 / 256)
    # one micro-batch: nothing to pair with
    assert combined_1f1b_paired_fraction(ParallelPlan(dp=64, ep=64, global_batch=64)) == 0.0


def test_combined_1f1b_layer_exposes_the_pairs_excess_and_the_unpaired_all_to_alls() -> None:
    """A DeepSeek-V3 MoE layer, 2 micro-batches without pipelining (1 of 2 forwards paired): the exposed
    expert-parallel seconds are 1/2 x (pair - compute) + 1/2 x every all-to-all, the pair composed
    from the layer's own op and collective costs (routed experts = the mlp node)."""
    sys_ = h100(64)
    plan = ParallelPlan(dp=64, ep=64, global_batch=128, seq_len=4096)
    spec = DSV3.with_(seq_len=4096)
    layer = moe_layer(plan_graph(spec, plan))
    over = plan.model_copy(update={"moe_a2a_overlap": True})
    t0, t1 = layer_time(sys_, plan, layer, world=1), layer_time(sys_, over, layer, world=1)
    acc = sys_.accelerator
    cost = {o.name: (op_cost(acc, o, "fwd").time_s, op_cost(acc, o, "bwd").time_s,
                     op_cost(acc, o, "bwd").time_s * o.wgrad_factor / o.bwd_flop_factor if o.wgrad_factor else 0.0)
            for o in layer.ops}
    expert = [n for n in cost if n.startswith(("sort_chunks", "expert_", "unsort_chunks"))]
    assert expert == ["sort_chunks", "expert_fc1", "expert_act", "expert_fc2", "unsort_chunks"]
    mlp_f, mlp_b, mlp_w = (sum(cost[n][i] for n in expert) for i in range(3))
    fwd, bwd, wgrad = (sum(v[i] for v in cost.values()) for i in range(3))
    c = comms(layer)
    disp, comb = comm_s(sys_, over, c["moe_dispatch"]), comm_s(sys_, over, c["moe_combine"])
    pair = combined_1f1b_pair_s(fwd - mlp_f, mlp_f, bwd - mlp_b - (wgrad - mlp_w), wgrad - mlp_w, mlp_b - mlp_w, mlp_w,
                                disp, comb, disp, comb)
    count = comm_s(sys_, over, c["moe_count_allgather"])
    # while both streams run, NCCL's all-to-all CTAs hold 16 of the H100's 132 SMs
    hidden = fwd + bwd + 2 * (disp + comb) - pair
    exposed = 0.5 * (pair - fwd - bwd + 16 / 132 * hidden) + 0.5 * 2 * (disp + comb)
    assert t1.fwd_comm_s + t1.bwd_comm_s == pytest.approx(exposed + count, rel=1e-9)
    assert t1.fwd_comm_s == pytest.approx(count + exposed / 2, rel=1e-9)  # dispatch + combine each way
    assert t0.fwd_comm_s + t0.bwd_comm_s == pytest.approx(count + 2 * (disp + comb), rel=1e-9)
    assert t1.fwd_s + t1.bwd_s < t0.fwd_s + t0.bwd_s


def test_combined_1f1b_des_agrees_with_analytic() -> None:
    """The overlap lives in the shared layer costs: both engines read it."""
    from perfmodel.engines.des import des_estimate
    sys_ = h100(16)
    plan = ParallelPlan(pp=2, vp=2, dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=4096, moe_a2a_overlap=True)
    est = analytic_estimate(MIXTRAL, sys_, plan)
    assert des_estimate(MIXTRAL, sys_, plan).step_time_s == pytest.approx(est.step_time_s, rel=0.05)
    assert est.step_time_s < analytic_estimate(MIXTRAL, sys_, plan.model_copy(update={"moe_a2a_overlap": False})).step_time_s


@pytest.mark.parametrize("wid", ["mixtral-8x7b", "deepseek-v3"])
def test_step_time_monotone_in_imbalance(wid: str) -> None:
    """More tokens on the busiest rank never makes a step faster."""
    spec = WL[wid].with_(seq_len=4096)
    sys_ = h100(64)
    base = ParallelPlan(dp=32, pp=2, ep=8, global_batch=64, micro_batch=1, precision="fp8", seq_len=4096)
    times = [analytic_estimate(spec, sys_, base.model_copy(update={"moe_imbalance": g})).step_time_s
             for g in (1.0, 1.1, 1.23, 1.5, 2.0)]
    assert times == sorted(times) and times[-1] > times[0]


# ---------------------------------------------------------------- dispatchers: alltoall and flex
def test_distinct_share_by_hand() -> None:
    """8 experts on 4 holders (2 each), top-2: a token misses a given holder with probability
    C(6,2)/C(8,2) = 15/28, so it touches 13/28 of the holders; one holder is always touched."""
    from perfmodel.comm.collectives import distinct_share

    assert distinct_share(8, 2, 4) == pytest.approx(13 / 28, rel=1e-12)
    assert distinct_share(8, 2, 1) == 1.0
    assert distinct_share(8, 8, 4) == 1.0  # every expert chosen: every holder touched
    assert distinct_share(256, 8, 4) == pytest.approx(1 - math.comb(192, 8) / math.comb(256, 8), rel=1e-12)


def test_flex_dispatch_sends_a_token_once_per_destination_rank_inside_a_node() -> None:
    """Mixtral in one DGX H100 (ep 8, one expert per rank, top-2): alltoall moves both copies of a
    token; DeepEP/HybridEP one row per destination rank, and with one expert per rank that is the
    same, k = 2 rows. With DeepSeek-V3's 256 experts (32 per rank) top-8 touches
    8·(1 - C(224,8)/C(256,8)) = 5.29 ranks: flex moves 5.29 rows where alltoall moves 8.
        t_flex = 8.4 us + 7/8 · S·5.29/8 / (450e9 · 0.82 B/s)"""
    T = 4096
    plan = ParallelPlan(dp=8, ep=8, global_batch=8, moe_imbalance=1.0, moe_dispatcher="alltoall")
    flex = plan.model_copy(update={"moe_dispatcher": "flex"})
    d = comms(moe_layer(plan_graph(MIXTRAL.with_(seq_len=T), plan)))["moe_dispatch"]
    assert d.routing == (2, 8, 1, 1)
    assert comm_s(h100(8), flex, d) == pytest.approx(comm_s(h100(8), plan, d), rel=1e-12)
    dsv3 = DSV3.with_(seq_len=T, moe_router_groups=1, moe_router_group_topk=None)  # uniform routing
    d3 = comms(moe_layer(plan_graph(dsv3, plan)))["moe_dispatch"]
    S = T * 8 * 7168 * 2
    assert d3.bytes == S and d3.routing == (8, 256, 1, 1)
    rows = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert rows == pytest.approx(5.29, abs=0.01)
    assert comm_s(h100(8), flex, d3) == pytest.approx(8.4e-6 + 7 / 8 * S * rows / 8 / (450e9 * 0.82), rel=1e-9)


def test_flex_dispatch_crosses_the_network_once_per_destination_node() -> None:
    """DeepSeek-V3 on 4 DGX H100 nodes (ep 32, 8 experts per rank, top-8), T = 4096 tokens per
    rank, bf16 rows of 7168: S = T·8·7168·2 B. alltoall: 24/32 of S leaves the node through the
    rank's NIC (47.5 GB/s): 352.3 MB -> 7.417 ms (+10.2 us latency). flex: a token reaches 3·(1 - C(192,8)/C(256,8))
    = 2.71 other nodes, once each: T·2.71·7168·2 B = 159.2 MB at the NIC's 50 GB/s line rate (DeepEP's
    RDMA kernels run at their own measured rate, not a ring's) -> 3.184 ms, 0.43 of it; the NVLink
    leg (the rows of 32·(1 - C(248,8)/C(256,8)) = 7.27 ranks, 7/8 of them forwarded) runs beside it.
    (Uniform routing here; DeepSeek-V3's own group limit lowers the 2.71, next test.)"""
    T, h = 4096, 7168
    plan = ParallelPlan(dp=32, ep=32, global_batch=32, moe_imbalance=1.0, moe_dispatcher="alltoall")
    flex = plan.model_copy(update={"moe_dispatcher": "flex"})
    uniform = DSV3.with_(seq_len=T, moe_router_groups=1, moe_router_group_topk=None)
    d = comms(moe_layer(plan_graph(uniform, plan)))["moe_dispatch"]
    S = T * 8 * h * 2
    sys32 = h100(32)
    lat = 8.4e-6 + 1.8e-6
    assert comm_s(sys32, plan, d) == pytest.approx(lat + S * 24 / 32 / 47.5e9, rel=1e-9)
    remote = 3 * (1 - math.comb(192, 8) / math.comb(256, 8))
    assert remote == pytest.approx(2.71, abs=0.01)
    t_flex = comm_s(sys32, flex, d)
    assert t_flex == pytest.approx(lat + T * remote * h * 2 / 50e9, rel=1e-9)
    assert comm_s(sys32, plan, d) == pytest.approx(7.427e-3, rel=1e-3)
    assert t_flex == pytest.approx(3.194e-3, rel=1e-3)
    assert t_flex / comm_s(sys32, plan, d) == pytest.approx(0.43, abs=0.01)
    ranks = 32 * (1 - math.comb(248, 8) / math.comb(256, 8))
    assert 7 / 8 * T * ranks * h * 2 / (450e9 * 0.82) < t_flex - lat  # NVLink leg hidden
    # group-limited: the network leg shrinks with the expected remote nodes; alltoall is unchanged
    from perfmodel.comm.collectives import distinct_share

    dl = comms(moe_layer(plan_graph(DSV3.with_(seq_len=T), plan)))["moe_dispatch"]
    assert comm_s(sys32, plan, dl) == pytest.approx(comm_s(sys32, plan, d), rel=1e-12)
    limited = 3 * distinct_share(256, 8, 4, 8, 4)
    assert comm_s(sys32, flex, dl) == pytest.approx(lat + T * limited * h * 2 / 50e9, rel=1e-9)


def test_stack_sets_the_dispatcher_and_the_plan_overrides_it() -> None:
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = ParallelPlan(dp=8, ep=8, global_batch=8)
    assert plan.moe_dispatcher is None
    assert apply_framework(plan, framework("megatron-core")).moe_dispatcher == "flex"
    assert apply_framework(plan, framework("pytorch")).moe_dispatcher == "alltoall"
    mine = plan.model_copy(update={"moe_dispatcher": "alltoall"})
    assert apply_framework(mine, framework("megatron-core")).moe_dispatcher == "alltoall"
    with pytest.raises(LayoutError, match="moe_dispatcher"):
        ParallelPlan(dp=8, ep=8, global_batch=8, moe_dispatcher="deepep")


def test_dispatch_and_p2p_calibration_knobs_scale_their_seconds_only() -> None:
    """moe_dispatch 0.5 doubles each dispatch / combine and nothing else in the layer; p2p 2
    doubles the pipeline send/recv; the physics-only profile leaves both at 1."""
    from perfmodel.calibration.parameters import KNOBS
    from perfmodel.calibration.profile import NONE, system_with_knobs
    from perfmodel.engines.stages import p2p_time_s

    plan = ParallelPlan(dp=16, ep=16, pp=2, global_batch=32, moe_imbalance=1.0, moe_dispatcher="flex")
    base = h100(32)
    knobs = dict.fromkeys(KNOBS, 1.0)
    assert system_with_knobs(base, knobs) is base
    slow = system_with_knobs(base, knobs | {"moe_dispatch": 0.5, "p2p": 2.0})
    g = plan_graph(MIXTRAL.with_(num_experts=16), plan)
    for c in moe_layer(g).comms:
        ratio = comm_s(slow, plan, c) / comm_s(base, plan, c)
        assert ratio == pytest.approx(2.0 if c.routing else 1.0, rel=1e-12), c.name
    assert p2p_time_s(slow, plan, g, MIXTRAL) == pytest.approx(2 * p2p_time_s(base, plan, g, MIXTRAL), rel=1e-12)
    assert NONE.knobs(base.accelerator)["moe_dispatch"] == NONE.knobs(base.accelerator)["p2p"] == 1.0


def test_group_limited_routing_touches_fewer_nodes_by_hand() -> None:
    """DeepSeek-V3 routes each token inside 4 of 8 expert groups (32 experts each). Over 4 nodes
    (2 groups per node) a node is missed when none of its 2 groups is picked,
    C(6,4)/C(8,4) = 15/70, or when 1 is picked (40/70) and the 8 experts all fall in the other
    96 of the 128 picked experts, C(96,8)/C(128,8); or 2 picked (15/70) and all 8 in the other 64.
    Without the limit the miss is C(192,8)/C(256,8). With as many groups picked as there are
    the formula is the uniform one; over 16 nodes (each inside one group of 2 nodes)
    a node is touched only when its group is picked (4/8) and one of the 8 picks is among its 16."""
    from perfmodel.comm.collectives import distinct_share

    miss = 15 / 70 + 40 / 70 * math.comb(96, 8) / math.comb(128, 8) + 15 / 70 * math.comb(64, 8) / math.comb(128, 8)
    assert distinct_share(256, 8, 4, 8, 4) == pytest.approx(1 - miss, rel=1e-12)
    assert distinct_share(256, 8, 4, 8, 4) < distinct_share(256, 8, 4)
    assert distinct_share(256, 8, 4, 8, 8) == pytest.approx(distinct_share(256, 8, 4), rel=1e-12)
    assert distinct_share(256, 8, 16, 8, 4) == pytest.approx(4 / 8 * (1 - math.comb(112, 8) / math.comb(128, 8)), rel=1e-12)
    # a token reaches at most the nodes its 4 groups live on: 4 over 8 nodes (the report's M = 4
    # nodes), 8 over 16 nodes where each group spans 2
    assert 8 * distinct_share(256, 8, 8, 8, 4) <= 4
    assert 4 < 16 * distinct_share(256, 8, 16, 8, 4) <= 8
    assert DSV3.moe_router_groups == 8 and DSV3.moe_router_group_topk == 4
    c = comms(moe_layer(plan_graph(DSV3.with_(seq_len=4096), ParallelPlan(dp=32, ep=32, global_batch=32))))
    assert c["moe_dispatch"].routing == (8, 256, 8, 4)


def test_router_groups_must_divide_the_experts() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="'moe_router_groups': 7 does not divide num_experts 256"):
        DSV3.with_(moe_router_groups=7)
    with pytest.raises(ValidationError, match="moe_router_group_topk"):
        DSV3.with_(moe_router_group_topk=9)


def test_flex_sends_to_the_expert_tensor_parallel_ranks_in_its_exchange() -> None:
    """Mixtral on one DGX H100 with ep 4 x etp 2. alltoall: an all-to-all over the 4 expert ranks,
    then an all-gather over etp (and a reduce-scatter after the experts). flex (Megatron-Core
    expands the routing map to the etp ranks): one exchange over all 8 ranks, a token going to
    both etp ranks of each of the 4·share(8, 2, 4) = 4·13/28 expert ranks it picks, so
    8·13/28 rows: t = 8.4 us + 7/8 · T·h·2 B · 26/7 / (450e9 · 0.82 B/s); no etp collective."""
    T, h = 4096, 4096
    plan = ParallelPlan(dp=8, ep=4, etp=2, global_batch=8, moe_imbalance=1.0, moe_dispatcher="alltoall")
    flex = plan.model_copy(update={"moe_dispatcher": "flex"})
    c = comms(moe_layer(plan_graph(MIXTRAL.with_(seq_len=T), plan)))
    s8 = h100(8)
    assert comm_s(s8, flex, c["moe_etp_allgather"]) == comm_s(s8, flex, c["moe_etp_reducescatter"]) == 0.0
    assert comm_s(s8, plan, c["moe_etp_allgather"]) > 0
    rows = 8 * 13 / 28
    assert comm_s(s8, flex, c["moe_dispatch"]) == pytest.approx(8.4e-6 + 7 / 8 * T * h * 2 * rows / (450e9 * 0.82), rel=1e-9)


@pytest.mark.parametrize(("update", "fix"), [
    ({"ep": 1}, "ep > 1"),
    ({"recompute": "full"}, "recompute none or selective"),
    ({"pp": 2, "vp": 1, "dp": 4, "ep": 4}, "vp > 1"),
    ({"moe_shared_expert_overlap": True}, "turn one off"),
])
def test_a2a_overlap_where_megatron_core_refuses_it_is_an_error(update, fix) -> None:
    """Megatron-Core asserts overlap_moe_expert_parallel_comm only with ep > 1, without full
    recompute, with the interleaved schedule when pp > 1 and without the shared-expert overlap
    (transformer_config.py __post_init__): such a plan is refused, naming the fix."""
    base = {"dp": 8, "ep": 8, "global_batch": 64, "micro_batch": 1, "seq_len": 4096, "moe_a2a_overlap": True}
    ParallelPlan(**base)  # the layout Megatron-Core runs
    with pytest.raises(LayoutError, match="moe_a2a_overlap") as e:
        ParallelPlan(**{**base, **update})
    assert fix in str(e.value)


def test_cli_refuses_a2a_overlap_without_expert_parallelism(capsys) -> None:
    from perfmodel.cli import main

    assert main(["estimate", "mixtral-8x7b", "--n-gpus", "8", "--dp", "8", "--moe-a2a-overlap"]) == 2
    err = capsys.readouterr().err
    assert "ep > 1" in err and "Traceback" not in err


def test_the_token_exchange_holds_sms_while_it_hides() -> None:
    """An overlapped dispatch / combine costs the compute beside it the SMs its kernels hold: NCCL's
    16 all-to-all CTAs or the flex dispatcher's 20 (Megatron-Core's DeepEP default), of 148 on B200;
    nothing on a CPU, where nothing overlaps."""
    b200 = perfmodel.resolve_system("b200", None, 8)[0].accelerator
    plan = ParallelPlan(dp=8, ep=8, global_batch=8)
    flex = plan.model_copy(update={"moe_dispatcher": "flex"})
    assert a2a_contention_fraction(b200, flex) == pytest.approx(20 / 148)
    assert a2a_contention_fraction(b200, plan.model_copy(update={"moe_dispatcher": "alltoall"})) == \
        a2a_contention_fraction(b200, plan) == pytest.approx(16 / 148)
    # a recipe that gives HybridEP 32 SMs (Megatron-Core moe_flex_dispatcher_num_sms) says so
    assert a2a_contention_fraction(b200, flex.model_copy(update={"moe_a2a_sms": 32})) == pytest.approx(32 / 148)
    cpu = perfmodel.resolve_system("host-cpu-zen4", None, 1)[0].accelerator
    assert a2a_contention_fraction(cpu, flex) == 0.0


def test_more_sms_for_the_exchange_slow_the_overlapped_layer() -> None:
    """Under the combined 1F1B the exposed seconds grow with the SMs the exchange holds, and only there:
    without an overlap nothing hides, so the SM count changes nothing."""
    sys_ = h100(64)
    spec = DSV3.with_(seq_len=4096)
    plan = ParallelPlan(dp=64, ep=64, global_batch=128, seq_len=4096, moe_dispatcher="flex", moe_a2a_overlap=True)
    layer = moe_layer(plan_graph(spec, plan))
    exposed = [layer_time(sys_, plan.model_copy(update={"moe_a2a_sms": n}), layer) for n in (8, 20, 40)]
    comm = [t.fwd_comm_s + t.bwd_comm_s for t in exposed]
    assert comm[0] < comm[1] < comm[2]
    assert exposed[1] == layer_time(sys_, plan, layer)  # 20 is flex's default
    alone = plan.model_copy(update={"moe_a2a_overlap": False})
    assert layer_time(sys_, alone.model_copy(update={"moe_a2a_sms": 40}), layer) == layer_time(sys_, alone, layer)


# ---------------------------------------------------------------- per-expert GEMM loop on the host
def test_per_expert_gemms_cost_the_host_per_local_expert_by_hand() -> None:
    """Transformer Engine's GroupedLinear issues one cuBLASLt GEMM per local expert: Mixtral's two
    grouped GEMMs (fc1, fc2) over 8 / ep local experts add (experts - 1) x 24.75 us each to the
    forward's host seconds, twice that (dgrad, wgrad) to the backward's, and once to the weight-gradient
    phase; the GPU seconds do not change."""
    from perfmodel.engines.costs import EXPERT_GEMM_HOST_S

    assert math.isclose(EXPERT_GEMM_HOST_S, 24.75e-6)
    sys_ = h100(8)
    for ep, local in ((1, 8), (2, 4), (8, 1)):
        plan = ParallelPlan(dp=8, ep=ep, global_batch=8)
        layer = moe_layer(plan_graph(MIXTRAL, plan))
        grouped = layer_time(sys_, plan, layer)
        loop = layer_time(sys_, plan.model_copy(update={"expert_gemm": "per-expert"}), layer)
        extra = 2 * (local - 1) * 24.75e-6
        assert loop.fwd_host_s - grouped.fwd_host_s == pytest.approx(extra, abs=1e-12)
        assert loop.bwd_host_s - grouped.bwd_host_s == pytest.approx(2 * extra, abs=1e-12)
        assert loop.wgrad_host_s - grouped.wgrad_host_s == pytest.approx(extra, abs=1e-12)
        assert (loop.fwd_gpu_s, loop.bwd_gpu_s) == (grouped.fwd_gpu_s, grouped.bwd_gpu_s)


def test_per_expert_gemms_rerun_with_recompute_and_vanish_in_a_cuda_graph() -> None:
    sys_ = h100(8)
    plan = ParallelPlan(dp=8, ep=2, global_batch=8, expert_gemm="per-expert")
    layer = moe_layer(plan_graph(MIXTRAL, plan))
    extra = 2 * 3 * 24.75e-6  # fc1 and fc2 over 4 local experts
    full = plan.model_copy(update={"recompute": "full"})
    assert layer_time(sys_, full, layer).recompute_host_s - layer_time(
        sys_, full.model_copy(update={"expert_gemm": "grouped"}), layer).recompute_host_s == pytest.approx(extra)
    moe_rerun = plan.model_copy(update={"recompute": "selective", "selective_recompute": "moe"})
    assert layer_time(sys_, moe_rerun, layer).recompute_host_s - layer_time(
        sys_, moe_rerun.model_copy(update={"expert_gemm": "grouped"}), layer).recompute_host_s == pytest.approx(extra)
    graphs = plan.model_copy(update={"cuda_graphs": True})
    assert layer_time(sys_, graphs, layer) == layer_time(sys_, graphs.model_copy(update={"expert_gemm": "grouped"}), layer)
    cpu = perfmodel.resolve_system("host-cpu-zen4", None, 1)[0]
    one = ParallelPlan(ep=1, global_batch=1, expert_gemm="per-expert")
    assert layer_time(cpu, one, layer) == layer_time(cpu, one.model_copy(update={"expert_gemm": "grouped"}), layer)


def test_megatron_core_issues_its_experts_one_by_one_and_a_host_bound_step_slows() -> None:
    """megatron-core selects the per-expert loop, torchtitan the grouped kernel, a plan's own choice
    stays; the loop never speeds a step up, and a small-expert model at one sequence per micro-batch
    on a fast GPU, where the host already sets the pace, slows by it."""
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = ParallelPlan(dp=8, ep=8, global_batch=512, micro_batch=1, seq_len=4096, precision="fp8")
    assert apply_framework(plan, framework("megatron-core")).expert_gemm == "per-expert"
    assert apply_framework(plan, framework("torchtitan")).expert_gemm == "grouped"
    mine = plan.model_copy(update={"expert_gemm": "grouped"})
    assert apply_framework(mine, framework("megatron-core")).expert_gemm == "grouped"
    qwen = WL["qwen3-30b-a3b"]
    sys_ = perfmodel.resolve_system("b200", None, 8)[0]
    t = {g: analytic_estimate(qwen, sys_, plan.model_copy(update={"expert_gemm": g})).step_time_s
         for g in ("grouped", "per-expert")}
    assert t["per-expert"] > 1.2 * t["grouped"]
    big = plan.model_copy(update={"micro_batch": 8})
    tb = {g: analytic_estimate(qwen, sys_, big.model_copy(update={"expert_gemm": g})).step_time_s
          for g in ("grouped", "per-expert")}
    assert tb["grouped"] <= tb["per-expert"] < 1.05 * tb["grouped"]


def test_cli_states_the_expert_gemm_loop(capsys) -> None:
    from perfmodel.cli import main

    args = ["estimate", "qwen3-30b-a3b", "--hardware", "h100-sxm5-80gb", "--n-gpus", "16", "--ep", "16",
            "--global-batch", "64", "--seq-len", "4096", "--framework", "megatron-core"]
    main(args)
    assert "(flex dispatcher, per-expert GEMMs)" in capsys.readouterr().out
    main([*args, "--expert-gemm", "grouped"])
    assert "(flex dispatcher)" in capsys.readouterr().out


# ---------------------------------------------------------------- where the router probabilities apply
def test_probabilities_in_the_activation_keep_no_copy_of_the_expert_outputs_by_hand() -> None:
    """16 experts top-4 over ep 4, T = 256 tokens, h 512, expert width 256, balanced: R = C = 1024
    copies per rank. Weighted at the un-permutation (Hugging Face, torchtitan), the copies are kept
    for the probabilities' gradient: C·h·2 B, and its backward reads them again. Weighted in the
    activation (Megatron-Core's weighted SwiGLU), the activation keeps R fp32 probabilities more and
    the un-permutation nothing; its backward is one gather. The expert GEMMs do not change."""
    spec = DSV3.with_(num_experts=16, top_k=4, moe_ffn_hidden=256, hidden=512, num_heads=8, first_dense_layers=0,
                      num_layers=1, mla=None, attention="mha")
    R, h, f = 256 * 4, 512, 256
    for flex, name in ((False, "unpermute"), (True, "expert_unpermute")):
        at_combine = ops(moe_layer(sharded_graph(spec, micro_batch=1, seq_len=256, ep=4, moe=MoEOptions(flex=flex))))
        in_act = ops(moe_layer(sharded_graph(spec, micro_batch=1, seq_len=256, ep=4,
                                             moe=MoEOptions(flex=flex, probs_in_activation=True))))
        assert at_combine[name].saved_bytes == R * h * 2
        assert in_act[name].saved_bytes == 0.0
        assert (at_combine[name].bwd_bytes_factor, in_act[name].bwd_bytes_factor) == (2.0, 1.0)
        assert in_act[name].bytes == pytest.approx(R * h * 2 * (1 + 1 / 4))
        assert in_act["expert_act"].saved_bytes - at_combine["expert_act"].saved_bytes == R * 4
        assert at_combine["expert_act"].saved_bytes == R * 2 * f * 2
        for gemm in ("expert_fc1", "expert_fc2"):
            assert in_act[gemm] == at_combine[gemm]


def test_megatron_core_weights_in_the_activation_and_its_moe_layers_keep_less() -> None:
    from perfmodel.calibration.frameworks import apply_framework, framework

    plan = ParallelPlan(dp=8, ep=8, global_batch=8, seq_len=4096)
    mcore = apply_framework(plan, framework("megatron-core"))
    assert mcore.moe_probs_in_activation and moe_options(mcore).probs_in_activation
    assert not apply_framework(plan, framework("torchtitan")).moe_probs_in_activation
    mine = plan.model_copy(update={"moe_probs_in_activation": False})
    assert not apply_framework(mine, framework("megatron-core")).moe_probs_in_activation
    spec = MIXTRAL.with_(seq_len=4096)
    kept = {}
    for p in (False, True):
        mine = plan.model_copy(update={"moe_probs_in_activation": p})
        kept[p] = memory_per_rank(plan_graph(spec, mine), mine).activations_bytes
    # per MoE layer: C = 4096 tokens x top-2 copies of h 4096 in bf16, less 4 B per received copy (imbalance 1.23)
    C, h, layers = 4096 * 2, 4096, 32
    R_max = 1.2285012285012284 * C
    assert kept[False] - kept[True] == pytest.approx(layers * (C * h * 2 - R_max * 4), rel=1e-6)


# ---------------------------------------------------------------- SwiGLU inputs kept in fp8
def test_fp8_swiglu_inputs_halve_what_the_activations_keep_by_hand() -> None:
    """Megatron-Core's activation_func_fp8_input_store casts the SwiGLU input it keeps to e4m3: the
    routed experts' activation keeps R·2f·1 B (+ its fp32 probabilities) instead of R·2f·2 B, and
    so does a dense or shared SwiGLU MLP; a model without SwiGLU is refused, as Megatron refuses it."""
    from perfmodel.memory import op_saved_bytes

    plan = ParallelPlan(dp=8, ep=8, global_batch=8, seq_len=4096, moe_probs_in_activation=True)
    store = plan.model_copy(update={"act_fp8_input_store": True})
    layer = moe_layer(plan_graph(DSV3.with_(seq_len=4096), plan))
    o = ops(layer)
    R_max = 1.2285012285012284 * 4096 * 8  # copies on the busiest rank, 8 experts per token
    f = 2048
    assert o["expert_act"].act_input_bytes == pytest.approx(R_max * 2 * f * 2)
    assert op_saved_bytes(o["expert_act"], plan) - op_saved_bytes(o["expert_act"], store) == pytest.approx(R_max * 2 * f)
    assert op_saved_bytes(o["shared_act"], store) == pytest.approx(op_saved_bytes(o["shared_act"], plan) / 2)
    assert op_saved_bytes(o["expert_fc1"], store) == op_saved_bytes(o["expert_fc1"], plan)
    gelu = WL["gpt3-175b"]
    with pytest.raises(LayoutError, match="SwiGLU"):
        plan_graph(gelu, ParallelPlan(dp=8, global_batch=8, act_fp8_input_store=True))


@pytest.mark.parametrize("hw", ["tpu-v5p", "gaudi3", "mi355x"])
def test_moe_runs_on_chips_without_an_fp32_matrix_format(hw: str) -> None:
    """The router's fp32 GEMM made every MoE estimate a PrecisionError on a chip with no fp32
    matrix format; it runs at the chip's 16-bit rate there (compute/ops.op_gemm_format), while a
    run whose own precision is fp32 stays refused."""
    from perfmodel.compute.ops import op_gemm_format
    from perfmodel.errors import PrecisionError
    from perfmodel.hardware.catalog import load_catalog

    acc = load_catalog().accelerator(hw)
    assert op_gemm_format(acc, "fp32") == "bf16"
    plan = ParallelPlan(ep=8, dp=8, global_batch=64, seq_len=4096, recompute="full")
    est = perfmodel.estimate("mixtral-8x7b", hw, plan)
    assert est.step_time_s > 0 and 0 < est.mfu < 1
    with pytest.raises(PrecisionError, match="no fp32 matrix format"):
        perfmodel.estimate("mixtral-8x7b", hw, plan.model_copy(update={"precision": "fp32"}))
    # where the chip has one, the router keeps fp32
    assert op_gemm_format(load_catalog().accelerator("h100-sxm5-80gb"), "fp32") == "fp32"


def test_a_fixed_bf16_op_runs_in_fp16_on_a_v100() -> None:
    """DeepSeek-V4's index weights projection is a bf16 GEMM whatever the run's precision; a V100
    has no bf16, so an fp16 run of the model was a PrecisionError. It runs at the fp16 rate."""
    from perfmodel.compute.ops import op_gemm_format
    from perfmodel.hardware.catalog import load_catalog

    assert op_gemm_format(load_catalog().accelerator("v100-sxm2-32gb"), "bf16") == "fp16"
    plan = ParallelPlan(dp=8, ep=8, global_batch=8, precision="fp16", recompute="full")
    assert perfmodel.estimate("deepseek-v4-flash", "v100-sxm2-32gb", plan).step_time_s > 0
