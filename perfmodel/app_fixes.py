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
    """A workload YAML uploaded in the explorer, validated like a file in workloads/; errors name
    the uploaded file (not a temporary path) and the field."""
    import tempfile
    from pathlib import Path

    from perfmodel.errors import SpecError
    from perfmodel.workload.catalog import load_workload_file

    if len(data) > MAX_UPLOAD_BYTES:
        raise SpecError("(file)", f"{len(data):,} bytes", f"a workload YAML under {MAX_UPLOAD_BYTES:,} bytes", name)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / (Path(name).stem + ".yaml")
        path.write_bytes(data)
        try:
            return load_workload_file(path)
        except SpecError as e:
            raise SpecError(e.field, e.problem.replace(str(path), name), e.expected, name) from None


__all__ = ["LayoutProblem", "diagnose", "field_of", "parse_uploaded_workload"]
