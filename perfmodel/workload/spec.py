"""ModelSpec: an architecture family with its sizes, as read from workloads/*.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel.errors import SpecError

Family = Literal["dense", "moe", "encoder", "lstm", "tcn", "patch_transformer", "mlp"]


class PublishedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    total: float = Field(gt=0, description="published total parameter count")
    active: float | None = Field(None, gt=0, description="MoE: parameters active per token")
    source: str


class MLA(BaseModel):
    """DeepSeek-V2/V3 multi-head latent attention sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelSpec(BaseModel):
    """One model. Transformer fields apply to dense / moe / encoder / patch_transformer; the
    recurrent, convolutional and MLP families use `input_size`, `hidden`, `num_layers` and their
    own fields. Sizes are element counts; `seq_len` is the default training context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
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
    activation: Literal["gelu", "swiglu", "relu", "geglu"] = "gelu"
    position: Literal["learned", "rope", "alibi", "none"] = "learned"
    tied_embeddings: bool = False
    bias: bool = True
    causal: bool = True
    attention: Literal["mha", "gqa", "mla"] = "mha"
    mla: MLA | None = None

    num_experts: int | None = Field(None, gt=0, description="routed experts")
    top_k: int | None = Field(None, gt=0)
    moe_ffn_hidden: int | None = Field(None, gt=0, description="one expert's FFN width")
    num_shared_experts: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN (DeepSeek)")
    moe_layer_freq: int = Field(1, gt=0, description="every k-th layer is MoE")

    input_size: int | None = Field(None, gt=0, description="features per time step (lstm/tcn/mlp/patch)")
    output_size: int | None = Field(None, gt=0)
    kernel_size: int | None = Field(None, gt=0, description="tcn")
    patch_len: int | None = Field(None, gt=0, description="patch_transformer")
    patch_stride: int | None = Field(None, gt=0)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        need: dict[str, tuple[str, ...]] = {
            "dense": ("ffn_hidden", "num_heads", "vocab"),
            "moe": ("num_heads", "vocab", "num_experts", "top_k", "moe_ffn_hidden"),
            "encoder": ("ffn_hidden", "num_heads", "vocab"),
            "patch_transformer": ("ffn_hidden", "num_heads", "input_size", "patch_len"),
            "lstm": ("input_size",),
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
        if self.family == "moe" and self.top_k and self.num_experts and self.top_k > self.num_experts:
            raise SpecError("top_k", f"{self.top_k} > num_experts {self.num_experts}", "top_k <= num_experts")
        if self.family == "moe" and self.first_dense_layers >= self.num_layers:
            raise SpecError("first_dense_layers",
                            f"{self.first_dense_layers} >= num_layers {self.num_layers} leaves no MoE layer",
                            f"at most {self.num_layers - 1}, or family 'dense'")
        if self.family == "patch_transformer" and self.patch_len and self.patch_len > self.seq_len:
            raise SpecError("patch_len", f"{self.patch_len} > seq_len {self.seq_len}", f"at most {self.seq_len}")
        return self

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
