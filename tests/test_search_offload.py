"""Layout search with activation offloading (SearchSpace.offload_activations, `search --offload`):
a layout that does not fit gets the fewest offloaded layers that fit, where Megatron-Core would
offload, and exactly the analytic engine's step and memory under them."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel.cli import main
from perfmodel.memory import peak_memory
from perfmodel.planning.search import layout_label, row_plan, search
from perfmodel.planning.space import SearchSpace

# Llama-3-8B, 8 x H100 (PCIe Gen5 host link), 8k tokens, no recompute: the larger micro-batches
# do not fit in 80 GB without recompute or offloading
SPACE = dict(recompute=("none",), micro_batch=(1, 2, 4), zero_stage=(1, 3), vp=(1,))
ARGS = dict(n_gpus=8, global_batch=32, seq_len=8192, precision="bf16", calibration="none")


@pytest.fixture(scope="module")
def both():
    off = search("llama3-8b", "dgx-h100", space=SearchSpace(**SPACE), **ARGS)
    on = search("llama3-8b", "dgx-h100", space=SearchSpace(**SPACE, offload_activations=True), **ARGS)
    return off, on


def test_offloading_adds_layouts_and_leaves_the_others_alone(both):
    off, on = both
    assert (off.table["offload_activations"] == 0).all()
    kept = on.table[on.table["offload_activations"] == 0]
    cols = ["dp", "tp", "pp", "cp", "zero_stage", "micro_batch", "sequence_parallel", "step_time_s", "memory_bytes"]
    key = ["dp", "tp", "pp", "cp", "zero_stage", "micro_batch", "sequence_parallel"]
    assert kept[cols].sort_values(key).reset_index(drop=True).equals(off.table[cols].sort_values(key).reset_index(drop=True))
    assert len(on.table) > len(off.table)


def test_offloaded_rows_are_the_engines_numbers_with_the_fewest_layers_that_fit(both):
    _, on = both
    rows = on.table[on.table["offload_activations"] > 0]
    assert len(rows) > 0
    hbm = on.system.accelerator.hbm_bytes
    spec = perfmodel.get_workload("llama3-8b")
    for i in rows.index[:6]:
        r = rows.loc[i]
        assert (r["pp"], r["recompute"]) == (1, "none")
        assert f"offload {r['offload_activations']}" in layout_label(r)
        est = on._estimate(int(i), "analytic")
        assert est.step_time_s == pytest.approx(r["step_time_s"], rel=1e-9)
        assert est.memory_per_gpu_bytes == pytest.approx(r["memory_bytes"], rel=1e-9)
        assert r["memory_bytes"] <= hbm
        # one layer fewer does not fit
        plan = row_plan(r, on.global_batch, on.seq_len, on.precision)
        fewer = plan.model_copy(update={"offload_activations": int(r["offload_activations"]) - 1})
        graph = perfmodel.engines.stages.plan_graph(spec, fewer)
        assert peak_memory(graph, fewer).total_bytes > hbm


def test_no_host_link_no_offloading(both):
    """DGX A100 names no host link (hardware_specs/nodes): the same 80 GB, the same layouts that
    do not fit, and none offloaded; a spec gap is not guessed over."""
    args = ARGS | {"precision": "bf16"}
    off = search("llama3-8b", "dgx-a100-80gb", space=SearchSpace(**SPACE), **args)
    on = search("llama3-8b", "dgx-a100-80gb", space=SearchSpace(**SPACE, offload_activations=True), **args)
    assert on.system.node.host_link is None
    assert len(on.table) == len(off.table) and (on.table["offload_activations"] == 0).all()
    assert on.n_layouts > len(on.table)  # some layouts did not fit, and stay out


def test_cli_offload_flag_prints_the_count(capsys):
    assert main(["search", "llama3-8b", "--hardware", "dgx-h100", "--n-gpus", "8", "--global-batch", "32",
                 "--seq-len", "8192", "--calibration", "none", "--offload", "--top", "200"]) == 0
    assert "offload " in capsys.readouterr().out
