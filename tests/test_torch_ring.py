"""PyTorch's context-parallel ring (ParallelPlan.cp_ring allgather / allgather-repeat-kv, the
torchtitan stack's): what it moves, merges and leaves exposed, by hand; the Transformer Engine ring
(p2p) and every plan without cp unchanged; engines and planner see the same seconds."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework
from perfmodel.comm.collectives import collective_time_s
from perfmodel.compute.ops import memory_bound_cost, op_cost
from perfmodel.engines.costs import layer_time
from perfmodel.engines.torch_ring import merge_bytes, ring_backward_exposed_s, ring_forward_exposed_s
from perfmodel.hardware.system import resolve_system
from perfmodel.parallel.shard import sharded_graph
from perfmodel.planning.evaluate import Evaluator
from perfmodel.planning.space import RECOMPUTES, SearchSpace, layout_grid
from perfmodel.workload.catalog import get_workload

GiB = 2**30
S = 262144  # the 8 x H100 torchtitan benchmark's longest sequence: 32k tokens per rank at cp 8


def _layer(cp_ring: str, cp: int = 8, seq: int = S, tp: int = 1):
    g = sharded_graph(get_workload("llama3-8b"), 1, seq, tp=tp, cp=cp, precision="fp8", cp_ring=cp_ring)  # type: ignore[arg-type]
    return next(layer for layer in g.layers if layer.layout is not None and layer.layout.cp is not None)


def test_ring_comms_by_hand():
    """Llama-3-8B (32 query heads, 8 kv heads, head dim 128), cp 8, s = 262,144:
    repeat-kv all-gathers K and V of 32 heads, 262,144 x 32 x (128 + 128) x 2 B = 4 GiB, forward and
    backward, and sends the rank's fp32 dK/dV, 32,768 x 32 x 256 x 4 B = 1 GiB, at each of 8
    backward steps; with the kv heads a quarter of both; Transformer Engine's ring is unchanged."""
    comms = {c.name: c for c in _layer("allgather-repeat-kv").comms}
    ag, rot = comms["cp_kv_allgather"], comms["cp_dkv_rotate"]
    assert (ag.kind, ag.group, ag.bytes, ag.fwd, ag.bwd) == ("all_gather", "cp", 4 * GiB, 1, 1)
    assert (rot.kind, rot.group, rot.bytes, rot.fwd, rot.bwd) == ("send_recv", "cp", 1 * GiB, 0, 8)
    kv = {c.name: c for c in _layer("allgather").comms}
    assert kv["cp_kv_allgather"].bytes == 1 * GiB and kv["cp_dkv_rotate"].bytes == GiB / 4
    p2p = {c.name: c for c in _layer("p2p").comms}
    assert set(p2p) == {"cp_kv_ring"} and p2p["cp_kv_ring"].bytes == 2 * S * 8 * 128 * 2 == 1 * GiB
    # under tp 8 a rank holds 4 query heads and 1 kv head: repeat-kv moves 4 heads
    tp8 = {c.name: c for c in _layer("allgather-repeat-kv", tp=8).comms}
    assert tp8["cp_kv_allgather"].bytes == S * 4 * 256 * 2


def test_forward_exposure_is_what_step_zero_does_not_hide():
    assert ring_forward_exposed_s(0.025, 0.010) == pytest.approx(0.015)
    assert ring_forward_exposed_s(0.004, 0.010) == 0.0


@pytest.mark.parametrize(("a", "t", "r", "cp", "exposed"), [
    (5.0, 10.0, 3.0, 8, 3.0),  # everything on time: only the last dK/dV send, after the loop
    (25.0, 10.0, 3.0, 4, 18.0),  # late all-gather: step 1 waits 15, then the last send 3
    (0.0, 10.0, 15.0, 3, 25.0),  # slow sends: 10 + 3 x 15 = 55 against 3 x 10 of attention
    (0.0, 10.0, 10.0, 2, 10.0),
])
def test_backward_exposure_by_hand(a: float, t: float, r: float, cp: int, exposed: float):
    """Backward timeline (torch_ring.ring_backward_exposed_s): (25, 10, 3, cp 4): R0 ends
    max(10, 25) + 3 = 28; S1 35, R1 38; S2 45, R2 48; S3 55, R3 58; 58 - 40 = 18."""
    assert ring_backward_exposed_s(a, t, r, cp) == pytest.approx(exposed)


