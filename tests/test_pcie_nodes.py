"""PCIe servers: cards joined in pairs by NVLink bridges (H100 PCIe / NVL, A100 PCIe) or not at all
(L40S). A two-rank group inside a bridged pair runs over the bridge; every other group's ring
crosses PCIe. Values computed by hand from the node YAML."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel import ParallelPlan, estimate
from perfmodel.comm.collectives import collective_time_s
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.system import resolve_system
from perfmodel.hardware.system_specs import Node

GIB = 2**30
PCIE_RING_LATENCY_S = 8.4e-6 + 14 * 5.7e-6  # NCCL ring Simple, 8 ranks over PCI
BRIDGE_LATENCY_S = 8.4e-6 + 2 * 3.4e-6  # NCCL ring Simple, 2 ranks over NVLink


def test_a_bridged_pair_all_reduces_over_the_bridge() -> None:
    """A100 PCIe pair: 600 GB/s bidirectional = 300e9 one-way, x 0.69 measured (208 GB/s busbw);
    a 2-rank all-reduce moves F = 2(2-1)/2 = 1 buffer: 1 GiB / 207e9 + 15.2 us."""
    s, _ = resolve_system("a100-pcie-80gb", None, 8)
    want = BRIDGE_LATENCY_S + GIB / (300e9 * 0.69)
    assert collective_time_s(s, "all_reduce", GIB, 2, 1) == pytest.approx(want, rel=1e-12)
    # all-gather moves half of it, F = 1/2
    assert collective_time_s(s, "all_gather", GIB, 2, 1) == pytest.approx(BRIDGE_LATENCY_S + 0.5 * GIB / 207e9, rel=1e-12)


def test_groups_beyond_a_pair_ride_pcie() -> None:
    """4 ranks (two pairs) or 2 ranks 2 apart (GPU 0 and 2, different bridges) ring over PCIe Gen4:
    64 GB/s bidirectional = 32e9 one-way x 0.63 measured (~20 GB/s busbw) and NCCL's 88.2 us."""
    s, _ = resolve_system("a100-pcie-80gb", None, 8)
    pcie = 32e9 * 0.63
    assert collective_time_s(s, "all_reduce", GIB, 4, 1) == pytest.approx(PCIE_RING_LATENCY_S + 1.5 * GIB / pcie, rel=1e-12)
    assert collective_time_s(s, "all_reduce", GIB, 2, 2) == pytest.approx(PCIE_RING_LATENCY_S + GIB / pcie, rel=1e-12)
    # the bridge is 11x faster than PCIe for the same 2-rank all-reduce
    assert collective_time_s(s, "all_reduce", GIB, 2, 2) > 10 * collective_time_s(s, "all_reduce", GIB, 2, 1)


def test_l40s_has_no_bridge() -> None:
    s, _ = resolve_system("l40s", None, 8)
    assert s.levels[0].pair_Bps == 0.0
    assert collective_time_s(s, "all_reduce", GIB, 2, 1) == pytest.approx(PCIE_RING_LATENCY_S + GIB / (32e9 * 0.63), rel=1e-12)


def test_pairs_misalign_when_a_node_holds_an_odd_number_of_gpus() -> None:
    """Three GPUs per node: ranks 2 and 3 sit on different nodes, so no group is assumed bridged."""
    s, _ = resolve_system("h100-pcie-80gb", None, 6, gpus_per_node=3)
    assert s.levels[0].pair_Bps > 0.0
    assert collective_time_s(s, "all_reduce", GIB, 2, 1) == pytest.approx(PCIE_RING_LATENCY_S + GIB / (64e9 * 0.44), rel=1e-12)


def test_what_if_bandwidth_scales_the_bridge_too() -> None:
    s, _ = resolve_system("h100-nvl-94gb", None, 8)
    lv = s.levels[0]
    doubled = lv.scaled(bandwidth=2.0, latency=0.5)
    assert doubled.pair_Bps == pytest.approx(2 * lv.pair_Bps)
    assert doubled.pair_latency_s == pytest.approx(0.5 * lv.pair_latency_s)


