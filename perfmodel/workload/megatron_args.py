"""A Megatron-LM / Megatron-Bridge argument list -> (ModelSpec, layout settings).

    >>> from perfmodel.workload.megatron_args import parse_megatron_args
    >>> job = parse_megatron_args("--num-layers 32 --hidden-size 4096 ... --tensor-model-parallel-size 8")
    >>> job.spec, job.layout          # a ModelSpec and {"tp": 8, "pp": 1, ...}

Accepted forms: Megatron-LM flags (`--num-layers 32`, `--swiglu`), the same with `=`
(`--num-layers=32`), and Megatron-Bridge / NeMo overrides (`model.num_layers=32`,
`model.tensor_model_parallel_size=8`: the last dotted component, underscores for dashes). A file
may hold one argument per line, bash arrays (`MODEL_ARGS=( ... )`) and `#` comments; a value that
is still a shell variable (`$DATA_PATH`) is an error only where perfmodel needs it. A Bridge
override set to Python's or YAML's nothing (`model.virtual_pipeline_model_parallel_size=None`, how
Bridge prints a field it leaves unset) is an argument not given: Megatron's default holds.

What is read (Megatron's defaults where the list is silent):
- model: --num-layers, --hidden-size, --ffn-hidden-size (4h), --num-attention-heads,
  --group-query-attention + --num-query-groups, --kv-channels, --seq-length, --vocab-size or
  --tokenizer-type (GPT2BPETokenizer 50257, Llama2Tokenizer 32000), padded like Megatron to a
  multiple of --make-vocab-size-divisible-by (128) x tp, --swiglu, --normalization,
  --position-embedding-type / --use-rotary-position-embeddings / --no-position-embedding,
  --untie-embeddings-and-output-weights (Megatron ties by default), --disable-bias-linear;
  MoE: --num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size,
  --moe-layer-freq (an integer or a Python list pattern of 0/1 such as `([0]*3+[1]*58)`),
  --moe-latent-size (LatentMoE); hybrid models: --hybrid-layer-pattern / --hybrid-override-pattern
  (with '/'-separated MTP depths), --mamba-num-heads, --mamba-head-dim, --mamba-state-dim,
  --mamba-num-groups, --squared-relu, --mtp-use-repeated-layer;
  MLA: --multi-latent-attention, --q-lora-rank, --kv-lora-rank, --qk-head-dim,
  --qk-pos-emb-head-dim, --v-head-dim.
- layout: --tensor-model-parallel-size, --pipeline-model-parallel-size,
  --num-layers-per-virtual-pipeline-stage or --virtual-pipeline-model-parallel-size,
  --context-parallel-size, --expert-model-parallel-size, --expert-tensor-parallel-size,
  --sequence-parallel (ignored by Megatron when tp = 1, and here), --recompute-granularity
  (full / selective) or --recompute-activations (selective) with --recompute-modules (the
  modules selective recompute reruns, default core_attn) or, under full, --recompute-method
  (uniform / block) and --recompute-num-layers, --micro-batch-size,
  --global-batch-size, --fp8-format (fp8 GEMMs) with --fp8-recipe (delayed, tensorwise = current
  scaling, blockwise, mxfp8), --fp4-format / --fp4-recipe (nvfp4), --fp16 / --bf16, --optimizer
  (adam = AdamW, sgd) with --exp-avg-dtype / --exp-avg-sq-dtype (fp32, or bf16 for both: adamw-bf16),
  --use-distributed-optimizer (ZeRO-1), --use-torch-fsdp2 / --use-custom-fsdp (ZeRO-3),
  --activation-func-fp8-input-store (SwiGLU inputs kept in fp8).
- MoE mechanisms: --moe-grouped-gemm (with or without it Megatron-Core issues one GEMM per local
  expert: expert_gemm per-expert), --moe-token-dispatcher-type (alltoall / flex), --overlap-moe-expert-parallel-comm,
  --moe-shared-expert-overlap, --moe-router-force-load-balancing (balanced routing: moe_imbalance 1),
  --moe-flex-dispatcher-num-sms (or the deprecated --moe-deepep-num-sms / --moe-hybridep-num-sms).
- CUDA graphs: --cuda-graph-impl (none / local / transformer_engine / full_iteration) with
  --cuda-graph-modules (or --cuda-graph-scope), and the deprecated --enable-cuda-graph /
  --external-cuda-graph: whole transformer layers graphed or not (see _cuda_graphs).
Every other argument (learning rate, data, logging...) does not change a step's shapes and is
listed in `ignored` so that the caller can show it.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.errors import LayoutError, SpecError
from perfmodel.workload.module_recompute import MODULES, OP_POLICY, parse_selective
from perfmodel.workload.spec import ModelSpec

TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000, "BertWordPieceLowerCase": 30522,
                   "BertWordPieceCase": 28996}
FLAGS = frozenset({"swiglu", "untie-embeddings-and-output-weights", "disable-bias-linear", "group-query-attention",
                   "sequence-parallel", "recompute-activations", "fp16", "bf16", "use-distributed-optimizer",
                   "use-torch-fsdp2", "use-custom-fsdp", "multi-latent-attention", "use-rotary-position-embeddings",
                   "no-position-embedding", "add-qkv-bias", "squared-relu", "is-hybrid-model",
                   "mtp-use-repeated-layer", "moe-router-force-load-balancing", "overlap-moe-expert-parallel-comm",
                   "moe-shared-expert-overlap", "enable-cuda-graph", "external-cuda-graph",
                   "activation-func-fp8-input-store", "use-precision-aware-optimizer", "moe-grouped-gemm"})
VALUED = frozenset({"num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups",
                    "kv-channels", "seq-length", "vocab-size", "tokenizer-type", "make-vocab-size-divisible-by",
                    "normalization", "position-embedding-type", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
                    "moe-shared-expert-intermediate-size", "moe-layer-freq", "q-lora-rank", "kv-lora-rank", "qk-head-dim",
                    "qk-pos-emb-head-dim", "v-head-dim", "tensor-model-parallel-size", "pipeline-model-parallel-size",
                    "num-layers-per-virtual-pipeline-stage", "virtual-pipeline-model-parallel-size",
                    "context-parallel-size", "expert-model-parallel-size", "expert-tensor-parallel-size",
                    "recompute-granularity", "recompute-method", "recompute-num-layers",
                    "micro-batch-size", "global-batch-size", "fp8-format", "fp8", "fp8-recipe",
                    "fp4-format", "fp4-recipe", "optimizer", "moe-latent-size", "hybrid-layer-pattern",
                    "hybrid-override-pattern", "mamba-num-heads", "mamba-head-dim", "mamba-state-dim", "mamba-num-groups",
                    "mtp-num-layers", "moe-token-dispatcher-type", "moe-flex-dispatcher-num-sms", "moe-deepep-num-sms",
                    "moe-hybridep-num-sms", "cuda-graph-impl", "exp-avg-dtype", "exp-avg-sq-dtype"})
LISTED = frozenset({"recompute-modules", "cuda-graph-modules"})  # nargs='*' arguments
# Megatron's --fp8-recipe / --fp4-recipe -> (precision, perfmodel fp8_recipe)
RECIPES = {"delayed": ("fp8", "delayed"), "tensorwise": ("fp8", "current"), "blockwise": ("fp8", "blockwise"),
           "mxfp8": ("mxfp8", "mxfp8"), "nvfp4": ("nvfp4", "nvfp4")}
ALIASES = {"tensor-parallel-size": "tensor-model-parallel-size", "pipeline-parallel-size": "pipeline-model-parallel-size",
           "moe-router-top-k": "moe-router-topk", "num-moe-experts": "num-experts",
           "gated-linear-unit": "swiglu", "cuda-graph-scope": "cuda-graph-modules"}
# How Megatron-Core issues an MoE layer's expert GEMMs, one per local expert either way:
# --moe-grouped-gemm builds TEGroupedMLP, whose Transformer Engine GroupedLinear runs one cuBLASLt
# GEMM per expert over 4 streams (ParallelPlan.expert_gemm `per-expert`); without it SequentialMLP
# loops over the experts, a GEMM pair and an activation per expert on one stream, which
# `per-expert` undercounts by the activation launches (a lower bound).
MEGATRON_EXPERT_GEMM = "per-expert"
UNSET = ("None", "null", "Null", "NULL", "~")  # a Bridge override's value for "not given": Python's / YAML's nothing
BRIDGE_BOOL = {"true": True, "false": False, "1": True, "0": False}


@dataclass(frozen=True)
class MegatronJob:
    spec: ModelSpec
    layout: dict[str, Any]  # tp, pp, vp, cp, ep, etp, sp, zero, micro_batch, global_batch, seq_len, recompute, precision
    ignored: tuple[str, ...] = field(default_factory=tuple)


def tokens(text: str) -> list[str]:
    """Shell-like tokens of an argument list or file: comments, line continuations, bash array
    brackets and launcher words dropped."""
    text = text.replace("\\\n", " ")
    out: list[str] = []
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise SpecError("(arguments)", f"cannot split {line!r}: {e}", "shell-quoted arguments") from None
        for w in words:
            if w in ("(", ")") or w.endswith("=(") or w.startswith("${"):
                continue
            out.append(w)
    return out


def parse_arg_list(words: list[str]) -> tuple[dict[str, Any], list[str]]:
    """{normalised name: value or True} for the arguments perfmodel reads, and the others."""
    got: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            name = ALIASES.get(name, name)
            takes = not eq and i + 1 < len(words) and not words[i + 1].startswith("--")
            if name in FLAGS:
                got[name] = True if not eq else BRIDGE_BOOL.get(value.lower(), True)
            elif name in LISTED:
                # nargs='*' (Megatron-LM arguments.py): the words up to the next flag
                vals = [value] if eq else []
                while not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                    vals.append(words[i + 1])
                    i += 1
                got[name] = ",".join(vals)
            elif name in VALUED:
                if not eq and not takes:
                    raise SpecError(f"--{name}", "has no value", "a value after the flag")
                got[name] = value if eq else words[i + 1]
                i += 0 if eq else 1
            else:
                if takes:
                    # a value belongs to the flag unless the next word is another flag (Megatron has no
                    # positional arguments), so skip it; rampup-batch-size takes three
                    n = 3 if name == "rampup-batch-size" else 1
                    i += n
                ignored.append(f"--{name}")
        elif "=" in w:  # Megatron-Bridge / NeMo override: model.tensor_model_parallel_size=8
            key, _, value = w.partition("=")
            last = key.rsplit(".", 1)[-1].replace("_", "-")
            name = ALIASES.get(last, last)
            if value in UNSET and name in FLAGS | VALUED | LISTED:
                # Bridge prints a field it leaves unset as `None` (virtual_pipeline_model_parallel_size=None):
                # the argument is not given and Megatron's default holds; a later override wins, so it
                # also clears an earlier value
                got.pop(name, None)
            elif name in FLAGS:
                got[name] = BRIDGE_BOOL.get(value.lower(), True)
            elif name in VALUED:
                got[name] = value
            elif name in LISTED:  # a Hydra / Python list: [layernorm,moe_act] or ['layernorm', 'moe_act']
                got[name] = ",".join(v.strip(" '\"") for v in value.strip("[]").split(",") if v.strip(" '\""))
            elif name == "share-embeddings-and-output-weights":
                got["untie-embeddings-and-output-weights"] = not BRIDGE_BOOL.get(value.lower(), True)
            elif name == "add-bias-linear":
                got["disable-bias-linear"] = not BRIDGE_BOOL.get(value.lower(), True)
            else:
                ignored.append(key)
        i += 1
    return got, ignored


def _int(got: dict[str, Any], name: str, default: int | None = None) -> int:
    v = got.get(name, default)
    if v is None:
        raise SpecError(f"--{name}", "not given", "a positive integer")
    try:
        n = int(str(v))
    except ValueError:
        hint = " (a shell variable: put its value in the list)" if str(v).startswith("$") else ""
        raise SpecError(f"--{name}", f"{v!r} is not an integer{hint}", "a positive integer") from None
    if n <= 0:
        raise SpecError(f"--{name}", f"{n}", "a positive integer")
    return n


def moe_layer_pattern(value: str, num_layers: int) -> tuple[int, int]:
    """(first dense layers, every k-th) of --moe-layer-freq: an integer k, or a Python list
    expression of 0/1 per layer such as `([0]*3+[1]*58)`; other patterns are an error."""
    v = value.strip()
    if v.isdigit():
        return 0, int(v)
    try:
        pattern = _eval_pattern(ast.parse(v, mode="eval").body)
    except (SyntaxError, ValueError):
        raise SpecError("--moe-layer-freq", f"{value!r}", "an integer or a list pattern like ([0]*3+[1]*58)") from None
    if len(pattern) != num_layers or any(p not in (0, 1) for p in pattern):
        raise SpecError("--moe-layer-freq", f"{value!r} gives {len(pattern)} entries", f"{num_layers} entries of 0 or 1")
    first = pattern.index(1) if 1 in pattern else num_layers
    rest = pattern[first:]
    for k in range(1, len(rest) + 1):
        if rest == [1 if i % k == 0 else 0 for i in range(len(rest))]:
            return first, k
    raise SpecError("--moe-layer-freq", f"{value!r}", "leading dense layers then every k-th layer MoE "
                    "(ModelSpec's first_dense_layers and moe_layer_freq)")


def _eval_pattern(node: ast.AST) -> list[int]:
    """Evaluate only list literals of ints, `+` and `* int` (no names, no calls)."""
    if isinstance(node, ast.List):
        out = []
        for e in node.elts:
            if not (isinstance(e, ast.Constant) and isinstance(e.value, int)):
                raise ValueError("list entries must be integers")
            out.append(int(e.value))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _eval_pattern(node.left) + _eval_pattern(node.right)
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, int)):
        return _eval_pattern(node.left) * int(node.right.value)
    raise ValueError("unsupported expression")


def parse_megatron_args(text: str, *, model_id: str = "megatron-model", source: str = "Megatron arguments") -> MegatronJob:
    got, ignored = parse_arg_list(tokens(text))
    try:
        return _job(got, ignored, model_id, source)
    except SpecError as e:
        raise e.in_file(source) from None


def load_megatron_args_file(path: str | Path) -> MegatronJob:
    p = Path(path)
    return parse_megatron_args(p.read_text(), model_id=p.stem, source=str(p))


def _job(got: dict[str, Any], ignored: list[str], model_id: str, source: str) -> MegatronJob:
    L, h, heads = _int(got, "num-layers"), _int(got, "hidden-size"), _int(got, "num-attention-heads")
    tp = _int(got, "tensor-model-parallel-size", 1)
    pp = _int(got, "pipeline-model-parallel-size", 1)
    if "vocab-size" in got:
        vocab = _int(got, "vocab-size")
    elif got.get("tokenizer-type") in TOKENIZER_VOCAB:
        vocab = TOKENIZER_VOCAB[got["tokenizer-type"]]
    else:
        raise SpecError("--vocab-size", f"not given and tokenizer {got.get('tokenizer-type')!r} has no known size",
                        f"--vocab-size N, or --tokenizer-type one of {', '.join(TOKENIZER_VOCAB)}")
    div = _int(got, "make-vocab-size-divisible-by", 128) * tp
    padded = -(-vocab // div) * div  # Megatron pads the vocab so that each tp shard is a multiple of 128
    pos = str(got.get("position-embedding-type", "learned_absolute"))
    if got.get("use-rotary-position-embeddings"):
        pos = "rope"
    position = {"rope": "rope", "learned_absolute": "learned", "none": "none", "yarn": "rope", "mrope": "rope"}.get(pos)
    if position is None:
        raise SpecError("--position-embedding-type", f"{pos!r}", "rope, learned_absolute, none")
    if got.get("no-position-embedding") and position == "learned":
        position = "none"
    norm = str(got.get("normalization", "LayerNorm"))
    if norm not in ("LayerNorm", "RMSNorm"):
        raise SpecError("--normalization", f"{norm!r}", "LayerNorm or RMSNorm")
    kv = _int(got, "num-query-groups") if got.get("group-query-attention") else heads
    data: dict[str, Any] = {
        "id": model_id, "name": f"Megatron model ({model_id})", "family": "dense", "source": source,
        "num_layers": L, "hidden": h, "seq_len": _int(got, "seq-length"), "ffn_hidden": _int(got, "ffn-hidden-size", 4 * h),
        "num_heads": heads, "num_kv_heads": kv, "vocab": padded, "norm": norm.lower(),
        "activation": "swiglu" if got.get("swiglu") else "gelu", "position": position,
        "tied_embeddings": not got.get("untie-embeddings-and-output-weights", False),
        "bias": not got.get("disable-bias-linear", False), "attention": "gqa" if kv < heads else "mha",
    }
    if "kv-channels" in got and _int(got, "kv-channels") * heads != h:
        data["head_dim"] = _int(got, "kv-channels")
    if "num-experts" in got:
        first, freq = moe_layer_pattern(str(got.get("moe-layer-freq", "1")), L)
        width = _int(got, "moe-ffn-hidden-size", data["ffn_hidden"])
        shared = int(got.get("moe-shared-expert-intermediate-size", 0) or 0)
        if shared % width:
            raise SpecError("--moe-shared-expert-intermediate-size", f"{shared} is not a multiple of the expert width "
                            f"{width}", "n_shared x --moe-ffn-hidden-size")
        data.update(family="moe", num_experts=_int(got, "num-experts"), top_k=_int(got, "moe-router-topk", 2),
                    moe_ffn_hidden=width, num_shared_experts=shared // width, first_dense_layers=first, moe_layer_freq=freq,
                    moe_latent_size=_int(got, "moe-latent-size") if got.get("moe-latent-size") else None)
    if got.get("multi-latent-attention"):
        data.update(attention="mla", num_kv_heads=None, mla={
            "q_lora_rank": _int(got, "q-lora-rank"), "kv_lora_rank": _int(got, "kv-lora-rank", 512),
            "qk_nope_head_dim": _int(got, "qk-head-dim", 128), "qk_rope_head_dim": _int(got, "qk-pos-emb-head-dim", 64),
            "v_head_dim": _int(got, "v-head-dim", 128)})
    if got.get("squared-relu"):
        data["activation"] = "squared_relu"
    data.update(_hybrid(got, L, h))
    spec = ModelSpec.model_validate(data)
    mechanisms = {**_moe_mechanisms(got), "expert_gemm": MEGATRON_EXPERT_GEMM if spec.family == "moe" else None}
    return MegatronJob(spec, {**_layout(got, L, tp, pp), **mechanisms, "cuda_graphs": _cuda_graphs(got)},
                       tuple(ignored))


def _hybrid(got: dict[str, Any], L: int, h: int) -> dict[str, Any]:
    """Megatron-Core hybrid models (Nemotron-H, Nemotron 3): --hybrid-layer-pattern (or the
    deprecated --hybrid-override-pattern), one symbol per layer (M Mamba-2, * attention, - MLP,
    E MoE; '|' marks pipeline boundaries), then '/'-separated MTP depths; Mamba-2 sizes with
    Megatron's defaults (state 128, head dim 64, 8 groups, heads = 2h / head dim);
    --mtp-use-repeated-layer: one MTP block's weights serve every depth."""
    pattern = got.get("hybrid-layer-pattern") or got.get("hybrid-override-pattern")
    if pattern is None:
        return {}
    main, *mtp = str(pattern).replace("|", "").split("/")
    if len(main) != L:
        raise SpecError("--hybrid-layer-pattern", f"{len(main)} layers in {main!r}", f"{L} symbols (--num-layers)")
    out: dict[str, Any] = {"layer_pattern": main}
    if "M" in main or any("M" in m for m in mtp):
        hd = _int(got, "mamba-head-dim", 64)
        out["mamba"] = {"num_heads": _int(got, "mamba-num-heads", 2 * h // hd), "head_dim": hd,
                        "state_dim": _int(got, "mamba-state-dim", 128), "num_groups": _int(got, "mamba-num-groups", 8)}
    if mtp:
        if len(set(mtp)) != 1:
            raise SpecError("--hybrid-layer-pattern", f"MTP depths {mtp} differ", "one pattern repeated per depth")
        if "mtp-num-layers" in got and _int(got, "mtp-num-layers") != len(mtp):
            raise SpecError("--mtp-num-layers", f"{got['mtp-num-layers']} but the pattern has {len(mtp)} MTP depths",
                            str(len(mtp)))
        out.update(mtp_pattern=mtp[0], mtp_depth=len(mtp), mtp_shared_weights=bool(got.get("mtp-use-repeated-layer")))
    return out


CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")


def _cuda_graphs(got: dict[str, Any]) -> bool | None:
    """Whether the job captures whole transformer layers in CUDA graphs (ParallelPlan.cuda_graphs),
    None where it is silent. Megatron-LM @ d98e8a64 (transformer_config.py cuda_graph_impl /
    cuda_graph_modules, arguments.py): full_iteration graphs the whole forward-backward; local and
    transformer_engine graph per layer what --cuda-graph-modules names, the whole layer when it
    names nothing (or the deprecated "full"); --enable-cuda-graph is local and
    --external-cuda-graph transformer_engine. A partial capture (attn with moe_router /
    moe_preprocess, as Megatron-Bridge's bf16 / fp8 MoE recipes set) leaves the rest of the layer
    eager: read as not graphed, the conservative side of a flag that graphs whole layers."""
    impl = got.get("cuda-graph-impl")
    if impl is None:
        impl = "local" if got.get("enable-cuda-graph") else "transformer_engine" if got.get("external-cuda-graph") else None
    if impl is None:
        return None
    if impl not in CUDA_GRAPH_IMPLS:
        raise SpecError("--cuda-graph-impl", f"{impl!r}", ", ".join(CUDA_GRAPH_IMPLS))
    if impl in ("none", "full_iteration"):
        return impl == "full_iteration"
    modules = {m for m in str(got.get("cuda-graph-modules", "")).split(",") if m} - {"full"}
    return not modules or ("attn" in modules and bool(modules & {"mlp", "moe"}))


def _moe_mechanisms(got: dict[str, Any]) -> dict[str, Any]:
    """The MoE choices the list states, each None where it is silent (the training stack's default
    then holds): the token dispatcher, the combined-1F1B all-to-all overlap, the shared-expert
    overlap, forced load balancing (router logits replaced by random ones: balanced routing,
    moe_imbalance 1) and the SMs the flex kernels hold (moe_flex_dispatcher_num_sms, or the
    deprecated per-backend moe_deepep_num_sms / moe_hybridep_num_sms it replaces; Megatron-LM @
    d98e8a64 transformer_config.py)."""
    dispatcher = got.get("moe-token-dispatcher-type")
    if dispatcher is not None and dispatcher not in ("alltoall", "flex"):
        raise SpecError("--moe-token-dispatcher-type", f"{dispatcher!r} (Megatron's allgather dispatcher is not modelled)",
                        "alltoall or flex")
    sms_arg = next((n for n in ("moe-flex-dispatcher-num-sms", "moe-deepep-num-sms", "moe-hybridep-num-sms")
                    if n in got), None)
    return {"moe_dispatcher": dispatcher,
            "moe_a2a_overlap": True if got.get("overlap-moe-expert-parallel-comm") else None,
            "moe_shared_overlap": True if got.get("moe-shared-expert-overlap") else None,
            "moe_imbalance": 1.0 if got.get("moe-router-force-load-balancing") else None,
            "moe_a2a_sms": _int(got, sms_arg) if sms_arg else None}


def _layout(got: dict[str, Any], L: int, tp: int, pp: int) -> dict[str, Any]:
    if "num-layers-per-virtual-pipeline-stage" in got:
        per = _int(got, "num-layers-per-virtual-pipeline-stage")
        if L % (pp * per):
            raise SpecError("--num-layers-per-virtual-pipeline-stage", f"{per} x pp {pp} does not divide num-layers {L}",
                            "a divisor of num-layers / pp")
        vp = L // (pp * per)
    else:
        vp = _int(got, "virtual-pipeline-model-parallel-size", 1)
    rec = str(got.get("recompute-granularity", "selective" if got.get("recompute-activations") else "none"))
    if rec not in ("none", "full", "selective"):
        raise SpecError("--recompute-granularity", f"{rec!r}", "full or selective")
    modules = None
    if rec == "selective" and got.get("recompute-modules"):
        try:
            modules = parse_selective(got["recompute-modules"])
        except LayoutError as e:
            raise SpecError("--recompute-modules", f"{got['recompute-modules']!r}",
                            f"Megatron-Core recompute modules from {', '.join(MODULES)}") from e
        if modules == OP_POLICY:
            raise SpecError("--recompute-modules", "'op'", f"Megatron-Core recompute modules from {', '.join(MODULES)}")
    method = got.get("recompute-method")
    window = _int(got, "recompute-num-layers") if "recompute-num-layers" in got else None
    if method is not None and method not in ("uniform", "block"):
        raise SpecError("--recompute-method", f"{method!r}", "uniform or block")
    if rec != "full":
        method = window = None  # Megatron reads them only under full recompute (selective refuses a count)
    elif method == "block" and window is None:
        raise SpecError("--recompute-num-layers", "not given with --recompute-method block",
                        "the layers per model chunk to recompute (1 to the chunk's layers)")
    precision = "fp8" if got.get("fp8-format") or got.get("fp8") else "fp16" if got.get("fp16") else "bf16"
    recipe = None
    if got.get("fp4-format") or got.get("fp4-recipe"):
        precision, recipe = RECIPES["nvfp4"]
    elif precision == "fp8":
        name = str(got.get("fp8-recipe", "delayed"))
        if name not in RECIPES or name == "nvfp4":
            raise SpecError("--fp8-recipe", f"{name!r}", "delayed, tensorwise, blockwise or mxfp8")
        precision, recipe = RECIPES[name]
    optimizer = str(got.get("optimizer", "adam"))
    if optimizer not in ("adam", "sgd"):
        raise SpecError("--optimizer", f"{optimizer!r}", "adam or sgd (Megatron's choices)")
    adam = _adam_moments(got) if optimizer == "adam" else "sgd"
    zero = 3 if got.get("use-torch-fsdp2") or got.get("use-custom-fsdp") else 1 if got.get("use-distributed-optimizer") else 0
    mb = _int(got, "micro-batch-size", 1)
    return {"tp": tp, "pp": pp, "vp": vp, "cp": _int(got, "context-parallel-size", 1),
            # Megatron-LM's arguments.py: an unset --expert-tensor-parallel-size takes the tp size (a dense
            # model has no expert layers for it to split: 1)
            "ep": _int(got, "expert-model-parallel-size", 1),
            "etp": _int(got, "expert-tensor-parallel-size", tp) if got.get("num-experts") else 1,
            "sp": bool(got.get("sequence-parallel")) and tp > 1, "zero": zero, "micro_batch": mb,
            "global_batch": _int(got, "global-batch-size") if "global-batch-size" in got else None,
            "seq_len": _int(got, "seq-length"), "recompute": rec, "recompute_modules": modules,
            "recompute_method": method, "recompute_num_layers": window,
            "precision": precision, "fp8_recipe": recipe,
            # Megatron's "adam" is AdamW (decoupled weight decay); both cost the same here
            "optimizer": adam, "act_fp8_input_store": bool(got.get("activation-func-fp8-input-store"))}


MOMENT_DTYPES = {"fp32": "fp32", "float32": "fp32", "torch.float32": "fp32",
                 "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16"}


def _adam_moments(got: dict[str, Any]) -> str:
    """AdamW with fp32 moments (Megatron's default) or with bf16 ones (--exp-avg-dtype and
    --exp-avg-sq-dtype bf16 under --use-precision-aware-optimizer, as DeepSeek-V3 trained;
    Megatron-Bridge prints them as torch.bfloat16); other widths are not modelled."""
    widths = {MOMENT_DTYPES.get(str(got.get(name, "fp32"))) for name in ("exp-avg-dtype", "exp-avg-sq-dtype")}
    if widths == {"fp32"}:
        return "adamw"
    if widths == {"bf16"}:
        return "adamw-bf16"
    stated = ", ".join(f"--{n} {got.get(n, 'fp32')}" for n in ("exp-avg-dtype", "exp-avg-sq-dtype"))
    raise SpecError("--exp-avg-dtype / --exp-avg-sq-dtype", stated, "both fp32 or both bf16 (the modelled moment widths)")
