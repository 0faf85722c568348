"""Megatron-Core's selective recompute by module (TransformerConfig.recompute_modules) on a layer.

`recompute = "selective"` reruns what ParallelPlan.selective_recompute names: torchtitan's per-op
policy ("op", workload/op_checkpoint.py) or a set of Megatron-Core modules, written comma-separated
("core_attn", the default; "layernorm,moe_act"; "mla_up_proj,mlp"). Megatron-LM @ d98e8a64
megatron/core/transformer/transformer_config.py:560-582 defines them; what each one does to a
layer of the builder (op names of workload/builder.py and moe.py):

  core_attn       normal checkpoint of the attention core: the ops marked Op.attn_core rerun
                  (engines/costs.layer_time's `core`); it frees the unfused kernel's s² terms
                  (memory.selective_dropped_bytes). A fused kernel's Q, K and V are the
                  checkpoint's input and stay.
  layernorm       output-discarding (CheckpointWithoutOutput): a norm that runs as its own kernel
                  drops its output once its consumers ran and reruns before their backward
                  (transformer_layer.py:475-530). Transformer Engine's layer specs fuse the norm
                  into the next linear (TELayerNormColumnParallelLinear, the norm an IdentityOp,
                  which the recompute skips) everywhere but where two modules read the norm's output:
                  the MLA input norm (q_down and kv_down) and the MoE pre-MLP norm (router and
                  dispatch). Here: norm1 before q_down, norm2 before the router. Frees what that
                  consumer keeps of the output (under fp8 the linear keeps the original input for
                  it, set_for_recompute_input_layernorm, and drops it).
  moe_act         output-discarding: the routed experts' activation (moe/experts.py:271, :1020);
                  frees what expert_fc2 keeps (its input).
  mla_up_proj     output-discarding: MLA's q / kv up-projections and RoPE (multi_latent_attention.py
                  :983-990), their output dropped once the core attention ran (:455-458); frees the
                  Q, K and V the attention kernel keeps (not its log-sum-exp).
  mlp             normal checkpoint of a dense MLP, not an MoE layer's (transformer_layer.py:537-539):
                  the fused norm + FC1, the activation and FC2 rerun, with the MLP's tensor-parallel
                  collective; frees all they keep but the checkpoint's input.
  shared_experts  normal checkpoint of the shared experts (moe/moe_layer.py:252-255,
                  shared_experts.py:158), with their tensor-parallel collective.
  moe             normal checkpoint of the whole MoE layer (moe_layer.py:247-251, :701): router,
                  dispatch, experts, combine and shared experts rerun, the expert-parallel exchange
                  with them; frees all they keep but the router's input (the checkpoint's).

A module that selects nothing in a layer (moe_act in a dense layer) leaves it alone, as Megatron
does; mla_up_proj on a model without MLA is an error there and here (engines/stages.py). While
one module's backward runs, what it freed exists again: memory counts the largest module's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from perfmodel.errors import LayoutError
from perfmodel.workload.graph import Comm, Layer, Op
from perfmodel.workload.spec import ModelSpec

# Megatron-Core's order of recompute_modules (transformer_config.py:1944-1957), the ones modelled
MODULES: tuple[str, ...] = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
OP_POLICY = "op"  # torchtitan's per-op policy (workload/op_checkpoint.py)
DEFAULT_SELECTIVE = "core_attn"
SEPARATE_NORM_CONSUMERS = ("q_down", "q_proj", "router")  # linears that read a norm that runs on its own (see above)
MLA_UP_OPS = ("q_up", "kv_up", "rope")
MLP_OPS = ("mlp_fc1", "mlp_act", "mlp_fc2")
SHARED_OPS = ("shared_fc1", "shared_act", "shared_fc2")
TP_PAIR = ("tp_allreduce", "tp_allgather", "tp_reducescatter")  # one column -> row pair's collectives


def parse_selective(value: object) -> str:
    """The canonical form of a selective-recompute choice: 'op', or Megatron modules joined by ','
    in Megatron's order (a list, or a string split at ',', '+' or spaces)."""
    words = ([str(v) for v in value] if isinstance(value, list | tuple)
             else str(value).replace("+", ",").replace(" ", ",").split(","))
    names = [w.strip() for w in words if w.strip()]
    if names == [OP_POLICY]:
        return OP_POLICY
    bad = [n for n in names if n not in MODULES]
    if not names or bad:
        raise LayoutError(f"selective_recompute {value!r}: unknown {', '.join(map(repr, bad)) or 'empty'}; allowed: "
                         f"'{OP_POLICY}' (torchtitan's per-op policy) or Megatron-Core recompute modules, comma-"
                         f"separated, from {', '.join(MODULES)}")
    return ",".join(m for m in MODULES if m in names)