def test_a_bridge_on_an_odd_node_is_refused() -> None:
    node = load_catalog().nodes["pcie-h100-8gpu"].model_dump()
    node["accelerators_per_node"] = 7
    with pytest.raises(ValueError, match=r"pair_bridge.*even number"):
        Node.model_validate(node)


@pytest.mark.parametrize("acc", ["h100-pcie-80gb", "h100-nvl-94gb", "a100-pcie-80gb", "l40s"])
def test_pcie_cards_estimate_and_tp_beyond_two_is_pcie_bound(acc: str) -> None:
    """Llama-3 8B on 8 cards: tp 4 pays far more tensor-parallel communication than tp 2, since
    its all-reduces cross PCIe (on L40S tp 2 does too)."""
    def tp_comm(tp: int) -> float:
        plan = ParallelPlan(dp=8 // tp, tp=tp, zero_stage=1, global_batch=64, micro_batch=1, recompute="full")
        return estimate("llama3-8b", acc, plan, calibration="none").breakdown_s["tp_ep_cp_comm_s"]

    t2, t4 = tp_comm(2), tp_comm(4)
    assert t2 > 0.0
    assert t4 > (3.0 if acc != "l40s" else 1.5) * t2


def test_the_bridge_is_a_spec_field_not_a_rule() -> None:
    """Removing the bridge from the node puts tp 2 on PCIe: slower, never faster."""
    s, _ = resolve_system("h100-pcie-80gb", None, 8)
    bare = dataclasses.replace(s, levels=(dataclasses.replace(s.levels[0], pair_Bps=0.0, pair_latency_s=0.0),
                                          *s.levels[1:]))
    plan = ParallelPlan(dp=4, tp=2, zero_stage=1, global_batch=64, micro_batch=1, recompute="full")
    with_bridge = estimate("llama3-8b", s, plan, calibration="none")
    without = estimate("llama3-8b", bare, plan, calibration="none")
    assert without.breakdown_s["tp_ep_cp_comm_s"] > 3 * with_bridge.breakdown_s["tp_ep_cp_comm_s"]
    assert without.step_time_s > with_bridge.step_time_s


def test_pipeline_neighbours_are_no_bridged_pair_beyond_pp_2() -> None:
    """Stages s and s + 1 of a pp 4 pipeline (tp = cp = dp = 1) sit on ranks 1 and 2 for one hop:
    different bridges, so a send crosses PCIe (Gen4: 32e9 x 0.63 and NCCL's 88.2 us); with pp 2 the
    only hop is ranks 0 -> 1, one bridged pair. The tied embedding's all-reduce between the first
    and last stage likewise (ranks 0 and 3 for pp 4)."""
    from perfmodel.engines.stages import model_graph, p2p_time_s, tied_embedding_sync_s
    from perfmodel.workload.catalog import load_workloads

    s, _ = resolve_system("a100-pcie-80gb", None, 8)
    spec = load_workloads()["gpt2-124m"]
    plans = {pp: ParallelPlan(pp=pp, micro_batch=8, global_batch=64, seq_len=1024) for pp in (2, 4)}
    t = {pp: p2p_time_s(s, plan, model_graph(spec, plan), spec) for pp, plan in plans.items()}
    size = (t[4] - PCIE_RING_LATENCY_S) * 32e9 * 0.63  # the activation bytes, from the PCIe hop
    assert size > 1e6
    assert t[2] == pytest.approx(BRIDGE_LATENCY_S + size / (300e9 * 0.69), rel=1e-9)
    assert collective_time_s(s, "send_recv", size, 2, 1) == pytest.approx(t[2], rel=1e-9)  # a tp-like pair
    emb = spec.vocab * spec.hidden * plans[4].grad_bytes  # tp 1
    assert tied_embedding_sync_s(s, plans[4], spec) == pytest.approx(PCIE_RING_LATENCY_S + emb / (32e9 * 0.63), rel=1e-9)
    assert tied_embedding_sync_s(s, plans[2], spec) == pytest.approx(BRIDGE_LATENCY_S + emb / (300e9 * 0.69), rel=1e-9)


QUAD_LATENCY_S = 8.4e-6 + 6 * 3.4e-6  # NCCL ring Simple, 4 ranks over NVLink
QUAD_BUSBW = 450e9 * 0.39  # 900 GB/s bidirectional per GPU over its 4-way bridge, x the bridge efficiency


def test_h200_nvl_quad_rings_over_its_bridges() -> None:
    """H200 NVL, 4-way bridges: GPUs 0-3 and 4-7 are cliques, each GPU's 450 GB/s one-way split
    over its three peers. A 4-rank all-reduce in a quad uses every link, F = 2·3/4; two cards of
    the quad share one link (1/3 of it), whether adjacent or two apart; GPU 0 and GPU 4 cross PCIe
    (64 GB/s one-way x 0.60, the 38.5 GB/s measured on the box), as does every 8-rank ring."""
    s, _ = resolve_system("h200-nvl", None, 8)
    assert s.levels[0].pair_group == 4
    quad = collective_time_s(s, "all_reduce", GIB, 4, 1)
    assert quad == pytest.approx(QUAD_LATENCY_S + 1.5 * GIB / QUAD_BUSBW, rel=1e-12)
    pair = QUAD_LATENCY_S + GIB / (QUAD_BUSBW / 3)
    assert collective_time_s(s, "all_reduce", GIB, 2, 1) == pytest.approx(pair, rel=1e-12)
    assert collective_time_s(s, "all_reduce", GIB, 2, 2) == pytest.approx(pair, rel=1e-12)
    pcie = 64e9 * 0.60
    assert collective_time_s(s, "all_reduce", GIB, 2, 4) == pytest.approx(PCIE_RING_LATENCY_S + GIB / pcie, rel=1e-12)
    assert collective_time_s(s, "all_reduce", GIB, 8, 1) == pytest.approx(PCIE_RING_LATENCY_S + 1.75 * GIB / pcie, rel=1e-12)
    # all-to-all in the quad: each rank sends 1/4 of its buffer to each peer over its own link
    a2a = collective_time_s(s, "all_to_all", GIB, 4, 1)
    assert a2a == pytest.approx(QUAD_LATENCY_S + GIB / 4 / (QUAD_BUSBW / 3), rel=1e-12)


def test_h200_nvl_pipeline_inside_a_quad_sends_over_the_bridge() -> None:
    """pp 4 on one quad: every neighbour pair is a direct link; pp 8 reaches the other quad, whose
    PCIe hop sets the steady state."""
    from perfmodel.engines.stages import pipeline_in_one_bridge

    s, _ = resolve_system("h200-nvl", None, 8)
    assert pipeline_in_one_bridge(s, ParallelPlan(pp=4, dp=2, global_batch=8), 1)
    assert pipeline_in_one_bridge(s, ParallelPlan(pp=2, tp=2, dp=2, global_batch=8), 2)
    assert not pipeline_in_one_bridge(s, ParallelPlan(pp=8), 1)
    assert not pipeline_in_one_bridge(s, ParallelPlan(pp=2, tp=4), 4)
    # the 2-way H100 NVL pair: only pp 2 with stride 1, as before
    h, _ = resolve_system("h100-nvl-94gb", None, 8)
    assert pipeline_in_one_bridge(h, ParallelPlan(pp=2, dp=4, global_batch=8), 1)
    assert not pipeline_in_one_bridge(h, ParallelPlan(pp=4, dp=2, global_batch=8), 1)


def test_a_4way_bridge_needs_whole_quads_per_node() -> None:
    node = load_catalog().nodes["pcie-h200-nvl-8gpu"].model_dump()
    node["accelerators_per_node"] = 6
    with pytest.raises(ValueError, match=r"pair_bridge.*multiple of 4"):
        Node.model_validate(node)


def test_h200_nvl_tp_inside_the_quad_beats_tp_across_it() -> None:
    def tp_comm(tp: int) -> float:
        plan = ParallelPlan(dp=8 // tp, tp=tp, zero_stage=1, global_batch=64, micro_batch=1, recompute="full")
        return estimate("llama3-8b", "h200-nvl", plan, calibration="none").breakdown_s["tp_ep_cp_comm_s"]

    assert tp_comm(8) > 10 * tp_comm(4)
