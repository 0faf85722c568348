"""Read a runs file (the validation contract of docs/VALIDATION.md) into (ModelSpec, ParallelPlan, System).

Empty cells take the documented defaults: micro_batch 1, vp 1, cp 1, ep 1, etp 1, precision bf16,
recompute none, zero_stage 0, sequence_parallel false, accelerator a100-sxm4-80gb; dp defaults
to n_gpus / (tp·pp·cp) and n_gpus to dp·tp·pp·cp. Every default taken is named in `notes`.

A damaged cell fails its own row only (RowError, naming the column, the value and what is
allowed): a count that is not a positive integer (0, -1, 2.5, inf, 1e400), a measured value that
is not a positive finite number, a byte that is not UTF-8. The file itself is read as UTF-8 with
or without a byte-order mark (or UTF-16 when it starts with a UTF-16 one); a stray non-UTF-8 byte spoils only the cell that holds it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel import precision as registry
from perfmodel.errors import PerfmodelError, SpecError, quote
from perfmodel.hardware.catalog import parse_model
from perfmodel.hardware.system import System, resolve_system
from perfmodel.names import spelling, spelling_without_notes
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.validation.match import by_architecture, by_name
from perfmodel.workload.spec import ModelSpec

COLUMNS = [
    "run_id", "source", "source_detail", "model", "arch", "n_layers", "hidden", "ffn_hidden", "n_heads",
    "n_kv_heads", "vocab", "n_experts", "top_k", "moe_ffn_hidden", "n_shared_experts", "seq_len",
    "global_batch", "micro_batch", "tp", "pp", "dp", "cp", "ep", "vp", "sequence_parallel", "zero_stage",
    "recompute", "precision", "accelerator", "n_gpus", "gpus_per_node", "system", "step_time_s",
    "tokens_per_s", "tflops_per_gpu", "mfu", "notes", "framework", "etp",
]
# read when present, never required: the runs files published so far do not carry them
OPTIONAL_COLUMNS = ["head_dim", "schedule", "attention", "optimizer"]
OUTPUT_COLUMNS = [
    "run_id", "status", "predicted_step_time_s", "predicted_tokens_per_s", "predicted_tflops_per_gpu",
    "predicted_mfu", "predicted_memory_per_gpu_bytes", "message", "predicted_step_time_lo_s", "predicted_step_time_hi_s",
]
DEFAULTS = {
    "micro_batch": "1", "vp": "1", "cp": "1", "ep": "1", "precision": registry.DEFAULT_PRECISION, "recompute": "none",
    "zero_stage": "0", "sequence_parallel": "false", "accelerator": "a100-sxm4-80gb",
}
ARCH_DEFAULTS: dict[str, dict[str, object]] = {
    # gpt: learned positions, GELU MLP, LayerNorm with biases, tied embeddings (GPT-2/3, MPT, BLOOM)
    "gpt": {"family": "dense", "norm": "layernorm", "activation": "gelu", "position": "learned",
            "bias": True, "tied_embeddings": True, "attention": "mha"},
    "llama": {"family": "dense", "norm": "rmsnorm", "activation": "swiglu", "position": "rope",
              "bias": False, "tied_embeddings": False, "attention": "gqa"},
    "moe": {"family": "moe", "norm": "rmsnorm", "activation": "swiglu", "position": "rope",
            "bias": False, "tied_embeddings": False, "attention": "gqa"},
}
# the families an `arch` cell names, as model cards and Hugging Face's model_type write them (case,
# '-' and '_' aside): learned positions and GELU (GPT-2 / GPT-3, OPT, Megatron's GPT), RoPE + SwiGLU
# + RMSNorm (Llama and the models built like it), and routed-expert versions of the latter (Mixtral,
# Qwen MoE); a family whose attention or experts differ (DeepSeek's MLA, gpt-oss) needs its workload
ARCH_SPELLINGS: dict[str, str] = {
    **{k: "gpt" for k in ("gpt", "gpt2", "gpt3", "megatrongpt", "opt")},
    **{k: "llama" for k in ("llama", "llama2", "llama3", "mistral", "qwen2", "qwen3", "dense")},
    **{k: "moe" for k in ("moe", "mixtral", "qwen2moe", "qwen3moe")},
}
ARCH_COLUMNS = {"n_layers": "num_layers", "hidden": "hidden", "ffn_hidden": "ffn_hidden", "n_heads": "num_heads",
                "n_kv_heads": "num_kv_heads", "vocab": "vocab", "n_experts": "num_experts", "top_k": "top_k",
                "moe_ffn_hidden": "moe_ffn_hidden", "n_shared_experts": "num_shared_experts", "seq_len": "seq_len",
                "head_dim": "head_dim"}


# columns other tools and papers name what this format calls otherwise: a runs file that carries one
# of them has its value ignored and the format's column defaulted (DEFAULTS), so it is named
COLUMN_SPELLINGS = {
    "micro_batch": ("micro_batch_size", "mbs", "micro_bs", "batch_size_per_gpu", "per_device_batch_size"),
    "global_batch": ("global_batch_size", "gbs", "global_bs", "batch_size"),
    "n_gpus": ("num_gpus", "gpus", "world_size", "n_devices", "num_devices", "gpu_count"),
    "tp": ("tensor_parallel", "tensor_model_parallel_size", "tp_size"),
    "pp": ("pipeline_parallel", "pipeline_model_parallel_size", "pp_size"),
    "cp": ("context_parallel", "context_parallel_size", "cp_size"),
    "ep": ("expert_parallel", "expert_model_parallel_size", "ep_size"),
    "dp": ("data_parallel", "data_parallel_size", "dp_size"),
    "vp": ("virtual_pipeline", "virtual_pipeline_model_parallel_size", "vpp"),
    "etp": ("expert_tensor_parallel", "expert_tensor_parallel_size"),
    "zero_stage": ("zero", "zero_level", "fsdp"),
    "recompute": ("activation_checkpointing", "recompute_granularity", "checkpointing"),
    "n_layers": ("num_layers", "num_hidden_layers", "layers"),
    "hidden": ("hidden_size", "d_model"),
    "ffn_hidden": ("ffn_hidden_size", "intermediate_size"),
    "n_heads": ("num_attention_heads", "num_heads", "heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads", "num_query_groups"),
    "vocab": ("vocab_size",),
    "n_experts": ("num_experts", "num_moe_experts"),
    "top_k": ("moe_router_topk", "num_experts_per_tok", "topk"),
    "seq_len": ("seq_length", "sequence_length", "max_seq_len", "context_length"),
    "sequence_parallel": ("sp",),
    "precision": ("dtype", "mixed_precision"),
    "accelerator": ("gpu", "gpu_type", "hardware", "device"),
    "step_time_s": ("step_time", "iteration_time", "iter_time", "step_time_ms", "time_per_step"),
}


def column_warnings(path: Path | str) -> list[str]:
    """One line per header column the runs format does not read (COLUMNS, OPTIONAL_COLUMNS and the
    prediction columns of a joined file aside), naming the format's column it most likely means
    (COLUMN_SPELLINGS, else the nearest name): its value is ignored and that column defaulted, so
    a `micro_batch_size` header would otherwise predict micro-batch 1 without a word."""
    import difflib

    known = set(COLUMNS) | set(OPTIONAL_COLUMNS) | set(OUTPUT_COLUMNS)
    try:
        header = [(h or "").strip() for h in next(csv.reader(io.StringIO(_text(Path(path).read_bytes()))), [])]
    except (OSError, StopIteration, csv.Error):
        return []  # read_rows says what spoils the file
    out = []
    for col in header:
        if not col or col in known:
            continue
        key = spelling(col).replace("-", "_")
        meant = next((c for c, names in COLUMN_SPELLINGS.items() if key in names), None)
        if meant is None:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
            meant = close[0] if close else None
        hint = f"; did you mean {meant!r}?" if meant and meant not in header else ""
        out.append(f"{path}: column {col!r} is not in the runs format and is ignored{hint} "
                   f"(columns: docs/VALIDATION.md)")
    return out


class RowError(PerfmodelError):
    """A runs-file row that cannot be predicted; the message says which column and why."""


@dataclass
class Run:
    run_id: str
    spec: ModelSpec
    plan: ParallelPlan
    system: System
    notes: list[str] = field(default_factory=list)
    measured_step_time_s: float | None = None


FREE_TEXT = ("source", "source_detail", "notes")  # never read by a prediction
MAX_COUNT = 10**7  # parallel degrees, GPU and batch counts: 10 million is past any machine built


def _text(raw: bytes) -> str:
    """A runs file's text: utf-8-sig drops the byte-order mark spreadsheets write; surrogateescape
    keeps a stray latin-1 byte as a marker that fails only the cell holding it (see undecodable);
    utf-16 is spreadsheets' "Unicode text" export."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16", errors="replace")
    return raw.decode("utf-8-sig", errors="surrogateescape")


