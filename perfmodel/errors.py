"""The exceptions a user can catch. Every message names what was wrong and what is allowed."""

from __future__ import annotations


class PerfmodelError(Exception):
    """Base class of every error perfmodel raises on bad input."""


class SpecError(PerfmodelError, ValueError):
    """A hardware spec, workload or runs file that cannot be read.

    Carries the field (and, once known, the file) so the message points at the exact line.
    """

    def __init__(self, field: str, problem: str, expected: str, file: str | None = None):
        self.field = field
        self.problem = problem
        self.expected = expected
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


class UnknownIdError(PerfmodelError, KeyError):
    """An accelerator, system or workload id that is not in the catalogue."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""
