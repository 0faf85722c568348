"""Hugging Face `config.json` -> ModelSpec, read from the config's own fields (no `transformers`).

    >>> from perfmodel.workload.hf_config import load_hf_config
    >>> spec = load_hf_config("Qwen3-30B-A3B/config.json")      # a strict ModelSpec
    >>> spec.num_experts, spec.top_k, spec.moe_ffn_hidden
    (128, 8, 768)

Mapped model types (the field names are those of the `transformers` configuration classes):

- llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3_text (dense): num_hidden_layers,
  hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim, vocab_size,
  hidden_act (or hidden_activation), tie_word_embeddings, attention_bias / mlp_bias;
- mixtral, gpt_oss (moe): + num_local_experts, num_experts_per_tok (expert width = intermediate_size);
  gpt-oss's learned per-head attention-sink logits;
- qwen3_moe (moe): + num_experts, num_experts_per_tok, moe_intermediate_size, decoder_sparse_step,
  mlp_only_layers (MoE where (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers);
- deepseek_v3 (moe + MLA): + n_routed_experts, n_shared_experts, moe_intermediate_size,
  first_k_dense_replace, moe_layer_freq, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim;
- llama4_text, or llama4 / gemma3 with a `text_config` (the text model; the vision encoder is not
  modelled): Llama 4's routed experts of intermediate_size plus one shared expert of the same width,
  dense layers of intermediate_size_mlp, MoE layers from moe_layers or interleave_moe_layer_step,
  chunked attention (attention_chunk_size) on the RoPE layers and global NoPE attention where
  no_rope_layers[i] == 0;
- nemotron_h (hybrid): hybrid_override_pattern (M Mamba-2, * attention, - MLP, E MoE), mamba_num_heads,
  mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size, attention_head_dim (or head_dim),
  mlp_hidden_act relu2 (squared ReLU), no position embedding; MoE layers (Nemotron 3): n_routed_experts,
  num_experts_per_tok, moe_intermediate_size, and a shared expert of moe_shared_expert_intermediate_size
  (a multiple of the routed width); Nemotron 3 Super / Ultra: layers_block_type (the pattern as a
  list, num_hidden_layers null), mtp_layers_block_type x num_nextn_predict_layers (MTP block),
  moe_latent_size (LatentMoE).

Local attention: a sliding window (sliding_window; Mistral, Phi-3, gpt-oss, Gemma 2 / 3, Qwen2 with
use_sliding_window) or a chunk (Llama 4) becomes ModelSpec's sliding_window / attention_chunk. Which
layers are local comes from layer_types, else from the family's rule (Gemma 2: every second layer
global; Gemma 3: every sliding_window_pattern-th; Llama 4: the NoPE layers; Qwen2: layers from
max_window_layers on; Mistral / Phi-3: all). ModelSpec expresses "all local" or "every k-th attention
layer global" (global_every); any other arrangement is refused naming the layout. Where MoE layers
are neither "all", "from layer f on" nor "every k-th", the model is written as a layer pattern
(`*E*-...`: one attention and one FFN symbol per layer).

Refused with an error naming the feature, because a model without it would be silently wrong: the
model types in `UNSUPPORTED`, Mamba projection biases, a Nemotron-H shared expert whose width is
not a multiple of the routed expert's, multi-token-prediction fields of Nemotron 3.5 (unknown fields), a
layer_types / local-global layout that no global_every reproduces. A field this module does not
know is an error too: it may change the shapes.

Small terms not modelled, named here so that nobody mistakes them for errors: Qwen2's q/k/v
biases (h + 2·kv·d per layer, 4,608 parameters of Qwen2.5-7B's 233 M per layer), Qwen3's and
Gemma 3's q/k RMSNorm weights (2·d per layer), Gemma 2 / 3's post-attention and post-FFN norms
(2·h per layer, 0.007 % of Gemma 2 9B), DeepSeek-V3's multi-token-prediction module (its
published 671 B total excludes it too), gpt-oss's expert biases, Llama 4's weightless QK L2-norm.
Gemma 2's logit soft-capping (tanh(x / c) · c on the attention scores and the final logits) costs a
few element-wise FLOPs per score against 4·d_head = 1,024 matmul FLOPs per score (d_head 256), and
per logit against 2·h of the LM-head GEMM: under 0.3 % of the attention FLOPs, so it is not modelled;
it does need an attention kernel that supports it (FlashAttention >= 2.6, not PyTorch SDPA).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfmodel.errors import SpecError
from perfmodel.workload.spec import ModelSpec

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text")
MOE_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4_text")
HYBRID_TYPES = ("nemotron_h",)
# multimodal wrappers: the text model is read from `text_config`
WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
SUPPORTED = DENSE_TYPES + MOE_TYPES + HYBRID_TYPES + tuple(WRAPPERS)

UNSUPPORTED: dict[str, str] = {
    "jamba": "hybrid Mamba / attention layers",
    "phi": "Phi-1/2's parallel attention + MLP block with partial rotary and LayerNorm biases",
    "qwen2_moe": "a shared expert with its own width and sigmoid gate (shared_expert_intermediate_size)",
    "deepseek_v2": "DeepSeek-V2's grouped routing (use model_type deepseek_v3 sizes only if they match)",
}

# fields that do not change the shapes or the FLOPs of a training step
NEUTRAL = frozenset({
    "_name_or_path", "architectures", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
    "dtype", "transformers_version", "use_cache", "initializer_range", "rms_norm_eps", "layer_norm_epsilon",
    "layer_norm_eps", "attention_dropout", "hidden_dropout", "embd_pdrop", "resid_pdrop", "rope_theta",
    "rope_scaling", "rope_parameters", "max_position_embeddings", "original_max_position_embeddings",
    "initial_context_length", "pretraining_tp", "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha",
    "seq_aux", "norm_topk_prob", "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group",
    "ep_size", "quantization_config", "use_mrope", "swiglu_limit", "num_logits_to_keep",
    "router_jitter_noise", "experts_per_token", "use_sliding_window", "sliding_window", "layer_types",
    "num_nextn_predict_layers", "model_type", "rope_interleave", "partial_rotary_factor", "use_qk_norm",
    "hidden_activation", "attention_bias", "mlp_bias", "tie_word_embeddings", "head_dim",
    # PretrainedConfig's generic fields (generation, labels, output switches)
    "use_bfloat16", "output_attentions", "output_hidden_states", "return_dict", "is_decoder", "torchscript",
    "keys_to_ignore_at_inference", "tokenizer_class", "finetuning_task", "id2label", "label2id", "problem_type",
    "chunk_size_feed_forward", "pruned_heads", "attn_implementation", "_attn_implementation", "bad_words_ids",
    "begin_suppress_tokens", "decoder_start_token_id", "sep_token_id", "prefix", "task_specific_params",
})
COMMON = frozenset({"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                    "num_key_value_heads", "vocab_size", "hidden_act"})
# Gemma 2 / 3: the attention scale, soft-capping (see the module docstring), the local layers' RoPE base
_GEMMA_NEW = frozenset({"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                        "cache_implementation", "sliding_window_size"})
EXTRA: dict[str, frozenset[str]] = {
    "qwen2": frozenset({"max_window_layers"}),
    "qwen3": frozenset({"max_window_layers"}),
    "mixtral": frozenset({"num_local_experts", "num_experts_per_tok"}),
    "gpt_oss": frozenset({"num_local_experts", "num_experts_per_tok"}),
    "qwen3_moe": frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                            "mlp_only_layers", "max_window_layers"}),
    "deepseek_v3": frozenset({"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                              "first_k_dense_replace", "moe_layer_freq", "q_lora_rank", "kv_lora_rank",
                              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}),
    "gemma2": _GEMMA_NEW,
    "gemma3_text": _GEMMA_NEW | {"rope_local_base_freq", "sliding_window_pattern"},
    # attn_temperature_tuning / floor_scale / attn_scale scale the NoPE layers' queries (element-wise)
    "llama4_text": frozenset({"intermediate_size_mlp", "num_local_experts", "num_experts_per_tok",
                              "interleave_moe_layer_step", "moe_layers", "no_rope_layers", "no_rope_layer_interval",
                              "attention_chunk_size", "attn_temperature_tuning", "floor_scale", "attn_scale",
                              "for_llm_compressor"}),
    # time_step_* initialise dt; residual_in_fp32 / rescale_prenorm_residual / use_mamba_kernels do not
    # change the shapes; expand is superseded by mamba_num_heads x mamba_head_dim
    "nemotron_h": frozenset({"hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                             "n_groups", "conv_kernel", "chunk_size", "expand", "mamba_hidden_act", "mamba_proj_bias",
                             "use_conv_bias", "use_bias", "mlp_hidden_act", "attention_head_dim", "residual_in_fp32",
                             "rescale_prenorm_residual", "use_mamba_kernels", "time_step_min", "time_step_max",
                             "time_step_floor", "time_step_limit", "time_step_rank", "mamba_dt_rank",
                             "mamba_ssm_cache_dtype", "norm_eps",
                             # MoE hybrids (Nemotron 3): routed experts plus one shared expert
                             "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                             "moe_shared_expert_intermediate_size", "n_shared_experts",
                             # LatentMoE (Nemotron 3 Super / Ultra): routed experts at this width
                             "moe_latent_size",
                             # Nemotron 3 Super / Ultra write the pattern as a list of block types, and
                             # their MTP block the same way (num_nextn_predict_layers depths);
                             # moe_shared_expert_overlap is a run-time stream choice
                             "layers_block_type", "mtp_layers_block_type", "moe_shared_expert_overlap"}),
}
# outer fields of the multimodal wrappers besides text_config (the vision tower is not modelled)
WRAPPER_FIELDS = frozenset({"text_config", "vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                            "image_token_id", "mm_tokens_per_image", "multi_modal_projector_bias",
                            "projector_hidden_act", "vision_feature_layer", "vision_feature_select_strategy"})
# transformers' defaults when a config leaves the field out
TIED_DEFAULT = {"gemma": True, "gemma2": True, "gemma3_text": True}
GATED_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu"}
LOCAL_KINDS = {"sliding_attention": "sliding", "chunked_attention": "chunked", "full_attention": None}


def is_hf_config(path: str | Path) -> bool:
    """True when `path` is a JSON file holding an object with a `model_type` (detected by content),
    or a directory (a Hub snapshot) whose config.json is one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        return False
    try:
        with p.open("rb") as f:
            head = f.read(1)
            if head.strip() not in (b"{", b""):
                return False
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and "model_type" in data


