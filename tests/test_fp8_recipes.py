"""Issue 14.8: the fp8 / fp4 recipe is a plan field, and each recipe charges the casts and amax
passes it implies (perfmodel/compute/fp8_recipes.py)."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.compute.fp8_recipes import RECIPES, gemm_cast_work, recipe_for
from perfmodel.compute.ops import launch_s, op_cost
from perfmodel.errors import LayoutError
from perfmodel.hardware.catalog import load_catalog
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.precision import PRECISIONS, recipe_names
from perfmodel.workload.graph import Op

N = 1024


def test_every_recipe_has_costs_and_a_precision():
    # each recipe runs exactly one precision (perfmodel/precision.py), and has its costs
    assert sorted(recipe_names()) == sorted(RECIPES)
    # the default (first) recipe per precision: Transformer Engine's delayed scaling for fp8
    defaults = {p.name: p.recipes[0] for p in PRECISIONS.values() if p.recipes}
    assert defaults == {"fp8": "delayed", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


@pytest.mark.parametrize(("name", "bytes_per_elem"), [
    ("delayed", 2 + 1),                 # read bf16, write e4m3; amax fused, scale from history
    ("current", 2 + 1 + 2),             # + a separate amax pass over the bf16 tensor
    ("blockwise", 2 + 1 + 4 / 128),     # + one fp32 scale per 1x128 block
    ("mxfp8", 2 + 1 + 1 / 32),          # + one E8M0 scale per 32 elements
    ("nvfp4", 2 + 0.5 + 1 / 16 + 2),    # 4-bit elements, E4M3 per 16, and the amax pass for the fp32 tensor scale
])
def test_cast_bytes_by_hand(name, bytes_per_elem):
    r = RECIPES[name]
    fwd = gemm_cast_work(r, N, N, N, 1, bwd=False)  # input [N, N] + weight [N, N]
    bwd = gemm_cast_work(r, N, N, N, 1, bwd=True)   # grad out twice + input again
    assert fwd.bytes == pytest.approx(bytes_per_elem * 2 * N * N)
    assert bwd.bytes == pytest.approx(bytes_per_elem * 3 * N * N)
    assert fwd.kernels == 2 * (2 if r.amax_pass else 1)
    # NVFP4's 16-point random Hadamard transform on the two wgrad operands: 32 FLOP per element
    assert bwd.flop == (32 * 2 * N * N if name == "nvfp4" else 0.0)
    assert fwd.flop == 0.0


def test_current_scaling_costs_one_more_pass_than_delayed():
    h100 = load_catalog().accelerator("h100-sxm5-80gb")
    op = Op("fc1", "gemm", flop=2.0 * 8192 * 4096 * 4096, bytes=0.0, m=8192, n=4096, k=4096, precision="fp8",
            weight_params=4096 * 4096)
    d, c = op_cost(h100, op, "fwd", "delayed"), op_cost(h100, op, "fwd", "current")
    extra = 2.0 * (8192 * 4096 + 4096 * 4096) / h100.elementwise_achieved_Bps + 2 * launch_s(h100)
    assert c.time_s - d.time_s == pytest.approx(extra, rel=1e-6)
    assert op_cost(h100, op, "fwd").time_s == d.time_s  # delayed is fp8's default
    # a bf16 GEMM pays no cast whatever recipe the plan names for its fp8 GEMMs
    bf = Op("fc1", "gemm", flop=op.flop, bytes=0.0, m=8192, n=4096, k=4096, weight_params=4096 * 4096)
    assert op_cost(h100, bf, "fwd", "current").time_s == op_cost(h100, bf, "fwd").time_s


def test_plan_defaults_and_mismatches():
    assert ParallelPlan(precision="fp8").fp8_recipe_name == "delayed"
    assert ParallelPlan(precision="mxfp8").fp8_recipe_name == "mxfp8"
    assert ParallelPlan(precision="nvfp4").fp8_recipe_name == "nvfp4"
    assert ParallelPlan(precision="bf16").fp8_recipe_name is None
    assert ParallelPlan(precision="fp8", fp8_recipe="current").fp8_recipe_name == "current"
    assert recipe_for("fp8", "current") is RECIPES["current"]
    expected = r"fp8_recipe 'mxfp8' runs precision mxfp8, not fp8; recipes for fp8: \['delayed', 'current', 'blockwise'\]"
    with pytest.raises(LayoutError, match=expected):
        ParallelPlan(precision="fp8", fp8_recipe="mxfp8")
    with pytest.raises(LayoutError, match="not bf16"):
        ParallelPlan(precision="bf16", fp8_recipe="delayed")


def test_recipe_moves_the_step_in_the_expected_order():
    base = dict(tp=8, global_batch=8, micro_batch=1)
    t = {r: perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", ParallelPlan(precision="fp8", fp8_recipe=r, **base)).step_time_s
         for r in ("delayed", "blockwise", "current")}
    assert t["delayed"] < t["blockwise"] < t["current"]
    # same fp8 GEMMs, mxfp8 writes its block scales too: more GPU time per step (delayed scaling
    # pays its amax all-reduces instead, latency-bound and outside the kernels)
    b200 = {r: perfmodel.estimate("llama3-8b", "b200", ParallelPlan(precision=p, **base)).breakdown_s
            for r, p in (("mxfp8", "mxfp8"), ("delayed", "fp8"))}
    gpu = {r: b["compute_fwd_s"] + b["compute_bwd_s"] for r, b in b200.items()}
    assert gpu["delayed"] < gpu["mxfp8"]


def test_cli_takes_the_recipe(capsys):
    import json

    from perfmodel.cli import main

    assert main(["estimate", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--n-gpus", "8", "--tp", "8",
                 "--global-batch", "8", "--precision", "fp8", "--fp8-recipe", "current", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["fp8_recipe"] == "current"


# ---------------------------------------------------------------- amax all-reduces across ranks
def test_sequence_parallel_amax_allreduces_by_hand():
    """Current scaling and NVFP4 all-reduce one fp32 amax over tp per quantized sequence-parallel
    all-gather: a dense layer gathers twice in the forward (QKV and FC1 inputs) and twice in the
    backward (out-proj and FC2 output gradients); latency-bound, nothing for the other recipes."""
    from perfmodel.comm.collectives import collective_time_s
    from perfmodel.engines.costs import sp_amax_allreduce_s
    from perfmodel.parallel.shard import sharded_graph
    from perfmodel.workload.catalog import get_workload

    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 8)[0]
    spec = get_workload("llama3-8b")
    g = sharded_graph(spec, seq_len=4096, tp=8, sp=True, precision="fp8")
    layer = next(x for x in g.layers if x.kind == "transformer")
    t = collective_time_s(system, "all_reduce", 4.0, 8, 1)
    assert t == pytest.approx(collective_time_s(system, "all_reduce", 64.0, 8, 1), rel=0.01)  # latency-bound
    plan = ParallelPlan(tp=8, sequence_parallel=True, precision="fp8", fp8_recipe="current")
    assert sp_amax_allreduce_s(system, plan, layer) == (2 * t, 2 * t)
    for r in ("delayed", "blockwise"):
        assert sp_amax_allreduce_s(system, plan.model_copy(update={"fp8_recipe": r}), layer) == (0.0, 0.0)
    head = next(x for x in g.layers if x.kind == "head")
    assert sp_amax_allreduce_s(system, plan, head) == (0.0, 0.0)  # the output layer runs outside fp8_autocast
    no_sp = next(x for x in sharded_graph(spec, seq_len=4096, tp=8, precision="fp8").layers if x.kind == "transformer")
    assert sp_amax_allreduce_s(system, plan.model_copy(update={"sequence_parallel": False}), no_sp) == (0.0, 0.0)
    bf16 = next(x for x in sharded_graph(spec, seq_len=4096, tp=8, sp=True).layers if x.kind == "transformer")
    assert sp_amax_allreduce_s(system, ParallelPlan(tp=8, sequence_parallel=True), bf16) == (0.0, 0.0)


def test_delayed_scaling_amax_allreduce_per_micro_batch_and_chunk_by_hand():
    """Delayed scaling: per micro-batch and model chunk one all-reduce of 3 fp32 amaxes per fp8
    GEMM (forward) and one of 2 per GEMM (backward) over tp·cp·dp; charged in optimizer_s."""
    from perfmodel.comm.collectives import collective_time_s
    from perfmodel.engines.stages import delayed_amax_s_per_micro_batch, fp8_gemms_per_chunk
    from perfmodel.parallel.shard import sharded_graph
    from perfmodel.workload.catalog import get_workload

    system = perfmodel.resolve_system("h100-sxm5-80gb", None, 64)[0]
    spec = get_workload("llama3-8b")  # 32 layers x (QKV, out-proj, FC1, FC2)
    plan = ParallelPlan(tp=4, pp=2, vp=2, dp=8, global_batch=64, micro_batch=1, precision="fp8")
    g = sharded_graph(spec, seq_len=2048, tp=4, precision="fp8")
    gemms = 32 * 4 / (2 * 2)
    assert fp8_gemms_per_chunk(g, plan) == gemms
    per_mb = 2 * (collective_time_s(system, "all_reduce", 4 * 3 * gemms, 32, 1)
                  + collective_time_s(system, "all_reduce", 4 * 2 * gemms, 32, 1))
    assert delayed_amax_s_per_micro_batch(system, plan, g) == pytest.approx(per_mb, rel=1e-12)
    for r in ("current", "blockwise"):
        assert delayed_amax_s_per_micro_batch(system, plan.model_copy(update={"fp8_recipe": r}), g) == 0.0
    # in the estimate: the optimizer term grows by num_micro_batches x that over a recipe without it
    est = {r: perfmodel.estimate("llama3-8b", "h100-sxm5-80gb", plan.model_copy(update={"fp8_recipe": r}),
                                 calibration="none")
           for r in ("delayed", "blockwise")}
    extra = est["delayed"].breakdown_s["optimizer_s"] - est["blockwise"].breakdown_s["optimizer_s"]
    assert extra == pytest.approx(plan.num_micro_batches * per_mb, rel=1e-9)
