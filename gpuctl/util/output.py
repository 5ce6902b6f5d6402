"""stdout carries data (table, json, yaml); progress goes to the one reporter: stderr unless the caller
supplies its own (`reporting`), so library code never prints for itself."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from gpuctl.util.choices import Choice

FORMATS = ("table", "json", "yaml")
FORMAT = Choice("format", FORMATS, {"yml": ("yaml",), "text": ("table",), "wide": ("table",)})  # -o, any case


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_REPORTER: ContextVar[Callable[[str], None]] = ContextVar("gpuctl_reporter", default=_to_stderr)


def info(message: str) -> None:
    """A progress line for humans, to the caller's reporter (default: stderr, so stdout stays parseable)."""
    _REPORTER.get()(message)


@contextmanager
def reporting(report: Callable[[str], None]) -> Iterator[None]:
    """Send every progress line of the library (gpuctl.info) to `report` while the block runs."""
    token = _REPORTER.set(report)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    header = [c.upper() for c in columns]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "-"
    return str(value)


def emit(data: Any, fmt: str, columns: Sequence[str] | None = None) -> None:
    """Print `data` (a list of rows or one mapping) as a table, JSON or YAML on stdout."""
    if fmt == "json":
        print(json.dumps(data, indent=2, default=str))
    elif fmt == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")
    else:
        rows = data if isinstance(data, list) else [data]
        print(_table(rows, columns or (list(rows[0]) if rows else [])))
