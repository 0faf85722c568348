"""What the command line shares: argument types that refuse out-of-range values where they are
parsed, a parser that raises instead of exiting, and the one way errors and warnings are printed
(one `perfmodel: error:` line on stderr, or `{"error": {...}}` on stdout with --json)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from perfmodel import precision as registry
from perfmodel.errors import PerfmodelError, SpecError, UsageError, clip, quote


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (carrying the usage line) instead of exiting, so that
    `main` reports argument errors the same way as every other error (JSON with --json), and
    that takes no option by a prefix: argparse's abbreviations read `--gpus 8` as
    `--gpus-per-node 8` and silently estimated one GPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # one usage line, not argparse's whole option list (40 lines for estimate) before the error
        raise UsageError(message, usage=f"usage: {self.prog} ... ({self.prog} -h lists the options)\n")


MAX_COUNT = 10**7  # GPUs, degrees, batches, tokens of context: past any machine or model built


def add_precision_arg(p: argparse.ArgumentParser | Any) -> None:
    """--precision: the names of perfmodel/precision.py (read when the parser is built), an alias
    taken for its name (bfloat16 -> bf16); anything else an error listing them."""
    p.add_argument("--precision", default=registry.DEFAULT_PRECISION, choices=registry.precision_names(),
                   type=lambda text: registry.canonical(text) or text, help="GEMM precision (default: %(default)s)")


def positive_int(text: str) -> int:
    """argparse type: an integer from 1 to MAX_COUNT (a GPU, batch, sequence or parallel-degree count)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quote(text)} is not an integer; allowed: 1 or more") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}; allowed: an integer >= 1")
    if v > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{clip(text, 40)}; allowed: at most {MAX_COUNT:,}")
    return v


def positive_int_at_most(most: int) -> Callable[[str], int]:
    """argparse type: an integer from 1 to `most` (a count past which a simulation never ends)."""
    def parse(text: str) -> int:
        v = positive_int(text)
        if v > most:
            raise argparse.ArgumentTypeError(f"{clip(text, 40)}; allowed: an integer from 1 to {most:,}")
        return v
    return parse


def _finite(text: str, allowed: str, ok: Callable[[float], bool]) -> float:
    """argparse type body: a finite number for which `ok` holds, else an error saying `allowed`."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quote(text)} is not a number; allowed: {allowed}") from None
    if not (math.isfinite(v) and ok(v)):
        raise argparse.ArgumentTypeError(f"{clip(text, 40)}; allowed: {allowed}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (accepts 1e12, 2.5e+12)."""
    return _finite(text, "a finite number > 0", lambda v: v > 0)


def positive_float_at_most(most: float) -> Callable[[str], float]:
    """argparse type: a finite number > 0 and at most `most` (beyond it a result is unreadable)."""
    return lambda text: _finite(text, f"a finite number > 0 and at most {most:g}", lambda v: 0 < v <= most)


def at_least_one(text: str) -> float:
    """argparse type: a finite number >= 1 (a ratio of a maximum over a mean, a PUE)."""
    return _finite(text, "a finite number >= 1", lambda v: v >= 1)


def shape(text: str) -> list[int]:
    """argparse type: a comma-separated list of positive integers (an input shape, batch first)."""
    try:
        dims = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quote(text)}; allowed: positive integers separated by commas, e.g. 8,2048") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{quote(text)}; allowed: positive integers separated by commas, e.g. 8,2048")
    return dims


def error_payload(e: BaseException) -> dict[str, Any]:
    """What --json prints for an error: its kind and message, and for a spec error the file and field."""
    err: dict[str, Any] = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, SpecError):
        err.update(file=e.file, field=e.field)
    if isinstance(e, OSError) and e.filename:
        err["file"] = str(e.filename)
    return {"error": err}


def report_error(e: BaseException, as_json: bool) -> int:
    """Print `e` as one error line on stderr (after the usage, for an argument error), or as JSON on
    stdout; return the exit status 2."""
    if as_json:
        print(json.dumps(error_payload(e), indent=2))
        return 2
    if isinstance(e, UsageError) and e.usage:
        sys.stderr.write(e.usage)
    if isinstance(e, (PerfmodelError, UsageError)):
        print(f"perfmodel: error: {e}", file=sys.stderr)
    elif isinstance(e, OSError):
        print(f"perfmodel: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), file=sys.stderr)
    elif type(e) is ValueError:  # a bad value the code said in words; its class adds nothing
        print(f"perfmodel: error: {e}", file=sys.stderr)
    else:
        print(f"perfmodel: error: {type(e).__name__}: {e}", file=sys.stderr)
    return 2


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    print(f"perfmodel: warning: {message}", file=sys.stderr)
