"""Load a callable the user names on the command line: "package.module:factory" or
"path/to/file.py:factory" (`--torch`, `--dataset`). No third-party imports here, so loading a
user's Dataset factory does not pull in the torch tracer."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfmodel.errors import PerfmodelError


def load_factory(path_spec: str, option: str = "--torch", error: type[PerfmodelError] = PerfmodelError) -> Callable[..., Any]:
    """The callable `path_spec` names; errors (of class `error`) name the option and what was wrong."""
    if ":" not in path_spec:
        raise error(f"{option} expects 'package.module:factory' or 'path/to/file.py:factory', got {path_spec!r}")
    target, attr = path_spec.rsplit(":", 1)
    if target.endswith(".py") or "/" in target or "\\" in target:
        file = Path(target)
        if not file.is_file():
            raise error(f"{path_spec!r}: no such file {file}")
        spec = importlib.util.spec_from_file_location(f"perfmodel_user_{file.stem}", file)
        if spec is None or spec.loader is None:
            raise error(f"{path_spec!r}: cannot import {file}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # the user's file: any error of its own, said in one line
            raise error(f"{path_spec!r}: importing {file} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            mod = importlib.import_module(target)
        except ImportError as e:
            raise error(f"{path_spec!r}: cannot import module {target!r}: {e}") from e
    if not hasattr(mod, attr):
        public = sorted(n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_"))
        raise error(f"{path_spec!r}: module {target!r} has no {attr!r}; callables there: {', '.join(public[:20])}")
    fn: Callable[..., Any] = getattr(mod, attr)
    return fn


def call_factory(fn: Callable[[], Any], path_spec: str, error: type[PerfmodelError] = PerfmodelError) -> Any:
    """`fn()`, with any error the user's code raises turned into one `error` naming the spec."""
    try:
        return fn()
    except Exception as e:
        raise error(f"{path_spec!r}: calling the factory failed: {type(e).__name__}: {e}; the factory must take "
                    "no arguments") from e


__all__ = ["call_factory", "load_factory"]
