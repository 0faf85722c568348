"""Human unit strings from YAML and the UI -> SI floats, and back.

Inside perfmodel every quantity is a plain float in SI base units (seconds, bytes, FLOP,
FLOP/s, bytes/s, watts). Conversions happen here and only here.

Prefixes: decimal k M G T P E (10^3n) and binary Ki Mi Gi Ti Pi (2^10n) are never confused:
``80 GB`` is 8.0e10 bytes, ``80 GiB`` is 8.59e10 bytes. ``b`` is a bit and ``B`` a byte:
``400 Gb/s`` is 5.0e10 bytes/s.

Where a unit is legal but probably not what was meant, `ambiguity` says so and the spec loader
warns (`UnitWarning`, naming file and field) rather than guessing silently: a size in bits
(``80 Gb`` is 10 GB; memory is quoted in bytes) and the JEDEC ``KB`` (read as 1000 B, as the
decimal prefix says). Values must be finite; ``1e400`` is refused.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Literal

from perfmodel.errors import SpecError, quote

Dimension = Literal[
    "flop_per_s", "bytes_per_s", "bytes", "seconds", "flop", "watts", "hertz", "dimensionless",
    "usd", "usd_per_hour",
]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_PATTERN = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[^\s].*?)?\s*$")


def _prefix(prefix: str, text: str, field: str) -> float:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    raise SpecError(field, f"unknown prefix {prefix!r} in {quote(text)}", "k, M, G, T, P or Ki, Mi, Gi, Ti")


def _split_unit(unit: str, text: str, field: str) -> tuple[float, Dimension]:
    """Return (multiplier to SI, dimension) for a unit string such as 'TFLOP/s' or 'GiB'."""
    u = unit.strip()
    if u in _TIME:
        return _TIME[u], "seconds"
    if u in ("W", "kW"):
        return (1.0 if u == "W" else 1e3), "watts"
    if u in ("Hz", "kHz", "MHz", "GHz"):
        return _prefix(u[:-2], text, field), "hertz"
    if u in ("USD", "$"):
        return 1.0, "usd"
    if u in ("USD/h", "$/h", "USD/hour"):
        return 1.0, "usd_per_hour"
    if u == "%":
        return 0.01, "dimensionless"
    m = re.fullmatch(r"(?P<p>Ki|Mi|Gi|Ti|Pi|[kKMGTPE]?)(?P<base>FLOPS|FLOP/s|FLOP|B/s|b/s|Bps|bps|B|b)", u)
    if not m:
        raise SpecError(
            field, f"cannot read the unit {quote(unit)} in {quote(text)}",
            "e.g. '989 TFLOP/s', '4.8 TB/s', '80 GiB', '400 Gb/s', '2 us', '700 W', '1.98 GHz'",
        )
    mult = _prefix(m["p"], text, field)
    base = m["base"]
    if base in ("FLOPS", "FLOP/s"):
        return mult, "flop_per_s"
    if base == "FLOP":
        return mult, "flop"
    if base in ("B/s", "Bps"):
        return mult, "bytes_per_s"
    if base in ("b/s", "bps"):
        return mult / 8.0, "bytes_per_s"
    if base == "B":
        return mult, "bytes"
    return mult / 8.0, "bytes"  # 'b': bits


def parse_quantity(value: object, expected: Dimension, field: str = "value") -> float:
    """Parse '989 TFLOP/s' (or a bare number when ``expected`` is dimensionless) into SI.

    A bare number for a dimensioned field is refused: YAML readers must say what unit they mean.
    A string read once is remembered (specs are read on every estimate); a string that does not
    parse is read again with `field`, so its error names the field it came from.
    """
    if isinstance(value, str):
        try:
            return _parse_text(value, expected)
        except SpecError:
            pass
    return _parse(value, expected, field)


@lru_cache(maxsize=4096)
def _parse_text(value: str, expected: Dimension) -> float:
    return _parse(value, expected, "value")


def _parse(value: object, expected: Dimension, field: str) -> float:
    if isinstance(value, bool):
        raise SpecError(field, f"got a boolean {value!r}", f"a quantity in {expected}")
    if isinstance(value, (int, float)):
        if expected != "dimensionless":
            raise SpecError(field, f"got the bare number {quote(value)} with no unit", _example(expected))
        return _finite(float(value), value, field, expected)
    if not isinstance(value, str):
        raise SpecError(field, f"got {type(value).__name__} {quote(value)}", _example(expected))
    m = _PATTERN.match(value) if len(value) < 100 else None
    if not m:
        raise SpecError(field, f"cannot read {quote(value)} as a number with a unit", _example(expected))
    number = _finite(float(m["num"]), value, field, expected)
    unit = m["unit"]
    if not unit:
        if expected == "dimensionless":
            return number
        raise SpecError(field, f"{value!r} has no unit", _example(expected))
    mult, dim = _split_unit(unit, value, field)
    if dim != expected:
        raise SpecError(field, f"{value!r} is {_WORD[dim]}, not {_WORD[expected]}", _example(expected))
    return _finite(number * mult, value, field, expected)


def ambiguity(value: object, expected: Dimension) -> str | None:
    """Why a readable quantity is probably not what its writer meant, or None.

    A size in bits (``80 Gb`` reads as 10 GB: memory is quoted in bytes, a lower-case b is a bit)
    and ``KB`` (read as 1000 B by its decimal prefix, though JEDEC uses it for 1024 B)."""
    if not isinstance(value, str):
        return None
    m = _PATTERN.match(value) if len(value) < 100 else None
    unit = (m["unit"] or "") if m else ""
    if expected == "bytes" and re.fullmatch(r"(Ki|Mi|Gi|Ti|Pi|[kKMGTPE]?)b", unit):
        return (f"{value!r} is read as bits ({fmt(parse_quantity(value, 'bytes'), 'B')}); sizes are quoted in bytes: "
                f"write '{unit[:-1]}B' if bytes were meant")
    if re.fullmatch(r"KB(/s|ps)?", unit):
        return f"{value!r}: 'KB' is read as 1000 B (decimal k), not 1024 B; write 'kB' or 'KiB' to say which"
    return None


def _finite(number: float, value: object, field: str, expected: Dimension) -> float:
    if not math.isfinite(number):
        raise SpecError(field, f"{quote(value)} is not a finite number", _example(expected))
    return number


_WORD: dict[Dimension, str] = {
    "flop_per_s": "a FLOP rate", "bytes_per_s": "a bandwidth", "bytes": "a size", "seconds": "a time",
    "flop": "a FLOP count", "watts": "a power", "hertz": "a clock", "dimensionless": "a plain number",
    "usd": "a price", "usd_per_hour": "an hourly price",
}


def _example(dim: Dimension) -> str:
    return {
        "flop_per_s": "FLOP/s, e.g. '989 TFLOP/s'",
        "bytes_per_s": "a bandwidth, e.g. '4.8 TB/s' or '400 Gb/s'",
        "bytes": "a size, e.g. '80 GiB' or '50 MB'",
        "seconds": "a time, e.g. '2 us' or '1.5 ms'",
        "flop": "a FLOP count, e.g. '3.1 PFLOP'",
        "watts": "a power, e.g. '700 W'",
        "hertz": "a clock, e.g. '1.98 GHz'",
        "dimensionless": "a plain number",
        "usd": "a price, e.g. '30000 USD'",
        "usd_per_hour": "an hourly price, e.g. '2.5 USD/h'",
    }[dim]


def fmt(value: float, unit: str, digits: int = 3) -> str:
    """Format an SI float with a decimal prefix: fmt(3.12e14, 'FLOP/s') -> '312 TFLOP/s'."""
    if value == 0:
        return f"0 {unit}"
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    if unit == "s" and abs(value) < 1:
        for prefix, scale in (("m", 1e-3), ("µ", 1e-6), ("n", 1e-9)):
            if abs(value) >= scale:
                return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


GiB = 2.0**30
GB = 1e9
