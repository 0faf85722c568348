"""Expand a ModelSpec into the Graph of ops of one micro-batch, unsharded.

Each transformer layer is written once as a function of the sizes a rank holds (`Axes`: tokens,
heads, columns...), called here with every dimension whole; `perfmodel.parallel.shard.shard`
calls it again with the sizes of one rank of a layout and adds the collectives the split
implies (the layer's `LayerLayout` says which). The builder knows no parallel degree.

Shapes per transformer layer on a rank, with T = b·s/cp tokens, h hidden, t = tp:
    QKV    [T, h] x [h, (q + 2·kv)/t]        out-proj  [T, q/t] x [q/t, h]
    FC1    [T, h] x [h, g·f/t] (g = 2 gated)  FC2       [T, f/t] x [f/t, h]
    attention per rank: heads/t, queries s/cp against keys s; FLOPs 4·b·(s²/cp)·d_head·heads/t,
    halved when causal (what a FlashAttention kernel executes).
The forward FLOPs of a dense GPT layer are 24·b·s·h² + 4·b·s²·h (Narayanan et al. 2021, Eq. 2
with the 4x FFN) and the tests hold the builder to that.

Saved activations follow Korthikanti et al. 2022 (Table 2): per layer s·b·h·(34 + 5·a·s/h) bytes
at 2-byte activations without parallelism (unfused attention); under tensor parallelism
s·b·h·(10 + 24/t + 5·a·s/(h·t)): the LayerNorm inputs, dropout masks and the inputs of QKV and
FC1 (10·s·b·h) stay replicated unless sequence parallelism shards them too (then all of it / t).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from perfmodel import precision as registry
from perfmodel.errors import LayoutError
from perfmodel.workload import hyper_connections as hc
from perfmodel.workload.attention_ops import attention_ops, local_attention_pairs
from perfmodel.workload.compressed_attention import csa_attention_ops, csa_params
from perfmodel.workload.graph import ACT_BYTES, ATTENTION_IMPLS, Axes, Comm, CpExchange, Graph, Layer, LayerLayout, Op
from perfmodel.workload.latent_moe import latent_params
from perfmodel.workload.moe import MoEOptions, moe_block
from perfmodel.workload.op_make import elementwise_op, gemm_op, replace_op
from perfmodel.workload.spec import ModelSpec
from perfmodel.workload.ssm import mamba2_ops, mamba2_params
from perfmodel.workload.timeseries import mlp_layers, rnn_layers, tcn_layers


class _Unsharded:
    """Every dimension whole (see graph.Axes): the graph the builder emits."""

    tp = cp = ep = 1
    sp = False
    moe = MoEOptions()

    def tokens(self, b: int, s: int) -> int:
        return b * s

    def norm_tokens(self, tokens: int) -> int:
        return tokens

    def query_len(self, s: int) -> int:
        return s

    def heads(self, heads: int, kv_heads: int, owner: str) -> tuple[int, int]:
        return heads, max(1, kv_heads)

    def columns(self, width: int, owner: str, what: str) -> int:
        return width

    def vocab_columns(self, vocab: int) -> int:
        return vocab

    def hidden_columns(self, hidden: int) -> int:
        return hidden

    def ssm_heads(self, heads: int, groups: int, owner: str) -> tuple[int, int, int, int]:
        return heads, groups, heads, groups


UNSHARDED: Axes = _Unsharded()


def build_graph(spec: ModelSpec, micro_batch: int = 1, seq_len: int | None = None, precision: str = "bf16",
                attention_impl: str = "flash") -> Graph:
    """The unsharded graph of one micro-batch of `micro_batch` sequences (lay it out on a rank with
    `perfmodel.parallel.shard.shard`)."""
    s = seq_len or spec.seq_len
    b = micro_batch
    if attention_impl not in ATTENTION_IMPLS:
        raise LayoutError(f"attention_impl {attention_impl!r}; allowed values: {', '.join(ATTENTION_IMPLS)}")
    if micro_batch < 1:
        raise LayoutError(f"micro_batch {micro_batch} must be a positive integer")
    spec.check_seq_len(s)
    if spec.family in ("dense", "moe", "encoder", "patch_transformer"):
        layers = _transformer(spec, b, s, precision, attention_impl)
        tokens = b * s if spec.family != "patch_transformer" else b * _num_patches(spec, s) * (spec.input_size or 1)
    elif spec.family in ("lstm", "gru"):
        layers, tokens = rnn_layers(spec, b, s, precision), b * s
    elif spec.family == "tcn":
        layers, tokens = tcn_layers(spec, b, s, precision), b * s
    else:
        layers, tokens = mlp_layers(spec, b, precision), b
    return Graph(model_id=spec.id, layers=tuple(layers), micro_batch=b, seq_len=s, tokens=tokens,
                 degrees={"tp": 1, "cp": 1, "ep": 1, "etp": 1, "sp": 0})


def _num_patches(spec: ModelSpec, s: int) -> int:
    stride = spec.patch_stride or spec.patch_len or 1
    return (s - (spec.patch_len or 1)) // stride + 1


# --------------------------------------------------------------------------------------------
def _shaped(make: Callable[[Axes], Layer]) -> Layer:
    """The unsharded layer `make` builds, carrying `make` for shard() to build it on a rank."""
    layer = make(UNSHARDED)
    assert layer.layout is not None
    return replace(layer, layout=replace(layer.layout, shape=make))


def _transformer(spec: ModelSpec, b: int, s: int, precision: str, attn_impl: str) -> list[Layer]:
    h = spec.hidden
    if spec.family == "patch_transformer":
        # channel-independent patches: every variable's patches form one sequence
        b, s = b * (spec.input_size or 1), _num_patches(spec, s)
    layers: list[Layer] = [_shaped(partial(_embedding, spec, b, s, precision))]
    ln_params = (2 * h if spec.norm == "layernorm" else h)
    # identical layers are one Layer with a count, in order of first appearance (the pattern and
    # the local / global alternation are data in the spec, see ModelSpec.layer_kinds)
    counts: dict[tuple[str | None, str | None, str], int] = {}
    for kind in spec.layer_kinds():
        counts[kind] = counts.get(kind, 0) + 1
    for (mixer, ffn, scope), count in counts.items():
        layers.append(_shaped(partial(_block_on, spec, b, s, precision, attn_impl, ffn == "moe", count, mixer, ffn, scope)))
    layers.append(_shaped(partial(_head_on, spec, b, s, precision, attn_impl, ln_params)))
    return layers


def _block_on(spec: ModelSpec, b: int, s: int, precision: str, attn_impl: str, moe: bool, count: int,
              mixer: str | None, ffn: str | None, scope: str, ax: Axes) -> Layer:
    return _block(spec, b, s, ax.tokens(b, s), ax, precision, attn_impl, moe=moe, count=count, mixer=mixer, ffn=ffn,
                  scope=scope)


def _head_on(spec: ModelSpec, b: int, s: int, precision: str, attn_impl: str, ln_params: int, ax: Axes) -> Layer:
    T = ax.tokens(b, s)
    head = _head(spec, b, s, T, ax, precision, ln_params)
    if spec.mtp_pattern is not None:
        head = _with_mtp(spec, head, b, s, T, ax, precision, attn_impl, ln_params)
    return head


def _with_mtp(spec: ModelSpec, head: Layer, b: int, s: int, T: int, ax: Axes, precision: str, attn_impl: str,
              ln_params: int) -> Layer:
    """The head plus `mtp_depth` multi-token-prediction passes (DeepSeek-V3 Sec. 2.2, Megatron-Core
    MultiTokenPredictionBlock), on the last pipeline stage: per depth two norms, the projection
    [T, 2h] x [2h, h] of the concatenated hidden state and next-token embedding, the pattern's
    layers, a final norm, the shared output layer and its own cross-entropy. Parameters once when
    the depths share one block (mtp_use_repeated_layer), else once per depth."""
    h = spec.hidden
    Tl = ax.norm_tokens(T)
    pattern = spec.mtp_pattern or ""
    ops: list[Op] = list(head.ops)
    parts: list[tuple[str, LayerLayout]] = []
    params = params_full = active_full = expert = 0.0
    out_ops = tuple(o for o in head.ops if o.name in ("final_norm", "lm_head", "cross_entropy"))
    for depth in range(spec.mtp_depth):
        sub = [elementwise_op(f"mtp{depth}_norms", 2 * Tl * h, 1, 1, 5, saved=2 * Tl * h * ACT_BYTES, kind="norm"),
               gemm_op(f"mtp{depth}_eh_proj", T, ax.hidden_columns(h), 2 * h, precision, split="column")]
        scope = f"c{spec.compress_ratio(spec.num_layers + depth)}" if spec.csa is not None else "global"
        for sym in pattern:
            kind = {"M": ("mamba", None), "*": ("attention", None), "-": (None, "dense"), "E": (None, "moe")}[sym]
            layer = _block(spec, b, s, T, ax, precision, attn_impl, moe=kind[1] == "moe", count=1,
                           mixer=kind[0], ffn=kind[1], scope=scope)
            sub += [replace_op(o, name=f"mtp{depth}_{o.name}") for o in layer.ops]
            assert layer.layout is not None
            parts.append((f"mtp{depth}_", layer.layout))
            if depth == 0 or not spec.mtp_shared_weights:
                params += layer.params
                params_full += layer.params_full
                active_full += layer.params_full if layer.active_params_full is None else layer.active_params_full
                expert += layer.expert_params
        # the output layer is the main head's: its weights counted there, its gradient computed again
        sub += [replace_op(o, name=f"mtp{depth}_{o.name}") for o in out_ops]
        ops += sub
        if depth == 0 or not spec.mtp_shared_weights:
            # eh_proj and the enorm / hnorm / final norms; with hyper-connections the block's own head mix
            extra = 2 * h * h + 3 * ln_params + hc.head_params(spec)
            params += 2 * h * h / ax.tp + 3 * ln_params + hc.head_params(spec)
            params_full += extra
            active_full += extra
    head_active = head.params_full if head.active_params_full is None else head.active_params_full
    assert head.layout is not None
    return Layer(head.name, head.kind, 1, tuple(ops), head.comms, params=head.params + params,
                 params_full=head.params_full + params_full, expert_params=head.expert_params + expert,
                 recomputable=False, active_params_full=head_active + active_full,
                 layout=replace(head.layout, parts=tuple(parts)))


def _embedding(spec: ModelSpec, b: int, s: int, precision: str, ax: Axes) -> Layer:
    h = spec.hidden
    T = ax.tokens(b, s)
    if spec.family == "patch_transformer":
        p = spec.patch_len or 1
        op = gemm_op("patch_embed", T, h, p, precision, bias=True)
        params = p * h + h + (s * h if spec.position == "learned" else 0)
        return Layer("embedding", "embedding", 1, (op,), params=params, params_full=params, recomputable=False,
                     layout=LayerLayout())
    V = spec.vocab or 1
    pos = spec.seq_len * h if spec.position == "learned" else 0
    if spec.family == "encoder":
        pos += 2 * h  # BERT token-type (segment) embeddings, 2 types
    full = V * h + pos
    # vocab-parallel embedding: partial lookups of the local vocabulary rows, summed over tp (shard.py)
    ops: tuple[Op, ...] = (Op("embedding_lookup", "embedding", flop=0.0, bytes=2 * T * h * ACT_BYTES, saved_bytes=0.0,
                              bwd_flop_factor=0.0, bwd_bytes_factor=2.0, weight_params=V * h / ax.tp + pos),)
    if spec.hyper_connections is not None:
        ops += (hc.hc_expand_op(spec, ax.norm_tokens(T)),)
    return Layer("embedding", "embedding", 1, ops, params=V * h / ax.tp + pos, params_full=full, recomputable=False,
                 layout=LayerLayout(vocab="embedding", tp_bytes=T * h * ACT_BYTES))


def _head(spec: ModelSpec, b: int, s: int, T: int, ax: Axes, precision: str, ln_params: int) -> Layer:
    h = spec.hidden
    Tl = ax.norm_tokens(T)
    norm = elementwise_op("final_norm", Tl * h, 1, 1, 5, saved=Tl * h * ACT_BYTES, kind="norm", params=ln_params)
    if spec.family == "patch_transformer":
        # PatchTST flatten head: each series' s patch embeddings -> Linear(s·h, horizon)
        out = spec.output_size or 1
        head_ops = (norm, gemm_op("forecast_head", b, out, s * h, precision, bias=True))
        params = ln_params + s * h * out + out
        return Layer("head", "head", 1, head_ops, params=params, params_full=params, recomputable=False,
                     layout=LayerLayout())
    V = spec.vocab or 1
    ops: list[Op] = [norm]
    extra = 0.0
    if spec.hyper_connections is not None:
        ops = [*hc.hc_head_ops(spec, Tl), norm]  # the n streams mixed back into one before the final norm
        extra = hc.head_params(spec)
    if spec.family == "encoder":
        # BERT masked-LM head: dense h->h + GELU + LayerNorm before the (tied) decoder, which has a bias
        ops += [gemm_op("mlm_transform", T, h, h, precision, bias=True),
                elementwise_op("mlm_act", T * h, 1, 1, 8, saved=T * h * ACT_BYTES),
                elementwise_op("mlm_norm", T * h, 1, 1, 5, saved=T * h * ACT_BYTES, kind="norm", params=ln_params)]
        extra = h * h + h + ln_params + V
    head_precision = registry.QUANTIZED_HEAD_PRECISION if registry.get(precision).quantized else precision
    ops.append(gemm_op("lm_head", T, ax.vocab_columns(V), h, head_precision, split="column"))
    # softmax cross-entropy in fp32 over the vocab shard: read logits, write fp32 probs, grads
    tp = ax.tp
    ops.append(Op("cross_entropy", "loss", flop=5.0 * T * V / tp, bytes=T * V / tp * (ACT_BYTES + 4 + 4),
                  saved_bytes=T * V / tp * 4, bwd_flop_factor=1.0, bwd_bytes_factor=1.0, kernels=3, bwd_kernels=2))
    head_params = 0 if spec.tied_embeddings else V * h
    # column-parallel lm_head and vocab-parallel cross-entropy: their collectives are shard.py's
    return Layer("head", "head", 1, tuple(ops), params=ln_params + extra + head_params / tp,
                 params_full=ln_params + extra + head_params, recomputable=False,
                 layout=LayerLayout(vocab="head", tp_bytes=T * h * ACT_BYTES, loss_bytes=T * 4 * 3))


def _ffn_ops(spec: ModelSpec, T: int, width: int, ax: Axes, precision: str, name: str, bias: bool,
             saved_in: float | None = None) -> tuple[list[Op], float]:
    """FC1 -> activation -> FC2. Saved: FC1 input, the activation's input (GELU: T·f, gated:
    both halves T·2f), FC2 input (Korthikanti et al. 2022: 2 + 8 + 8 sbh for a 4h GELU MLP)."""
    h = spec.hidden
    gated = spec.activation in ("swiglu", "geglu")
    f = ax.columns(width, spec.id, "the FFN width")
    up_n = f * (2 if gated else 1)
    act = elementwise_op(f"{name}_act", T * f, 2 if gated else 1, 1, 8, saved=T * up_n * ACT_BYTES)
    if spec.activation == "swiglu":
        act = replace_op(act, act_input_bytes=T * up_n * ACT_BYTES)
    # a dense FC1 reads the pre-MLP norm's output directly (an MoE layer's norm also feeds the router)
    fc1 = replace_op(gemm_op(f"{name}_fc1", T, up_n, h, precision, bias=bias, saved=saved_in, split="column"),
                   norm_input=name == "mlp", mm_parts=(f, f) if gated else ())
    ops = [fc1, act,
           gemm_op(f"{name}_fc2", T, h, f, precision, bias=bias, split="row")]
    params = h * up_n + up_n * (1 if bias else 0) + f * h + (h if bias else 0)
    return ops, params


def _block(spec: ModelSpec, b: int, s: int, T: int, ax: Axes, precision: str, attn_impl: str, moe: bool, count: int,
           mixer: str | None = "attention", ffn: str | None = "dense", scope: str = "global") -> Layer:
    """One layer: a mixer (attention or Mamba-2) and / or an FFN (dense or MoE), each pre-norm with
    a residual. A standard transformer layer has both; a hybrid-pattern layer has one of them.
    `moe` and `ffn == "moe"` say the same (callers pass both); an MoE FFN is the block of moe.py,
    laid out by `ax.moe`. Its tensor- and context-parallel collectives are shard.py's, from the
    layout this returns."""
    if moe:
        ffn = "moe"
    h = spec.hidden
    Tl = ax.norm_tokens(T)  # tokens whose norm / dropout this rank computes
    ln_params = 2 * h if spec.norm == "layernorm" else h
    # inputs of the column-parallel GEMMs (QKV, FC1) kept for wgrad: the full T·h without sp, the
    # local shard with sp (Megatron-LM re-gathers it in the backward, overlapped with the dgrad GEMM)
    saved_in = Tl * h * ACT_BYTES
    norm = lambda nm: elementwise_op(nm, Tl * h, 1, 1, 5, saved=Tl * h * ACT_BYTES, kind="norm", params=ln_params)  # noqa: E731
    dropout_add = lambda nm: elementwise_op(nm, Tl * h, 2, 1.5, 2, saved=Tl * h * 1, bwd_bytes_factor=1.5)  # noqa: E731
    ops: list[Op] = []
    attn_params = ffn_params = 0.0
    csa_comms: list[Comm] = []
    if mixer == "attention" and spec.csa is not None:
        # DeepSeek-V4 window + compressed (sparse) attention, ratio from the scope 'c<r>'; its own
        # module still lays itself out over tp and builds its collectives (LayerLayout.model_comms)
        attn_ops, attn_params, csa_comms = csa_attention_ops(spec, int(scope[1:]), b, s, T, ax.tp, ax.cp, precision,
                                                             saved_in)
        ops += [norm("norm1"), *attn_ops, dropout_add("attn_residual")]
    elif mixer == "attention":
        attn_ops, attn_params = attention_ops(spec, b, s, T, ax, precision, attn_impl, saved_in, scope)
        ops += [norm("norm1"), *attn_ops, dropout_add("attn_residual")]
    elif mixer == "mamba":
        mamba_ops, attn_params, cp_a2a = mamba2_ops(spec, b, s, T, ax, precision, saved_in)
        ops += [norm("norm1"), *mamba_ops, dropout_add("mamba_residual")]
    if ffn is not None:
        ops.append(norm("norm2"))
    if mixer != "mamba":
        cp_a2a = ()
    expert_params = 0.0
    moe_x = None
    moe_tp_region = 0  # the MoE FFN is a tp region only through its shared experts
    if ffn == "dense":
        ffn_ops, ffn_params = _ffn_ops(spec, T, spec.ffn_hidden or 4 * h, ax, precision, "mlp", spec.bias, saved_in)
        ops += ffn_ops
    elif ffn == "moe":
        width = spec.moe_ffn_hidden or h
        shared_ops: list[Op] = []
        shared_params = 0.0
        if spec.num_shared_experts:
            sh, shared_params = _ffn_ops(spec, T, width * spec.num_shared_experts, ax, precision, "shared", False, 0.0)
            shared_ops = list(sh)
        # the routed experts leave and re-enter the tp group through the all-to-all (and etp
        # collectives), so only the shared experts make the MoE FFN a tp region
        moe_tp_region = 1 if shared_ops else 0
        blk = moe_block(spec, T, ax.tp, ax.ep, precision, ax.moe, shared_ops, shared_params)
        ops += blk.ops
        moe_x = blk.exchange
        ffn_params, expert_params = blk.params, blk.expert_params
    if ffn is not None:
        ops.append(dropout_add("mlp_residual"))
    ops, hc_params = hc.with_hyper_connections(spec, ops, Tl)  # n residual streams (DeepSeek-V4 mHC)
    # one column -> row pair per tp-sharded sub-layer
    pairs = (mixer is not None) + (ffn == "dense") + (moe_tp_region if ffn == "moe" else 0)
    cp_kv = None
    if mixer == "attention":
        hl, kvl = ((ax.heads(spec.num_heads or 1, spec.kv_heads, spec.id)) if spec.csa is None
                   else (max(1, (spec.num_heads or 1) // ax.tp), max(1, spec.kv_heads // ax.tp)))
        dq = spec.dhead if spec.attention != "mla" else (spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim if spec.mla else spec.dhead)
        dv = spec.mla.v_head_dim if spec.attention == "mla" and spec.mla else spec.dhead
        keys = local_attention_pairs(spec, s)[1] if scope == "local" else s
        cp_kv = CpExchange(ring_bytes=2 * b * s * kvl * dq * ACT_BYTES, halo_bytes=2 * b * keys * kvl * dq * ACT_BYTES,
                           seq_len=s, keys=keys, local=scope == "local", chunked=spec.attention_chunk is not None,
                           micro_batch=b, q_heads=hl, kv_heads=kvl, qk_head_dim=dq, v_head_dim=dv)
    layout = LayerLayout(tp_region=True, tp_pairs=pairs, tp_bytes=T * h * ACT_BYTES, cp=cp_kv, cp_all_to_all=cp_a2a,
                         moe=moe_x, model_comms=tuple(csa_comms))
    nsub = (mixer is not None) + (ffn is not None)
    params = nsub * ln_params + attn_params + ffn_params + hc_params
    params_full = _full_params(spec, moe, ln_params, mixer, ffn, scope)
    active = None
    if moe:
        E, k, width = spec.num_experts or 1, spec.top_k or 1, spec.moe_ffn_hidden or h
        one_expert = (spec.moe_latent_size or h) * width * (3 if spec.activation in ("swiglu", "geglu") else 2)
        active = params_full - (E - k) * one_expert
    name, kind = _layer_name(spec, mixer, ffn, scope)
    return Layer(name, kind, count, tuple(ops),
                 params=params, params_full=params_full, expert_params=expert_params,
                 input_bytes=Tl * h * hc.streams(spec) * ACT_BYTES, active_params_full=active, layout=layout)


def _layer_name(spec: ModelSpec, mixer: str | None, ffn: str | None, scope: str) -> tuple[str, str]:
    """(Layer name, Layer kind): 'layers' / 'moe_layers' for standard layers (suffix '_local' for
    local attention), 'mamba_layers', 'attention_layers', 'mlp_layers', 'moe_layers' in a pattern."""
    local = "_local" if scope == "local" and mixer == "attention" else ""
    if spec.csa is not None and mixer == "attention":
        local = f"_{scope}"  # DeepSeek-V4: one layer kind per compress ratio
    if spec.layer_pattern is None:
        return ("moe_layers" if ffn == "moe" else "layers") + local, "moe" if ffn == "moe" else "transformer"
    if mixer == "mamba":
        return "mamba_layers", "mamba"
    if mixer == "attention":
        return "attention_layers" + local, "transformer"
    return ("moe_layers", "moe") if ffn == "moe" else ("mlp_layers", "transformer")


def _full_params(spec: ModelSpec, moe: bool, ln_params: int, mixer: str | None = "attention",
                 ffn_kind: str | None = "dense", scope: str = "global") -> float:
    """Unsharded parameters of one layer, written out from the architecture."""
    if ffn_kind is not None:
        ffn_kind = "moe" if moe else "dense"
    h = spec.hidden
    bias = spec.bias
    heads, kvh = spec.num_heads or 1, spec.kv_heads
    if spec.attention == "mla" and spec.mla:
        m = spec.mla
        attn = m.input_params(h, heads) + heads * m.v_head_dim * h
    else:
        d = spec.dhead
        qkv = (heads + 2 * kvh) * d
        attn = h * qkv + heads * d * h + ((qkv + h) if bias else 0)
    attn += heads if spec.attention_sink_logits else 0
    if mixer == "attention" and spec.csa is not None:
        attn = int(csa_params(spec, int(scope[1:])))
    if mixer == "mamba":
        attn = int(mamba2_params(spec))
    elif mixer is None:
        attn = 0
    gated = spec.activation in ("swiglu", "geglu")
    def ffn(width: int, with_bias: bool, d: int = h) -> float:
        up = width * (2 if gated else 1)
        return d * up + width * d + ((up + d) if with_bias else 0)
    if ffn_kind is None:
        mlp = 0.0
    elif moe:
        E, width = spec.num_experts or 1, spec.moe_ffn_hidden or h
        # routed experts at the latent width under LatentMoE, plus its two projections
        mlp = (E * ffn(width, False, spec.moe_latent_size or h) + h * E + latent_params(spec)
               + (ffn(width * spec.num_shared_experts, False) if spec.num_shared_experts else 0))
    else:
        mlp = ffn(spec.ffn_hidden or 4 * h, bias)
    nsub = (mixer is not None) + (ffn_kind is not None)
    return nsub * (ln_params + hc.sublayer_params(spec)) + attn + mlp
