"""Sharding the builder's graph (parallel/shard.py): tensor, sequence, context and expert parallelism."""

from __future__ import annotations

import pytest

from perfmodel.errors import LayoutError
from perfmodel.parallel.shard import sharded_graph
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.graph import Comm, Graph, Layer
from perfmodel.workload.moe import MoEOptions

WL = load_workloads()


def layer_of(g: Graph, kind: str) -> Layer:
    return next(layer for layer in g.layers if layer.kind == kind)


def comms(layer: Layer) -> dict[str, Comm]:
    return {c.name: c for c in layer.comms}


def gemm_flop(layer: Layer) -> float:
    return sum(o.flop for o in layer.ops if o.kind in ("gemm", "bmm", "attention"))


@pytest.mark.parametrize("wid", ["gpt3-175b", "llama3-70b", "mixtral-8x7b"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_divides_layer_gemm_flop(wid: str, tp: int) -> None:
    spec = WL[wid]
    kind = "moe" if spec.family == "moe" else "transformer"
    full = sharded_graph(spec, micro_batch=2, seq_len=2048)
    # experts split by tp as well (etp = tp: Megatron-Core's default expert layout); each tp rank
    # routes its own 1/tp of the tokens, so the router's FLOPs divide too
    shard = sharded_graph(spec, micro_batch=2, seq_len=2048, tp=tp, moe=MoEOptions(etp=tp))
    assert gemm_flop(layer_of(shard, kind)) == pytest.approx(gemm_flop(layer_of(full, kind)) / tp, rel=1e-12)
    router = sum(o.weight_params for o in layer_of(full, kind).ops if o.name == "router")  # replicated
    assert layer_of(shard, kind).params - router == pytest.approx(
        (layer_of(full, kind).params - router) / tp, rel=0.01)  # norms and row-parallel biases stay replicated


def test_tp_all_reduces_megatron() -> None:
    # Megatron-LM TP: 2 all-reduces of b·s·h activations per layer forward (after attention
    # out-proj and FC2), 2 in the backward (the inputs of QKV and FC1). GPT-3: b 1, s 2048, h 12288, bf16.
    b, s, h = 1, 2048, 12288
    g = sharded_graph(WL["gpt3-175b"], micro_batch=b, seq_len=s, tp=8)
    c = comms(layer_of(g, "transformer"))
    assert set(c) == {"tp_allreduce"}
    ar = c["tp_allreduce"]
    assert (ar.kind, ar.group, ar.fwd, ar.bwd) == ("all_reduce", "tp", 2, 2)
    assert ar.bytes == b * s * h * 2 == 50_331_648  # 48 MiB per all-reduce
    assert not layer_of(sharded_graph(WL["gpt3-175b"], b, s, tp=1), "transformer").comms


def test_sp_replaces_all_reduce_by_gather_and_scatter() -> None:
    # Korthikanti et al. 2022: each all-reduce becomes an all-gather + reduce-scatter of the same
    # b·s·h buffer (same bytes on the wire), and the norms / dropouts work on s/t tokens.
    b, s, h, t = 1, 2048, 12288, 8
    g = sharded_graph(WL["gpt3-175b"], micro_batch=b, seq_len=s, tp=t, sp=True)
    layer = layer_of(g, "transformer")
    c = comms(layer)
    assert (c["tp_allgather"].kind, c["tp_allgather"].fwd, c["tp_allgather"].bytes) == ("all_gather", 2, b * s * h * 2)
    assert (c["tp_reducescatter"].kind, c["tp_reducescatter"].fwd) == ("reduce_scatter", 2)
    norm = next(o for o in layer.ops if o.name == "norm1")
    assert norm.flop == 5 * b * s * h / t


def test_embedding_and_head_comms_under_tp() -> None:
    b, s, h = 1, 2048, 4096
    g = sharded_graph(WL["llama3-8b"], micro_batch=b, seq_len=s, tp=4)
    emb, head = comms(layer_of(g, "embedding")), comms(layer_of(g, "head"))
    assert (emb["embedding_ar"].kind, emb["embedding_ar"].fwd, emb["embedding_ar"].bwd) == ("all_reduce", 1, 0)
    # column-parallel LM head: the gradient of its replicated input is all-reduced in the backward
    assert (head["head_grad_allreduce"].fwd, head["head_grad_allreduce"].bwd) == (0, 1)
    assert head["head_grad_allreduce"].bytes == b * s * h * 2
    lm = next(o for o in layer_of(g, "head").ops if o.name == "lm_head")
    assert lm.n == 128256 // 4
    g = sharded_graph(WL["llama3-8b"], micro_batch=b, seq_len=s, tp=4, sp=True)
    emb, head = comms(layer_of(g, "embedding")), comms(layer_of(g, "head"))
    assert (emb["embedding_ar"].kind, emb["embedding_ar"].bwd) == ("reduce_scatter", 1)
    assert (head["head_allgather"].fwd, head["head_allgather"].bwd) == (1, 1)


def test_gqa_tp_beyond_kv_heads_replicates_kv() -> None:
    # Llama-3-70B has 8 KV heads; tp 16 keeps one KV head per rank (replicated pairs)
    g = sharded_graph(WL["llama3-70b"], micro_batch=1, seq_len=1024, tp=16)
    qkv = next(o for o in layer_of(g, "transformer").ops if o.name == "qkv_proj")
    assert qkv.n == (64 // 16 + 2 * 1) * 128


def test_cp_splits_queries_and_rings_kv() -> None:
    b, s, cp = 1, 8192, 4
    spec = WL["llama3-8b"]
    g = sharded_graph(spec, micro_batch=b, seq_len=s, cp=cp)
    layer = layer_of(g, "transformer")
    attn = next(o for o in layer.ops if o.kind == "attention")
    assert (attn.seq_q, attn.seq_kv) == (s // cp, s)
    full = sharded_graph(spec, micro_batch=b, seq_len=s)
    assert gemm_flop(layer) == pytest.approx(gemm_flop(layer_of(full, "transformer")) / cp)
    ring = comms(layer)["cp_kv_ring"]
    assert ring.bytes == 2 * b * s * 8 * 128 * 2 and ring.overlappable  # K and V, 8 kv heads of 128


def test_ep_all_to_all_and_expert_sharding() -> None:
    # Mixtral, T = 4096 tokens per rank, top-2: dispatch and combine all-to-alls of T·k·h·2 bytes
    T, h = 4096, 4096
    g = sharded_graph(WL["mixtral-8x7b"], micro_batch=1, seq_len=T, ep=4)
    layer = layer_of(g, "moe")
    c = comms(layer)
    assert c["moe_dispatch"].kind == "all_to_all" and c["moe_dispatch"].bytes == T * 2 * h * 2
    assert c["moe_combine"].group == "ep"
    assert layer.expert_params == 2 * 3 * h * 14336  # 8 / 4 experts on this rank
    fc1 = next(o for o in layer.ops if o.name == "expert_fc1")
    assert fc1.batch == 2 and fc1.m == T * 2 // 2


@pytest.mark.parametrize("kw, word", [
    ({"tp": 5}, "num_heads 96 .*valid tp: 1, 2, 3, 4, 6, 8, 12"),
    ({"cp": 3}, "cp"),  # 2048 % 3
    ({"ep": 3}, "num_experts"),
    ({"attention_impl": "xformers"}, "attention_impl"),
    ({"tp": 0}, "tp"),
])
def test_bad_layout_raises_naming_values(kw: dict[str, object], word: str) -> None:
    spec = WL["mixtral-8x7b"] if "ep" in kw else WL["gpt3-175b"]
    with pytest.raises(LayoutError, match=word):
        sharded_graph(spec, micro_batch=1, seq_len=2048, **kw)  # type: ignore[arg-type]


def test_tp_must_divide_ffn_width() -> None:
    spec = WL["gpt2-124m"].with_(num_heads=16, hidden=768, ffn_hidden=3000)
    with pytest.raises(LayoutError, match="FFN width 3000"):
        sharded_graph(spec, tp=16)