def modules_of(selective: str) -> tuple[str, ...]:
    """The Megatron modules a canonical selective choice names (() for the per-op policy)."""
    return () if selective == OP_POLICY else tuple(selective.split(","))


@dataclass(frozen=True, slots=True)
class ModuleRecompute:
    """What a set of recompute modules does to one layer instance (one micro-batch on one rank)."""

    core_attn: bool  # the attention core reruns (costed as the layer's `core`)
    recomputed: tuple[Op, ...]  # the other forward ops rerun before the backward
    comms: tuple[Comm, ...]  # forward collectives rerun with them (fwd = times per layer)
    freed: tuple[tuple[int, float], ...]  # (op index, share of that op's saved bytes no longer kept)
    rebuilt: tuple[tuple[tuple[int, float], ...], ...]  # per module, the (index, share) it rebuilds at once


def _index(layer: Layer, names: tuple[str, ...]) -> list[int]:
    return [i for i, op in enumerate(layer.ops) if op.name in names]


def qkv_share(op: Op) -> float:
    """Share of a fused attention op's saved bytes that are Q, K and V (the rest is the fp32
    log-sum-exp, 4 B per query head and row). For MLA (as many k/v heads as q heads) the saved
    bytes are rows·heads·(2·d_qk + d_v)·2 + rows·heads·4 and its output rows·heads·d_v·2 +
    rows·heads·4 (workload/attention_ops.py), so saved - output = 4·rows·heads·d_qk gives rows·heads."""
    if op.saved_bytes <= 0 or op.out_bytes < 0 or op.head_dim <= 0:
        return 1.0
    lse = (op.saved_bytes - op.out_bytes) / op.head_dim
    return max(0.0, 1.0 - lse / op.saved_bytes)


def _tp_pair(layer: Layer) -> list[Comm]:
    """One column -> row pair's forward collectives (every pair of a layer moves the same bytes)."""
    return [replace(c, fwd=1) for c in layer.comms if c.group == "tp" and c.name in TP_PAIR and c.fwd]