def test_merge_bytes_by_hand():
    """cp 8, 32,768 rows, 32 heads of 128: forward (6 + 6 + 10 x 7) B x 134,217,728 output elements;
    backward (10 x 8 + 6) B x (dQ 134,217,728 + dK/dV 268,435,456) elements."""
    x = _layer("allgather-repeat-kv").layout.cp
    out = 32768 * 32 * 128
    fwd, bwd = merge_bytes(x, 8, "allgather-repeat-kv")
    assert fwd == 82 * out == 11_005_853_696
    assert bwd == 86 * 3 * out == 34_628_173_824
    # with the kv heads the dK/dV accumulators hold a quarter of the elements; dQ and O do not change
    assert merge_bytes(x, 8, "allgather") == (fwd, 86 * (out + out / 2))


def _system():
    return resolve_system("h100-sxm5-80gb", None, 8)[0]


def _plan(cp_ring: str, recompute: str = "full", selective: str = "core_attn") -> perfmodel.ParallelPlan:
    return perfmodel.ParallelPlan(dp=1, cp=8, zero_stage=3, global_batch=1, seq_len=S, precision="fp8", recompute=recompute,
                                  selective_recompute=selective, cp_ring=cp_ring)  # type: ignore[arg-type]


def test_layer_time_adds_the_merges_and_the_exposed_exchange():
    """layer_time under the ring = the p2p layer (whose all-gather hides) + the merge passes on the
    GPU + the exchange seconds the recurrences leave exposed, each from the same cost functions."""
    sys_ = _system()
    acc = sys_.accelerator
    ring, p2p = _layer("allgather-repeat-kv"), _layer("p2p")
    lt_r, lt_p = layer_time(sys_, _plan("allgather-repeat-kv"), ring, world=1), layer_time(sys_, _plan("p2p"), p2p, world=1)
    att = next(op for op in ring.ops if op.kind == "attention")
    f, b = op_cost(acc, att, "fwd").time_s, op_cost(acc, att, "bwd").time_s
    fwd_b, bwd_b = merge_bytes(ring.layout.cp, 8, "allgather-repeat-kv")
    mf = memory_bound_cost(acc, 0.0, fwd_b, 9).time_s
    mb = memory_bound_cost(acc, 0.0, bwd_b, 18).time_s
    assert lt_p.fwd_comm_s == 0.0  # Transformer Engine's ring hides behind the whole attention
    assert lt_r.fwd_gpu_s == pytest.approx(lt_p.fwd_gpu_s + mf, rel=1e-12)
    assert lt_r.bwd_gpu_s == pytest.approx(lt_p.bwd_gpu_s + mb, rel=1e-12)
    t_ag = collective_time_s(sys_, "all_gather", 4 * GiB, 8)
    t_rot = collective_time_s(sys_, "send_recv", 1 * GiB, 8)
    assert lt_r.fwd_comm_s == pytest.approx(max(0.0, t_ag - f / 8), abs=1e-15)
    assert lt_r.bwd_comm_s == pytest.approx(ring_backward_exposed_s(t_ag, b / 8, t_rot, 8), rel=1e-12)
    assert lt_r.bwd_comm_s >= t_rot > 0.0  # at least the last dK/dV send
    # full recompute reruns the forward call: its merges and its exposure
    assert lt_r.recompute_gpu_s == pytest.approx(lt_r.fwd_gpu_s) and lt_r.recompute_comm_s == lt_r.fwd_comm_s


def test_per_op_checkpointing_saves_the_ring_core_attn_reruns_it():
    sys_ = _system()
    layer = _layer("allgather-repeat-kv")
    op = layer_time(sys_, _plan("allgather-repeat-kv", "selective", "op"), layer)
    core = layer_time(sys_, _plan("allgather-repeat-kv", "selective", "core_attn"), layer)
    assert op.recompute_comm_s == 0.0
    assert core.recompute_comm_s == pytest.approx(core.fwd_comm_s)
    # the core recompute reruns the attention and its merges: more than the p2p core
    p2p = layer_time(sys_, _plan("p2p", "selective", "core_attn"), _layer("p2p"))
    assert core.recompute_gpu_s > p2p.recompute_gpu_s