def read_rows(path: Path | str) -> list[dict[str, str]]:
    """The rows of a runs file as {column: stripped text}. Raises RowError only for what spoils
    the whole file (missing, no run_id column, a repeated column name, broken CSV quoting)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise RowError(f"{path}: cannot be read ({e.strerror or e})") from None
    reader = csv.DictReader(io.StringIO(_text(raw), newline=""))
    try:
        header = [(h or "").strip() for h in (reader.fieldnames or [])]
        repeated = sorted({h for h in header if h and header.count(h) > 1})
        if repeated:
            raise RowError(f"{path}: header repeats column(s) {repeated}; each column once")
        if "run_id" not in header:
            raise RowError(f"{path}: header lacks the required column run_id; expected columns: {', '.join(COLUMNS)}")
        reader.fieldnames = header
        return [{k: (v if isinstance(v, str) else "").strip() for k, v in row.items() if k is not None} for row in reader]
    except csv.Error as e:
        raise RowError(f"{path}: after line {reader.line_num}: not readable as CSV ({e})") from None


def undecodable(value: str) -> str | None:
    """'byte 0xe9' when `value` holds a byte that was not UTF-8, else None."""
    bad = next((c for c in value if "\udc80" <= c <= "\udcff"), None)
    return None if bad is None else f"byte 0x{ord(bad) - 0xDC00:02x}"


def printable(value: str) -> str:
    """`value` with undecodable bytes shown as U+FFFD, safe to write as UTF-8."""
    return value.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


def check_encoding(row: dict[str, str]) -> None:
    """RowError for the first column a prediction reads that holds a non-UTF-8 byte."""
    for col, v in row.items():
        if col not in FREE_TEXT and (bad := undecodable(v)):
            raise RowError(f"column {col}: {bad} in {quote(printable(v))} is not UTF-8; save the file as UTF-8")


# a spreadsheet's digit grouping ("1,024", "1,000,000.5"): unambiguous in a quoted CSV cell
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


def ungrouped(text: str) -> str:
    """`text` without a spreadsheet's digit grouping ('1,024' -> '1024'); anything else as is."""
    return text.replace(",", "") if _GROUPED.fullmatch(text) else text


