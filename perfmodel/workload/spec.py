"""ModelSpec: an architecture family with its sizes, as read from workloads/*.yaml."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel.errors import LayoutError, SpecError
from perfmodel.validators import reject_bool_ints

Family = Literal["dense", "moe", "encoder", "lstm", "gru", "tcn", "patch_transformer", "mlp"]

# Nemotron-H / Megatron-Core hybrid layer symbols: one character per layer
PATTERN_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


class PublishedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    total: float = Field(gt=0, description="published total parameter count")
    active: float | None = Field(None, gt=0, description="MoE: parameters active per token")
    source: str
    active_includes_embedding: bool = Field(
        True, description="False where the publisher counts the unembedding but not the input embedding table "
        "as active (OpenAI's gpt-oss model card)")
    active_includes_output: bool = Field(
        True, description="False where the publisher counts neither embedding table as active (Zhipu's GLM-4.5 "
        "figures: non-embedding activated parameters)")
    includes_mtp: bool = Field(
        True, description="False where the publisher's counts leave out the multi-token-prediction block (DeepSeek-V3's "
        "671B, Nemotron 3 Super's and Ultra's model-card figures); the check then compares the model without it")
    tolerance: float = Field(
        0.01, gt=0, le=0.05, description="relative tolerance of the parameter-count check; wider than 1 % only "
        "where the published figure is rounded coarser than that or includes parts not modelled (say which in source)")


class MLA(BaseModel):
    """DeepSeek-V2/V3 multi-head latent attention sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int | None = Field(None, gt=0, description=(
        "the compressed query's width; none: one full query projection, as DeepSeek-V2-Lite (its config's "
        "q_lora_rank null)"))
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    def input_params(self, hidden: int, heads: int) -> int:
        """Parameters of the projections into `heads` attention heads (all but the output
        projection): the query's (one projection, or down / norm / up through q_lora_rank) and
        the shared K/V latent's (down with the rope key, norm, up to the heads' nope keys and values)."""
        dqk = self.qk_nope_head_dim + self.qk_rope_head_dim
        r = self.q_lora_rank
        q = hidden * heads * dqk if r is None else hidden * r + r + r * heads * dqk
        return (q + hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))


class CompressedSparseAttention(BaseModel):
    """DeepSeek-V4 hybrid attention (HF DeepseekV4 config names in brackets): one shared K = V head
    of `head_dim` [head_dim], a low-rank query [q_lora_rank], a grouped low-rank output
    [o_groups, o_lora_rank], a sliding window [sliding_window] and per layer a compress ratio
    [compress_ratios]: 0 window only, `indexed_ratio` the top-k an indexer selects
    [index_topk, index_n_heads, index_head_dim] (CSA), other ratios every compressed key (HCA).
    Costs: perfmodel/workload/compressed_attention.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    head_dim: int = Field(gt=0)
    rope_head_dim: int = Field(gt=0)
    q_lora_rank: int = Field(gt=0)
    o_lora_rank: int = Field(gt=0)
    o_groups: int = Field(gt=0)
    window: int = Field(gt=0)
    compress_ratios: tuple[int, ...] = Field(
        description="per layer (then per MTP depth, as the HF config lists them): 0, indexed_ratio or another ratio")
    index_heads: int = Field(gt=0)
    index_head_dim: int = Field(gt=0)
    index_topk: int = Field(gt=0)
    indexed_ratio: int = Field(4, gt=0, description="the ratio whose layers select keys with the indexer (4 in DeepSeek's code)")


class HyperConnections(BaseModel):
    """Manifold-constrained hyper-connections (DeepSeek-V4 hc_mult, hc_sinkhorn_iters): the residual
    stream is `streams` copies of the hidden state; costs: perfmodel/workload/hyper_connections.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    streams: int = Field(gt=1)
    sinkhorn_iters: int = Field(20, ge=0)