def test_torchtitan_selects_the_torch_ring_and_only_torchtitan():
    plan = perfmodel.ParallelPlan(dp=1, cp=8, global_batch=1, seq_len=S)
    assert apply_framework(plan, FRAMEWORKS["torchtitan"]).cp_ring == "allgather-repeat-kv"
    for name, fw in FRAMEWORKS.items():
        if name != "torchtitan" and fw.context_parallel:  # the others refuse cp > 1 (test_framework_mechanisms)
            assert apply_framework(plan, fw).cp_ring == "p2p", name
    named = perfmodel.ParallelPlan(dp=1, cp=8, global_batch=1, seq_len=S, cp_ring="allgather")
    assert apply_framework(named, FRAMEWORKS["torchtitan"]).cp_ring == "allgather"


def test_without_cp_the_ring_changes_nothing():
    sys_ = _system()
    spec = get_workload("llama3-8b")
    base = perfmodel.ParallelPlan(dp=8, zero_stage=3, global_batch=8, seq_len=8192, precision="fp8", recompute="full")
    ring = base.model_copy(update={"cp_ring": "allgather-repeat-kv"})
    assert perfmodel.estimate(spec, sys_, ring, calibration="none").step_time_s == \
        perfmodel.estimate(spec, sys_, base, calibration="none").step_time_s


def test_the_ring_slows_a_step_in_both_engines_alike():
    spec = get_workload("llama3-8b")
    sys_ = _system()
    p2p, ring = _plan("p2p"), _plan("allgather-repeat-kv")
    a = {p.cp_ring: perfmodel.estimate(spec, sys_, p, calibration="none").step_time_s for p in (p2p, ring)}
    d = {p.cp_ring: perfmodel.estimate(spec, sys_, p, calibration="none", engine="des").step_time_s for p in (p2p, ring)}
    assert a["allgather-repeat-kv"] > a["p2p"] and d["allgather-repeat-kv"] > d["p2p"]
    assert d["allgather-repeat-kv"] - d["p2p"] == pytest.approx(a["allgather-repeat-kv"] - a["p2p"], rel=1e-6)


def test_planner_scores_the_ring_as_estimate_does():
    """Under torchtitan the planner's cp > 1 layouts carry the ring's merges and exposure."""
    from perfmodel.calibration.profile import NONE, calibrated_system

    fw = FRAMEWORKS["torchtitan"]
    spec = get_workload("llama3-8b")
    system = calibrated_system(resolve_system("h100-sxm5-80gb", None, 8)[0], NONE, fw)
    seq = 65536
    space = SearchSpace(cp=(2, 4, 8), tp=(1,), pp=(1,), micro_batch=(1,))
    g = layout_grid(spec, system, [8], 8, seq, space)
    out = Evaluator(spec, system, seq, "bf16", framework=fw).evaluate(g)
    checked = 0
    for i in np.flatnonzero(g["cp"] > 1)[:6]:
        r = {k: int(v[i]) for k, v in g.items()}
        plan = perfmodel.ParallelPlan(dp=r["dp"], cp=r["cp"], zero_stage=r["zero"], micro_batch=1, global_batch=8, seq_len=seq,
                                      recompute=RECOMPUTES[r["rec"]], precision="bf16")
        est = perfmodel.estimate(spec, system, plan, calibration="none", framework="torchtitan")
        assert est.plan.cp_ring == "allgather-repeat-kv"
        assert out["step_time_s"][i] == pytest.approx(est.step_time_s, rel=1e-9), plan
        checked += 1
    assert checked > 0


def test_cli_names_the_ring_it_ran(capsys: pytest.CaptureFixture[str]):
    """--cp-ring overrides the stack's choice, and the layout line says which ring ran."""
    from perfmodel import cli

    args = ["estimate", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--n-gpus", "8", "--cp", "8", "--zero", "3",
            "--seq-len", "65536", "--recompute", "full", "--framework", "torchtitan", "--calibration", "none"]
    assert cli.main(args) == 0
    assert "cp ring allgather-repeat-kv" in capsys.readouterr().out
    assert cli.main([*args, "--cp-ring", "p2p"]) == 0
    assert "cp ring" not in capsys.readouterr().out
    assert cli.main([*args, "--cp-ring", "allgather"]) == 0
    out = capsys.readouterr().out
    assert "cp ring allgather" in out and "repeat-kv" not in out