# units a measured column may carry after its number (case aside): the factor to its own unit
_UNITS: dict[str, dict[str, float]] = {
    "step_time_s": {"s": 1.0, "sec": 1.0, "secs": 1.0, "seconds": 1.0, "ms": 1e-3, "msec": 1e-3},
    "tokens_per_s": {"k": 1e3, "m": 1e6},
}
_UNIT_NUMBER = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)")


def _number(row: dict[str, str], col: str) -> float | None:
    v = row.get(col, "")
    if v == "":
        return None
    text = ungrouped(v)
    # mfu written as a percentage ("45%"); a sequence length as papers write it ("8K", "128k": binary
    # thousands, 8K = 8192 tokens, as every model card and benchmark table means it); every other
    # column is a plain number
    percent = col == "mfu" and text.endswith("%")
    kilo = col == "seq_len" and text[-1:] in ("k", "K")
    # a step time with its unit ("1.5 s", "850 ms"), a throughput in thousands or millions ("120k")
    unit = _UNITS.get(col)
    timed = _UNIT_NUMBER.fullmatch(text.strip()) if unit else None
    try:
        if timed and unit and timed.group(2).lower() in unit:
            f = float(timed.group(1)) * unit[timed.group(2).lower()]
        else:
            f = float(text[:-1]) / 100 if percent else float(text[:-1]) * 1024 if kilo else float(text)
    except ValueError:
        units = f" (a number, or one followed by {' / '.join(unit)})" if unit else ""
        raise RowError(f"column {col}: {quote(v)} is not a number{units}") from None
    if not math.isfinite(f):
        raise RowError(f"column {col}: {quote(v)} is not a finite number")
    return f


def cell_number(text: str, col: str) -> float:
    """One cell of `col` as validate reads it (digit grouping, percentages, units), NaN where
    validate would refuse it or it is empty: what the report reads runs files with."""
    try:
        v = _number({col: text}, col)
    except RowError:
        return math.nan
    return math.nan if v is None else v


