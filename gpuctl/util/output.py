"""stdout carries data (table, json, yaml); progress goes to the one reporter: stderr unless the caller
supplies its own (`reporting`), so library code never prints for itself."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from gpuctl.util.choices import Choice
from gpuctl.util.errors import UsageError
from gpuctl.util.lazy_import import LazyImport

if TYPE_CHECKING:
    import yaml
else:
    yaml = LazyImport("yaml")

# The output contract (docs/reference.md, "Output"): stdout holds data in one of these formats. `table` fits 80
# columns, `wide` adds the rest; json and yaml hold every field, keys in camelCase (as Kubernetes' JSON) except
# keys that are Kubernetes names (nvidia.com/gpu, 1g.5gb, a node's name), numbers as numbers, booleans as booleans.
FORMATS = ("table", "wide", "json", "yaml")
FORMAT = Choice("format", FORMATS, {"yml": ("yaml",), "text": ("table",)})  # -o, any case
TABLE_WIDTH = 80


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_REPORTER: ContextVar[Callable[[str], None]] = ContextVar("gpuctl_reporter", default=_to_stderr)


def info(message: str) -> None:
    """A progress line for humans, to the caller's reporter (default: stderr, so stdout stays parseable)."""
    _REPORTER.get()(message)


_VERBOSITY: ContextVar[int] = ContextVar("gpuctl_verbosity", default=0)


def set_verbosity(level: int) -> None:
    """How much the command says beyond what needs the reader: 0 (default), 1 for `-v`, ..."""
    _VERBOSITY.set(level)


def detail(message: str) -> None:
    """A line only `-v` shows: how a promise was kept (`fence in force (waited 0.2s)`), not that it was."""
    if _VERBOSITY.get() > 0:
        info(message)


@contextmanager
def reporting(report: Callable[[str], None]) -> Iterator[None]:
    """Send every progress line of the library (gpuctl.info) to `report` while the block runs."""
    token = _REPORTER.set(report)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def is_table(fmt: str) -> bool:
    """Whether `fmt` is one of the text formats (table, wide) rather than a document (json, yaml)."""
    return fmt in ("table", "wide")


_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def camel(key: str) -> str:
    """`ready_nodes` -> `readyNodes`; any other key (camelCase already, or a Kubernetes name such as
    `nvidia.com/gpu`, `1g.5gb`, `gpu-0`) unchanged."""
    if not _SNAKE.fullmatch(key):
        return key
    first, *rest = key.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def document(data: Any) -> Any:
    """`data` as the output contract prints it: gpuctl's keys in camelCase at every depth, dataclasses as
    mappings, tuples as lists, paths and enums as their text."""
    if is_dataclass(data) and not isinstance(data, type):
        data = {f.name: getattr(data, f.name) for f in fields(data)}
    if isinstance(data, Mapping):
        return {camel(str(k)): document(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [document(v) for v in data]
    if isinstance(data, Enum):
        return document(data.value)
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    return str(data)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fit: str | None = None) -> str:
    """`rows` as a table of `columns` (headers upper-cased), each line ending with a newline; the cells of
    column `fit` (free text, the last column) cut with `...` where a line would pass TABLE_WIDTH."""
    header = [c.upper() for c in columns]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    if fit is not None and fit in columns:
        i = list(columns).index(fit)
        room = max(len(header[i]), 10, TABLE_WIDTH - sum(w + 2 for j, w in enumerate(widths) if j != i))
        for r in cells:
            r[i] = r[i] if len(r[i]) <= room else r[i][:room - 3].rstrip() + "..."
        widths[i] = max(len(header[i]), *(len(r[i]) for r in cells)) if cells else len(header[i])
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "".join(f"{line}\n" for line in lines)


def _cell(value: Any) -> str:
    """A table cell: `-` for none, `yes`/`no` for a boolean, `k=v,k=v` for a mapping, `a,b` for a list,
    one decimal for a fraction."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, Enum):
        return _cell(value.value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={_cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ",".join(map(_cell, value)) or "-"
    return str(value)


def text(data: Any, fmt: str) -> str:
    """`data` as a json or yaml document (the contract's: `document`), ending with a newline."""
    data = document(data)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def emit(data: Any, fmt: str, columns: Sequence[str] | None = None, wide: Sequence[str] = (),
         rows: Sequence[Mapping[str, Any]] | None = None, fit: str | None = None) -> None:
    """Print `data` on stdout: as json or yaml (every field), or as a table of `columns` (`-o wide`: and of
    `wide`) over `rows` (default: `data`, a list of rows or one mapping); the free-text column `fit` is cut to
    TABLE_WIDTH in a table, whole in `-o wide`."""
    if not is_table(fmt):
        out(text(data, fmt))
        return
    if rows is None:
        rows = data if isinstance(data, list) else [data]
    chosen = list(columns or (list(rows[0]) if rows else []))
    out(table(rows, chosen + (list(wide) if fmt == "wide" else []), fit if fmt == "table" else None))


def out(text: str) -> None:
    """Data on stdout, flushed, so that a line on stderr never lands in the middle of it."""
    sys.stdout.write(text)
    sys.stdout.flush()


def section(body: str) -> None:
    """A section after a table: a blank line, then `body`, ending with a newline."""
    out(f"\n{body.rstrip(chr(10))}\n")


def refuse_format(fmt: str, allowed: Sequence[str], field: str, why: str) -> None:
    """A UsageError naming -o where `fmt` is not one of `allowed` for this command (exit 2)."""
    if fmt not in allowed:
        raise UsageError("-o/--output", f"{fmt} does not apply to {field}: {why}",
                         f"use {' or '.join('-o ' + f for f in allowed)}")


def emit_manifests(stream: str, fmt: str) -> None:
    """Kubernetes-style documents (a spec, manifests: a YAML stream) as they are, keys untouched: the YAML for
    table, wide and yaml; JSON for json (one document, or several as a v1 List, which `kubectl apply -f -`
    takes)."""
    if fmt != "json":
        out(stream if stream.endswith("\n") or not stream else stream + "\n")
        return
    docs = [d for d in yaml.safe_load_all(stream) if d is not None]
    one = docs[0] if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": docs}
    out(json.dumps(one, indent=2) + "\n")
