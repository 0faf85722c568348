"""Hugging Face `config.json` -> ModelSpec, read from the config's own fields (no `transformers`).

    >>> from perfmodel.workload.hf_config import load_hf_config
    >>> spec = load_hf_config("Qwen3-30B-A3B/config.json")      # a strict ModelSpec
    >>> spec.num_experts, spec.top_k, spec.moe_ffn_hidden
    (128, 8, 768)

Mapped model types (the field names are those of the `transformers` configuration classes):

- llama, mistral, qwen2, qwen3, phi3, gemma (dense): num_hidden_layers, hidden_size,
  intermediate_size, num_attention_heads, num_key_value_heads, head_dim, vocab_size, hidden_act
  (or hidden_activation), tie_word_embeddings, attention_bias / mlp_bias;
- mixtral (moe): + num_local_experts, num_experts_per_tok (expert width = intermediate_size);
- qwen3_moe (moe): + num_experts, num_experts_per_tok, moe_intermediate_size,
  decoder_sparse_step, mlp_only_layers (must be empty);
- deepseek_v3 (moe + MLA): + n_routed_experts, n_shared_experts, moe_intermediate_size,
  first_k_dense_replace, moe_layer_freq, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim.

Refused with an error naming the feature, because ModelSpec cannot yet express it and a model
without it would be silently wrong: a sliding window shorter than the sequence (Mistral v0.1
beyond 4096 tokens, Phi-3 4k beyond 2047, gpt-oss's alternating sliding / full layers and
attention sinks), hybrid Mamba-2 layer patterns (Nemotron-H), and the model types listed in
`UNSUPPORTED`. A field this module does not know is an error too: it may change the shapes.

Small terms not modelled, named here so that nobody mistakes them for errors: Qwen2's q/k/v
biases (h + 2·kv·d per layer, 4,608 parameters of Qwen2.5-7B's 233 M per layer), Qwen3's q/k
RMSNorm weights (2·d per layer), DeepSeek-V3's multi-token-prediction module (its published
671 B total excludes it too), gpt-oss's expert biases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfmodel.errors import SpecError
from perfmodel.workload.spec import ModelSpec

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma")
MOE_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss")
SUPPORTED = DENSE_TYPES + MOE_TYPES

UNSUPPORTED: dict[str, str] = {
    "nemotron_h": "the hybrid Mamba-2 / attention / MLP layer pattern (hybrid_override_pattern)",
    "jamba": "hybrid Mamba / attention layers",
    "gemma2": "alternating sliding-window / full attention and logit soft-capping",
    "gemma3": "alternating sliding-window / full attention (layer_types)",
    "gemma3_text": "alternating sliding-window / full attention (layer_types)",
    "llama4": "chunked attention and alternating dense / MoE layers",
    "llama4_text": "chunked attention and alternating dense / MoE layers",
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
    "ep_size", "quantization_config", "max_window_layers", "use_mrope", "swiglu_limit", "num_logits_to_keep",
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
EXTRA: dict[str, frozenset[str]] = {
    "mixtral": frozenset({"num_local_experts", "num_experts_per_tok"}),
    "gpt_oss": frozenset({"num_local_experts", "num_experts_per_tok"}),
    "qwen3_moe": frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                            "mlp_only_layers"}),
    "deepseek_v3": frozenset({"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                              "first_k_dense_replace", "moe_layer_freq", "q_lora_rank", "kv_lora_rank",
                              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}),
}
# transformers' defaults when a config leaves the field out
TIED_DEFAULT = {"gemma": True}
GATED_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu"}


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


def spec_from_hf(cfg: dict[str, Any], *, model_id: str, seq_len: int | None = None, file: str = "config.json") -> ModelSpec:
    mt = cfg.get("model_type")
    if mt is None:
        raise SpecError("model_type", "missing", f"one of: {', '.join(SUPPORTED)}", file)
    if mt in UNSUPPORTED:
        raise SpecError("model_type", f"{mt!r} needs {UNSUPPORTED[mt]}, which perfmodel does not model yet",
                        f"one of: {', '.join(SUPPORTED)}", file)
    if mt not in SUPPORTED:
        raise SpecError("model_type", f"unknown model type {mt!r}", f"one of: {', '.join(SUPPORTED)}", file)
    known = NEUTRAL | COMMON | EXTRA.get(mt, frozenset())
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        raise SpecError(unknown[0], f"unknown {mt} config field(s) {', '.join(unknown)}: perfmodel cannot tell "
                        "whether they change the model's shapes", "a field of the transformers "
                        f"{mt} configuration that perfmodel maps (remove it if it does not change the architecture)", file)
    seq = seq_len or default_seq_len(cfg)
    _check_attention_window(cfg, mt, seq, file)

    def need(key: str) -> int:
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise SpecError(key, f"{v!r}", "a positive integer", file)
        return v

    heads = need("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    act = cfg.get("hidden_activation") or cfg.get("hidden_act", "silu")
    if act not in GATED_ACTS:
        raise SpecError("hidden_act", f"{act!r}", f"one of: {', '.join(GATED_ACTS)} (gated MLP)", file)
    attn_bias, mlp_bias = bool(cfg.get("attention_bias", False)), bool(cfg.get("mlp_bias", False))
    notes = [f"imported from a Hugging Face {mt} config.json"]
    if mt == "qwen2":
        notes.append("q/k/v biases not counted (h + 2 kv d per layer)")
    if mt == "qwen3" or mt == "qwen3_moe":
        notes.append("q/k RMSNorm weights not counted (2 d per layer)")
    if attn_bias != mlp_bias and mt != "gpt_oss":
        raise SpecError("attention_bias", f"attention_bias {attn_bias} with mlp_bias {mlp_bias}",
                        "both true or both false (ModelSpec has one bias switch)", file)
    data: dict[str, Any] = {
        "id": model_id, "name": str((cfg.get("architectures") or [mt])[0]) + f" ({model_id})", "family": "dense",
        "source": f"Hugging Face config.json {file}", "num_layers": need("num_hidden_layers"),
        "hidden": need("hidden_size"), "seq_len": seq, "ffn_hidden": cfg.get("intermediate_size"),
        "num_heads": heads, "num_kv_heads": kv, "vocab": need("vocab_size"), "norm": "rmsnorm",
        "activation": GATED_ACTS[act], "position": "rope",
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", TIED_DEFAULT.get(mt, False))),
        "bias": attn_bias, "attention": "gqa" if kv < heads else "mha",
    }
    if cfg.get("head_dim") and cfg["head_dim"] * heads != data["hidden"]:
        data["head_dim"] = cfg["head_dim"]
    if mt in MOE_TYPES:
        data.update(_moe_fields(cfg, mt, need, file))
        if mt == "deepseek_v3" and cfg.get("num_nextn_predict_layers"):
            notes.append("the multi-token-prediction module is not modelled")
    data["notes"] = "; ".join(notes)
    try:
        return ModelSpec.model_validate(data)
    except SpecError as e:
        raise e.in_file(file) from None


def _check_attention_window(cfg: dict[str, Any], mt: str, seq: int, file: str) -> None:
    layer_types = cfg.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        kinds = sorted(set(layer_types))
        raise SpecError("layer_types", f"layers of kinds {kinds} (e.g. sliding-window attention alternating with "
                        f"full attention{', with attention sinks' if mt == 'gpt_oss' else ''}): perfmodel's ModelSpec "
                        "has no per-layer attention kinds yet", "every layer 'full_attention'", file)
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", True) is not False and window < seq:
        raise SpecError("sliding_window", f"{window} tokens is shorter than seq_len {seq}: perfmodel does not model "
                        "sliding-window attention yet", f"seq_len <= {window} (pass --seq-len {window}), or a config "
                        "without a sliding window", file)


def _moe_fields(cfg: dict[str, Any], mt: str, need: Any, file: str) -> dict[str, Any]:
    out: dict[str, Any] = {"family": "moe", "top_k": need("num_experts_per_tok")}
    if mt in ("mixtral", "gpt_oss"):
        out.update(num_experts=need("num_local_experts"), moe_ffn_hidden=need("intermediate_size"), ffn_hidden=None)
    elif mt == "qwen3_moe":
        if cfg.get("mlp_only_layers"):
            raise SpecError("mlp_only_layers", f"{cfg['mlp_only_layers']}: dense layers at chosen positions",
                            "[] (ModelSpec places dense layers only first or every k-th)", file)
        out.update(num_experts=need("num_experts"), moe_ffn_hidden=need("moe_intermediate_size"),
                   moe_layer_freq=cfg.get("decoder_sparse_step", 1))
    else:  # deepseek_v3
        if not cfg.get("q_lora_rank"):
            raise SpecError("q_lora_rank", f"{cfg.get('q_lora_rank')!r} (queries without a low-rank projection)",
                            "a positive integer (MLA with a compressed query, as DeepSeek-V3)", file)
        out.update(num_experts=need("n_routed_experts"), moe_ffn_hidden=need("moe_intermediate_size"),
                   num_shared_experts=cfg.get("n_shared_experts") or 0,
                   first_dense_layers=cfg.get("first_k_dense_replace") or 0,
                   moe_layer_freq=cfg.get("moe_layer_freq") or 1, attention="mla", num_kv_heads=None,
                   mla={k: need(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                             "v_head_dim")})
    return out


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
