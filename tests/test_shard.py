"""shard(graph, plan) (parallel/shard.py): the builder's unsharded graph laid out on a rank, and
tensor parallelism of imported torch graphs through their recognised Linear pairs, checked
against hand-computed FLOPs and all-reduce bytes and against the builder's equivalent spec."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import perfmodel
from perfmodel.api import estimate_graph
from perfmodel.errors import LayoutError
from perfmodel.parallel.shard import RankLayout, shard, sharded_graph
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.graph import Graph, Layer
from perfmodel.workload.moe import MoEOptions
from perfmodel.workload.spec import ModelSpec
from perfmodel.workload.torch_import import from_torch
from perfmodel.workload.tp_pairs import Node, tp_roles

sys.path.insert(0, str(Path(__file__).parent))
import torch_import_models as M

ACT = 2  # bf16 bytes


class MLP(nn.Module):
    """Linear(h, f) -> GELU -> Linear(f, h): one column -> row pair."""

    def __init__(self, h: int, f: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(h, f), nn.Linear(f, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class OneBlock(nn.Module):
    """A module list of one block: the trace makes it one layer."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.blocks = nn.ModuleList([block])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[0](x)


class Residual(nn.Module):
    """Linear -> + x -> Linear: the second Linear's input mixes a split and a whole tensor: no pair."""

    def __init__(self, h: int):
        super().__init__()
        self.a, self.b = nn.Linear(h, h), nn.Linear(h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x) + x)


def _matmul_flop(g: Graph) -> float:
    return sum(layer.count * o.flop for layer in g.layers for o in layer.ops if o.kind in ("gemm", "bmm", "attention"))


def _tp_comms(layer: Layer) -> dict[str, tuple[str, float, int, int]]:
    return {c.name: (c.kind, c.bytes, c.fwd, c.bwd) for c in layer.comms if c.group == "tp"}


