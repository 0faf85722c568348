"""Megatron-Core's pipeline split (parallel/split.py) against layer assignments worked out by
hand from Megatron-Core's rule (transformer_block.get_num_layers_to_build and
get_transformer_layer_offset): chunk c of rank s is virtual stage c·pp + s; with the embedding
and the loss counted as layers, every chunk holds (L + 2)/(pp·vp) units and the first and last
chunk one transformer layer fewer; with decoder_first/last_pipeline_num_layers the middle ranks
hold (L - first - last)/(pp - 2) each, every count a multiple of vp."""

from __future__ import annotations

import pytest

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.engines.stages import plan_graph
from perfmodel.errors import LayoutError
from perfmodel.parallel.split import pipeline_split, splittable, stage_layers


def megatron_offset(L: int, pp: int, vp: int, s: int, c: int, emb: bool, loss: bool) -> tuple[int, int]:
    """(first layer, layer count) of chunk c on rank s, Megatron-Core's formulas written out:
    units = L + emb + loss; per chunk = units/(pp·vp); offset = c·units/vp + s·per chunk - emb
    (except on the very first chunk); count = per chunk - emb on the first chunk - loss on the last."""
    units = L + emb + loss
    per = units // (pp * vp)
    first_chunk, last_chunk = (s == 0 and c == 0), (s == pp - 1 and c == vp - 1)
    offset = c * units // vp + s * per - (emb and not first_chunk)
    count = per - (emb and first_chunk) - (loss and last_chunk)
    return offset, count


@pytest.mark.parametrize(("L", "pp", "vp", "emb", "loss"), [
    (126, 16, 8, True, True),   # Llama 3.1 405B on pp 16 x vp 8: 128 units, 1 per chunk
    (126, 8, 8, True, True),
    (30, 4, 1, True, True),
    (30, 4, 2, True, True),
    (31, 2, 1, False, True),
    (95, 4, 3, False, True),
    (96, 8, 3, False, False),
    (80, 8, 5, False, False),
])
def test_chunk_layers_match_megatron_offsets(L: int, pp: int, vp: int, emb: bool, loss: bool) -> None:
    split = pipeline_split(L, pp, vp)
    assert split.rule == {(True, True): "embedding+loss", (False, True): "loss", (False, False): "even"}[(emb, loss)]
    start = 0
    for c in range(vp):
        for s in range(pp):
            _, count = megatron_offset(L, pp, vp, s, c, emb, loss)
            assert split.chunk_layers[c * pp + s] == count, (s, c)
    # layers are laid out in virtual-stage order: the offsets are the running sums
    for vs in range(pp * vp):
        c, s = divmod(vs, pp)
        assert start == megatron_offset(L, pp, vp, s, c, emb, loss)[0], (s, c)
        start += split.chunk_layers[vs]
    assert start == L


def test_405b_on_pp16_vp8_by_hand() -> None:
    """126 layers + embedding + loss = 128 units over 128 chunks: rank 0 and rank 15 hold 7
    transformer layers (one chunk is only the embedding / only the loss), the others 8."""
    split = pipeline_split(126, 16, 8)
    assert [split.rank_layers(s) for s in range(16)] == [7] + [8] * 14 + [7]
    assert split.chunk_layers[0] == 0 and split.chunk_layers[-1] == 0
    assert "embedding and the loss" in (split.note or "")


