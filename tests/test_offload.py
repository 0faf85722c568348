"""Activation offloading (engines/offload.py): Transformer Engine's default schedule by hand,
the GPU-resident bytes, Megatron-Core's refusals, and the estimate around them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.engines.analytic import analytic_estimate
from perfmodel.engines.des import des_estimate
from perfmodel.engines.offload import offload_stall, resident_bytes
from perfmodel.engines.stages import plan_graph
from perfmodel.errors import LayoutError, SpecError
from perfmodel.memory import layer_saved_bytes
from perfmodel.parallel.split import stage_layers

GB = 1e9


def test_nothing_offloaded_waits_for_nothing():
    s = offload_stall([1.0] * 4, [2.0] * 4, [GB] * 4, 0, 1.0, 1.0)
    assert (s.fwd_s, s.bwd_s) == (0.0, 0.0)


def test_one_resident_layer_serialises_every_copy():
    """K = L - N = 1: layer j + 1 waits for layer j's copy out (x = 3 s against a 1 s forward:
    N·(x - f) = 3 x 2 = 6 s), and each backward for its own reload (N·y = 3 x 1.5 = 4.5 s), as
    TE's documentation says ('compute and transfers cannot overlap')."""
    s = offload_stall([1.0] * 4, [2.0] * 4, [3 * GB] * 4, 3, d2h_Bps=GB, h2d_Bps=2 * GB)
    assert s.fwd_s == pytest.approx(6.0)
    assert s.bwd_s == pytest.approx(4.5)


def test_copies_shorter_than_a_layer_hide_behind_the_next_layers():
    """K >= 2 and a copy shorter than one layer's forward (0.9 s against 1 s) and its reload
    shorter than one backward (1.8 s against 2 s): nothing waits."""
    s = offload_stall([1.0] * 10, [2.0] * 10, [0.9 * GB] * 10, 8, d2h_Bps=GB, h2d_Bps=0.5 * GB)
    assert s.total_s == pytest.approx(0.0, abs=1e-12)


def test_copies_longer_than_a_layer_pile_up():
    """2 s copies behind 1 s layers, K = 2: copy j (serial on one stream) ends at 2(j + 1) and
    layer j + 2 waits for it, so the forward of 8 layers with 6 offloaded ends at
    2·6 + 1 (the waits of layers 2..7, then the last layer) = 13 s, 5 s over the 8 s of compute."""
    s = offload_stall([1.0] * 8, [1.0] * 8, [2 * GB] * 8, 6, d2h_Bps=GB, h2d_Bps=1e30)
    assert s.fwd_s == pytest.approx(5.0)
    assert s.bwd_s == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 11), scale=st.floats(1.1, 10.0), bw=st.floats(0.05, 20.0), f=st.floats(0.1, 3.0))
def test_more_host_bandwidth_or_fewer_offloaded_layers_never_wait_longer(n, scale, bw, f):
    layers = 12
    fwd, bwd, saved = [f] * layers, [2 * f] * layers, [GB * (1 + i % 3) for i in range(layers)]
    base = offload_stall(fwd, bwd, saved, n, bw * GB, bw * GB).total_s
    assert offload_stall(fwd, bwd, saved, n, scale * bw * GB, scale * bw * GB).total_s <= base + 1e-9
    assert offload_stall(fwd, bwd, saved, n - 1, bw * GB, bw * GB).total_s <= base + 1e-9


def test_resident_bytes_is_the_largest_window_of_kept_layers():
    assert resident_bytes([1.0] * 10, 4) == 6.0
    assert resident_bytes([5.0, 1.0, 1.0, 1.0, 1.0], 3) == 6.0  # layers 0-1 sit on the GPU together once
    assert resident_bytes([1.0, 2.0, 3.0], 0) == 6.0