def test_imported_mlp_at_tp2_halves_gemm_flop_and_all_reduces_its_output() -> None:
    b, s, h, f = 4, 32, 64, 256
    g = from_torch(OneBlock(MLP(h, f)), torch.zeros(b, s, h))
    (layer,) = g.layers
    assert [o.split for o in layer.ops] == ["column", "inner", "row"]
    g2 = shard(g, RankLayout(tp=2))
    # fc1 and fc2: 2·b·s·h·f each; per rank half of each
    assert _matmul_flop(g) == 4 * b * s * h * f
    assert _matmul_flop(g2) == 2 * b * s * h * f
    fc1, act, fc2 = g2.layers[0].ops
    assert (fc1.m, fc1.n, fc1.k) == (b * s, f // 2, h) and (fc2.m, fc2.n, fc2.k) == (b * s, h, f // 2)
    assert act.flop == 8 * b * s * f / 2  # GELU on the local f/2 columns
    # one all-reduce of the [b·s, h] bf16 output, forward and backward (the input gradient)
    assert _tp_comms(g2.layers[0]) == {"tp_allreduce": ("all_reduce", b * s * h * ACT, 1, 1)}
    # weights split, fc2's bias kept whole (added after the all-reduce)
    assert g2.layers[0].params == (h * f + f) / 2 + f * h / 2 + h
    # sequence parallel: all-gather before the pair and reduce-scatter after, each [b·s, h]
    sp = shard(g, RankLayout(tp=2, sp=True))
    assert _tp_comms(sp.layers[0]) == {"tp_allgather": ("all_gather", b * s * h * ACT, 1, 1),
                                       "tp_reducescatter": ("reduce_scatter", b * s * h * ACT, 1, 1)}


@pytest.mark.parametrize("tp", [2, 4])
def test_imported_transformer_block_at_tp(tp: int) -> None:
    b, s, h, heads = 2, 64, 64, 4
    g = from_torch(OneBlock(M.Block(h, heads, 4 * h)), torch.zeros(b, s, h))
    gt = shard(g, RankLayout(tp=tp))
    assert _matmul_flop(gt) == pytest.approx(_matmul_flop(g) / tp, rel=1e-12)
    attn = next(o for o in gt.layers[0].ops if o.kind == "attention")
    assert attn.heads == heads // tp and attn.split == "heads"
    # qkv -> attention -> proj and fc1 -> gelu -> fc2: two pairs, each all-reducing [b·s, h]:
    # 2 x b x s x h x 2 bytes of all-reduce per block in the forward pass
    kind, size, fwd, bwd = _tp_comms(gt.layers[0])["tp_allreduce"]
    assert (kind, size, fwd, bwd) == ("all_reduce", b * s * h * ACT, 2, 2)
    assert size * fwd == 2 * b * s * h * ACT


def test_imported_gpt_matches_the_builder_at_tp2() -> None:
    L, h, heads, V, s, b = 2, 256, 4, 512, 128, 2
    spec = ModelSpec(id="tiny-gpt", name="tiny GPT", family="dense", source="test fixture", num_layers=L, hidden=h,
                     ffn_hidden=4 * h, num_heads=heads, vocab=V, seq_len=s)
    native = sharded_graph(spec, micro_batch=b, seq_len=s, tp=2)
    traced = shard(from_torch(lambda: M.GPT(L, h, heads, V, s), torch.zeros(b, s, dtype=torch.long)), RankLayout(tp=2))
    (nb,), (tb,) = native.body, traced.body
    assert (nb.count, tb.count) == (L, L)

    def mm(layer: Layer) -> float:
        return sum(o.mflop for o in layer.ops if o.kind in ("gemm", "bmm", "attention"))
    assert mm(tb) == pytest.approx(mm(nb), rel=1e-12)
    assert _tp_comms(tb) == _tp_comms(nb)
    # the same weights per rank in the body (the builder's and the traced block's)
    assert tb.params == pytest.approx(nb.params, rel=1e-12)


def test_imported_graph_estimates_at_tp2() -> None:
    b, s = 2, 128
    g = from_torch(lambda: M.GPT(2, 64, 4, 512, s), torch.zeros(b, s, dtype=torch.long))
    one = estimate_graph(g, "h100-sxm5-80gb", perfmodel.ParallelPlan(micro_batch=b, global_batch=b))
    two = estimate_graph(g, "h100-sxm5-80gb", perfmodel.ParallelPlan(tp=2, micro_batch=b, global_batch=b))
    # model FLOPs are the whole job's, whatever the layout; the rank holds fewer weights
    assert two.model_flop_per_step == one.model_flop_per_step
    assert two.memory.weights_bytes < one.memory.weights_bytes
    assert two.breakdown_s["tp_ep_cp_comm_s"] > 0 == one.breakdown_s["tp_ep_cp_comm_s"]


def test_no_pair_at_tp_is_an_error_naming_why() -> None:
    g = from_torch(lambda: M.LSTMForecaster(), torch.zeros(4, 16, 8))
    with pytest.raises(LayoutError, match="no tensor-parallel pair"):
        estimate_graph(g, "h100-sxm5-80gb", perfmodel.ParallelPlan(tp=2, micro_batch=4, global_batch=4))
    res = from_torch(Residual(32), torch.zeros(8, 32))
    assert not any(o.split for layer in res.layers for o in layer.ops)
    with pytest.raises(LayoutError, match="no tensor-parallel pair"):
        shard(res, RankLayout(tp=2))
    with pytest.raises(LayoutError, match="not by cp"):
        shard(from_torch(MLP(16, 64), torch.zeros(8, 16)), RankLayout(cp=2))


def test_tp_must_divide_a_column() -> None:
    g = from_torch(MLP(16, 66), torch.zeros(8, 16))
    with pytest.raises(LayoutError, match="tp 4 does not divide the 66 output features"):
        shard(g, RankLayout(tp=4))


def test_pair_roles_on_a_chain_and_a_fork() -> None:
    lin = lambda i, o: Node("gemm", True, (i,), (o,))  # noqa: E731
    act = lambda i, o: Node("elementwise", False, (i,), (o,))  # noqa: E731
    # x(0) -> fc1 -> relu -> fc2 -> relu -> fc3: (fc1, fc2) pair, fc3 whole
    chain = [lin(0, 1), act(1, 2), lin(2, 3), act(3, 4), lin(4, 5)]
    assert tp_roles(chain, frozenset({0})) == ["column", "inner", "row", "", ""]
    # fc1's output also read by another op outside the pair: it would need a gather, so no pair
    fork = [lin(0, 1), act(1, 2), lin(2, 3), Node("norm", False, (1,), (6,))]
    assert tp_roles(fork, frozenset({0})) == ["", "", "", ""]


def test_shard_lays_the_builder_graph_out_and_refuses_a_sharded_one() -> None:
    spec = get_workload("llama3-8b")
    whole = build_graph(spec, 1, 4096)
    assert whole.degrees == {"tp": 1, "cp": 1, "ep": 1, "etp": 1, "sp": 0}
    assert not any(layer.comms for layer in whole.layers)
    rank = shard(whole, perfmodel.ParallelPlan(tp=8, cp=2, sequence_parallel=True))
    assert rank.degrees == {"tp": 8, "cp": 2, "ep": 1, "etp": 1, "sp": 1}
    # Llama 3 8B: 32 heads / 8 kv heads over tp 8; 4096 tokens over cp 2
    qkv = next(o for o in rank.body[0].ops if o.name == "qkv_proj")
    assert (qkv.m, qkv.n, qkv.k, qkv.split) == (2048, (32 // 8 + 2 * 8 // 8) * 128, 4096, "column")
    names = [c.name for c in rank.body[0].comms]
    assert names == ["tp_allgather", "tp_reducescatter", "cp_kv_ring"]
    with pytest.raises(LayoutError, match="already sharded"):
        shard(rank, RankLayout(tp=2))


def test_moe_collectives_come_from_shard() -> None:
    spec = get_workload("mixtral-8x7b")  # h 4096, 8 experts, top-2
    whole = build_graph(spec, 1, 4096)
    moe = next(layer for layer in whole.body if layer.kind == "moe")
    assert not moe.comms and moe.layout is not None and moe.layout.moe is not None
    rank = sharded_graph(spec, 1, 4096, ep=8, moe=MoEOptions(imbalance=1.0))
    comms = {c.name: c for c in next(layer for layer in rank.body if layer.kind == "moe").comms}
    # 4096 tokens x top-2 copies x 4096 hidden x 2 bytes each way; int64 counts of 8 experts x ep 8
    assert comms["moe_dispatch"].bytes == comms["moe_combine"].bytes == 4096 * 2 * 4096 * 2
    assert comms["moe_count_allgather"].bytes == 8 * 8 * 8
    assert "moe_etp_allgather" not in comms and "moe_aux_count_allreduce" not in comms
