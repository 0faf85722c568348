"""LatentMoE: the routed experts work at a latent width l < h (NVIDIA, "LatentMoE: Toward Optimal
Accuracy per FLOP and Parameter in Mixture of Experts", 2026; Nemotron 3 Super and Ultra).

As Megatron-Core's MoELayer runs it (megatron/core/transformer/moe/moe_layer.py, config field
`moe_latent_size`, HF NemotronH `moe_latent_size`):
    router            on the full hidden state, [T, h] x [h, E] (unchanged)
    fc1_latent_proj   [T, h] x [h, l], before the dispatcher: permutation, dispatch all-to-all,
                      grouped expert GEMMs ([m, l] x [l, f], [m, f] x [f, l]), combine all-to-all
                      and un-permutation all move l-wide rows instead of h-wide ones
    fc2_latent_proj   [T, l] x [l, h], after the combine
    shared expert     on the full hidden state, its output added after fc2_latent_proj
Both projections are `parallel_mode="duplicated"` TELinear: every tensor-parallel rank holds the
whole [h, l] weight and applies it to its own sequence-parallel shard of T/tp tokens, so they add
2·h·l parameters per MoE layer (not divided by tp) and 2 x 2·(T/tp)·h·l forward FLOPs per rank.

Per routed token copy the expert FLOPs and the all-to-all bytes scale with l / h; for Nemotron 3
Super (h 4096, l 1024) a quarter of a standard MoE of the same expert width.
"""

from __future__ import annotations

from perfmodel import precision as registry
from perfmodel.workload.graph import ACT_BYTES, Op
from perfmodel.workload.spec import ModelSpec


def _projection(name: str, tokens: int, n: int, k: int, precision: str) -> Op:
    """A duplicated (not tp-sharded) linear [tokens, k] x [k, n]; saves its input for wgrad."""
    el = registry.get(precision).weight_bytes
    return Op(name=name, kind="gemm", flop=2.0 * tokens * n * k,
              bytes=tokens * k * ACT_BYTES + tokens * n * ACT_BYTES + k * n * el, m=tokens, n=n, k=k,
              precision=precision, weight_params=float(k * n), saved_bytes=tokens * k * ACT_BYTES,
              kernels=1, bwd_kernels=2)


def latent_params(spec: ModelSpec) -> float:
    """Parameters of the two latent projections of one MoE layer: 2·h·l (0 without LatentMoE)."""
    lat = spec.moe_latent_size
    return 0.0 if lat is None else 2.0 * spec.hidden * lat


def latent_projections(spec: ModelSpec, tokens: int, precision: str) -> tuple[list[Op], list[Op], float]:
    """(down-projection ops, up-projection ops, parameters on this rank) for `tokens` routed on
    this rank; empty and 0 when the model has no latent MoE."""
    lat = spec.moe_latent_size
    if lat is None:
        return [], [], 0.0
    h = spec.hidden
    down = _projection("moe_latent_down", tokens, lat, h, precision)
    up = _projection("moe_latent_up", tokens, h, lat, precision)
    return [down], [up], latent_params(spec)


__all__ = ["latent_params", "latent_projections"]