@pytest.mark.parametrize(("L", "pp", "vp", "ranks"), [
    (61, 8, 1, [7, 8, 8, 8, 8, 8, 8, 6]),     # DeepSeek-V3's 61 layers: 60 + 2, 61 + 1 no multiple of 8
    (80, 7, 1, [10, 12, 12, 12, 12, 12, 10]),
    (40, 3, 4, [12, 16, 12]),
    (10, 8, 1, [2, 1, 1, 1, 1, 1, 1, 2]),
    (80, 8, 4, [4, 12, 12, 12, 12, 12, 12, 4]),
])
def test_uneven_first_last_stages(L: int, pp: int, vp: int, ranks: list[int]) -> None:
    """decoder_first/last_pipeline_num_layers: Megatron asserts (L - first - last) % (pp - 2) == 0
    and every rank's count a multiple of vp; the slowest rank is as small as that allows."""
    split = pipeline_split(L, pp, vp)
    assert split.rule == "first/last"
    got = [split.rank_layers(s) for s in range(pp)]
    assert got == ranks
    assert all(n % vp == 0 for n in got) and len(set(got[1:-1])) <= 1
    assert max(got) == min(max(n, f, la) for n in range(vp, L + 1, vp) for f in range(0, L + 1, vp)
                           for la in range(0, L + 1, vp) if (pp - 2) * n + f + la == L)
    assert "decoder_first_pipeline_num_layers" in (split.note or "")


def test_no_automatic_rule_falls_back_to_the_most_even_layout_and_says_so() -> None:
    # 30 layers over pp 3 x vp 4 = 12 chunks: 30 = 12 x 2 + 6, the 6 extra layers on the chunks
    # farthest from the ends (chunks 3..8), the first and last chunks lighter
    split = pipeline_split(30, 3, 4)
    assert split.rule == "balanced" and not splittable(30, 3, 4) and splittable(30, 3, 5)
    assert split.chunk_layers == (2, 2, 2, 3, 3, 3, 3, 3, 3, 2, 2, 2) and sum(split.chunk_layers) == 30
    assert "pipeline_model_parallel_layout" in (split.note or "")
    # DeepSeek-V3: 61 layers over pp 16 x vp 2, measured by NVIDIA with an explicit layout
    ds = pipeline_split(61, 16, 2)
    assert ds.rule == "balanced" and sum(ds.chunk_layers) == 61 and ds.chunk_layers[0] == ds.chunk_layers[-1] == 1
    with pytest.raises(LayoutError, match="model chunks > 61 layers"):
        pipeline_split(61, 16, 4)


def test_uneven_split_shows_in_estimate_and_message() -> None:
    """Llama 3.1 405B (126 layers) on pp 16 x vp 8: the plan says how it was split, and the
    first and last ranks (7 layers + embedding / loss) differ from the middle ones (8 layers)."""
    spec = perfmodel.get_workload("llama3-405b")
    assert spec.num_layers == 126
    plan = ParallelPlan(tp=8, pp=16, vp=8, dp=1, global_batch=16)
    est = perfmodel.estimate(spec, "h100-sxm5-80gb", plan)
    assert any("126 layers over pp 16 x vp 8" in m and "embedding and the loss" in m for m in est.messages)
    t = est.stage_time_s
    assert len(t) == 16 and t[1] == pytest.approx(t[8], rel=1e-12)
    assert t[0] < t[1] and t[15] != t[1]
    graph = plan_graph(spec, plan)
    on_rank = {s: {layer.kind: n for layer, n in stage_layers(graph, 16, s, 8)} for s in (0, 8, 15)}
    assert on_rank[0] == {"embedding": 1.0, "transformer": 7.0}
    assert on_rank[8] == {"transformer": 8.0}
    assert on_rank[15] == {"transformer": 7.0, "head": 1.0}


def test_uneven_split_shows_in_des_timeline() -> None:
    """The DES timeline: rank 0's compute is busy for less than a middle rank's."""
    from perfmodel.engines.des import stream_utilisation

    spec = perfmodel.get_workload("llama3-405b")
    plan = ParallelPlan(tp=8, pp=16, vp=8, dp=1, global_batch=16)
    est = perfmodel.estimate(spec, "h100-sxm5-80gb", plan, engine="des")
    busy = {pid: u for (pid, tid), u in stream_utilisation(est.timeline).items() if tid == 0}
    assert busy[0] < busy[8]