def _module(layer: Layer, module: str) -> tuple[list[int], list[tuple[int, float]], list[Comm]]:
    """(ops rerun, (op, share) freed, collectives rerun) of one module on `layer`."""
    ops = layer.ops
    if module == "core_attn":
        return [], [], []  # the engines' attention-core path (module docstring)
    if module == "layernorm":
        rerun, freed = [], []
        for i in range(len(ops) - 1):
            if ops[i].kind == "norm" and ops[i + 1].name in SEPARATE_NORM_CONSUMERS:
                rerun.append(i)
                freed.append((i + 1, 1.0))
        return rerun, freed, []
    if module == "moe_act":
        act, fc2 = _index(layer, ("expert_act",)), _index(layer, ("expert_fc2",))
        return (act, [(fc2[0], 1.0)], []) if act and fc2 else ([], [], [])
    if module == "mla_up_proj":
        up = _index(layer, MLA_UP_OPS)
        if not _index(layer, ("q_up", "kv_up")):
            return [], [], []
        freed = [(i, qkv_share(op)) for i, op in enumerate(ops) if op.kind == "attention"]
        freed += [(i, 1.0) for i in _index(layer, ("attn_scores", "attn_values"))]  # unfused: Q, K and V
        return up, freed, []
    if module == "mlp":
        mlp = _index(layer, MLP_OPS)
        if not mlp:
            return [], [], []
        fc1 = ops[mlp[0]]
        rerun = ([mlp[0] - 1] if fc1.norm_input and ops[mlp[0] - 1].kind == "norm" else []) + mlp
        # the checkpoint's input: the residual stream (kept by the fused norm) or, with the norm
        # outside, the norm's output that FC1 keeps
        freed = [(i, 1.0) for i in mlp if fc1.norm_input or i != mlp[0]]
        return rerun, freed, _tp_pair(layer)
    if module == "shared_experts":
        shared = _index(layer, SHARED_OPS)
        return (shared, [(i, 1.0) for i in shared], _tp_pair(layer)) if shared else ([], [], [])
    if module == "moe":
        router = _index(layer, ("router",))
        if not router:
            return [], [], []
        end = next((i for i in range(router[0], len(ops)) if ops[i].name == "mlp_residual"), len(ops))
        block = list(range(router[0], end))
        comms = [c for c in layer.comms if c.group in ("ep", "etp") and c.fwd]
        if _index(layer, SHARED_OPS):
            comms += _tp_pair(layer)
        return block, [(i, 1.0) for i in block[1:]], comms
    raise LayoutError(f"unknown recompute module {module!r}; allowed: {', '.join(MODULES)}")


@lru_cache(maxsize=4096)
def module_recompute(layer: Layer, selective: str) -> ModuleRecompute:
    """The union of the named modules on `layer` (an op two modules rerun reruns once, bytes two
    modules free are freed once)."""
    rerun: set[int] = set()
    freed: dict[int, float] = {}
    comms: dict[str, Comm] = {}
    rebuilt: list[tuple[tuple[int, float], ...]] = []
    mods = modules_of(selective)
    for module in mods:
        r, f, c = _module(layer, module)
        rerun.update(r)
        for i, share in f:
            freed[i] = max(freed.get(i, 0.0), share)
        for comm in c:
            comms.setdefault(comm.name, comm)
        if f:
            rebuilt.append(tuple(f))
    return ModuleRecompute(core_attn="core_attn" in mods, recomputed=tuple(layer.ops[i] for i in sorted(rerun)),
                           comms=tuple(comms.values()), freed=tuple(sorted(freed.items())), rebuilt=tuple(rebuilt))


def recompute_module_notes(selective: str, spec: ModelSpec) -> list[str]:
    """Megatron's refusal (check_modules), and a note for each named module the model has nothing
    for (Megatron leaves those alone without a word)."""
    check_modules(selective, spec.attention == "mla", spec.id)
    mods = modules_of(selective)
    moe = spec.family == "moe"
    idle = [m for m in mods if (m in ("moe_act", "moe", "shared_experts") and not moe)
            or (m == "shared_experts" and moe and not spec.num_shared_experts)]
    return [f"recompute module {m!r} has nothing to rerun in {spec.id} (no {'shared experts' if moe else 'MoE layers'})"
            for m in idle]


def check_modules(selective: str, has_mla: bool, model_id: str) -> None:
    """Megatron's own refusals (transformer_config.py:1969-1973): mla_up_proj needs MLA."""
    if "mla_up_proj" in modules_of(selective) and not has_mla:
        raise LayoutError(f"recompute module 'mla_up_proj' needs multi-latent attention, which {model_id} does not "
                          "have (Megatron-Core refuses it too)")


__all__ = ["DEFAULT_SELECTIVE", "MODULES", "OP_POLICY", "ModuleRecompute", "check_modules", "module_recompute",
           "modules_of", "parse_selective", "qkv_share", "recompute_module_notes"]
