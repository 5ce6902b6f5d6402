"""Strict command-line value parsers: whole numbers in ASCII digits, finite positive durations, paths.

Left to the CLI framework, `--nodes ' 3'`, `--nodes 1_000`, `--nodes 3.0` and `--timeout nan`
would all be taken, and `--out ''` would be the current directory. These refuse them while the command
line is parsed, naming the flag. A number of any length is read: one too long for any bound comes back
as a naming.Huge, so the flag's validator refuses it naming the bound."""

from __future__ import annotations

import re
from pathlib import Path

from gpuctl.model.naming import MAX_DURATION_S, check_duration, parse_count
from gpuctl.util.errors import UsageError, shown
from gpuctl.util.paths import check_path_text

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")


def count(value: object) -> int:
    """typer `parser=`: the one whole-number rule (naming.parse_count); bounds are checked by the validators."""
    if isinstance(value, int):
        return value
    try:
        return parse_count(str(value), "value")
    except UsageError:
        raise ValueError(f"{shown(value)} is not a whole number in ASCII digits") from None


def seconds(value: object) -> float:
    """typer `parser=`: decimal seconds, then the one duration rule (naming.check_duration)."""
    if isinstance(value, float):
        return value
    text = str(value)
    if not _SECONDS.fullmatch(text):
        raise ValueError(f"{shown(value)} is not a number of seconds such as 300")
    try:
        return check_duration(float(text), "value")  # float() takes any length: a long one is inf
    except UsageError:
        raise ValueError(f"{shown(value)} is not a number of seconds above 0 and at most {MAX_DURATION_S:g}") from None


def path(value: object) -> Path:
    """typer `parser=` for every path flag: the one rule for a path as typed (paths.check_path_text);
    what the path must be (a readable file, a writable target) is checked where it is used."""
    if isinstance(value, Path):
        return value
    try:
        return Path(check_path_text(str(value), "value"))
    except UsageError as err:
        raise ValueError(f"{err.message.removeprefix('value: ')}; {err.hint}") from None
