"""One engine registry for every face, and the import rules of DESIGN.md checked from the
package's own source: arrows point down the flow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import perfmodel
from perfmodel import ParallelPlan
from perfmodel.cli import main
from perfmodel.engines.registry import ENGINE_NAMES, UnknownEngineError, get_engine, run_engine
from perfmodel.planning.search import SearchSpace, search
from perfmodel.validation.predict import validate_file

PKG = Path(perfmodel.__file__).resolve().parent
ROOT = PKG.parent


# ---- the registry ---------------------------------------------------------------------------

def test_registry_names_both_engines() -> None:
    assert ENGINE_NAMES == ("analytic", "des")
    for name in ENGINE_NAMES:
        assert callable(get_engine(name))


def test_unknown_engine_is_one_error_everywhere(tmp_path: Path) -> None:
    plan = ParallelPlan(pp=2, global_batch=4)
    msg = r"unknown engine 'simulated'; valid engines: analytic, des"
    with pytest.raises(UnknownEngineError, match=msg):
        perfmodel.estimate("gpt2-124m", "a100-sxm4-80gb", plan, engine="simulated")
    with pytest.raises(UnknownEngineError, match=msg):
        validate_file(ROOT / "validation" / "runs_public.csv", tmp_path / "out.csv", engine="simulated")
    assert not (tmp_path / "out.csv").exists()
    res = search("gpt2-124m", "a100-sxm4-80gb", 8, 32, space=SearchSpace(pp=(1,), zero_stage=(0,)))
    with pytest.raises(UnknownEngineError, match=msg):
        res.best(engine="simulated")
    with pytest.raises(SystemExit) as e:
        main(["estimate", "gpt2-124m", "--hardware", "a100-sxm4-80gb", "--engine", "simulated"])
    assert e.value.code == 2


def test_run_engine_is_what_the_faces_return() -> None:
    spec = perfmodel.get_workload("gpt2-124m")
    system = perfmodel.resolve_system("a100-sxm4-80gb", None, 2)[0]
    plan = ParallelPlan(pp=2, global_batch=4)
    for name in ENGINE_NAMES:
        assert run_engine(name, spec, system, plan) == perfmodel.estimate(spec, system, plan, engine=name, calibration="none")


# ---- import rules ----------------------------------------------------------------------------

def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every perfmodel module a file imports, at the top or inside a function; `from perfmodel
    import x` counts as importing perfmodel.x when that is a module, else perfmodel itself."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("perfmodel"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfmodel"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or (ROOT / Path(*sub.split("."))).is_dir()
                out.add(sub if is_module else node.module)
    return out


GRAPH = {_module(p): _imports(p) for p in PKG.rglob("*.py")}


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reach(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [d for d in GRAPH.get(m, ()) if d in GRAPH]
    return seen


def test_graph_is_read() -> None:
    assert "perfmodel.engines.des" in GRAPH and "perfmodel.engines.stages" in GRAPH["perfmodel.engines.des"]


@pytest.mark.parametrize("layer", ["perfmodel.planning", "perfmodel.validation"])
def test_planner_and_validation_reach_engines_only_through_the_registry(layer: str) -> None:
    for mod, deps in GRAPH.items():
        if not _under(mod, layer):
            continue
        bad = {d for d in deps if d in ("perfmodel", "perfmodel.api")
               or _under(d, "perfmodel.engines.analytic", "perfmodel.engines.des")}
        assert not bad, f"{mod} imports {sorted(bad)}: use perfmodel.engines.registry"


def test_des_never_imports_the_analytic_engine() -> None:
    assert "perfmodel.engines.analytic" not in _reach("perfmodel.engines.des")


def test_nothing_that_makes_an_estimate_reads_measured_runs() -> None:
    for start in ("perfmodel.api", "perfmodel.engines.registry", "perfmodel.engines.analytic", "perfmodel.engines.des",
                  "perfmodel.planning.search"):
        reached = _reach(start)
        assert not {m for m in reached if _under(m, "perfmodel.validation")}, start


@pytest.mark.parametrize(("layer", "above"), [
    ("perfmodel.parallel", ("perfmodel.engines", "perfmodel.planning", "perfmodel.validation", "perfmodel.api",
                            "perfmodel.cli", "perfmodel.memory", "perfmodel.compute", "perfmodel.comm")),
    ("perfmodel.engines", ("perfmodel.planning", "perfmodel.validation", "perfmodel.api", "perfmodel.cli")),
    ("perfmodel.workload", ("perfmodel.parallel", "perfmodel.engines", "perfmodel.planning", "perfmodel.api")),
])
def test_arrows_point_down_the_flow(layer: str, above: tuple[str, ...]) -> None:
    for mod, deps in GRAPH.items():
        if _under(mod, layer):
            bad = {d for d in deps if _under(d, *above)}
            assert not bad, f"{mod} imports {sorted(bad)}, which sit above {layer}"
