"""Which layers each pipeline stage (and each model chunk of it) holds: Megatron-Core's split.

Megatron-Core (`transformer_block.get_num_layers_to_build`, `get_transformer_layer_offset`) gives
each of the pp·vp model chunks the same number of transformer layers; virtual stage
vs = c·pp + s is chunk c of pipeline rank s, and layers are laid out in virtual-stage order
(rank 0 holds layers [0, L/(pp·vp)) and [L/vp, L/vp + L/(pp·vp)), ...). The embedding sits on
virtual stage 0, the output layer and loss on the last one. When pp·vp does not divide the
L layers, Megatron offers three ways to split, tried here in this order:

1. `account_for_embedding_in_pipeline_split` and `account_for_loss_in_pipeline_split`: the
   embedding and the loss count as a layer each, so L + 2 must be a multiple of pp·vp; every
   chunk holds (L + 2)/(pp·vp) units and the first and last chunks one transformer layer fewer
   (126 layers over pp 16 x vp 8: 128 units, 1 per chunk, first and last chunks 0 layers).
2. `account_for_loss_in_pipeline_split` alone: L + 1 a multiple of pp·vp, the last chunk one
   layer fewer (the output GEMM and loss weigh more than the embedding lookup, so the loss is
   the one counted).
3. `decoder_first_pipeline_num_layers` / `decoder_last_pipeline_num_layers`: the first and last
   ranks take `first` and `last` layers, the pp - 2 others n each, (pp - 2)·n + first + last = L,
   every count a multiple of vp (Megatron asserts it). Chosen here: the smallest slowest stage
   max(n, first, last), then the fewest layers on the first and last ranks (they also hold the
   embedding and the loss), then last <= first.
4. None of these fits (e.g. DeepSeek-V3's 61 layers over pp 16 x vp 2): Megatron-Core then needs
   an explicit `pipeline_model_parallel_layout`, which the runs contract cannot state. The split
   assumed is the most even one, base = L // (pp·vp) layers per chunk and the L mod (pp·vp)
   extra layers on the chunks farthest from the ends (the first and last chunks also hold the
   embedding and the loss, so they stay lighter), and the note says so. `splittable` tells
   Megatron's three automatic rules from this fallback; the planner enumerates only those.
More chunks than layers + 2 is a LayoutError.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from perfmodel.errors import LayoutError
from perfmodel.workload.graph import Graph, Layer

EDGE_KINDS = ("embedding", "head")


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """Transformer (body) layers per virtual stage vs = c·pp + s, and the rule that gave them."""

    num_layers: int
    pp: int
    vp: int
    chunk_layers: tuple[int, ...]
    rule: str  # "even", "embedding+loss", "loss", "first/last", "balanced"

    def rank_layers(self, stage: int) -> int:
        return sum(self.chunk_layers[c * self.pp + stage] for c in range(self.vp))

    @property
    def note(self) -> str | None:
        """What a user should be told about an uneven split (None when even)."""
        return _note(self)


@lru_cache(maxsize=4096)
def _note(split: PipelineSplit) -> str | None:
    """The note of an uneven split, made once per split."""
    chunks = split.pp * split.vp
    head = f"{split.num_layers} layers over pp {split.pp} x vp {split.vp} = {chunks} model chunks is uneven: "
    per_rank = [split.rank_layers(s) for s in range(split.pp)]
    if split.rule == "embedding+loss":
        return head + ("Megatron's split counting the embedding and the loss as a layer each "
                       f"(account_for_embedding/loss_in_pipeline_split): {_layers(max(split.chunk_layers))} per chunk, "
                       f"the first and last chunks {max(split.chunk_layers) - 1}; layers per stage {_runs(per_rank)}")
    if split.rule == "loss":
        return head + ("Megatron's split counting the loss as a layer (account_for_loss_in_pipeline_split): "
                       f"the last chunk holds one layer fewer; layers per stage {_runs(per_rank)}")
    if split.rule == "balanced":
        return head + ("none of Megatron-Core's automatic splits fits (layer counts not a multiple of vp), so it needs an "
                       "explicit pipeline_model_parallel_layout; assumed the most even one, the first and last chunks lighter: "
                       f"layers per chunk {_runs(list(split.chunk_layers))}, per stage {_runs(per_rank)}")
    if split.rule == "first/last":
        return head + (f"Megatron's uneven first/last stages (decoder_first_pipeline_num_layers {per_rank[0]}, "
                       f"decoder_last_pipeline_num_layers {per_rank[-1]}); layers per stage {_runs(per_rank)}")
    return None


def _layers(n: int) -> str:
    return f"{n} layer" + ("" if n == 1 else "s")


def _runs(xs: list[int]) -> str:
    """'7, 8 x 2, 7' for [7, 8, 8, 7]."""
    out: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j < len(xs) and xs[j] == xs[i]:
            j += 1
        out.append(f"{xs[i]}" + (f" x {j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(out)


@lru_cache(maxsize=4096)
def pipeline_split(num_layers: int, pp: int, vp: int = 1) -> PipelineSplit:
    """Megatron-Core's layer count per model chunk (see the module docstring)."""
    chunks = pp * vp
    if chunks > num_layers + (2 if pp > 1 else 0):
        raise LayoutError(f"pp {pp} x vp {vp} = {chunks} model chunks > {num_layers} layers"
                          + (" + 2 (embedding and loss counted as layers)" if pp > 1 else ""))
    if num_layers % chunks == 0:
        return PipelineSplit(num_layers, pp, vp, (num_layers // chunks,) * chunks, "even")
    if pp > 1 and (num_layers + 2) % chunks == 0:
        per = (num_layers + 2) // chunks
        counts = [per] * chunks
        counts[0] -= 1
        counts[-1] -= 1
        return PipelineSplit(num_layers, pp, vp, tuple(counts), "embedding+loss")
    if pp > 1 and (num_layers + 1) % chunks == 0:
        counts = [(num_layers + 1) // chunks] * chunks
        counts[-1] -= 1
        return PipelineSplit(num_layers, pp, vp, tuple(counts), "loss")
    ranks = _first_last(num_layers, pp, vp)
    if ranks is None:
        return PipelineSplit(num_layers, pp, vp, _balanced(num_layers, chunks), "balanced")
    counts = [ranks[s] // vp for _c in range(vp) for s in range(pp)]
    return PipelineSplit(num_layers, pp, vp, tuple(counts), "first/last")


def _balanced(num_layers: int, chunks: int) -> tuple[int, ...]:
    """The most even split: L // chunks per chunk, the remainder on the chunks farthest from the ends."""
    base, extra = divmod(num_layers, chunks)
    counts = [base] * chunks
    for i in sorted(range(chunks), key=lambda i: (-min(i, chunks - 1 - i), i))[:extra]:
        counts[i] += 1
    return tuple(counts)


def _first_last(num_layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Layers per rank under decoder_first/last_pipeline_num_layers, or None if none fits."""
    best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
    middle = pp - 2
    for n in range(vp, num_layers + 1, vp) if middle > 0 else (0,):
        rest = num_layers - middle * n
        if rest < 0:
            break
        if rest % vp:
            continue
        for last in range(0, rest // 2 + 1, vp):
            first = rest - last
            key = (max(n, first, last), first + last, first - last)
            if best is None or key < best[0]:
                best = (key, (first, *([n] * middle), last))
    return None if best is None else best[1]


def splittable(num_layers: int, pp: int, vp: int) -> bool:
    """Whether one of Megatron-Core's automatic rules (1-3 of the module docstring) splits the layers."""
    chunks = pp * vp
    if chunks > num_layers + 2:
        return False
    if any((num_layers + extra) % chunks == 0 for extra in ((0, 1, 2) if pp > 1 else (0,))):
        return True
    return _first_last(num_layers, pp, vp) is not None


def body_layer_count(graph: Graph) -> int:
    return sum(layer.count for layer in graph.layers if layer.kind not in EDGE_KINDS)


def graph_split(graph: Graph, pp: int, vp: int = 1) -> PipelineSplit:
    return pipeline_split(body_layer_count(graph), pp, vp)


def chunk_layers(graph: Graph, pp: int, vp: int, vstage: int) -> list[tuple[Layer, float]]:
    """(layer, instances) on virtual stage `vstage` = chunk·pp + rank: its share of the body
    layers in order, the embedding on virtual stage 0 and the head on the last."""
    split = graph_split(graph, pp, vp)
    lo = sum(split.chunk_layers[:vstage])
    hi = lo + split.chunk_layers[vstage]
    last = pp * vp - 1
    out: list[tuple[Layer, float]] = []
    pos = 0
    for layer in graph.layers:
        if layer.kind == "embedding":
            if vstage == 0:
                out.append((layer, 1.0))
            continue
        if layer.kind == "head":
            if vstage == last:
                out.append((layer, 1.0))
            continue
        a, b = max(lo, pos), min(hi, pos + layer.count)
        if b > a:
            out.append((layer, float(b - a)))
        pos += layer.count
    return out


def stage_layers(graph: Graph, pp: int, stage: int, vp: int = 1, schedule: str = "1f1b") -> list[tuple[Layer, float]]:
    """(layer, instances) on pipeline rank `stage`, over all the model chunks it holds: Megatron's
    c·pp + stage, or what `schedule` places there (DualPipe: stages `stage` and pp − 1 − stage)."""
    from perfmodel.parallel.schedules import rank_chunks

    out: dict[int, tuple[Layer, float]] = {}
    for vs in rank_chunks(schedule, pp, vp, stage):
        for layer, n in chunk_layers(graph, pp, vp, vs):
            prev = out.get(id(layer))
            out[id(layer)] = (layer, n + (prev[1] if prev else 0.0))
    order = {id(layer): i for i, layer in enumerate(graph.layers)}
    return sorted(out.values(), key=lambda ln: order[id(ln[0])])


__all__ = ["PipelineSplit", "body_layer_count", "chunk_layers", "graph_split", "pipeline_split", "splittable", "stage_layers"]