def read_hf_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise SpecError("(file)", f"not valid JSON: {e}", "a Hugging Face config.json", str(p)) from None
    if not isinstance(data, dict):
        raise SpecError("(file)", f"top level is {type(data).__name__}", "a JSON object", str(p))
    return data


def load_hf_config(path: str | Path, *, seq_len: int | None = None, model_id: str | None = None) -> ModelSpec:
    """The ModelSpec of the Hugging Face config.json at `path` (see the module docstring)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    stem = p.parent.name if p.stem == "config" and p.parent.name else p.stem
    return spec_from_hf(read_hf_config(p), model_id=model_id or stem, seq_len=seq_len, file=str(p))


def default_seq_len(cfg: dict[str, Any]) -> int:
    """The pretraining context: rope_scaling.original_max_position_embeddings, else
    original_max_position_embeddings / initial_context_length, else max_position_embeddings."""
    rope = cfg.get("rope_scaling") or {}
    for v in (rope.get("original_max_position_embeddings") if isinstance(rope, dict) else None,
              cfg.get("original_max_position_embeddings"), cfg.get("initial_context_length"),
              cfg.get("max_position_embeddings")):
        if isinstance(v, int) and v > 0:
            return v
    return 4096


def _unwrap(cfg: dict[str, Any], file: str) -> tuple[dict[str, Any], list[str]]:
    """A multimodal wrapper's text_config (its model type and untied / tied flag filled in from
    the wrapper), else the config itself."""
    mt = cfg.get("model_type")
    if mt not in WRAPPERS:
        return cfg, []
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise SpecError("text_config", f"{text!r}", f"the {mt} text model's configuration (an object)", file)
    unknown = sorted(k for k in cfg if k not in NEUTRAL | WRAPPER_FIELDS)
    if unknown:
        raise SpecError(unknown[0], f"unknown {mt} config field(s) {', '.join(unknown)}",
                        "text_config, vision_config and the image-token fields", file)
    inner = {**text, "model_type": text.get("model_type", WRAPPERS[mt])}
    if inner["model_type"] != WRAPPERS[mt]:
        raise SpecError("text_config.model_type", f"{inner['model_type']!r} inside a {mt} config",
                        repr(WRAPPERS[mt]), file)
    if "tie_word_embeddings" in cfg and "tie_word_embeddings" not in inner:
        inner["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    inner.setdefault("architectures", cfg.get("architectures"))
    return inner, [f"text model of a {mt} config (the vision encoder and projector are not modelled)"]


def spec_from_hf(cfg: dict[str, Any], *, model_id: str, seq_len: int | None = None, file: str = "config.json") -> ModelSpec:
    mt0 = cfg.get("model_type")
    if mt0 is None:
        raise SpecError("model_type", "missing", f"one of: {', '.join(SUPPORTED)}", file)
    if mt0 in UNSUPPORTED:
        raise SpecError("model_type", f"{mt0!r} needs {UNSUPPORTED[mt0]}, which perfmodel does not model yet",
                        f"one of: {', '.join(SUPPORTED)}", file)
    if mt0 not in SUPPORTED:
        raise SpecError("model_type", f"unknown model type {mt0!r}", f"one of: {', '.join(SUPPORTED)}", file)
    cfg, notes = _unwrap(cfg, file)
    mt = str(cfg["model_type"])
    known = NEUTRAL | COMMON | EXTRA.get(mt, frozenset())
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        raise SpecError(unknown[0], f"unknown {mt} config field(s) {', '.join(unknown)}: perfmodel cannot tell "
                        "whether they change the model's shapes", "a field of the transformers "
                        f"{mt} configuration that perfmodel maps (remove it if it does not change the architecture)", file)
    seq = seq_len or default_seq_len(cfg)

    def need(key: str) -> int:
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise SpecError(key, f"{v!r}", "a positive integer", file)
        return v

    heads = need("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    act_field = "mlp_hidden_act" if mt == "nemotron_h" else ("hidden_activation" if cfg.get("hidden_activation") else "hidden_act")
    act = cfg.get(act_field) or "silu"
    acts = {"relu2": "squared_relu"} if mt == "nemotron_h" else GATED_ACTS
    if act not in acts:
        raise SpecError(act_field, f"{act!r}", f"one of: {', '.join(acts)}", file)
    bias_fields = ("use_bias", "use_bias") if mt == "nemotron_h" else ("attention_bias", "mlp_bias")
    attn_bias, mlp_bias = bool(cfg.get(bias_fields[0], False)), bool(cfg.get(bias_fields[1], False))
    notes.insert(0, f"imported from a Hugging Face {mt} config.json")
    if mt == "qwen2":
        notes.append("q/k/v biases not counted (h + 2 kv d per layer)")
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        notes.append("q/k RMSNorm weights not counted (2 d per layer)")
    if mt in ("gemma2", "gemma3_text"):
        notes.append("post-attention and post-FFN norms not counted (2 h per layer)")
    if cfg.get("attn_logit_softcapping") or cfg.get("final_logit_softcapping"):
        notes.append("logit soft-capping not modelled (a few element-wise FLOPs per attention score and per logit)")
    if mt == "llama4_text":
        notes.append("QK L2-norm has no weights; NoPE layers' query temperature is element-wise")
    if attn_bias != mlp_bias and mt != "gpt_oss":
        raise SpecError("attention_bias", f"attention_bias {attn_bias} with mlp_bias {mlp_bias}",
                        "both true or both false (ModelSpec has one bias switch)", file)
    blocks = cfg.get("layers_block_type")
    if mt == "nemotron_h" and cfg.get("num_hidden_layers") is None and isinstance(blocks, list):
        L = len(blocks)  # Nemotron 3 Super / Ultra leave num_hidden_layers null
    else:
        L = need("num_hidden_layers")
    data: dict[str, Any] = {
        "id": model_id, "name": str((cfg.get("architectures") or [mt])[0]) + f" ({model_id})", "family": "dense",
        "source": f"Hugging Face config.json {file}", "num_layers": L,
        "hidden": need("hidden_size"), "seq_len": seq, "ffn_hidden": cfg.get("intermediate_size"),
        "num_heads": heads, "num_kv_heads": kv, "vocab": need("vocab_size"), "norm": "rmsnorm",
        "activation": acts[act], "position": "rope",
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", TIED_DEFAULT.get(mt, False))),
        "bias": attn_bias, "attention": "gqa" if kv < heads else "mha",
    }
    hd = cfg.get("attention_head_dim") or cfg.get("head_dim")
    if hd and hd * heads != data["hidden"]:
        data["head_dim"] = hd
    moe_layers: list[bool] | None = None
    if mt in MOE_TYPES:
        fields, moe_layers = _moe_fields(cfg, mt, need, L, file)
        data.update(fields)
        if mt == "deepseek_v3" and cfg.get("num_nextn_predict_layers"):
            notes.append("the multi-token-prediction module is not modelled")
    if mt == "nemotron_h":
        data.update(_nemotron_h_fields(cfg, need, L, file))
    data.update(_local_attention(cfg, mt, L, file))
    if moe_layers is not None:
        data.update(_moe_placement(moe_layers, data, file))
    data["notes"] = "; ".join(notes)
    try:
        return ModelSpec.model_validate(data)
    except SpecError as e:
        raise e.in_file(file) from None


def _local_layers(cfg: dict[str, Any], mt: str, L: int, file: str) -> list[bool]:
    """Per layer: does its attention see only a window / chunk (True) or the whole prefix."""
    layer_types = cfg.get("layer_types")
    if layer_types:
        if not isinstance(layer_types, list) or len(layer_types) != L:
            raise SpecError("layer_types", f"{layer_types!r}", f"a list of num_hidden_layers = {L} layer kinds", file)
        bad = sorted({str(t) for t in layer_types if t not in LOCAL_KINDS})
        if bad:
            raise SpecError("layer_types", f"unknown layer kinds {bad}", f"each one of {', '.join(LOCAL_KINDS)}", file)
        return [LOCAL_KINDS[t] is not None for t in layer_types]
    if mt == "gemma2":  # transformers' Gemma2: even layers slide, odd layers are global
        return [(i + 1) % 2 != 0 for i in range(L)]
    if mt == "gemma3_text":
        p = cfg.get("sliding_window_pattern", 6)
        if not isinstance(p, int) or p <= 0:
            raise SpecError("sliding_window_pattern", f"{p!r}", "a positive integer", file)
        return [(i + 1) % p != 0 for i in range(L)]
    if mt == "llama4_text":  # chunked attention on the RoPE layers; the NoPE layers see everything
        if not cfg.get("attention_chunk_size"):
            return [False] * L
        rope = cfg.get("no_rope_layers") or [int((i + 1) % (cfg.get("no_rope_layer_interval") or 4) != 0)
                                             for i in range(L)]
        if not isinstance(rope, list) or len(rope) != L:
            raise SpecError("no_rope_layers", f"{rope!r}", f"a list of num_hidden_layers = {L} flags (1 RoPE, 0 NoPE)", file)
        return [bool(r) for r in rope]
    if not cfg.get("sliding_window") or cfg.get("use_sliding_window", mt not in ("qwen2", "qwen3", "qwen3_moe")) is False:
        return [False] * L
    if mt in ("qwen2", "qwen3", "qwen3_moe"):  # transformers' Qwen2: layers from max_window_layers on slide
        first = cfg.get("max_window_layers", L)
        return [i >= first for i in range(L)]
    return [True] * L


def _local_attention(cfg: dict[str, Any], mt: str, L: int, file: str) -> dict[str, Any]:
    """ModelSpec's sliding_window / attention_chunk, global_every and attention_sink_logits."""
    local = _local_layers(cfg, mt, L, file)
    out: dict[str, Any] = {"attention_sink_logits": True} if mt == "gpt_oss" else {}
    if not any(local):
        return out
    key = "attention_chunk_size" if mt == "llama4_text" else "sliding_window"
    w = cfg.get(key)
    if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
        raise SpecError(key, f"{w!r} with local attention layers", "a positive integer (tokens)", file)
    out["attention_chunk" if mt == "llama4_text" else "sliding_window"] = w
    if all(local):
        return out
    k = local.index(False) + 1
    if local != [(i + 1) % k != 0 for i in range(L)]:
        layout = "".join("L" if x else "G" for x in local)
        field = "layer_types" if cfg.get("layer_types") else {"llama4_text": "no_rope_layers",
                                                               "gemma3_text": "sliding_window_pattern"}.get(mt, "max_window_layers")
        raise SpecError(field, f"local (L) / global (G) attention layers {layout}: ModelSpec places global layers "
                        "only at every k-th attention layer (global_every)", "a layout with layer i global exactly "
                        "when (i + 1) % k == 0, or all local", file)
    out["global_every"] = k
    return out