class Mamba2(BaseModel):
    """Mamba-2 mixer sizes (Dao & Gu 2024; Megatron-Core MambaMixer / HF NemotronH config names:
    mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    num_heads: int = Field(gt=0, description="SSM heads H; d_inner = H x head_dim")
    head_dim: int = Field(gt=0, description="P, channels per head")
    state_dim: int = Field(gt=0, description="N, the SSM state size")
    num_groups: int = Field(1, gt=0, description="G, groups sharing B and C")
    conv_kernel: int = Field(4, gt=0, description="K of the depthwise causal conv1d")
    chunk_size: int = Field(128, gt=0, description="Q, the SSD chunk length")

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels through the conv1d: x, B and C."""
        return self.d_inner + 2 * self.num_groups * self.state_dim


class ModelSpec(BaseModel):
    """One model. Transformer fields apply to dense / moe / encoder / patch_transformer; the
    recurrent, convolutional and MLP families use `input_size`, `hidden`, `num_layers` and their
    own fields. Sizes are element counts; `seq_len` is the default training context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    # other names the model is published under (a Hugging Face repository, a paper's size name):
    # a runs file's model cell matching one, up to case and separators, reads as this workload
    aliases: tuple[str, ...] = ()
    family: Family
    source: str = Field(min_length=3, description="where the configuration is published")
    published_params: PublishedParams | None = None

    num_layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    seq_len: int = Field(2048, gt=0)
    ffn_hidden: int | None = Field(None, gt=0)
    num_heads: int | None = Field(None, gt=0)
    num_kv_heads: int | None = Field(None, gt=0)
    head_dim: int | None = Field(None, gt=0, description="defaults to hidden / num_heads")
    vocab: int | None = Field(None, gt=0)
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    activation: Literal["gelu", "swiglu", "relu", "geglu", "squared_relu"] = "gelu"
    position: Literal["learned", "rope", "alibi", "none"] = "learned"
    tied_embeddings: bool = False
    bias: bool = True
    causal: bool = True
    attention: Literal["mha", "gqa", "mla", "csa"] = "mha"
    mla: MLA | None = None
    csa: CompressedSparseAttention | None = Field(None, description="DeepSeek-V4 window + compressed (sparse) attention")
    hyper_connections: HyperConnections | None = None
    sliding_window: int | None = Field(None, gt=0, description="local layers: each query sees the last w keys (itself included)")
    attention_chunk: int | None = Field(None, gt=0, description="local layers: queries see only keys of their own chunk (Llama 4)")
    global_every: int | None = Field(
        None, gt=0, description="with a window or chunk: attention layer i is global when (i + 1) % k == 0 "
        "(gpt-oss 2, Llama 4 4, Gemma 3 6); None = every attention layer is local")
    sink_tokens: int = Field(0, ge=0, description="local layers: the first k keys stay visible to every query (StreamingLLM)")
    attention_sink_logits: bool = Field(False, description="one learned softmax sink logit per head (gpt-oss)")
    layer_pattern: str | None = Field(
        None, description="hybrid layer pattern, one symbol per layer: M Mamba-2, * attention, - dense MLP, "
        "E MoE (Nemotron-H hybrid_override_pattern); num_layers must equal its length")
    mamba: Mamba2 | None = None
    mtp_pattern: str | None = Field(
        None, description="multi-token-prediction block, layer-pattern symbols (Nemotron 3: '*E', one attention "
        "and one MoE layer), run after the last layer once per depth with its own loss")
    mtp_depth: int = Field(0, ge=0, description="MTP depths (Megatron mtp_num_layers): forward passes of the block")
    mtp_shared_weights: bool = Field(False, description="one MTP block's weights serve every depth (mtp_use_repeated_layer)")

    num_experts: int | None = Field(None, gt=0, description="routed experts")
    top_k: int | None = Field(None, gt=0)
    moe_ffn_hidden: int | None = Field(None, gt=0, description="one expert's FFN width")
    num_shared_experts: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN (DeepSeek)")
    moe_layer_freq: int = Field(1, gt=0, description="every k-th layer is MoE")
    moe_router_groups: int = Field(1, gt=0, description=(
        "group-limited routing: the routed experts form this many groups (HF n_group, Megatron-Core "
        "moe_router_num_groups); 1 = none"))
    moe_router_group_topk: int | None = Field(None, gt=0, description=(
        "group-limited routing: groups a token may pick its experts from (HF topk_group, moe_router_group_topk)"))
    moe_latent_size: int | None = Field(
        None, gt=0, description="LatentMoE (Nemotron 3 Super / Ultra, Megatron-Core moe_latent_size): routed experts, "
        "dispatch and combine work at this width, with h->l and l->h projections around them; None = hidden")

    input_size: int | None = Field(None, gt=0, description="features per time step (lstm/tcn/mlp/patch)")
    output_size: int | None = Field(None, gt=0)
    kernel_size: int | None = Field(None, gt=0, description="tcn")
    patch_len: int | None = Field(None, gt=0, description="patch_transformer")
    patch_stride: int | None = Field(None, gt=0)
    notes: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_bool_ints(cls, data: Any) -> Any:
        return reject_bool_ints(cls, data)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        need: dict[str, tuple[str, ...]] = {
            "dense": ("ffn_hidden", "num_heads", "vocab"),
            "moe": ("num_heads", "vocab", "num_experts", "top_k", "moe_ffn_hidden"),
            "encoder": ("ffn_hidden", "num_heads", "vocab"),
            "patch_transformer": ("ffn_hidden", "num_heads", "input_size", "patch_len"),
            "lstm": ("input_size",),
            "gru": ("input_size",),
            "tcn": ("input_size", "kernel_size"),
            "mlp": ("input_size",),
        }
        for f in need[self.family]:
            if getattr(self, f) is None:
                raise SpecError(f, f"required for family {self.family!r}", "a positive integer")
        if self.num_heads:
            kv = self.num_kv_heads or self.num_heads
            if self.num_heads % kv:
                raise SpecError("num_kv_heads", f"{kv} does not divide num_heads {self.num_heads}", "a divisor of num_heads")
            if self.head_dim is None and self.attention != "mla" and self.hidden % self.num_heads:
                raise SpecError("head_dim", f"hidden {self.hidden} not divisible by num_heads {self.num_heads}", "an explicit head_dim")
        if self.attention == "mla" and self.mla is None:
            raise SpecError("mla", "attention is 'mla' but no mla sizes given", "q_lora_rank, kv_lora_rank, ...")
        if self.mla is not None and self.attention != "mla":
            raise SpecError("attention", f"{self.attention!r} but mla sizes are given", "'mla', or drop the mla block")
        self._check_csa()
        if self.family == "moe" and self.top_k and self.num_experts and self.top_k > self.num_experts:
            raise SpecError("top_k", f"{self.top_k} > num_experts {self.num_experts}", "top_k <= num_experts")
        if self.moe_router_groups > 1 or self.moe_router_group_topk is not None:
            g, m, e = self.moe_router_groups, self.moe_router_group_topk or self.moe_router_groups, self.num_experts or 0
            if e % g:
                raise SpecError("moe_router_groups", f"{g} does not divide num_experts {e}",
                                f"a divisor of {e}, e.g. {max(d for d in range(1, 65) if e % d == 0) if e else 1}")
            if m > g or (self.top_k or 1) > m * (e // g):
                raise SpecError("moe_router_group_topk", f"{m} of {g} groups of {e // g} experts for top_k {self.top_k}",
                                f"at most {g} groups holding at least top_k experts")
        if self.moe_latent_size is not None and (self.family != "moe" or self.moe_latent_size >= self.hidden):
            raise SpecError("moe_latent_size", f"{self.moe_latent_size} with family {self.family!r} and hidden {self.hidden}",
                            f"a width below hidden {self.hidden} on a family 'moe' model, or drop the field")
        if self.family == "moe" and self.first_dense_layers >= self.num_layers:
            raise SpecError("first_dense_layers",
                            f"{self.first_dense_layers} >= num_layers {self.num_layers} leaves no MoE layer",
                            f"at most {self.num_layers - 1}, or family 'dense'")
        self._check_hybrid()
        if (self.mtp_pattern is None) != (self.mtp_depth == 0):
            raise SpecError("mtp_depth", f"{self.mtp_depth} with mtp_pattern {self.mtp_pattern!r}",
                            "both (a pattern such as '*E' and a depth >= 1) or neither")
        if self.mtp_pattern is not None:
            bad = sorted({c for c in self.mtp_pattern if c not in PATTERN_SYMBOLS})
            if bad or ("M" in self.mtp_pattern and self.mamba is None) or ("E" in self.mtp_pattern and self.family != "moe"):
                raise SpecError("mtp_pattern", f"{self.mtp_pattern!r} does not fit this model",
                                "symbols * - E (M needs mamba sizes, E family 'moe')")
        self._check_attention_variants()
        if self.family == "patch_transformer" and self.patch_len and self.patch_len > self.seq_len:
            raise SpecError("patch_len", f"{self.patch_len} > seq_len {self.seq_len}", f"at most {self.seq_len}")
        return self

    def check_seq_len(self, s: int) -> None:
        """A run's sequence length (a plan may override the spec's) must hold one patch of a patch
        model: a shorter series has no patch to embed (LayoutError naming the shortest allowed)."""
        if self.family == "patch_transformer" and (self.patch_len or 1) > s:
            raise LayoutError(f"seq_len {s} is shorter than one patch of {self.id} (patch_len {self.patch_len}): "
                              f"no patch to embed; allowed: seq_len >= {self.patch_len}")

    def _check_hybrid(self) -> None:
        p = self.layer_pattern
        if p is None:
            if self.mamba is not None:
                raise SpecError("layer_pattern", "mamba sizes are given but no layer pattern places Mamba layers",
                                "a pattern such as 'M-M*-' (M Mamba, * attention, - MLP, E MoE)")
            return
        bad = sorted({c for c in p if c not in PATTERN_SYMBOLS})
        if bad:
            raise SpecError("layer_pattern", f"unknown symbols {bad} in {p!r}", "M (Mamba-2), * (attention), - (MLP), E (MoE)")
        if len(p) != self.num_layers:
            raise SpecError("num_layers", f"{self.num_layers} but layer_pattern has {len(p)} layers", str(len(p)))
        if self.family not in ("dense", "moe"):
            raise SpecError("layer_pattern", f"given for family {self.family!r}", "family 'dense' or 'moe'")
        if "M" in p and self.mamba is None:
            raise SpecError("mamba", "layer_pattern has Mamba layers (M) but no mamba sizes", "num_heads, head_dim, state_dim, ...")
        if "E" in p and self.family != "moe":
            raise SpecError("family", f"{self.family!r} but layer_pattern has MoE layers (E)", "'moe'")
        if self.family == "moe" and "E" not in p:
            raise SpecError("layer_pattern", "family 'moe' but the pattern has no MoE layer (E)", "a pattern with E, or family 'dense'")
        if "-" in p and self.ffn_hidden is None:
            raise SpecError("ffn_hidden", "layer_pattern has MLP layers (-) but no ffn_hidden", "a positive integer")
        if self.mamba is not None and self.mamba.num_groups and self.mamba.num_heads % self.mamba.num_groups:
            raise SpecError("mamba.num_groups", f"{self.mamba.num_groups} does not divide num_heads {self.mamba.num_heads}",
                            "a divisor of mamba.num_heads")

    def _check_csa(self) -> None:
        if (self.attention == "csa") != (self.csa is not None):
            raise SpecError("csa", f"attention {self.attention!r} with csa sizes {'given' if self.csa else 'missing'}",
                            "attention 'csa' together with a csa block, or neither")
        if self.csa is None:
            return
        n = len(self.csa.compress_ratios)
        if n < self.num_layers:
            raise SpecError("csa.compress_ratios", f"{n} entries for {self.num_layers} layers",
                            f"at least {self.num_layers} entries (one per layer, then the MTP depths')")
        if any(r < 0 for r in self.csa.compress_ratios):
            raise SpecError("csa.compress_ratios", f"{list(self.csa.compress_ratios)} has a negative ratio", "ratios >= 0")
        if self.layer_pattern is not None or self.sliding_window is not None or self.attention_chunk is not None:
            raise SpecError("csa", "combined with layer_pattern, sliding_window or attention_chunk",
                            "csa's own window (csa.window) on a plain layer stack")

    def compress_ratio(self, i: int) -> int:
        """Compress ratio of attention layer i (i >= num_layers: MTP depth i - num_layers; a
        ratio list without MTP entries gives them a window-only layer)."""
        if self.csa is None:
            return 0
        r = self.csa.compress_ratios
        return r[i] if i < len(r) else 0

    def _check_attention_variants(self) -> None:
        if self.sliding_window is not None and self.attention_chunk is not None:
            raise SpecError("attention_chunk", "both sliding_window and attention_chunk are given", "one of them")
        local = self.sliding_window is not None or self.attention_chunk is not None
        if (self.global_every is not None or self.sink_tokens) and not local:
            raise SpecError("global_every" if self.global_every is not None else "sink_tokens",
                            "given without sliding_window or attention_chunk", "a sliding_window or attention_chunk")
        if local and not self.causal:
            raise SpecError("sliding_window", "local attention is modelled for causal models only", "causal: true")

    def layer_kinds(self) -> tuple[tuple[str | None, str | None, str], ...]:
        """Per layer (mixer, ffn, attention scope): mixer 'attention' | 'mamba' | None, ffn 'dense' |
        'moe' | None, scope 'global' | 'local' | 'c<r>' (DeepSeek-V4 attention of compress ratio r).
        A layer pattern gives one sub-layer per symbol; otherwise every layer is attention + FFN
        (MoE where `is_moe_layer`)."""
        local = self.sliding_window is not None or self.attention_chunk is not None
        out: list[tuple[str | None, str | None, str]] = []
        n_attn = 0
        for i in range(self.num_layers):
            if self.layer_pattern is not None:
                kind = PATTERN_SYMBOLS[self.layer_pattern[i]]
                mixer = kind if kind in ("mamba", "attention") else None
                ffn = {"mlp": "dense", "moe": "moe"}.get(kind)
            else:
                mixer, ffn = "attention", ("moe" if self.is_moe_layer(i) else "dense")
            scope = "global"
            if mixer == "attention" and self.csa is not None:
                scope = f"c{self.compress_ratio(i)}"  # DeepSeek-V4: the layer's compress ratio
            elif mixer == "attention":
                if local and not (self.global_every is not None and (n_attn + 1) % self.global_every == 0):
                    scope = "local"
                n_attn += 1
            out.append((mixer, ffn, scope))
        return tuple(out)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads or 1

    @property
    def dhead(self) -> int:
        if self.head_dim:
            return self.head_dim
        return self.hidden // (self.num_heads or 1)

    @property
    def is_transformer(self) -> bool:
        return self.family in ("dense", "moe", "encoder", "patch_transformer")

    def is_moe_layer(self, i: int) -> bool:
        return self.family == "moe" and i >= self.first_dense_layers and (i - self.first_dense_layers) % self.moe_layer_freq == 0

    def with_(self, **changes: object) -> ModelSpec:
        data = self.model_dump()
        data.update(changes)
        return ModelSpec.model_validate(data)
