"""DeepSeek-V4-Flash: window + compressed (sparse) attention and manifold-constrained
hyper-connections; FLOPs against FlopCounterMode, key counts and parameters by hand."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.errors import LayoutError
from perfmodel.parallel.shard import sharded_graph
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.compressed_attention import compressed_keys, window_keys
from perfmodel.workload.spec import ModelSpec

WL = load_workloads()
ATTN_MATMULS = ("q_down", "q_up", "kv_proj", "compress_kv", "compress_gate", "idx_q", "idx_weights", "idx_compress_kv",
                "idx_compress_gate", "idx_score", "sparse_attention", "o_group_proj", "out_proj")


def _tiny(**changes: object) -> ModelSpec:
    base = dict(id="t-dsv4", name="tiny DeepSeek-V4", family="moe", source="test fixture", num_layers=3, hidden=128,
                num_heads=4, vocab=256, num_experts=4, top_k=2, moe_ffn_hidden=64, num_shared_experts=1,
                norm="rmsnorm", activation="swiglu", position="rope", bias=False, attention="csa",
                csa={"head_dim": 32, "rope_head_dim": 8, "q_lora_rank": 32, "o_lora_rank": 16, "o_groups": 2, "window": 16,
                     "index_heads": 4, "index_head_dim": 16, "index_topk": 8, "compress_ratios": [0, 4, 16]},
                hyper_connections={"streams": 4, "sinkhorn_iters": 20})
    return ModelSpec.model_validate({**base, **changes})


def test_keys_per_query_by_hand():
    s = 256
    # window 16: queries 1..16 see t keys, the rest 16
    assert window_keys(s, 16) == (16 * 17 / 2 + 240 * 16, 16)
    assert window_keys(8, 16) == (36, 8)
    # CSA ratio 4, top-8: query t sees min(8, t // 4) compressed keys; HCA ratio 16: t // 16
    assert compressed_keys(s, 4, 8) == (sum(min(8, t // 4) for t in range(1, s + 1)), 8) == (1912, 8)
    assert compressed_keys(s, 16, None) == (sum(t // 16 for t in range(1, s + 1)), 16) == (1936, 16)
    assert compressed_keys(s, 0, None) == (0.0, 0)


@pytest.mark.parametrize("ratio", [0, 4, 16])
def test_attention_flops_equal_flop_counter(ratio: int):
    """Model FLOPs of every matmul of the block (the padded key slots, the indexer's full score
    matrix) equal FlopCounterMode on the reference; executed FLOPs count the visible keys."""
    torch = pytest.importorskip("torch")
    import torch_reference as R

    spec = _tiny()
    b, s = 2, 256
    g = build_graph(spec, micro_batch=b, seq_len=s)
    layer = next(x for x in g.layers if x.name == f"moe_layers_c{ratio}")
    ops = {o.name: o for o in layer.ops}
    with torch.device("meta"):
        ref = R.DeepSeekV4Attention(128, 4, 32, 32, 16, 2, 16, ratio, 4, 16, 8)
        x = torch.zeros(b, s, 128)
    assert sum(o.mflop for o in layer.ops if o.name in ATTN_MATMULS) == R.count_flop(ref, x)
    attn = ops["sparse_attention"]
    win, _ = window_keys(s, 16)
    comp, _ = compressed_keys(s, ratio, 8 if ratio == 4 else None)
    assert attn.flop == 4 * 32 * 4 * b * (win + comp)  # QK + PV, 4 heads of 32, per visible key
    assert ("idx_score" in ops) == (ratio == 4)


def test_hyper_connection_mix_flops_params_and_stream_width():
    torch = pytest.importorskip("torch")
    import torch_reference as R

    spec = _tiny()
    b, s, h, n = 2, 256, 128, 4
    g = build_graph(spec, micro_batch=b, seq_len=s)
    layer = next(x for x in g.layers if x.name == "moe_layers_c0")
    ops = {o.name: o for o in layer.ops}
    with torch.device("meta"):
        mix, x = R.HyperConnectionMix(h, n), torch.zeros(b, s, n, h)
    assert ops["norm1_hc_mix"].mflop == ops["norm2_hc_mix"].mflop == R.count_flop(mix, x) == 2 * b * s * n * h * 24
    # two sub-layers: weight (2 + n)·n x n·h, bias (2 + n)·n, 3 scales each
    plain = build_graph(spec.with_(hyper_connections=None), micro_batch=b, seq_len=s)
    p0 = next(x for x in plain.layers if x.name == "moe_layers_c0")
    assert layer.params_full - p0.params_full == 2 * (24 * n * h + 24 + 3)
    assert layer.input_bytes == n * p0.input_bytes  # n streams cross a layer (and a pipeline stage)
    assert {"attn_hc_post", "mlp_hc_post"} <= set(ops) and "attn_residual" not in ops
    # the head mixes the streams back with an [n, n·h] weight, n biases and one scale
    assert g.layers[-1].params_full - plain.layers[-1].params_full == n * n * h + n + 1


def test_deepseek_v4_flash_parameters_by_hand():
    """284B total published without the MTP block: the graph gives 284.33B (+0.12 %). 13B
    activated is whole billions: the graph's 13.27B without the input embedding table rounds to
    it (13.80B with it would not), the convention of gpt-oss's card and Nemotron 3 Ultra's 55B."""
    spec = WL["deepseek-v4-flash"]
    base = spec.with_(mtp_pattern=None, mtp_depth=0)
    g = build_graph(base, seq_len=4096)
    assert g.total_params_full() == pytest.approx(284e9, rel=0.002)
    active = g.active_params_full() - spec.vocab * spec.hidden  # type: ignore[operator]
    assert round(active / 1e9) == 13
    # one ratio-4 layer by hand: attention (sink, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b),
    # compressor (ape 4x1024, kv + gate 4096x1024, norm 512), indexer (wq_b 1024x8192, weights
    # 4096x64, compressor at 128), hyper-connections 2 x (24·16384 + 27), MoE 257 SwiGLU
    # experts of 2048 + router, 2 norms
    h, d = 4096, 512
    attn = 64 + h * 1024 + 1024 + 1024 * 64 * d + h * d + d + 8 * 1024 * 4096 + 8 * 1024 * h
    comp = 4 * 2 * d + 2 * h * 2 * d + d
    idx = 1024 * 64 * 128 + h * 64 + 4 * 2 * 128 + 2 * h * 2 * 128 + 128
    hcp = 2 * (24 * 4 * h + 24 + 3)
    moe = 257 * 3 * h * 2048 + h * 256
    layer = next(x for x in g.layers if x.name == "moe_layers_c4")
    assert layer.params_full == attn + comp + idx + hcp + moe + 2 * h


def test_layout_errors_name_the_constraint():
    spec = WL["deepseek-v4-flash"]
    with pytest.raises(LayoutError, match="context parallelism"):
        sharded_graph(spec, seq_len=4096, cp=2)
    with pytest.raises(LayoutError, match=r"csa\.o_groups 8"):
        sharded_graph(spec, seq_len=4096, tp=16)
    with pytest.raises(ValueError, match="csa"):
        _tiny(csa=None)
    with pytest.raises(ValueError, match="compress_ratios"):
        _tiny(csa={**_tiny().csa.model_dump(), "compress_ratios": [0, 4]})  # type: ignore[union-attr]


def test_estimate_runs_and_engines_agree():
    plan = ParallelPlan(tp=2, ep=8, dp=8, pp=2, global_batch=32, micro_batch=1, sequence_parallel=True)
    a = perfmodel.estimate("deepseek-v4-flash", "h100-sxm5-80gb", plan, engine="analytic")
    d = perfmodel.estimate("deepseek-v4-flash", "h100-sxm5-80gb", plan, engine="des")
    assert a.step_time_s == pytest.approx(d.step_time_s, rel=0.05)
    assert a.model_flop_per_step > 0 and a.step_time_s > 0


def test_plan_checks_and_search_space_honour_the_attention_split():
    """tp must divide the output groups and indexer heads too; cp stays 1 (not modelled): the
    plan says so by name and the planner never proposes such a layout."""
    from perfmodel.planning.space import SearchSpace, _cp_choices, _tp_choices

    spec = WL["deepseek-v4-flash"]
    with pytest.raises(LayoutError, match=r"tp 16 does not divide csa\.o_groups 8 .* valid tp: \[1, 2, 4, 8\]"):
        perfmodel.estimate(spec, "h100-sxm5-80gb", ParallelPlan(tp=16, global_batch=4))
    with pytest.raises(LayoutError, match="cp 2: context parallelism"):
        perfmodel.estimate(spec, "h100-sxm5-80gb", ParallelPlan(cp=2, global_batch=4))
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 64)[0]
    assert _tp_choices(spec, system, SearchSpace(), 64) == [1, 2, 4, 8]
    assert _cp_choices(spec, 4096, SearchSpace()) == [1]
