"""What-if scaling (System.scaled, `estimate --scale`) moves every figure a key feeds, measured
curves and rates included, and never in the wrong direction."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.cli import main
from perfmodel.comm.collectives import intra_time_s
from perfmodel.compute.ops import gemm_fixed_s
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.system import SCALE_KEYS, resolve_system


def test_measured_curve_scales_its_bandwidth_part(a100_system) -> None:
    """DGX A100 curve, 8 ranks, alpha 8.4 us.
    16 GiB at 234.9 GB/s: t = 1.75 * 2^34 / 234.9e9 = 127.999 ms; NVLink x2: 8.4 us + (t - 8.4 us) / 2.
    32 KiB at 1.31 GB/s: t = 1.75 * 32768 / 1.31e9 = 43.774 us; x2: 8.4 + 35.374 / 2 = 26.087 us;
    latency x2 instead: 16.8 + 35.374 = 52.174 us."""
    s = a100_system(8)
    big, small = 2.0**34, 32768.0
    t_big = 1.75 * big / 234.9e9
    t_small = 1.75 * small / 1.31e9
    assert intra_time_s(s, "all_reduce", big, 8) == pytest.approx(t_big, rel=1e-9)
    fast = s.scaled(intra_bw=2.0)
    assert intra_time_s(fast, "all_reduce", big, 8) == pytest.approx(8.4e-6 + (t_big - 8.4e-6) / 2, rel=1e-9)
    assert intra_time_s(fast, "all_reduce", small, 8) == pytest.approx(8.4e-6 + (t_small - 8.4e-6) / 2, rel=1e-9)
    assert intra_time_s(fast, "all_reduce", small, 8) == pytest.approx(26.087e-6, rel=1e-4)
    slow = s.scaled(latency=2.0)
    assert intra_time_s(slow, "all_reduce", small, 8) == pytest.approx(t_small + 8.4e-6, rel=1e-9)
    assert intra_time_s(slow, "all_reduce", small, 8) == pytest.approx(52.174e-6, rel=1e-4)
    # the scale-out level does not move with NVLink, nor NVLink with the NICs
    assert fast.levels[1] == s.levels[1]
    assert s.scaled(inter_bw=2.0).levels[0] == s.levels[0]


@pytest.mark.parametrize("acc", ["a100-sxm4-80gb", "a100-sxm4-40gb", "mi300x", "h100-sxm5-80gb"])
def test_doubling_nvlink_halves_the_tp_term_where_a_curve_exists(acc: str) -> None:
    """GPT-3 175B, tp 8 pp 8 dp 16: the tp all-reduces are large (bandwidth bound), so twice the
    scale-up bandwidth takes their time to about half (A100 80GB: 2.574 s -> 1.312 s)."""
    plan = perfmodel.ParallelPlan(tp=8, pp=8, dp=16, global_batch=1536)
    system, _ = resolve_system(acc, None, plan.world)
    assert system.levels[0].curves, acc  # the case that used to be a no-op
    base = perfmodel.estimate("gpt3-175b", system, plan)
    fast = perfmodel.estimate("gpt3-175b", system.scaled(intra_bw=2.0), plan)
    tp0, tp1 = base.breakdown_s["tp_ep_cp_comm_s"], fast.breakdown_s["tp_ep_cp_comm_s"]
    assert tp0 > 0.05 * base.step_time_s
    assert 0.5 * tp0 < tp1 < 0.55 * tp0
    # the step gains at least the tp saving (the pipeline bubble, made of the same stage time, shrinks too)
    assert fast.step_time_s <= base.step_time_s - (tp0 - tp1) * (1 - 1e-9)
    assert "what-if hardware: intra_bw x2" in fast.messages


REFERENCE = sorted(a.id for a in load_catalog().accelerators.values() if a.reference_node)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("acc", REFERENCE)
def test_each_key_moves_the_step_on_every_reference_node(acc: str, overlap: bool) -> None:
    """llama3-8b (gpt2-124m on the host CPU) in the part's widest-supported 16-bit format (on a CPU the faster of
    it and fp32), tp inside the scale-up domain, dp across two
    domains (one where the node has no NICs), DP communication overlapped or not.
    The term a key feeds is the part of the step that goes when the resource is made 1000x better.
    Whenever it is over 1 % of the step, a better resource (x2; latency x0.5) makes the step
    strictly faster and a worse one (x0.5; latency x2) strictly slower; every key moves it the
    right way or not at all. The terms are there: FLOP/s and NVLink (tp) always feed
    over 1 % here, the NICs do wherever the whole gradient crosses them. HBM capacity scales the
    capacity exactly."""
    probe, _ = resolve_system(acc, None, 1)
    domain = probe.domain_size
    tp = min(8, domain)
    world = 2 * domain if len(probe.levels) > 1 else domain
    # two micro-batches of 4 x 4096 tokens: a loaded step, not one bound by the host issuing kernels
    # (a host-bound step rightly ignores FLOP/s; at 2 x 4096 a Rubin GPU's kernels already finish
    # before the host has issued the next ones)
    precision = next(p for p in ("bf16", "fp16", "fp32") if p in probe.accelerator.supported_precisions)
    cal = probe.accelerator.calibration.gemm_max_achievable
    if probe.accelerator.kind == "cpu" and "fp32" in cal and precision in cal:
        # a CPU without bf16 instructions (Zen 3) runs bf16 GEMMs ~30x slower than fp32: train in its faster
        # format, or the step is all GEMM and the keys this test needs feed under 1 % of it
        precision = max((precision, "fp32"), key=lambda p: cal[p].si("flop_per_s"))
    plan = perfmodel.ParallelPlan(tp=tp, dp=world // tp, micro_batch=4, global_batch=8 * (world // tp), seq_len=4096,
                                  overlap_dp_comm=overlap, overlap_fsdp_prefetch=overlap, precision=precision)
    system, _ = resolve_system(acc, None, world)
    workload = "gpt2-124m" if probe.accelerator.kind == "cpu" else "llama3-8b"
    base = perfmodel.estimate(workload, system, plan)
    exercised = []
    for key in SCALE_KEYS:
        if key == "hbm_capacity":
            bigger = perfmodel.estimate(workload, system.scaled(hbm_capacity=2.0), plan)
            assert bigger.hbm_bytes == pytest.approx(2 * base.hbm_bytes, rel=1e-9)
            assert bigger.step_time_s == base.step_time_s
            continue
        better, worse, best = (0.5, 2.0, 1e-3) if key == "latency" else (2.0, 0.5, 1e3)
        fed = base.step_time_s - perfmodel.estimate(workload, system.scaled(**{key: best}), plan).step_time_s
        t_better = perfmodel.estimate(workload, system.scaled(**{key: better}), plan).step_time_s
        t_worse = perfmodel.estimate(workload, system.scaled(**{key: worse}), plan).step_time_s
        assert t_better <= base.step_time_s * (1 + 1e-12) <= t_worse * (1 + 1e-12), key
        if fed > 0.01 * base.step_time_s:
            exercised.append(key)
            assert t_better < base.step_time_s * (1 - 1e-6), (key, fed, base.step_time_s)
            assert t_worse > base.step_time_s * (1 + 1e-6), key
    assert "flops" in exercised
    if tp > 1 and probe.accelerator.kind != "cpu":
        # on a CPU the gloo tp share follows the host's GEMM speed (under 1 % of the step on Zen 3)
        assert "intra_bw" in exercised
        assert base.breakdown_s["tp_ep_cp_comm_s"] > 0.01 * base.step_time_s  # what intra_bw feeds
    if not overlap and len(system.levels) > 1 and domain <= 72:
        # the whole gradient all-reduce crosses the NICs (on a TPU pod the ICI ring is the slower part)
        assert "inter_bw" in exercised


def test_cli_scale_runs_and_rejects_bad_input(capsys) -> None:
    args = ["estimate", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "16", "--global-batch", "1536", "--json"]
    assert main(args) == 0
    import json

    base = json.loads(capsys.readouterr().out)
    assert main([*args, "--scale", "intra_bw=2", "--scale", "flops=1.5"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["step_time_s"] < base["step_time_s"]
    assert fast["breakdown_s"]["tp_ep_cp_comm_s"] < 0.55 * base["breakdown_s"]["tp_ep_cp_comm_s"]
    assert "what-if hardware: flops x1.5, intra_bw x2" in fast["messages"]
    for bad, expected in (("nvlink=2", "unknown scale key 'nvlink'; allowed: flops, hbm_bw, intra_bw, inter_bw, "
                                        "latency, hbm_capacity"),
                          ("flops=0", "outside [0.001, 1000]"), ("flops=inf", "outside [0.001, 1000]"),
                          ("flops=x", "FACTOR a number"), ("flops", "expected KEY=FACTOR")):
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--scale", bad])
        assert exit_.value.code == 2
        # with --json the error is a JSON object on stdout (issue 13 item 8)
        assert expected in json.loads(capsys.readouterr().out)["error"]["message"], bad
    assert main([*args, "--scale", "flops=2", "--scale", "flops=3"]) == 2
    assert "--scale names flops more than once" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_library_rejects_bad_factors(a100_system) -> None:
    s = a100_system(8)
    for bad in (0.0, -1.0, float("nan"), float("inf"), 1e6):
        with pytest.raises(ValueError, match=r"outside \[0.001, 1000\]"):
            s.scaled(flops=bad)
    assert s.scaled() is s


@pytest.mark.parametrize("acc", REFERENCE)
def test_scaling_keeps_the_gemm_fill_and_drain_time(acc: str) -> None:
    """t0 is fitted as measured minus ideal time on the measured GEMM shapes. Scaling those rates by
    the FLOP factor alone used to move the fit: 2x HBM took A100's t0 from 12.58 us to 13.50 us
    (the ideal time fell, the measured one did not), so a step of small GEMMs got slower with more
    bandwidth. The what-if keeps the original's t0 whatever it scales."""
    system, _ = resolve_system(acc, None, 1)
    t0 = gemm_fixed_s(system.accelerator)
    for key in ("flops", "hbm_bw"):
        for f in (0.5, 2.0, 10.0):
            scaled = system.scaled(**{key: f}).accelerator
            assert gemm_fixed_s(scaled) == pytest.approx(t0, rel=1e-8), (key, f)
    precision = next(p for p in ("bf16", "fp16", "fp32") if p in system.accelerator.supported_precisions)
    plan = perfmodel.ParallelPlan(micro_batch=4, global_batch=4, precision=precision)
    base = perfmodel.estimate("mlp-mnist", system, plan).step_time_s
    for key in ("flops", "hbm_bw"):
        assert perfmodel.estimate("mlp-mnist", system.scaled(**{key: 2.0}), plan).step_time_s <= base * (1 + 1e-12)