def _moe_fields(cfg: dict[str, Any], mt: str, need: Callable[[str], int], L: int,
                file: str) -> tuple[dict[str, Any], list[bool]]:
    """The MoE sizes and, per layer, whether its FFN is MoE (transformers' placement rule)."""
    out: dict[str, Any] = {"family": "moe", "top_k": need("num_experts_per_tok")}
    if mt in ("mixtral", "gpt_oss"):
        out.update(num_experts=need("num_local_experts"), moe_ffn_hidden=need("intermediate_size"), ffn_hidden=None)
        return out, [True] * L
    if mt == "qwen3_moe":
        step = cfg.get("decoder_sparse_step", 1) or 1
        dense = cfg.get("mlp_only_layers") or []
        if not isinstance(dense, list) or any(not isinstance(i, int) or not 0 <= i < L for i in dense):
            raise SpecError("mlp_only_layers", f"{dense!r}", f"a list of layer indices in [0, {L})", file)
        out.update(num_experts=need("num_experts"), moe_ffn_hidden=need("moe_intermediate_size"))
        return out, [(i + 1) % step == 0 and i not in dense for i in range(L)]
    if mt == "llama4_text":
        out.update(num_experts=need("num_local_experts"), moe_ffn_hidden=need("intermediate_size"),
                   num_shared_experts=1, ffn_hidden=need("intermediate_size_mlp"))
        listed = cfg.get("moe_layers")
        if listed is None:
            step = need("interleave_moe_layer_step")
            listed = list(range(step - 1, L, step))
        if not isinstance(listed, list) or any(not isinstance(i, int) or not 0 <= i < L for i in listed):
            raise SpecError("moe_layers", f"{listed!r}", f"a list of layer indices in [0, {L})", file)
        return out, [i in listed for i in range(L)]
    # deepseek_v3
    if cfg.get("q_lora_rank") is not None and (not isinstance(cfg["q_lora_rank"], int) or cfg["q_lora_rank"] <= 0):
        raise SpecError("q_lora_rank", f"{cfg['q_lora_rank']!r}",
                        "a positive integer (a compressed query, as DeepSeek-V3) or null (one query projection, "
                        "as DeepSeek-V2-Lite)", file)
    out.update(num_experts=need("n_routed_experts"), moe_ffn_hidden=need("moe_intermediate_size"),
               num_shared_experts=cfg.get("n_shared_experts") or 0, attention="mla", num_kv_heads=None,
               mla={"q_lora_rank": cfg.get("q_lora_rank"),
                    **{k: need(k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}})
    groups, group_topk = cfg.get("n_group"), cfg.get("topk_group")
    if isinstance(groups, int) and groups > 1 and isinstance(group_topk, int) and group_topk < groups:
        out.update(moe_router_groups=groups, moe_router_group_topk=group_topk)  # group-limited routing
    first, freq = cfg.get("first_k_dense_replace") or 0, cfg.get("moe_layer_freq") or 1
    return out, [i >= first and i % freq == 0 for i in range(L)]


def _moe_placement(moe: list[bool], data: dict[str, Any], file: str) -> dict[str, Any]:
    """first_dense_layers / moe_layer_freq where they reproduce the MoE layers; otherwise a layer
    pattern with one attention (*) and one FFN symbol (E MoE, - dense) per layer."""
    L = len(moe)
    if not any(moe):
        return {"family": "dense", "num_experts": None, "top_k": None, "moe_ffn_hidden": None, "num_shared_experts": 0}
    first = moe.index(True)
    rest = [i for i in range(first + 1, L) if moe[i]]
    freq = rest[0] - first if rest else L
    if moe == [i >= first and (i - first) % freq == 0 for i in range(L)]:
        return {"first_dense_layers": first, "moe_layer_freq": freq}
    if data.get("ffn_hidden") is None:
        raise SpecError("intermediate_size", "missing, but some layers have a dense MLP", "a positive integer", file)
    return {"layer_pattern": "".join("*E" if m else "*-" for m in moe), "num_layers": 2 * L}


NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _block_symbols(cfg: dict[str, Any], key: str, file: str) -> str | None:
    """A NemotronH list of block types (layers_block_type, mtp_layers_block_type) as a pattern."""
    blocks = cfg.get(key)
    if blocks is None:
        return None
    bad = [b for b in blocks if b not in NEMOTRON_BLOCKS] if isinstance(blocks, list) else [blocks]
    if bad:
        raise SpecError(key, f"unknown block type(s) {bad}", f"a list of {', '.join(NEMOTRON_BLOCKS)}", file)
    return "".join(NEMOTRON_BLOCKS[b] for b in blocks)


def _nemotron_h_fields(cfg: dict[str, Any], need: Callable[[str], int], L: int, file: str) -> dict[str, Any]:
    pattern = cfg.get("hybrid_override_pattern") or _block_symbols(cfg, "layers_block_type", file)
    if not isinstance(pattern, str) or len(pattern) != L:
        raise SpecError("hybrid_override_pattern", f"{pattern!r}",
                        f"a string of num_hidden_layers = {L} symbols (M Mamba-2, * attention, - MLP, E MoE), or a "
                        "layers_block_type list", file)
    if cfg.get("mamba_proj_bias"):
        raise SpecError("mamba_proj_bias", "true: biases on the Mamba-2 in / out projections are not modelled", "false", file)
    if cfg.get("use_conv_bias") is False:
        raise SpecError("use_conv_bias", "false: perfmodel's Mamba-2 mixer has a conv1d bias", "true", file)
    if (cfg.get("mamba_hidden_act") or "silu") != "silu":
        raise SpecError("mamba_hidden_act", f"{cfg.get('mamba_hidden_act')!r}", "'silu'", file)
    out: dict[str, Any] = {}
    if "E" in pattern:
        width = need("moe_intermediate_size")
        shared = (cfg.get("moe_shared_expert_intermediate_size") or 0) * (cfg.get("n_shared_experts") or 1)
        if shared % width:
            raise SpecError("moe_shared_expert_intermediate_size", f"{shared} (x n_shared_experts) is not a multiple of "
                            f"moe_intermediate_size {width}", "a multiple (ModelSpec sizes the shared expert as "
                            "num_shared_experts routed-expert widths)", file)
        out = {"family": "moe", "num_experts": need("n_routed_experts"), "top_k": need("num_experts_per_tok"),
               "moe_ffn_hidden": width, "num_shared_experts": shared // width,
               "moe_latent_size": cfg.get("moe_latent_size")}
        if "-" not in pattern:
            out["ffn_hidden"] = None
    mtp = _block_symbols(cfg, "mtp_layers_block_type", file)
    if mtp:
        # the checkpoint's MTP block, run num_nextn_predict_layers times with its own weights each
        out |= {"mtp_pattern": mtp, "mtp_depth": cfg.get("num_nextn_predict_layers") or 1}
    return out | {"layer_pattern": pattern, "position": "none",
            "mamba": {"num_heads": need("mamba_num_heads"), "head_dim": need("mamba_head_dim"),
                      "state_dim": need("ssm_state_size"), "num_groups": cfg.get("n_groups") or 1,
                      "conv_kernel": cfg.get("conv_kernel") or 4, "chunk_size": cfg.get("chunk_size") or 128}}


def param_counts(spec: ModelSpec) -> tuple[float, float]:
    """(total, active per token) unsharded parameters of `spec`, from its built graph."""
    from perfmodel.workload.builder import build_graph

    g = build_graph(spec, seq_len=min(spec.seq_len, 128) if spec.is_transformer else None)
    return g.total_params_full(), g.active_params_full()


def spec_yaml(spec: ModelSpec) -> str:
    """The workload YAML of `spec` (fields left at their defaults are omitted)."""
    import yaml

    data = spec.model_dump(exclude_defaults=True)
    for k in ("id", "name", "family", "source"):
        data[k] = getattr(spec, k)
    order = ["id", "name", "family", "source"]
    ordered = {k: data[k] for k in order} | {k: v for k, v in data.items() if k not in order}
    return str(yaml.safe_dump(ordered, sort_keys=False, width=120))