def _int(row: dict[str, str], col: str, minimum: int = 1) -> int | None:
    """An integer count >= minimum (up to MAX_COUNT), or None when the cell is empty."""
    f = _number(row, col)
    if f is None:
        return None
    if f != int(f) or not minimum <= f <= MAX_COUNT:
        raise RowError(f"column {col}: {quote(row[col])}; allowed: an integer from {minimum} to {MAX_COUNT:,}")
    return int(f)


def measured(row: dict[str, str], col: str) -> float | None:
    """A measured value (step_time_s, tokens_per_s, tflops_per_gpu, mfu): positive and finite."""
    f = _number(row, col)
    if f is not None and f <= 0:
        raise RowError(f"column {col}: {quote(row[col])}; allowed: a positive number (empty when not measured)")
    return f


# other spellings of the enumerated columns, as stacks and tables write them (case, spaces and '_'
# aside): Megatron's recompute_method uniform / block is full-layer recompute; torch FSDP's
# FULL_SHARD / SHARD_GRAD_OP / NO_SHARD are ZeRO-3 / 2 / 0; torchtitan's per-op SAC is selective,
# Hugging Face's gradient checkpointing and torch.utils.checkpoint of whole blocks are full. A bare
# "true" is not read for recompute: Megatron-LM's --recompute-activations means selective, Hugging
# Face's gradient_checkpointing full. A bracketed note is dropped ("selective (attention)").
# how a boolean cell says yes: sequence_parallel's true, and for recompute an ambiguous answer
TRUE_WORDS = ("true", "1", "yes", "on", "t", "y")
SPELLINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "recompute": {"none": ("none", "false", "no", "off", "0"),
                  "selective": ("selective", "selective-recompute", "selective-ac", "sac", "per-op-sac", "per-op", "op"),
                  "full": ("full", "uniform", "block", "full-recompute", "full-ac", "activation-checkpointing",
                           "full-activation-checkpointing", "gradient-checkpointing")},
    "zero_stage": {"0": ("0", "none", "no-shard", "ddp"), "1": ("1", "zero1", "zero-1", "z1"),
                   "2": ("2", "zero2", "zero-2", "z2", "shard-grad-op"),
                   "3": ("3", "zero3", "zero-3", "z3", "fsdp", "fsdp2", "full-shard")},
    "sequence_parallel": {"true": TRUE_WORDS, "false": ("false", "0", "no", "off", "f", "n")},
    # optional column; empty = the plan's default (1F1B, interleaved with vp > 1)
    "schedule": {"1f1b": ("1f1b", "pipedream-flush", "one-f-one-b"),
                 "interleaved": ("interleaved", "interleaved-1f1b", "vpp", "virtual-pipeline"),
                 "gpipe": ("gpipe", "fill-drain"), "zb-h1": ("zb-h1", "zbh1", "zb1p", "zero-bubble"),
                 "dualpipe": ("dualpipe", "dual-pipe")},
    # optional column; empty = the framework's kernel. Hugging Face's attn_implementation names read as
    # the kernel they load; a bare `sdpa` is not read (torch picks FA2 or cuDNN by version and chip)
    "attention": {"flash": ("flash", "flash2", "fa2", "flash-attention-2", "flash-attn-2", "flashattention-2"),
                  "flash3": ("flash3", "fa3", "flash-attention-3", "flash-attn-3", "flashattention-3"),
                  "flash4": ("flash4", "fa4", "flash-attention-4", "flash-attn-4", "flashattention-4"),
                  "fused": ("fused", "cudnn", "cudnn-attention", "sdpa-cudnn", "fusedattention", "te-fused"),
                  "flash1": ("flash1", "fa1", "flash-attention-1", "flash-attn-1", "triton", "flash-attn-triton"),
                  "unfused": ("unfused", "eager", "math", "sdpa-math")},
    # optional column; empty = adam (compute/optimizers.py: adam and adamw cost the same)
    "optimizer": {"adam": ("adam", "adamw", "fused-adam", "fusedadam", "adam-fp32", "adamw-fp32", "torch-adamw"),
                  "adamw-bf16": ("adamw-bf16", "adam-bf16", "bf16-adamw", "precision-aware-adam"),
                  "adam8bit": ("adam8bit", "adamw8bit", "adam-8bit", "adamw-8bit", "8bit-adam"),
                  "sgd": ("sgd", "sgd-momentum"), "adafactor": ("adafactor",), "muon": ("muon", "distributed-muon")},
}