def test_offloading_n_layers_frees_n_layers_of_activations():
    """Llama-3-8B (32 identical layers), pp 1: the activations fall by exactly N layers' saved bytes."""
    spec = perfmodel.get_workload("llama3-8b")
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 8)[0]
    plan = ParallelPlan(dp=8, global_batch=8, seq_len=8192, precision="bf16")
    base = analytic_estimate(spec, system, plan)
    off = analytic_estimate(spec, system, plan.model_copy(update={"offload_activations": 12}))
    layer = next(layer for layer, _ in stage_layers(plan_graph(spec, plan), 1, 0, 1) if layer.recomputable)
    assert base.memory.activations_bytes - off.memory.activations_bytes == pytest.approx(12 * layer_saved_bytes(layer, plan))
    assert any(m.startswith("activation offload: 12 layers") for m in off.messages)


def test_a_slow_host_link_shows_as_its_own_term_in_both_engines():
    """31 of 32 layers over PCIe (51 / 52 GB/s, dgx-h100): nothing hides the copies; the wait is
    its own breakdown term, the terms still add up, and the simulation agrees with the closed form."""
    spec = perfmodel.get_workload("llama3-8b")
    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 8)[0]
    plan = ParallelPlan(dp=8, global_batch=16, seq_len=8192, precision="bf16", offload_activations=31)
    a, d = analytic_estimate(spec, system, plan), des_estimate(spec, system, plan)
    base = analytic_estimate(spec, system, plan.model_copy(update={"offload_activations": 0}))
    wait = a.breakdown_s["activation_offload_s"]
    assert wait > 0.1 * base.step_time_s
    assert a.step_time_s == pytest.approx(base.step_time_s + wait, rel=1e-6)
    assert sum(a.breakdown_s.values()) == pytest.approx(a.step_time_s)
    assert sum(d.breakdown_s.values()) == pytest.approx(d.step_time_s)
    assert d.step_time_s == pytest.approx(a.step_time_s, rel=0.02)


@pytest.mark.parametrize(("update", "words"), [
    ({"pp": 2, "dp": 4}, "pp 1"),
    ({"recompute": "selective"}, "recompute none"),
    ({"cuda_graphs": True}, "CUDA graphs"),
])
def test_megatron_refusals_are_errors(update, words):
    with pytest.raises(LayoutError, match=words):
        ParallelPlan(**{"dp": 8, "global_batch": 8, "offload_activations": 4, **update})


def test_offloading_every_layer_is_an_error():
    spec = perfmodel.get_workload("llama3-8b")
    with pytest.raises(LayoutError, match="allowed: 0 to 31"):
        ParallelPlan(dp=8, global_batch=8, offload_activations=32).validate_for(spec, 8)


def test_a_node_without_a_host_link_says_which_field_is_missing():
    spec = perfmodel.get_workload("llama3-8b")
    system = perfmodel.resolve_system("b300", None, 8)[0]
    assert system.node.host_link is None
    with pytest.raises(SpecError, match="host_link"):
        analytic_estimate(spec, system, ParallelPlan(dp=8, global_batch=8, offload_activations=4))


def test_a_plan_that_does_not_fit_names_the_fewest_offloaded_layers_that_would():
    """Llama-3-70B, FSDP over 64 GB200, 2 x 8k sequences in fp8 (Megatron-Bridge's recipe offloads
    40 layers): the message names the smallest count that fits, and that count does fit."""
    spec = perfmodel.get_workload("llama3-70b")
    system = perfmodel.resolve_system("gb200", "gb200-nvl72", 64)[0]
    plan = ParallelPlan(dp=64, zero_stage=3, micro_batch=2, global_batch=256, seq_len=8192, precision="fp8")
    msg = next(m for m in analytic_estimate(spec, system, plan).messages if m.startswith("does not fit"))
    n = int(msg.split("or offloading ")[1].split(" layers")[0])
    fits = analytic_estimate(spec, system, plan.model_copy(update={"offload_activations": n}))
    short = analytic_estimate(spec, system, plan.model_copy(update={"offload_activations": n - 1}))
    assert fits.memory.total_bytes <= system.accelerator.hbm_bytes < short.memory.total_bytes
    assert 30 <= n < 80
