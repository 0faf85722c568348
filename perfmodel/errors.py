"""The exceptions a user can catch. Every message names what was wrong and what is allowed.

Messages quote the offending value, but never more than `MAX_QUOTE` characters of it: a
damaged file can hold a value of hundreds of MB, and an error that echoes it is no help.
"""

from __future__ import annotations

import reprlib

MAX_QUOTE = 200


def clip(text: str, limit: int = MAX_QUOTE) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters in all)"


def quote(value: object, limit: int = MAX_QUOTE) -> str:
    """repr(value), cut short: the form every error message uses to echo an input. Long strings
    and deep or long containers are abbreviated before they are rendered (reprlib), so quoting
    a value of hundreds of MB costs no more than quoting a short one."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 8
    r.maxlevel = 3
    text = r.repr(value)
    if isinstance(value, (str, bytes)) and len(value) > limit:
        text += f" ({len(value):,} characters in all)"
    return clip(text, 2 * limit)


class PerfmodelError(Exception):
    """Base class of every error perfmodel raises on bad input."""


class SpecError(PerfmodelError, ValueError):
    """A hardware spec, workload or runs file that cannot be read.

    Carries the field (and, once known, the file) so the message points at the exact line.
    """

    def __init__(self, field: str, problem: str, expected: str, file: str | None = None):
        self.field = clip(field)
        self.problem = clip(problem, 4 * MAX_QUOTE)
        self.expected = clip(expected, 10 * MAX_QUOTE)
        self.file = file
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}field '{self.field}': {self.problem}; expected {self.expected}"

    def in_file(self, file: str) -> SpecError:
        return SpecError(self.field, self.problem, self.expected, file)


class LayoutError(PerfmodelError, ValueError):
    """A parallel layout that cannot run on this model and cluster (tp not dividing heads...)."""


class PrecisionError(PerfmodelError, ValueError):
    """A training precision the accelerator has no matrix format for (fp8 on an A100...)."""


class UsageError(PerfmodelError, ValueError):
    """A command-line argument outside what the command accepts; `usage` is the command's usage
    line when the error comes from parsing."""

    def __init__(self, message: str, usage: str | None = None):
        super().__init__(message)
        self.usage = usage


class UnknownIdError(PerfmodelError, KeyError):
    """An accelerator, system or workload id that is not in the catalogue."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class UnitWarning(UserWarning):
    """A quantity whose unit is legal but probably not what was meant (`80 Gb` of memory: bits)."""