def spelled(vals: dict[str, str], col: str, notes: list[str]) -> str:
    """The canonical value of enumerated column `col` (see SPELLINGS); RowError naming the allowed ones."""
    v = vals[col]
    if re.fullmatch(r"\d+\.0*", v.strip()):  # "1.0" from a spreadsheet
        v = v.strip().split(".")[0]
    key = spelling_without_notes(v)
    for canon, names in SPELLINGS[col].items():
        if key in names:
            if col == "recompute" and key == "block":
                # the format has no recompute_num_layers: every layer is charged its rerun
                notes.append(f"recompute {quote(vals[col])} read as full recompute of every layer (the runs format "
                             "has no recompute_num_layers); Megatron's block method reruns only the first N layers "
                             "per model chunk, so this step time is an upper bound")
            elif (key != canon and v != canon) or spelling(v) != key:
                notes.append(f"{col} {quote(vals[col])} read as {canon}")
            return canon
    why = ""
    if col == "recompute" and key in TRUE_WORDS:
        why = (" (a bare yes / true is ambiguous: Megatron-LM's --recompute-activations reruns attention only, "
               "selective; Hugging Face's gradient_checkpointing reruns whole layers, full: write which)")
    raise RowError(f"column {col} {quote(vals[col])}; allowed values: {', '.join(SPELLINGS[col])}{why}")


