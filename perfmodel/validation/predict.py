"""`perfmodel validate`: predict every row of a runs file, one output row per input row.

Measured values are read only to be copied next to the prediction in the report; nothing
measured flows into a prediction. A row's `framework` selects its stack's mechanisms
(perfmodel/calibration/frameworks.py); the calibration profile (default: the shipped one)
adjusts the efficiencies and gives the 80 % interval.

The contract holds whatever a row holds: a damaged row (a bad cell, a repeated or empty run_id,
a non-UTF-8 byte, a layout that cannot run) becomes an error row whose `message` says why, and
every other row is still predicted.
"""

from __future__ import annotations

import csv
from pathlib import Path

from perfmodel.calibration.frameworks import FRAMEWORKS, apply_framework, framework_id
from perfmodel.calibration.profile import Profile, calibrated_system, load_profile, with_interval
from perfmodel.engines.registry import get_engine, run_engine
from perfmodel.errors import MAX_QUOTE, PerfmodelError, clip
from perfmodel.memory import NO_FIT_PREFIX
from perfmodel.validation.runs import DEFAULTS, OUTPUT_COLUMNS, RowError, check_encoding, printable, read_rows, row_run
from perfmodel.workload.catalog import load_workloads


def predict_row(row: dict[str, str], workloads: dict, engine: str = "analytic", attention_impl: str | None = None,
                profile: Profile | None = None, framework_name: str | None = None) -> dict[str, str]:
    """One output row. `framework_name` overrides the row's framework column; `attention_impl`
    (flash / flash3 / flash4 / fused / flash1 / unfused) overrides the row's and its framework's attention kernel."""
    out = {c: "" for c in OUTPUT_COLUMNS}
    out["run_id"] = printable(row.get("run_id", ""))
    prof = profile or load_profile(None)
    try:
        check_encoding(row)
        if not row.get("run_id"):
            raise RowError("column run_id is empty; allowed: a unique id")
        run = row_run(row, workloads)
        fw_name = framework_name or row.get("framework") or None
        fw_id = framework_id(fw_name) if fw_name else None
        if fw_name and fw_id is None:
            # a stack perfmodel has no mechanisms for: predicted as an empty framework, and said
            run.notes.append(f"framework {fw_name!r} is not one perfmodel models (known: {', '.join(FRAMEWORKS)}): "
                             "ran with no stack's mechanisms")
        elif fw_id != fw_name:
            run.notes.append(f"framework {fw_name!r} read as {fw_id}")
        fw = FRAMEWORKS[fw_id] if fw_id else None
        if fw is not None:
            run.plan = apply_framework(run.plan, fw, run.spec)
        if attention_impl and attention_impl != run.plan.attention_impl:
            run.plan = run.plan.model_copy(update={"attention_impl": attention_impl})
            run.notes.append(f"attention {attention_impl} (--attention)")
        est = run_engine(engine, run.spec, calibrated_system(run.system, prof, fw), run.plan, run.notes)
        est = with_interval(est, prof, run.system, run.spec, fw.name if fw is not None else None)
    except (PerfmodelError, RowError, ValueError, KeyError, ArithmeticError) as e:
        return _error(out, f"{type(e).__name__}: {e}")
    except Exception as e:
        return _error(out, f"internal error on this row ({type(e).__name__}: {e}); please report it")
    out.update(
        status="ok",
        predicted_step_time_s=f"{est.step_time_s:.6g}",
        predicted_tokens_per_s=f"{est.tokens_per_s:.6g}",
        predicted_tflops_per_gpu=f"{est.tflops_per_gpu:.6g}",
        predicted_mfu=f"{est.mfu:.4f}",
        predicted_memory_per_gpu_bytes=f"{est.memory_per_gpu_bytes:.6g}",
        message="; ".join(defaulted_fit(m, row) for m in est.messages),
    )
    if est.step_time_lo_s is not None and est.step_time_hi_s is not None:
        out["predicted_step_time_lo_s"] = f"{est.step_time_lo_s:.6g}"
        out["predicted_step_time_hi_s"] = f"{est.step_time_hi_s:.6g}"
    return out


def defaulted_fit(message: str, row: dict[str, str]) -> str:
    """A 'does not fit' under a recompute the row left empty names the default it ran under
    (docs/VALIDATION.md: an empty recompute is none; published recipes often recompute, and the
    message already says what the run needs with recompute), so a run that ran never reads as
    one that cannot."""
    if message.startswith(NO_FIT_PREFIX) and row.get("recompute", "") == "":
        return f"does not fit with the defaulted recompute={DEFAULTS['recompute']}:" + message[len(NO_FIT_PREFIX):]
    return message


def _error(out: dict[str, str], message: str) -> dict[str, str]:
    out["status"] = "error"
    out["message"] = printable(clip(message, 4 * MAX_QUOTE))
    return out


def validate_file(runs: Path | str, out: Path | str, engine: str = "analytic", attention_impl: str | None = None,
                  calibration: str | Profile | None = None, framework_name: str | None = None) -> list[dict[str, str]]:
    """Predict every row of `runs` into `out`. `attention_impl` overrides the attention kernel
    every row's framework selects: 'flash' or 'unfused' (Megatron's baddbmm + fused softmax + bmm,
    before FlashAttention). `calibration`: None / 'default', 'none' or a profile path."""
    get_engine(engine)  # an unknown engine is an error before any row is read
    rows = read_rows(runs)
    workloads = load_workloads()
    prof = load_profile(calibration)
    first: dict[str, int] = {}
    preds = []
    for i, r in enumerate(rows):
        rid = r.get("run_id", "")
        if rid and rid in first:
            row_out = {c: "" for c in OUTPUT_COLUMNS}
            row_out["run_id"] = printable(rid)
            preds.append(_error(row_out, f"RowError: run_id {rid!r} repeats data row {first[rid] + 1}; allowed: a unique id"))
            continue
        first.setdefault(rid, i)
        preds.append(predict_row(r, workloads, engine, attention_impl, prof, framework_name))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=OUTPUT_COLUMNS)
        w.writeheader()
        w.writerows(preds)
    return preds
