"""Import a user's own measurements into the catalogue as calibration.

``perfmodel calibrate --trace TRACE.json --accelerator ID`` reads a PyTorch profiler Chrome trace
(``torch.profiler.profile(record_shapes=True)`` + ``export_chrome_trace``) and stores the achieved
GEMM and fused-attention rates in the accelerator's ``calibration``; ``perfmodel calibrate
--nccl-log LOG.txt --node ID`` reads an nccl-tests log (``all_reduce_perf`` ..., parsed by
calibration/nccl_tests.py) and this module stores the bus-bandwidth curve in the node's
``intra_node.curves``. The cost models then use them in place
of (or before) the datasheet-derived defaults.

Trace reading:

* GEMMs: ``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``
  CPU-op events with ``Input Dims``. Only the innermost GEMM op counts (``matmul`` wraps ``mm``,
  ``linear`` wraps ``addmm``), and GEMMs inside an attention op (the SDPA math fallback) are left
  out. FLOP = 2·M·N·K·batch. A batched GEMM is stored as (batch·M, N, K): same FLOPs, same
  per-element work.
* Attention: ``aten::_scaled_dot_product_*attention*`` (innermost: the dispatcher op
  ``aten::scaled_dot_product_attention`` counts only when no fused kernel op is inside it),
  ``aten::_flash_attention_forward`` / ``_efficient_attention_forward`` and the ``flash_attn``
  package's ops. FLOP as AttentionPoint counts it: 4·b·h·s_q·s_kv·d forward, halved when causal;
  backward 2.5x that. Forward points are stored as ``fwd``; where backward ops of the same shape
  are in the trace too, ``bwd`` and ``fwd_bwd`` points are stored as well (the cost model reads
  ``fwd_bwd``).
* Duration of one call: on a GPU trace, the summed duration of the GPU kernels it launched,
  linked through the runtime calls nested in the op (``correlation``) or through the op's
  ``External id``; an op whose kernels are not in the trace is skipped. On a CPU-only trace, the
  op's own ``dur``. Calls of one shape are aggregated by the median duration.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from perfmodel.errors import SpecError
from perfmodel.units import fmt

# --------------------------------------------------------------------------------------------
# torch.profiler Chrome trace
# --------------------------------------------------------------------------------------------

_GEMM_OPS = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::_scaled_mm", "aten::_addmm_activation",
}
_ATTN_RE = re.compile(
    r"^(aten::_?scaled_dot_product_\w*attention\w*|aten::_flash_attention_\w+|aten::_efficient_attention_\w+"
    r"|flash_attn\w*::\w*(fwd|bwd|forward|backward)\w*)$"
)
_CPU_CATS = {"cpu_op", "operator", "user_annotation"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "driver"}
_KERNEL_CATS = {"kernel", "gpu_op"}

_TYPE_PRECISION = {
    "float": "fp32", "double": "fp64", "c10::half": "fp16", "half": "fp16", "c10::bfloat16": "bf16",
    "bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8", "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8",
    "signed char": "int8", "char": "int8",
}

# index of `is_causal` in the op's inputs (schema order), for the ops that take it as a flag
_CAUSAL_ARG = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 7,
    "aten::_scaled_dot_product_cudnn_attention_backward": 11,
}


def _precision(type_name: Any) -> str | None:
    if not isinstance(type_name, str):
        return None
    return _TYPE_PRECISION.get(type_name.strip().lower())


def _load_trace(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if p.suffix == ".gz":
        with gzip.open(p, "rt") as fh:
            raw = fh.read()
    else:
        raw = p.read_text()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SpecError("(file)", f"not JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                        "a torch.profiler Chrome trace (export_chrome_trace), .json or .json.gz", str(p)) from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e]


def _gemm_mnk(name: str, dims: list[Any]) -> tuple[int, int, int, int] | None:
    """(M, N, K, batch) of a GEMM op from its Input Dims, or None if it is not a plain GEMM."""
    def shapes(i: int, j: int) -> tuple[list[int], list[int]] | None:
        if len(dims) <= max(i, j):
            return None
        a, b = dims[i], dims[j]
        if not (isinstance(a, list) and isinstance(b, list)) or not a or not b:
            return None
        return [int(x) for x in a], [int(x) for x in b]

    if name in ("aten::mm", "aten::_scaled_mm"):
        ab = shapes(0, 1)
    elif name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):
        ab = shapes(1, 2)
    elif name in ("aten::bmm", "aten::matmul"):
        ab = shapes(0, 1)
    elif name == "aten::linear":  # x [..., K], weight [N, K]
        ab = shapes(0, 1)
        if ab is None or len(ab[1]) != 2:
            return None
        a, w = ab
        if len(a) < 2:
            return None
        return math.prod(a[:-1]), w[0], a[-1], 1
    else:
        return None
    if ab is None:
        return None
    a, b = ab
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    if len(b) == 2:  # [..., M, K] x [K, N]: one GEMM of (prod(...)·M, N, K)
        return math.prod(a[:-1]), n, k, 1
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=False))
    return m, n, k, batch


def _attention_shape(name: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """b, h, s_q, s_kv, d, causal, precision, backward of one attention op."""
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    backward = "backward" in name or name.endswith("bwd") or "_bwd" in name
    q_idx = 1 if backward else 0  # backward ops take grad_out first
    package = name.startswith("flash_attn")
    if package and backward:
        q_idx = 1  # flash_attn bwd(dout, q, k, v, ...)
    if len(dims) <= q_idx + 1:
        return None
    q, k = dims[q_idx], dims[q_idx + 1]
    if not (isinstance(q, list) and isinstance(k, list)) or len(q) != 4 or len(k) != 4:
        return None  # varlen / nested tensors: shapes are not in the dims
    if package or name.startswith("aten::_flash_attention") or name.startswith("aten::_efficient_attention"):
        b, s_q, h, d = q  # (batch, seq, heads, head_dim) layout
        s_kv = k[1]
    else:
        b, h, s_q, d = q  # SDPA: (batch, heads, seq, head_dim)
        s_kv = k[2]
    causal: bool | None = None
    idx = _CAUSAL_ARG.get(name)
    if idx is not None and idx < len(concrete) and concrete[idx] in ("True", "False"):
        causal = concrete[idx] == "True"
    elif package:
        flags = [c for c in concrete if c in ("True", "False")]
        causal = flags[0] == "True" if flags else None
    prec = _precision(types[q_idx] if q_idx < len(types) else None) or "bf16"
    kernel = _attention_kernel(name)
    return {"b": int(b), "h": int(h), "s_q": int(s_q), "s_kv": int(s_kv), "d": int(d), "causal": causal,
            "precision": prec, "backward": backward, "kernel": kernel}


def _attention_kernel(name: str) -> str:
    if name.startswith("flash_attn"):
        return "flash-attn"
    n = name.removesuffix("_backward")
    if "for_cpu" in n:
        return "sdpa-cpu-flash"
    if "flash" in n:
        return "sdpa-flash"
    if "efficient" in n:
        return "sdpa-mem-efficient"
    if "cudnn" in n:
        return "sdpa-cudnn"
    return "sdpa"


def _nesting(events: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Index of each host event -> indices of the host events enclosing it (same pid/tid)."""
    by_thread: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[(e.get("pid"), e.get("tid"))].append(i)
    parents: dict[int, list[int]] = {}
    for idx in by_thread.values():
        idx.sort(key=lambda i: (float(events[i]["ts"]), -float(events[i]["dur"])))
        stack: list[int] = []
        for i in idx:
            ts = float(events[i]["ts"])
            while stack and float(events[stack[-1]]["ts"]) + float(events[stack[-1]]["dur"]) <= ts:
                stack.pop()
            parents[i] = list(stack)
            stack.append(i)
    return parents


