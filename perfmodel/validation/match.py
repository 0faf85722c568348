"""Which catalogue workload a runs-file row means when its `model` cell is not a workload id.

The runs format states a transformer in a dozen columns, and some published models do not fit
them: Qwen3-30B-A3B has 32 heads of 128 on a hidden of 2048 (attention 4096 wide, not 2048),
gpt-oss-120b alternates 128-token sliding-window layers with full ones. Built from its columns
alone such a row under-counts attention, silently. Two ways to the catalogue's published
configuration, each named in the row's message:

* by name: `Qwen3-30B-A3B`, `Qwen/Qwen3-30B-A3B` and `qwen3_30b_a3b` all mean the workload
  `qwen3-30b-a3b`, `meta-llama/Meta-Llama-3.1-8B-Instruct` means `llama3.1-8b` (case, separators,
  an `org/` prefix, a bracketed note such as `(FP8)` and checkpoint suffixes do not matter; a name
  two workloads answer to matches none);
* by architecture: the row gives at least layers, hidden, heads and vocab, every architecture
  column it gives equals one workload's, and that workload has structure the columns cannot
  state (a head width other than hidden / heads, local-attention layers, MLA, ...). A row whose
  columns say all there is keeps the model its columns build.
"""

from __future__ import annotations

import re

from perfmodel.names import spelling_without_notes
from perfmodel.workload.spec import ModelSpec

# what a row must give before its columns identify a published model
FINGERPRINT = ("num_layers", "hidden", "num_heads", "vocab")
# ModelSpec fields that say what a model is called or where it was read, not what it computes
_NAMING = {"id", "name", "aliases", "source", "notes", "published_params", "seq_len"}


# words a published checkpoint's name adds to the architecture's: the same network trains alike.
# A version is dropped only when it is a checkpoint revision, v0.x (Mixtral-8x7B-v0.1): V2, V3, and
# dotted ones such as V2.5 or V3.2 name a network of their own (DeepSeek-V2 is not DeepSeek-V3, and
# DeepSeek-V3.2 adds sparse attention to V3; read as 'DeepSeek' they matched DeepSeek-V2.5's alias)
# a checkpoint's weight format (-BF16, -FP8) and trained context (-8K, -128k) name the same network too
_VARIANT = re.compile(r"(-(hf|base|instruct|chat|it|v0(\.\d+)+|\d{4}|bf16|fp8|nvfp4|fp4|\d+k))+$")


def _key(name: str) -> str:
    """`name` reduced to what identifies an architecture: the part after an `org/` prefix, lower
    case, without bracketed notes, the publisher's own prefix (`meta-`, `nvidia-`) or checkpoint
    suffixes (-hf, -base, -instruct, -chat, -it, a revision -v0.1, a release date -2507, a
    weight format -bf16 / -fp8, a context -8k), and without separators:
    'meta-llama/Meta-Llama-3.1-8B-Instruct' -> 'llama3.18b',
    'nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16' -> 'nemotron3nano30ba3b'. The notes go before the
    org prefix is cut, so a '/' inside one ('DeepSeekV3 (w/o MTP)') is no org."""
    key = spelling_without_notes(spelling_without_notes(name).rsplit("/", 1)[-1])
    key = _VARIANT.sub("", key.removeprefix("meta-").removeprefix("nvidia-"))
    return re.sub(r"[^a-z0-9.]", "", key)


def by_name(model: str, workloads: dict[str, ModelSpec]) -> ModelSpec | None:
    """The workload whose id, name or an alias is `model` up to case, separators, an `org/` prefix
    and checkpoint suffixes (_key); None when none is, or when several different networks are.
    A name that only resolves with its bracket's words kept is tried second: 'GPT-3 (175B)'."""
    for key in (_key(model), _key(model.replace("(", " ").replace(")", " "))):
        hits = sorted((s for s in workloads.values() if key in (_key(s.id), _key(s.name), *map(_key, s.aliases))),
                      key=lambda s: s.id)
        if hits:
            # two ids for one network (llama3-405b and llama3.1-405b) are one answer
            return hits[0] if all(_network(h) == _network(hits[0]) for h in hits) else None
    return None


def _network(spec: ModelSpec) -> dict[str, object]:
    return {k: v for k, v in spec.model_dump().items() if k not in _NAMING}


def _all_ffn_are_experts(spec: ModelSpec) -> bool:
    """True when no layer has a dense FFN, so a row's ffn_hidden describes nothing that runs."""
    return spec.family == "moe" and spec.first_dense_layers == 0 and spec.moe_layer_freq == 1


def _agrees(spec: ModelSpec, sizes: dict[str, int], family: str, activation: str) -> bool:
    if spec.family != family or spec.activation != activation:
        return False
    for field, value in sizes.items():
        if field == "seq_len" or (field == "ffn_hidden" and _all_ffn_are_experts(spec)):
            continue
        if (spec.dhead if field == "head_dim" else getattr(spec, field)) != value:
            return False
    # a column left empty means its default: MHA, no shared expert
    return ("num_kv_heads" in sizes or spec.kv_heads == spec.num_heads) and \
        ("num_shared_experts" in sizes or spec.num_shared_experts == 0)


def unstated(built: ModelSpec, published: ModelSpec, columns: set[str]) -> dict[str, object]:
    """The published model's values where it differs from `built` in a field no column sets."""
    skip = _NAMING | columns | {"head_dim"}
    a, b = built.model_dump(), published.model_dump()
    out = {k: b[k] for k in b if k not in skip and a.get(k) != b[k]}
    if built.dhead != published.dhead:
        out["head_dim"] = published.dhead
    return out


def by_architecture(built: ModelSpec, sizes: dict[str, int], workloads: dict[str, ModelSpec],
                    columns: set[str]) -> tuple[ModelSpec, dict[str, object]] | None:
    """(workload, what it adds) when `sizes` (the row's given columns) identify exactly one
    workload that has structure the columns cannot state; else None."""
    if any(f not in sizes for f in FINGERPRINT):
        return None
    hits = [s for s in workloads.values() if _agrees(s, sizes, built.family, built.activation)]
    if len(hits) != 1:
        return None
    extra = unstated(built, hits[0], columns)
    return (hits[0], extra) if extra else None
