"""Collectives: the alpha-beta ring closed forms, measured curves, hierarchical placement."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.comm.collectives import bus_factor, collective_time_s, intra_time_s, nic_Bps_per_gpu, placement


def _no_curves(system):
    scale_up = dataclasses.replace(system.levels[0], curves=())
    return dataclasses.replace(system, levels=(scale_up, *system.levels[1:]))


def test_bus_factors_by_hand():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(1 / 2)
    assert bus_factor("send_recv", 2) == 1.0


def test_ring_all_reduce_closed_form(a100_system):
    """No curve: t = alpha + 2(n-1)/n * S / (B * eff). DGX A100: B = 300 GB/s one-way,
    eff 0.78, alpha 8.4 us; 1 GiB over 8 GPUs -> 8.4e-6 + 1.75 * 2^30 / 234e9 = 8.0384 ms."""
    s = _no_curves(a100_system(8))
    size = 2.0**30
    expected = 8.4e-6 + 2 * 7 / 8 * size / (300e9 * 0.78)
    assert intra_time_s(s, "all_reduce", size, 8) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(8.0384e-3, rel=1e-4)
    # all-gather moves half the bytes of an all-reduce
    ag = intra_time_s(s, "all_gather", size, 8) - 8.4e-6
    assert ag == pytest.approx((expected - 8.4e-6) / 2, rel=1e-9)


def test_measured_curve_is_used_and_interpolated(a100_system):
    """The DGX A100 curve says 229.0 GB/s busbw at 1 GiB: t = 1.75 * 2^30 / 229e9."""
    s = a100_system(8)
    assert intra_time_s(s, "all_reduce", 2.0**30, 8) == pytest.approx(1.75 * 2**30 / 229.0e9, rel=1e-9)
    # between 256 MiB (194.1) and 512 MiB (222.7): log-log interpolation lies between them
    t = intra_time_s(s, "all_reduce", 384 * 2**20, 8)
    busbw = 1.75 * 384 * 2**20 / t
    assert 194.1e9 < busbw < 222.7e9


def test_placement_follows_megatron_rank_order(a100_system):
    s = a100_system(64)
    assert placement(s, 8, 1).intra_only  # tp 8 inside a node
    p = placement(s, 8, 8)  # dp 8 with tp 8: one rank per node
    assert (p.per_domain, p.domains) == (1, 8)
    p = placement(s, 16, 2)  # dp 16 with tp 2: four ranks per node, four nodes
    assert (p.per_domain, p.domains) == (4, 4)


def test_inter_node_ring_bottleneck_is_the_nics(a100_system):
    """dp 64 over 8 full DGX A100 nodes: busbw = 8 NICs x 25 GB/s x 0.96 = 192 GB/s
    (NVIDIA/nccl#812 measured 192 GB/s)."""
    s = a100_system(64)
    assert nic_Bps_per_gpu(s) == pytest.approx(25e9 * 0.96)
    size = 4.0 * 2**30
    t = collective_time_s(s, "all_reduce", size, 64, 1)
    busbw = bus_factor("all_reduce", 64) * size / t
    assert busbw == pytest.approx(192e9, rel=0.01)
    # one rank per node (tp 8 fills the node): the ring gets one NIC
    t1 = collective_time_s(s, "all_reduce", size, 8, 8)
    assert bus_factor("all_reduce", 8) * size / t1 == pytest.approx(24e9, rel=0.01)


def test_more_bandwidth_never_slower(a100_system):
    s = a100_system(64)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        for degree, stride in ((8, 1), (8, 8), (64, 1), (2, 32)):
            for size in (1e3, 1e6, 1e9):
                base = collective_time_s(s, kind, size, degree, stride)
                faster = collective_time_s(s.scaled(intra_bw=2, inter_bw=2), kind, size, degree, stride)
                assert faster <= base * (1 + 1e-12), (kind, degree, stride, size)


def test_trivial_groups_cost_nothing(a100_system):
    s = a100_system(8)
    assert collective_time_s(s, "all_reduce", 1e9, 1) == 0.0
    assert collective_time_s(s, "all_reduce", 0.0, 8) == 0.0


def test_ring_all_gather_pays_every_step_latency_as_nccls_model_does(a100_system):
    """NCCL's tuning model (src/graph/tuning.cc) charges a ring all-gather of n ranks over N nodes
    baseLat + (n - N)·3.4 us (NVLink steps) + (N - 1)·9.6 us (network steps), ring / Simple. The
    one scale-up ring the measured curve holds (7 steps) is not charged twice. 1024 ranks on 128
    DGX A100: (1024 - 128 - 7) x 3.4 + 127 x 9.6 us = 4.2418 ms above the same gather's bandwidth
    and switch terms; on 8 nodes (64 ranks) 0.2554 ms."""
    from perfmodel.comm.collectives import ring_steps_s

    big, small = a100_system(1024), a100_system(64)
    assert (big.levels[0].step_latency_s, big.levels[1].step_latency_s) == (3.4e-6, 9.6e-6)
    assert ring_steps_s(big.levels, 1024, 8, 128) == pytest.approx(889 * 3.4e-6 + 127 * 9.6e-6, rel=1e-12)
    assert ring_steps_s(big.levels, 1024, 8, 128) == pytest.approx(4.2418e-3, rel=1e-4)
    assert ring_steps_s(small.levels, 64, 8, 8) == pytest.approx(49 * 3.4e-6 + 7 * 9.6e-6, rel=1e-12)
    # a latency-bound gather (1 KB) grows with the ring by those steps and the switch hops (the
    # bandwidth terms of 1 KB differ by under a microsecond)
    grow = collective_time_s(big, "all_gather", 1e3, 1024, 1) - collective_time_s(small, "all_gather", 1e3, 64, 1)
    hops = 120 * big.levels[1].latency_s
    assert grow == pytest.approx(ring_steps_s(big.levels, 1024, 8, 128) - ring_steps_s(small.levels, 64, 8, 8) + hops,
                                 abs=1e-6)
    # an all-reduce runs NCCL's tree across nodes at scale: its latency stays logarithmic
    ar = collective_time_s(big, "all_reduce", 1e3, 1024, 1) - collective_time_s(small, "all_reduce", 1e3, 64, 1)
    assert ar < 1e-4
