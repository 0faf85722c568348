"""Which sidebar widget a layout problem belongs to, and the nearest choices that fix it.

The explorer shows a layout error under the widget that caused it, with one-click fixes. The
checks mirror ParallelPlan's own (the plan stays the authority: anything these miss is still
caught when the plan is built, and shown at the top of the sidebar).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LayoutProblem:
    widget: str  # the widget row it belongs under: gpus | tp | ep | batch
    message: str
    fixes: tuple[tuple[str, dict[str, Any]], ...] = field(default=())  # (button label, session-state updates)


def _nearest(values: list[int], x: int, k: int = 2) -> list[int]:
    return sorted(sorted(set(values), key=lambda v: (abs(v - x), v))[:k])


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def diagnose(cfg: dict[str, Any], spec: Any) -> LayoutProblem | None:
    """The first problem of the sidebar choices `cfg` (gpus, tp, pp, cp, ep, vp, mb, gb) for the
    model `spec`, with fixes; None when none of these checks fails."""
    tp, pp, cp, ep, vp, gpus = cfg["tp"], cfg["pp"], cfg["cp"], cfg["ep"], cfg["vp"], cfg["gpus"]
    if spec.is_transformer:
        heads = spec.num_heads or 1
        if heads % tp:
            good = [d for d in _divisors(heads) if d <= 512]
            return LayoutProblem("tp", f"tp {tp} does not divide the {heads} attention heads of {spec.id}.",
                                 tuple((f"use tp {t}", {"tp": t}) for t in _nearest(good, tp)))
        kv = spec.kv_heads
        if kv % tp and tp % kv:
            good = [d for d in _divisors(heads) if kv % d == 0 or d % kv == 0]
            return LayoutProblem("tp", f"tp {tp} and the {kv} KV heads of {spec.id}: one must divide the other.",
                                 tuple((f"use tp {t}", {"tp": t}) for t in _nearest(good, tp)))
    elif tp > 1 or cp > 1 or ep > 1:
        return LayoutProblem("tp", f"{spec.family} model {spec.id}: tp, cp and ep need a transformer.",
                             (("use tp 1, cp 1, ep 1", {"tp": 1, "cp": 1, "ep": 1}),))
    if pp * vp > spec.num_layers:
        best = max(1, spec.num_layers // vp)
        return LayoutProblem("tp", f"pp {pp} x vp {vp} = {pp * vp} pipeline chunks for {spec.num_layers} layers.",
                             ((f"use pp {best}", {"pp": best}),))
    per = tp * pp * cp
    if gpus % per:
        lo, hi = max(per, gpus // per * per), (gpus // per + 1) * per
        return LayoutProblem("gpus", f"{gpus} GPUs do not split into tp {tp} x pp {pp} x cp {cp} = {per} per replica.",
                             tuple((f"use {n:,} GPUs", {"gpus": n}) for n in sorted({lo, hi})))
    dp = gpus // per
    if spec.family == "moe" and (spec.num_experts or 1) % ep:
        good = _divisors(spec.num_experts or 1)
        return LayoutProblem("ep", f"ep {ep} does not divide the {spec.num_experts} experts of {spec.id}.",
                             tuple((f"use ep {e}", {"ep": e}) for e in _nearest(good, ep)))
    if spec.family != "moe" and ep > 1:
        return LayoutProblem("ep", f"ep {ep} > 1 but {spec.id} has no experts.", (("use ep 1", {"ep": 1}),))
    step = cfg["mb"] * dp
    if cfg["gb"] % step:
        lo, hi = max(step, cfg["gb"] // step * step), (cfg["gb"] // step + 1) * step
        return LayoutProblem("batch", f"global batch {cfg['gb']:,} is not a multiple of micro-batch {cfg['mb']} x dp {dp} "
                             f"= {step:,}.", tuple((f"use global batch {g:,}", {"gb": g}) for g in sorted({lo, hi})))
    return None


def field_of(message: str) -> str:
    """The widget row a library error message belongs to (for errors the checks above miss)."""
    m = message.lower()
    for words, widget in ((("global_batch", "global batch", "micro_batch"), "batch"), (("ep ", "experts", "etp"), "ep"),
                          (("world size", "gpus", "n_gpus"), "gpus"), (("tp ", "pp ", "cp ", "vp ", "heads", "layers"), "tp")):
        if any(w in m for w in words):
            return widget
    return "top"


MAX_UPLOAD_BYTES = 1_000_000


def parse_uploaded_workload(name: str, data: bytes) -> Any:
    """A workload uploaded in the explorer, validated like a file in workloads/: a workload YAML,
    or a Hugging Face config.json (detected by content, as the CLI does). Errors name the uploaded
    file (not a temporary path) and the field."""
    import tempfile
    from pathlib import Path

    from perfmodel.errors import SpecError
    from perfmodel.workload.catalog import load_workload_file
    from perfmodel.workload.hf_config import is_hf_config, load_hf_config

    if len(data) > MAX_UPLOAD_BYTES:
        raise SpecError("(file)", f"{len(data):,} bytes", f"a file under {MAX_UPLOAD_BYTES:,} bytes", name)
    stem = Path(name).stem if Path(name).stem != "config" else "uploaded-config"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / (stem + Path(name).suffix.lower() if Path(name).suffix else stem + ".yaml")
        path.write_bytes(data)
        try:
            if is_hf_config(path):
                return load_hf_config(path, model_id=stem)
            return load_workload_file(path)
        except SpecError as e:
            raise SpecError(e.field, e.problem.replace(str(path), name), e.expected, name) from None
        except ValueError as e:  # the HF importer's errors (unknown model_type or field) name the feature
            raise SpecError("(file)", str(e).replace(str(path), name), "a workload YAML or a supported config.json",
                            name) from None


def add_uploaded_profile(name: str, data: bytes, root: Any) -> str:
    """An uploaded calibration profile (a YAML written by `perfmodel fit --out PROFILE.yaml`),
    validated by the library's own reader; returns the path to pass as `calibration=` everywhere.
    The file is stored under `root` by its content hash, so a changed upload is a new path (and a
    new cache key of every cached estimate) while the same upload twice is one. A file the reader
    rejects raises a ProfileError naming the upload and the field (e.g. `parameters.memory_bound.fitted`)."""
    import hashlib
    from pathlib import Path

    from perfmodel.calibration.profile import ProfileError, load_profile

    if len(data) > MAX_UPLOAD_BYTES:
        raise ProfileError(f"{name}: {len(data):,} bytes; expected a profile under {MAX_UPLOAD_BYTES:,} bytes")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"{name}: not UTF-8 text; expected a YAML written by `perfmodel fit --out PROFILE.yaml`") from None
    path = Path(root) / hashlib.sha256(data).hexdigest()[:16] / (Path(name).stem + ".yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    try:
        load_profile(str(path))
    except ProfileError as e:
        path.unlink()
        raise ProfileError(str(e).replace(str(path), name)) from None
    return str(path)


def profile_summary(prof: Any) -> dict[str, Any]:
    """What a user needs to judge a calibration profile: what it was fitted on, when, and its
    cross-validated error (from the provenance `perfmodel fit` records); empty fields are left out,
    an absolute runs path is shortened to its file name."""
    from pathlib import Path

    pv = prof.provenance
    loso = pv.get("leave_one_source_out_error") or {}
    phys = pv.get("physics_only_error") or {}

    def pct(x: Any) -> str | None:
        return f"{float(x):+.1%}" if isinstance(x, (int, float)) else None

    out = {
        "fitted on": ", ".join(Path(str(f)).name if Path(str(f)).is_absolute() else str(f)
                               for f in pv.get("fitted_on") or []) or None,
        "rows": pv.get("rows"),
        "sources": len(pv.get("sources") or []) or None,
        "fitted": pv.get("date"),
        "held out by": pv.get("held_out_by"),
        "accelerator generations seen": ", ".join(pv.get("generations") or []) or None,
        "model families seen": ", ".join(pv.get("families") or []) or None,
        # the interval widens for each mechanism of a model outside this list (calibration/profile.py)
        "mechanisms seen (families, token mixers)": ", ".join(pv.get("mechanisms") or []) or None,
        "cross-validated MAPE": f"{float(loso['mape']):.1%}" if isinstance(loso.get("mape"), (int, float)) else None,
        "cross-validated median error": pct(loso.get("median")),
        "80 % interval held": (f"{float(loso['interval_coverage']):.0%} of held-out runs"
                               if isinstance(loso.get("interval_coverage"), (int, float)) else None),
        "physics-only MAPE on the same rows": f"{float(phys['mape']):.1%}" if isinstance(phys.get("mape"), (int, float)) else None,
    }
    return {k: v for k, v in out.items() if v not in (None, "")}


HARDWARE_KINDS = {"matrix_peak": "accelerators", "intra_node": "nodes", "num_nodes": "clusters", "per_hop_latency": "fabrics"}


def add_uploaded_hardware(name: str, data: bytes, root: Any) -> tuple[str, str]:
    """An uploaded hardware YAML (accelerator, node, cluster or fabric, detected by its fields) added
    to the catalogue through a user specs directory `root` (perfmodel.hardware.catalog.add_specs_dir).
    Returns (kind, id); a file the catalogue rejects raises its error, naming the upload and field."""
    from pathlib import Path

    import yaml

    from perfmodel.errors import SpecError
    from perfmodel.hardware.catalog import add_specs_dir, load_catalog

    if len(data) > MAX_UPLOAD_BYTES:
        raise SpecError("(file)", f"{len(data):,} bytes", f"a file under {MAX_UPLOAD_BYTES:,} bytes", name)
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise SpecError("(file)", f"not readable YAML ({str(e)[:160]})", "a UTF-8 YAML mapping", name) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise SpecError("id", "missing", "a YAML mapping with an `id` like the files in hardware_specs/", name)
    kind = next((k for field, k in HARDWARE_KINDS.items() if field in doc), None)
    if kind is None:
        raise SpecError("(file)", "neither an accelerator, node, cluster nor fabric spec",
                        f"one of the fields {sorted(HARDWARE_KINDS)} (see hardware_specs/)", name)
    ident = doc["id"]
    target = Path(root) / kind / f"{ident}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    problems = add_specs_dir(root)
    for p in problems:
        if p.file and Path(p.file).resolve() == target.resolve():
            target.unlink()
            raise SpecError(p.field, p.problem, p.expected, name)
    if ident not in getattr(load_catalog(), kind):
        target.unlink()
        raise SpecError("id", f"{ident!r} was not added (an id the built-in catalogue already has?)", "a new id", name)
    return kind, ident


__all__ = ["LayoutProblem", "add_uploaded_hardware", "add_uploaded_profile", "diagnose", "field_of", "parse_uploaded_workload",
           "profile_summary"]
