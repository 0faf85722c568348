"""LatentMoE (Nemotron 3 Super / Ultra): routed experts, dispatch and combine at the latent width,
the two projections around them; FLOPs against FlopCounterMode, bytes and parameters by hand."""

from __future__ import annotations

import pytest

from perfmodel.parallel.shard import sharded_graph
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.graph import Graph, Layer
from perfmodel.workload.spec import ModelSpec

WL = load_workloads()


def moe_layer(g: Graph) -> Layer:
    return next(layer for layer in g.layers if layer.kind == "moe")


def _tiny(**changes: object) -> ModelSpec:
    base = dict(id="t-latent", name="tiny latent MoE", family="moe", source="test fixture", num_layers=1,
                hidden=512, num_heads=8, vocab=128, num_experts=16, top_k=4, moe_ffn_hidden=256, moe_latent_size=128,
                num_shared_experts=1, norm="rmsnorm", activation="swiglu", position="none", bias=False)
    return ModelSpec.model_validate({**base, **changes})


@pytest.mark.parametrize("tp, ep, dp", [(1, 1, 1), (2, 4, 2), (1, 8, 4)])
def test_latent_moe_flops_equal_flop_counter(tp: int, ep: int, dp: int) -> None:
    """Router (full h, fp32) + latent down/up projections (duplicated on every tp rank, each on its
    T/tp tokens) + every expert at the latent width + the shared expert at h: what the tp·dp
    ranks compute together equals FlopCounterMode on one module holding all their tokens."""
    torch = pytest.importorskip("torch")
    import torch_reference as R

    spec = _tiny()
    b, s = 1, 256
    with torch.device("meta"):
        ref = R.LatentMoEFFN(512, 128, 16, 4, 256, shared=1)
        x = torch.zeros(dp * b, s, 512)
    want = R.count_flop(ref, x)
    layer = moe_layer(sharded_graph(spec, micro_batch=b, seq_len=s, tp=tp, ep=ep, sp=tp > 1))
    names = ("router", "moe_latent_down", "expert_fc1", "expert_fc2", "moe_latent_up", "shared_fc1", "shared_fc2")
    assert sum(o.mflop for o in layer.ops if o.name in names) * tp * dp == want
    # by hand on one rank (tp 1, ep 1): T = 256 tokens, k = 4, l = 128, f = 256, E = 16
    if tp == ep == 1:
        o = {op.name: op for op in layer.ops}
        assert o["moe_latent_down"].flop == 2 * 256 * 512 * 128 == o["moe_latent_up"].flop
        assert o["expert_fc1"].flop == 2 * (256 * 4) * 128 * (2 * 256)
        assert o["permute"].bytes == 256 * 4 * 128 * 2 * 2  # copies x l elements, read + write, bf16


def test_dispatch_and_combine_move_latent_rows() -> None:
    """The all-to-alls carry C = (T/tp)·k rows of l, not h: a quarter for Nemotron 3 Super."""
    spec = WL["nemotron3-super"]
    b, s, tp, ep = 1, 4096, 2, 8
    comms = {c.name: c for c in moe_layer(sharded_graph(spec, micro_batch=b, seq_len=s, tp=tp, ep=ep, sp=True)).comms}
    C = (b * s // tp) * 22
    assert comms["moe_dispatch"].bytes == C * 1024 * 2
    assert comms["moe_combine"].bytes == C * 1024 * 2
    plain = moe_layer(sharded_graph(spec.with_(moe_latent_size=None), micro_batch=b, seq_len=s, tp=tp, ep=ep, sp=True))
    assert {c.name: c for c in plain.comms}["moe_dispatch"].bytes == 4 * comms["moe_dispatch"].bytes


def test_nemotron3_super_parameters_by_hand() -> None:
    """One MoE layer: router 512·4096, latent projections 2·4096·1024, 512 experts of 2·1024·2688
    (squared ReLU, not gated), shared expert 2·4096·5376, pre-norm 4096. The whole checkpoint
    (MTP block included) holds 123,611,033,088 elements (Megatron-Bridge verification card); the
    graph leaves out only the 41 fp32 router expert-bias vectors of 512."""
    spec = WL["nemotron3-super"]
    g = build_graph(spec, seq_len=2048)
    moe = moe_layer(g)
    h, lat, E, f = 4096, 1024, 512, 2688
    assert moe.params_full == E * h + 2 * h * lat + E * 2 * lat * f + 2 * h * 5376 + h
    assert moe.active_params_full == moe.params_full - (E - 22) * 2 * lat * f
    assert g.total_params_full() == 123_611_033_088 - 41 * 512


def test_latent_size_must_be_below_hidden_on_an_moe_model() -> None:
    with pytest.raises(ValueError, match="moe_latent_size"):
        _tiny(moe_latent_size=512)
    with pytest.raises(ValueError, match="moe_latent_size"):
        _tiny(family="dense", ffn_hidden=1024, moe_latent_size=128)


def test_replicated_latent_projection_gradients_all_reduce_over_tp():
    """Under sequence parallelism every tp rank holds the duplicated latent projections (and the
    layer norms) whole; Megatron-Core all-reduces their gradients over tp once per step."""
    import perfmodel
    from perfmodel import ParallelPlan
    from perfmodel.comm.collectives import collective_time_s
    from perfmodel.engines.stages import plan_graph, sp_replicated_grad_sync_s

    spec = WL["nemotron3-super"]
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 16)[0]
    plan = ParallelPlan(tp=2, ep=8, dp=8, global_batch=8, micro_batch=1, sequence_parallel=True, seq_len=2048)
    g = plan_graph(spec, plan)
    params = 89 * 4096 + 40 * 2 * 4096 * 1024  # 88 layer norms + the final norm, 40 x (down + up)
    want = collective_time_s(system, "all_reduce", params * 4, 2, 1)
    assert sp_replicated_grad_sync_s(system, plan, g, 0) == pytest.approx(want, rel=1e-12)
    assert sp_replicated_grad_sync_s(system, plan.model_copy(update={"sequence_parallel": False}), g, 0) == 0.0