def read_torch_trace(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(GEMM points, attention points) of a torch.profiler Chrome trace; see the module doc."""
    events = _load_trace(path)
    host = [e for e in events if str(e.get("cat", "")).lower() in _CPU_CATS | _RUNTIME_CATS]
    kernels = [e for e in events if str(e.get("cat", "")).lower() in _KERNEL_CATS]
    k_by_corr: dict[Any, float] = defaultdict(float)
    k_by_ext: dict[Any, float] = defaultdict(float)
    for kv in kernels:
        a = kv.get("args") or {}
        if "correlation" in a:
            k_by_corr[a["correlation"]] += float(kv["dur"])
        if "External id" in a:
            k_by_ext[a["External id"]] += float(kv["dur"])
    on_gpu = bool(kernels)

    parents = _nesting(host)
    kind: dict[int, str] = {}
    for i, e in enumerate(host):
        name = str(e.get("name", ""))
        if str(e.get("cat", "")).lower() in _RUNTIME_CATS:
            continue
        if name in _GEMM_OPS:
            kind[i] = "gemm"
        elif _ATTN_RE.match(name):
            kind[i] = "attn"
    descendants: dict[int, list[int]] = defaultdict(list)
    for i, ps in parents.items():
        for p in ps:
            if p in kind:
                descendants[p].append(i)

    def duration_s(i: int) -> float | None:
        if not on_gpu:
            return float(host[i]["dur"]) * 1e-6
        total = 0.0
        for j in descendants[i]:
            if str(host[j].get("cat", "")).lower() in _RUNTIME_CATS:
                total += k_by_corr.get((host[j].get("args") or {}).get("correlation"), 0.0)
        if total == 0.0:
            for j in [i, *descendants[i]]:
                total += k_by_ext.get((host[j].get("args") or {}).get("External id"), 0.0)
        return total * 1e-6 if total > 0 else None

    gemm_calls: dict[tuple[str, int, int, int, int], list[float]] = defaultdict(list)
    gemm_ops: dict[tuple[str, int, int, int, int], set[str]] = defaultdict(set)
    attn_calls: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for i, what in kind.items():
        e = host[i]
        name = str(e["name"])
        args = e.get("args") or {}
        if any(kind.get(j) == what for j in descendants[i]):
            continue  # a wrapper (matmul around mm, sdpa around its fused kernel): count the inner op
        if what == "gemm":
            if any(kind.get(p) == "attn" for p in parents[i]):
                continue
            mnkb = _gemm_mnk(name, args.get("Input Dims") or [])
            types = args.get("Input type") or []
            a_idx = 1 if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm") else 0
            prec = _precision(types[a_idx] if a_idx < len(types) else None)
            if mnkb is None or prec is None or min(mnkb) <= 0:
                continue
            t = duration_s(i)
            if t is None or t <= 0:
                continue
            gkey = (prec, *mnkb)
            gemm_calls[gkey].append(t)
            gemm_ops[gkey].add(name)
        else:
            shp = _attention_shape(name, args)
            if shp is None:
                continue
            t = duration_s(i)
            if t is None or t <= 0:
                continue
            akey = (shp["kernel"], shp["precision"], shp["b"], shp["h"], shp["s_q"], shp["s_kv"], shp["d"],
                    shp["causal"], shp["backward"])
            attn_calls[akey].append(t)

    gemm = []
    for (prec, m, n, k, batch), ts in sorted(gemm_calls.items()):
        t = statistics.median(ts)
        flop = 2.0 * m * n * k * batch
        gemm.append({
            "precision": prec, "m": m, "n": n, "k": k, "batch": batch, "calls": len(ts),
            "ops": sorted(gemm_ops[(prec, m, n, k, batch)]), "flop": flop, "median_s": t,
            "achieved_flop_per_s": flop / t, "achieved": fmt(flop / t, "FLOP/s", 4),
        })
    return gemm, _attention_points(attn_calls)


def _attention_points(calls: dict[tuple[Any, ...], list[float]]) -> list[dict[str, Any]]:
    fwd: dict[tuple[Any, ...], tuple[float, float, int]] = {}
    bwd: dict[tuple[Any, ...], tuple[float, float, int]] = {}
    for (kernel, prec, b, h, s_q, s_kv, d, causal, backward), ts in calls.items():
        flop = 4.0 * b * h * s_q * s_kv * d * (0.5 if causal else 1.0)
        key = (kernel.removesuffix("_backward"), prec, b, h, s_q, s_kv, d, bool(causal))
        (bwd if backward else fwd)[key] = (flop * (2.5 if backward else 1.0), statistics.median(ts), len(ts))
    # a backward op that does not carry is_causal takes it from the forward of the same shape
    for key in list(bwd):
        if not key[-1] and key not in fwd:
            twin = (*key[:-1], True)
            if twin in fwd:
                flop, t, c = bwd.pop(key)
                bwd[twin] = (flop * 0.5, t, c)
    out = []

    def point(key: tuple[Any, ...], direction: str, flop: float, t: float, n: int) -> dict[str, Any]:
        kernel, prec, b, h, s_q, s_kv, d, causal = key
        return {
            "kernel": kernel, "direction": direction, "causal": causal, "head_dim": d, "seq_len": s_q,
            "kv_len": s_kv, "batch": b, "heads": h, "precision": prec, "calls": n, "flop": flop,
            "median_s": t, "achieved_flop_per_s": flop / t, "achieved": fmt(flop / t, "FLOP/s", 4),
        }

    for key in sorted(set(fwd) | set(bwd), key=str):
        if key in fwd:
            out.append(point(key, "fwd", *fwd[key]))
        if key in bwd:
            out.append(point(key, "bwd", *bwd[key]))
        if key in fwd and key in bwd:
            f, b = fwd[key], bwd[key]
            out.append(point(key, "fwd_bwd", f[0] + b[0], f[1] + b[1], min(f[2], b[2])))
    return out


def parse_torch_trace(path: str | Path) -> list[dict[str, Any]]:
    """GemmPoint-like dicts (precision, m, n, k, batch, achieved, achieved_flop_per_s, calls, ...)
    of every GEMM shape in a torch.profiler Chrome trace recorded with record_shapes=True."""
    return read_torch_trace(path)[0]


def parse_torch_trace_attention(path: str | Path) -> list[dict[str, Any]]:
    """AttentionPoint-like dicts of the fused-attention ops in the trace."""
    return read_torch_trace(path)[1]


# --------------------------------------------------------------------------------------------
# writing into the catalogue
# --------------------------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    pass


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    # leaf mappings ({value: ..., source: ...}, one GEMM point) stay on one line as in the catalogue
    flow = (bool(data) and all(not isinstance(v, (dict, list)) for v in data.values())
            and sum(len(str(k)) + len(str(v)) for k, v in data.items()) <= 200)
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_Dumper.add_representer(dict, _represent_dict)


def _write_yaml(src: Path, data: dict[str, Any], dest: Path) -> None:
    header = []
    for line in src.read_text().splitlines():
        if line.startswith("#"):
            header.append(line)
        else:
            break
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=140, default_flow_style=False)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(("\n".join(header) + "\n" if header else "") + body)


def _ref_key(refs: dict[str, str], base: str, text: str) -> str:
    key, i = base, 2
    while key in refs and refs[key] != text:
        key, i = f"{base}-{i}", i + 1
    refs[key] = text
    return key


def _open_spec(path: str | Path, key_base: str, source_note: str, date: str) -> tuple[Path, dict[str, Any], str]:
    """(path, the spec's YAML data, the references key under which the imported points cite
    `source_note`), the key added to the data's references."""
    from perfmodel.hardware.catalog import read_yaml

    src = Path(path)
    data = read_yaml(src)
    refs = data.get("references") or {}
    data["references"] = refs
    return src, data, _ref_key(refs, key_base, f"{source_note} (imported by perfmodel calibrate, {date})")


def apply_to_spec(spec_yaml_path: str | Path | None = None, *, gemm: list[dict[str, Any]] | None = None,
                  attention: list[dict[str, Any]] | None = None, curve: dict[str, Any] | None = None,
                  node_yaml_path: str | Path | None = None, source_note: str = "user measurement",
                  out: str | Path | None = None, node_out: str | Path | None = None,
                  date: str | None = None) -> dict[str, str]:
    """Write measured points into an accelerator YAML (`gemm`, `attention` -> calibration) and a
    node YAML (`curve` -> intra_node.curves), each citing a new `references` entry
    (``user-trace-DATE`` / ``user-nccl-DATE``) that holds `source_note`.

    A new point replaces an existing one of the same identity (precision+m+n+k; kernel, direction,
    causal, head_dim, seq_len, precision; collective+group_size); a new curve goes first, so the
    cost model picks it. Each result is validated with the strict spec models before it is
    written: to `out` / `node_out` if given, else in place. Returns {"accelerator": path, "node":
    path} for what was written.
    """
    from perfmodel.hardware.catalog import parse_model
    from perfmodel.hardware.specs import Accelerator
    from perfmodel.hardware.system_specs import Node

    date = date or dt.date.today().isoformat()
    written: dict[str, str] = {}
    if gemm or attention:
        if spec_yaml_path is None:
            raise ValueError("GEMM/attention points need the accelerator YAML (spec_yaml_path)")
        src, data, key = _open_spec(spec_yaml_path, f"user-trace-{date}", source_note, date)
        cal = data.get("calibration") or {}
        data["calibration"] = cal
        if gemm:
            new = [{"precision": g["precision"], "m": int(g["m"]) * int(g.get("batch", 1)), "n": int(g["n"]),
                    "k": int(g["k"]), "achieved": g["achieved"], "source": key} for g in gemm]
            ids = {(p["precision"], p["m"], p["n"], p["k"]) for p in new}
            old = [p for p in cal.get("gemm_shapes", []) if (p.get("precision"), p.get("m"), p.get("n"), p.get("k")) not in ids]
            cal["gemm_shapes"] = old + new
        if attention:
            def ident(p: dict[str, Any]) -> tuple[Any, ...]:
                return (p.get("kernel"), p.get("direction"), bool(p.get("causal")), p.get("head_dim"),
                        p.get("seq_len"), p.get("precision", "bf16"))
            new = [{"kernel": a["kernel"], "direction": a["direction"], "causal": bool(a["causal"]),
                    "head_dim": int(a["head_dim"]), "seq_len": int(a["seq_len"]), "precision": a["precision"],
                    "achieved": a["achieved"], "source": key} for a in attention]
            ids = {ident(p) for p in new}
            cal["attention"] = [p for p in cal.get("attention", []) if ident(p) not in ids] + new
        dest = Path(out) if out else src
        parse_model(Accelerator, data, dest)
        _write_yaml(src, data, dest)
        written["accelerator"] = str(dest)
    if curve is not None:
        if node_yaml_path is None:
            raise ValueError("a collective curve needs the node YAML (node_yaml_path)")
        src, data, key = _open_spec(node_yaml_path, f"user-nccl-{date}", source_note, date)
        c = {**curve, "source": key}
        intra = data.setdefault("intra_node", {})
        old = [x for x in intra.get("curves", [])
               if (x.get("collective"), x.get("group_size")) != (c["collective"], c["group_size"])]
        intra["curves"] = [c, *old]
        dest = Path(node_out) if node_out else src
        parse_model(Node, data, dest)
        _write_yaml(src, data, dest)
        written["node"] = str(dest)
    return written
