"""Read one YAML spec or workload file, refusing what a YAML parser would let through silently.

- the file must be UTF-8 (a leading byte-order mark is fine); a stray byte is reported with its
  line and column;
- a key written twice in one mapping is an error (YAML parsers keep the last value);
- aliases may not expand to more than `MAX_VALUES` values, nor nest deeper than `MAX_DEPTH`
  (a nested-alias "billion laughs" file would otherwise hang whatever walks the data);
- files over `MAX_FILE_BYTES` are refused before they are parsed.
Every error is a SpecError naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from perfmodel.errors import SpecError, quote

MAX_FILE_BYTES = 4 * 2**20  # the largest shipped spec is ~10 kB
MAX_VALUES = 100_000  # scalars and containers after alias expansion; the largest spec has ~2,000
MAX_DEPTH = 32

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 5x faster on the catalogue


class _DuplicateKey(Exception):
    def __init__(self, key: object, first_line: int, line: int):
        super().__init__(key, first_line, line)
        self.key, self.first_line, self.line = key, first_line, line


class _StrictLoader(_Base):
    """Safe loader that refuses a mapping with a repeated key."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first: dict[object, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # merge keys may repeat; a non-scalar key is the base class's to refuse
                key = key_node.value
                if key in first:
                    raise _DuplicateKey(key, first[key], key_node.start_mark.line + 1)
                first[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A YAML parse error in one line: 'line 2, column 1: did not find expected ',' or ']'
    (while parsing a flow sequence from line 1)' instead of PyYAML's multi-line text naming
    "<unicode string>"."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem is None or mark is None:
        return " ".join(str(e).split())
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    where = f" ({context} from line {cmark.line + 1})" if context and cmark is not None else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{where}"


def read_yaml(path: Path | str) -> dict[str, Any]:
    """The top-level mapping of a YAML file; SpecError (naming the file) on anything else."""
    path = Path(path)
    file = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecError("(file)", f"is {size:,} bytes", f"a spec file under {MAX_FILE_BYTES:,} bytes", file)
        raw = path.read_bytes()
    except OSError as e:
        raise SpecError("(file)", f"cannot be read ({e.strerror or e})", "a readable YAML file", file) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise SpecError("(file)", f"byte 0x{raw[e.start]:02x} at line {line}, column {col} is not UTF-8",
                        "a UTF-8 text file (re-save it as UTF-8)", file) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as e:
        raise SpecError(str(e.key), f"appears twice (lines {e.first_line} and {e.line}); YAML would keep the last silently",
                        "each key once per mapping", file) from None
    except yaml.YAMLError as e:
        raise SpecError("(file)", f"not valid YAML: {yaml_error_line(e)}", "a YAML mapping", file) from None
    except RecursionError:
        raise SpecError("(file)", "nested too deeply to read", f"at most {MAX_DEPTH} levels", file) from None
    if not isinstance(data, dict):
        raise SpecError("(file)", f"top level is {type(data).__name__} {quote(data)}", "a YAML mapping", file)
    n = _expanded_size(data, {}, 0, file)
    if n > MAX_VALUES:
        raise SpecError("(file)", f"expands to {n:,} values (aliases repeat shared parts)",
                        f"at most {MAX_VALUES:,} values after alias expansion", file)
    return data


def _expanded_size(value: Any, memo: dict[int, int], depth: int, file: str) -> int:
    """How many values `value` holds once every alias is expanded, computed once per shared
    object (so a billion-laughs file costs as little to measure as its text)."""
    if depth > MAX_DEPTH:
        raise SpecError("(file)", f"nests deeper than {MAX_DEPTH} levels", f"at most {MAX_DEPTH} levels", file)
    if not isinstance(value, (dict, list)):
        return 1
    key = id(value)
    if key not in memo:
        children = value.values() if isinstance(value, dict) else value
        memo[key] = 1 + sum(_expanded_size(c, memo, depth + 1, file) for c in children)
    return memo[key]
