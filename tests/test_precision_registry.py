"""Issue 12: one precision registry (perfmodel/precision.py) that every layer reads. A precision
added to it at run time is accepted by the CLI, plan validation, the runs-file parser, the sweep
file, the spec loader and the cost functions without an edit anywhere else; only the accelerator
YAML that runs it gains data."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest
import yaml

import perfmodel
from perfmodel import precision as registry
from perfmodel.cli import main
from perfmodel.compute.fp8_recipes import gemm_cast_work, recipe_for
from perfmodel.errors import LayoutError, PrecisionError
from perfmodel.hardware import catalog
from perfmodel.hardware.catalog import load_catalog
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.planning.sweep import Sweep
from perfmodel.validation.predict import validate_file
from perfmodel.validation.runs import COLUMNS, OUTPUT_COLUMNS, RowError, row_run
from perfmodel.workload.catalog import load_workloads

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = "bf16, fp16, fp8, mxfp8, nvfp4, fp32"


# ---- the table ------------------------------------------------------------------------------

def test_table_holds_what_the_layers_used_to_spell_out() -> None:
    # (matrix format, GEMM operand bytes, weight bytes, gradient bytes, recipes): the widths the
    # kernels read (fp32 4 B per operand; nvfp4 0.5 B + one E4M3 scale per 16 elements)
    got = {p.name: (p.matrix_format, p.gemm_operand_bytes, p.weight_bytes, p.grad_bytes, p.recipes)
           for p in registry.PRECISIONS.values()}
    assert got == {
        "bf16": ("bf16", 2.0, 2, 4, ()),
        "fp16": ("fp16", 2.0, 2, 2, ()),
        "fp8": ("fp8", 1.0, 1, 4, ("delayed", "current", "blockwise")),
        "mxfp8": ("fp8", 1.0, 1, 4, ("mxfp8",)),
        "nvfp4": ("fp4", 0.5625, 0.5625, 4, ("nvfp4",)),
        "fp32": ("fp32", 4.0, 4, 4, ()),
    }
    assert registry.precision_names()[0] == registry.DEFAULT_PRECISION == "bf16"
    assert registry.peak_formats("fp32") == ("fp32", "tf32") and registry.peak_formats("tf32") == ("tf32", "fp32")
    assert registry.peak_formats("mxfp8") == ("fp8",) and registry.peak_formats("nvfp4") == ("fp4",)


def test_peaks_follow_the_formats() -> None:
    cat = load_catalog()
    b200, a100 = cat.accelerator("b200"), cat.accelerator("a100-sxm4-80gb")
    assert b200.matrix_peak_flop_per_s("mxfp8") == b200.matrix_peak_flop_per_s("fp8") == 4.5e15
    assert b200.matrix_peak_flop_per_s("nvfp4") == 9e15
    # a chip without training_precisions runs what its matrix_peak lists, widest first (V100: no bf16)
    h100 = cat.accelerator("h100-sxm5-80gb")
    assert h100.training_precisions is None or "fp8" in h100.supported_precisions
    with pytest.raises(PrecisionError, match=r"has no fp8 matrix peak; matrix_peak lists"):
        a100.matrix_peak_flop_per_s("fp8")


def test_aliases_resolve_to_the_registry_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ParallelPlan(precision="bfloat16").precision == "bf16"
    assert ParallelPlan(precision="FP16").precision == "fp16"
    assert registry.get("float32").name == "fp32"
    assert main(["estimate", "gpt2-124m", "--hardware", "a100-sxm4-80gb", "--precision", "bfloat16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["precision"] == "bf16"
    # as stacks and published tables write them: Lightning, Composer, Megatron-Bridge's tables
    for written, name in (("bf16-mixed", "bf16"), ("amp_bf16", "bf16"), ("16-mixed", "fp16"), ("FP8-CS", "fp8"),
                          ("fp8_ds", "fp8"), ("FP8-MX", "mxfp8"), ("fp8 (delayed)", "fp8"), ("float8 rowwise", "fp8"),
                          ("FP8 current scaling", "fp8"), ("bf16 mixed precision", "bf16"), ("FP16 precision", "fp16"),
                          # subchannel (blockwise) scaling: Megatron-Bridge's fp8_sc, DGX Cloud's FP8-SS
                          ("fp8_sc", "fp8"), ("FP8-SS", "fp8")):
        assert registry.canonical(written) == name, written
    # names whose format is not one precision stay unknown: fp4 (MXFP4 or NVFP4), tf32
    assert registry.canonical("fp4") is None and registry.canonical("tf32") is None
    # 'mixed' / 'amp' alone do not say which 16-bit format
    assert registry.canonical("mixed precision") is None and registry.canonical("amp") is None


def test_unknown_precision_names_the_allowed_ones_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(LayoutError, match=r"precision='fp7': 'bf16', 'fp16', 'fp8', 'mxfp8', 'nvfp4' or 'fp32'"):
        ParallelPlan(precision="fp7")
    with pytest.raises(PrecisionError, match=f"unknown precision 'fp7'; allowed: {ALLOWED}"):
        registry.get("fp7")
    with pytest.raises(RowError, match=f"column precision 'fp7'; allowed values: {ALLOWED}"):
        row_run({"model": "gpt2-124m", "n_gpus": "1", "global_batch": "8", "precision": "fp7"}, load_workloads())
    with pytest.raises(SystemExit) as e:
        main(["estimate", "gpt2-124m", "--precision", "fp7"])
    assert e.value.code == 2
    assert "'fp7'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'bf16', 'fp16', 'fp8', 'mxfp8', 'nvfp4' or 'fp32'"):
        Sweep(workloads=("gpt2-124m",), hardware=("a100-sxm4-80gb",), n_gpus=(8,), global_batch=(8,), precision=("fp7",))


def test_no_module_keeps_its_own_list_of_precisions() -> None:
    """A literal tuple / list / set (or dict keys) naming three or more precisions outside the
    registry is a copy that a new precision would have to be added to."""
    names = set(registry.PRECISIONS)
    copies = []
    for path in [*(ROOT / "perfmodel").rglob("*.py"), ROOT / "app.py"]:
        if path.name == "precision.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            elts = (node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set)
                    else node.keys if isinstance(node, ast.Dict) else [])
            found = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in names}
            if len(found) >= 3:
                copies.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(found)}")
    assert not copies


# ---- a new precision is one registry entry ----------------------------------------------------

# OCP Microscaling MXFP6 (E2M3): 6-bit elements, an E8M0 scale per 32 (OCP MX v1.0); Blackwell's
# fp6 tensor-core rate. A stand-in for "the next precision", added only for this test.
MXFP6_RECIPE = registry.Fp8Recipe("mxfp6", 0.75, 1.0 / 32, amax_pass=False)
MXFP6 = registry.TrainingPrecision("mxfp6", 6, "fp6", gemm_operand_bytes=1.0, weight_bytes=1,
                                   recipes=("mxfp6",), listed_by_format=False)


@pytest.fixture
def mxfp6(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """mxfp6 in the registry (nothing else edited) and a B200 spec that lists it (data only)."""
    monkeypatch.setitem(registry.PRECISIONS, "mxfp6", MXFP6)
    monkeypatch.setitem(registry.RECIPES, "mxfp6", MXFP6_RECIPE)
    b200 = yaml.safe_load((ROOT / "hardware_specs/accelerators/b200.yaml").read_text())
    b200.update(id="b200-mxfp6", training_precisions=[*b200["training_precisions"], "mxfp6"])
    (tmp_path / "specs" / "accelerators").mkdir(parents=True)
    (tmp_path / "specs" / "accelerators" / "b200-mxfp6.yaml").write_text(yaml.safe_dump(b200))
    yield tmp_path / "specs"
    catalog.clear_added_specs()
    catalog._load.cache_clear()


def test_new_precision_is_accepted_by_plan_validation(mxfp6: Path) -> None:
    plan = ParallelPlan(precision="mxfp6", global_batch=8)
    assert (plan.precision, plan.fp8_recipe_name, plan.grad_bytes) == ("mxfp6", "mxfp6", 4)
    with pytest.raises(LayoutError, match=r"fp8_recipe 'delayed' runs precision fp8, not mxfp6; recipes for mxfp6: \['mxfp6'\]"):
        ParallelPlan(precision="mxfp6", fp8_recipe="delayed")
    with pytest.raises(LayoutError, match=r"'fp32' or 'mxfp6'"):
        ParallelPlan(precision="fp7")
    # its quantize casts: read 2 B of bf16, write 0.75 B and 1/32 B of scale per element
    recipe = recipe_for("mxfp6")
    assert recipe is MXFP6_RECIPE
    fwd = gemm_cast_work(recipe, 128, 256, 64, 1, bwd=False)
    assert fwd.bytes == pytest.approx((2 + 0.75 + 1 / 32) * (128 * 64 + 64 * 256)) and fwd.kernels == 2


def test_new_precision_runs_from_the_cli_on_the_chip_that_lists_it(mxfp6: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "llama3-8b", "--hardware", "b200-mxfp6", "--specs", str(mxfp6), "--n-gpus", "8",
            "--global-batch", "64", "--json"]
    assert main([*args, "--precision", "mxfp6"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["plan"]["precision"] == "mxfp6"
    assert main([*args, "--precision", "mxfp8"]) == 0
    ref = json.loads(capsys.readouterr().out)
    # its GEMMs read B200's fp6 entries: the fp6 peak (4.5 PFLOP/s, as fp8) is the MFU denominator, and
    # with no fp6 MAMF measured the part's fp8 MAMF/peak (3432.5 / 4500, the nearest narrow format)
    # carries to it (derating rule)
    assert est["provenance"]["gemm_rate"] == ("measured: fp8 MAMF/peak (ml-eng-mamf) at the fp6 peak "
                                              "(the same narrow-format class)")
    assert ref["provenance"]["gemm_rate"] == "measured: fp8 MAMF (ml-eng-mamf)"
    for e in (est, ref):
        assert e["tflops_per_gpu"] * 1e12 / e["mfu"] == pytest.approx(4.5e15, rel=1e-12)
    # the same fraction of the same peak as fp8, and casts writing 0.75 B against 1 B: faster
    assert 0 < est["step_time_s"] < ref["step_time_s"]
    # the stock B200 does not list it: a PrecisionError naming what it runs
    assert main(["estimate", "llama3-8b", "--hardware", "b200", "--precision", "mxfp6", "--n-gpus", "8",
                 "--global-batch", "64"]) == 2
    assert "has no mxfp6 matrix format; it supports fp32, bf16, fp16, fp8, mxfp8, nvfp4" in capsys.readouterr().err


def test_new_precision_is_read_from_a_runs_file(mxfp6: Path, tmp_path: Path) -> None:
    perfmodel.add_specs_dir(mxfp6)
    runs, out = tmp_path / "runs.csv", tmp_path / "out.csv"
    with open(runs, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerow({"run_id": "r1", "model": "llama3-8b", "n_gpus": "8", "global_batch": "64", "precision": "mxfp6",
                    "accelerator": "b200-mxfp6", "step_time_s": "1.0"})
    rows = validate_file(runs, out)
    assert [r["status"] for r in rows] == ["ok"], rows
    with open(out, newline="") as f:
        (written,) = csv.DictReader(f)
    assert list(written) == OUTPUT_COLUMNS and float(written["predicted_step_time_s"]) > 0


def test_new_precision_without_the_registry_entry_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same inputs without the registry entry fail with the allowed values."""
    with pytest.raises(LayoutError, match=r"precision='mxfp6'"):
        ParallelPlan(precision="mxfp6")
    with pytest.raises(SystemExit):
        main(["estimate", "llama3-8b", "--precision", "mxfp6"])
    capsys.readouterr()
    with pytest.raises(RowError, match=f"allowed values: {ALLOWED}$"):
        row_run({"model": "gpt2-124m", "n_gpus": "1", "global_batch": "8", "precision": "mxfp6"}, load_workloads())
