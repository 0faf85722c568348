"""Regenerate the validation report: predictions for every runs file and the error report.

    python validation/run_validation.py [--out DIR]     (default: validation/report, the committed one)

Sections: the public runs with the shipped calibration profile (exactly `perfmodel validate`: the
headline, in sample since the profile was fitted on them), the same runs physics only
(`--calibration none`), the profile's leave-one-source-out table (each source predicted by a fit
that never saw it: the honest figure), the CPU runs measured on the machine the committed
host-cpu-zen4 spec describes, those measured on a second CPU (host-cpu-zen5, fitted on), on a third
(host-cpu-zen3, never fitted on) and on a second Zen 4 VM (host-cpu-zen4b, its own quick calibration,
never fitted on),
and the H200 runs measured on a lent GPU (validation/device/), with the
profile and physics only. Each row's `framework` column selects its stack's mechanisms.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfmodel.calibration.profile import load_profile
from perfmodel.hardware.catalog import add_specs_dir, clear_added_specs
from perfmodel.validation.predict import validate_file
from perfmodel.validation.report import write_report

HERE = Path(__file__).resolve().parent


def loso_markdown() -> str:
    prov = load_profile("default").provenance
    if not prov:
        return "No shipped profile.\n"
    lines = [f"Profile fitted {prov.get('date')} on {prov.get('rows')} rows of {', '.join(prov.get('fitted_on', []))}.", "",
             "| held-out source | rows | physics-only MAPE | median | leave-one-source-out MAPE | median |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in prov.get("leave_one_source_out", []):
        lines.append(f"| {r['source']} | {r['rows']} | {r['physics_mape']:.1%} | {r['physics_median']:+.1%} | "
                     f"{r['loso_mape']:.1%} | {r['loso_median']:+.1%} |")
    lo = prov.get("leave_one_source_out_error", {})
    if lo:
        lines += ["", f"All held-out rows: MAPE {lo['mape']:.1%}, median {lo['median']:+.1%}; the 80 % interval "
                  f"(from these same residuals) held {lo.get('interval_coverage', float('nan')):.0%}."]
    return "\n".join(lines) + "\n"


def profile_and_physics(runs: Path, name: str, pred_dir: Path, out: Path, title: str) -> list[tuple[str, str]]:
    """Report sections for `runs` with the shipped profile and physics only (none if the file is absent)."""
    if not runs.exists():
        return []
    sections = []
    for cal, suffix, what in (("default", "", "shipped calibration profile"), ("none", "_physics", "physics only")):
        validate_file(runs, pred_dir / f"{name}{suffix}.csv", calibration=cal)
        text = write_report([runs], [pred_dir / f"{name}{suffix}.csv"], out / f"{name}{suffix}")
        sections.append((title.format(what=what), text))
    return sections


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE / "report"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    pred_dir = out / "predictions"
    pred_dir.mkdir(parents=True, exist_ok=True)
    sections = []

    public = HERE / "runs_public.csv"
    validate_file(public, pred_dir / "public_default.csv")
    text = write_report([public], [pred_dir / "public_default.csv"], out / "public_default")
    sections.append(("Public runs, shipped calibration profile (what `perfmodel validate` prints; in sample)", text))

    sections.append(("Public runs, leave one source out (the shipped profile's provenance)", loso_markdown()))

    validate_file(public, pred_dir / "public_physics.csv", calibration="none")
    text = write_report([public], [pred_dir / "public_physics.csv"], out / "public_physics")
    sections.append(("Public runs, physics only (`--calibration none`)", text))

    cpu = HERE / "runs_cpu.csv"
    if cpu.exists():
        validate_file(cpu, pred_dir / "cpu.csv")
        text = write_report([cpu], [pred_dir / "cpu.csv"], out / "cpu")
        sections.append(("CPU runs measured on the AMD EPYC Zen 4 host host-cpu-zen4 describes (validation/runs_cpu.csv)", text))

    sections += profile_and_physics(HERE / "runs_cpu_zen5.csv", "cpu_zen5", pred_dir, out,
                                    "CPU runs measured on an AMD EPYC Zen 5 host (host-cpu-zen5), {what} "
                                    "(validation/runs_cpu_zen5.csv; fitted on, in sample: held out 16.0 %, docs/CALIBRATION.md)")
    sections += profile_and_physics(HERE / "runs_cpu_zen3.csv", "cpu_zen3", pred_dir, out,
                                    "CPU runs measured on an AMD EPYC Zen 3 host (host-cpu-zen3, its quick calibration), "
                                    "{what} (validation/runs_cpu_zen3.csv; never fitted on)")
    # a second Zen 4 VM (faster clock and memory than the one host-cpu-zen4 describes), predicted
    # through the spec its own 11-second `perfmodel calibrate` wrote (validation/cpu/specs_zen4b)
    add_specs_dir(HERE / "cpu" / "specs_zen4b")
    try:
        sections += profile_and_physics(HERE / "cpu" / "runs_cpu_zen4b.csv", "cpu_zen4b", pred_dir, out,
                                        "CPU runs measured on a second AMD EPYC Zen 4 VM (host-cpu-zen4b, its quick "
                                        "calibration in validation/cpu/specs_zen4b), {what} "
                                        "(validation/cpu/runs_cpu_zen4b.csv; never fitted on)")
    finally:
        clear_added_specs()
    sections += profile_and_physics(HERE / "runs_h200_measured.csv", "h200", pred_dir, out,
                                    "One H200, small models measured on a lent GPU, {what} (validation/runs_h200_measured.csv; "
                                    "never fitted on)")

    body = ["# perfmodel validation report", "",
            "Generated by `python validation/run_validation.py`. Per-row predictions are in",
            "`predictions/`; charts (predicted vs measured, error by feature) in each section's",
            "`validation.html` / `validation.png`. Targets: MAPE <= 12 % leave-one-source-out, median within",
            "+-5 %, the 80 % interval holding 70-90 %, Kendall tau >= 0.8, CPU <= 15 %.", ""]
    for title, t in sections:
        body += [f"## {title}", "", t, ""]
    (out / "report.md").write_text("\n".join(body))
    print("\n".join(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