def row_spec(row: dict[str, str], workloads: dict[str, ModelSpec], notes: list[str]) -> ModelSpec:
    model = row.get("model", "")
    given = {ARCH_COLUMNS[c]: _int(row, c, 0 if c == "n_shared_experts" else 1) for c in ARCH_COLUMNS}
    sizes: dict[str, int] = {k: v for k, v in given.items() if v is not None}
    if sizes.get("num_shared_experts") == 0:
        sizes.pop("num_shared_experts")
    named = workloads.get(model) or (by_name(model, workloads) if model else None)
    if named is not None:
        spec = named
        if spec.id != model:
            notes.append(f"model {quote(model)} read as workload {spec.id}")
        changes = {k: v for k, v in sizes.items() if getattr(spec, k) != v}
        try:
            return spec.with_(**changes) if changes else spec
        except ValueError as e:
            raise RowError(f"architecture columns {sorted(changes)} on workload {model!r}: "
                           f"{str(e).splitlines()[-1] if str(e) else e!r}") from None
    written = row.get("arch", "")
    arch = ARCH_SPELLINGS.get(spelling_without_notes(written).replace("-", ""), "") if written else ""
    if arch not in ARCH_DEFAULTS:
        where = f"model {model!r} is not in workloads/ and " if model else ""
        raise RowError(f"{where}column arch {written!r}: allowed values: {', '.join(ARCH_DEFAULTS)} (or a family "
                       f"name of one: {', '.join(sorted(k for k, v in ARCH_SPELLINGS.items() if k != v))})")
    if written != arch:
        notes.append(f"arch {quote(written)} read as {arch}")
    if "vocab" not in sizes:
        # the GPT-2 BPE vocabulary: the default tokenizer of Megatron-LM / Megatron-DeepSpeed GPT
        # examples (gpt2-vocab.json), which the builder pads no further
        sizes["vocab"] = 50257
        notes.append("vocab empty: used 50257 (GPT-2 BPE)")
    if "num_heads" not in sizes and "hidden" in sizes:
        # head count only shapes the attention kernel (its FLOPs depend on hidden alone):
        # take the divisor of hidden whose head_dim is nearest 128
        h = int(sizes["hidden"])
        tp = _int(row, "tp") or 1
        heads = min((d for d in range(tp, h + 1, tp) if h % d == 0), key=lambda d: abs(h / d - 128))
        sizes["num_heads"] = heads
        notes.append(f"n_heads empty: assumed {heads} heads (head_dim {h // heads})")
    for need in ("num_layers", "hidden", "num_heads"):
        if need not in sizes:
            col = next(c for c, f in ARCH_COLUMNS.items() if f == need)
            raise RowError(f"column {col} is empty and model {model!r} is not a workload id")
    data: dict[str, object] = dict(ARCH_DEFAULTS[arch])
    data.update(sizes)
    if "ffn_hidden" not in data:
        h = int(sizes["hidden"])
        data["ffn_hidden"] = 4 * h if arch == "gpt" else 256 * -(-int(8 * h / 3) // 256)
        notes.append(f"ffn_hidden empty: used {data['ffn_hidden']}")
    if data.get("num_kv_heads") in (None, data["num_heads"]):
        data["attention"] = "mha"
    data.update(id=model or f"row-{row.get('run_id', '?')}", name=model or "from runs columns",
                source=f"runs file columns ({row.get('source', '')})")
    try:
        built = parse_model(ModelSpec, data, "architecture columns")  # one line naming the field
    except SpecError as e:
        raise RowError(str(e)) from None
    match = by_architecture(built, sizes, workloads, set(ARCH_COLUMNS.values()))
    if match is None:
        return built
    published, extra = match
    said = ", ".join(f"{k} {v}" for k, v in sorted(extra.items()))
    notes.append(f"architecture columns match workload {published.id}: used its {said} (no column states them)")
    return published.with_(seq_len=built.seq_len)


def row_run(row: dict[str, str], workloads: dict[str, ModelSpec]) -> Run:
    notes: list[str] = []
    used = [f"{k}={v}" for k, v in DEFAULTS.items() if row.get(k, "") == ""]
    vals = {k: (row.get(k, "") or DEFAULTS[k]) for k in DEFAULTS}
    spec = row_spec(row, workloads, notes)
    tp, pp = _int(row, "tp") or 1, _int(row, "pp") or 1
    cp, ep, vp = (_int(vals, c) or 1 for c in ("cp", "ep", "vp"))
    etp = _int(row, "etp") or 1  # optional column (MoE parallel folding); empty = 1
    if spec.family == "moe" and row.get("etp", "") == "":
        used.append("etp=1")
    n_gpus, dp = _int(row, "n_gpus"), _int(row, "dp")
    if dp is None:
        if n_gpus is None:
            raise RowError("columns dp and n_gpus are both empty")
        if n_gpus % (tp * pp * cp):
            raise RowError(f"n_gpus {n_gpus} is not divisible by tp {tp} x pp {pp} x cp {cp}")
        dp = n_gpus // (tp * pp * cp)
        used.append(f"dp={dp} (n_gpus/(tp·pp·cp))")
    if n_gpus is None:
        n_gpus = dp * tp * pp * cp
        used.append(f"n_gpus={n_gpus}")
    gb = _int(row, "global_batch")
    if gb is None:
        raise RowError("column global_batch is empty; allowed: an integer from 1 (sequences per step)")
    prec = registry.canonical(vals["precision"])
    if prec is None:
        raise RowError(f"column precision {quote(vals['precision'])}; allowed values: {', '.join(registry.precision_names())}")
    rec = spelled(vals, "recompute", notes)
    zero = int(spelled(vals, "zero_stage", notes))
    sp = spelled(vals, "sequence_parallel", notes) == "true"
    schedule = spelled(row, "schedule", notes) if row.get("schedule", "").strip() else None
    # a kernel the row names outranks its framework's (frameworks.apply_framework keeps a field the plan sets)
    attention = {"attention_impl": spelled(row, "attention", notes)} if row.get("attention", "").strip() else {}
    optimizer = {"optimizer": spelled(row, "optimizer", notes)} if row.get("optimizer", "").strip() else {}
    if row.get("seq_len", "")[-1:] in ("k", "K"):
        notes.append(f"seq_len {quote(row['seq_len'])} read as {_int(row, 'seq_len')} tokens (K = 1024)")
    try:
        plan = ParallelPlan(
            dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vp=vp, sequence_parallel=sp,
            zero_stage=zero, micro_batch=_int(vals, "micro_batch") or 1, global_batch=gb,
            seq_len=_int(row, "seq_len") or spec.seq_len, recompute=rec, precision=prec, schedule=schedule,
            **attention, **optimizer,
        )
    except PerfmodelError as e:
        raise RowError(str(e)) from None
    except ValueError as e:
        raise RowError(str(e).splitlines()[-1] if str(e) else repr(e)) from None
    if plan.world != n_gpus:
        raise RowError(f"n_gpus {n_gpus} != dp {dp} x tp {tp} x pp {pp} x cp {cp} = {plan.world}")
    system, msgs = resolve_system(vals["accelerator"], row.get("system") or None, n_gpus, _int(row, "gpus_per_node"))
    notes += msgs
    if used:
        notes.insert(0, "defaults: " + ", ".join(used))
    for col in ("tokens_per_s", "tflops_per_gpu", "mfu"):
        measured(row, col)  # not used by the prediction; checked so a damaged row is never scored
    return Run(row["run_id"], spec, plan, system, notes, measured(row, "step_time_s"))
