"""Strict command-line value parsers: whole numbers in ASCII digits and finite, positive durations.

Left to the CLI framework, `--nodes ' 3'`, `--nodes 1_000`, `--nodes 3.0` and `--timeout nan`
would all be taken. These refuse them while the command line is parsed, naming the flag."""

from __future__ import annotations

import re

from gpuctl.errors import UsageError
from gpuctl.naming import check_duration, parse_count, shown

_SECONDS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,3})?")


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
    if not _SECONDS.fullmatch(str(value)):
        raise ValueError(f"{shown(value)} is not a number of seconds such as 300")
    try:
        return check_duration(float(str(value)), "value")
    except UsageError as err:
        raise ValueError(err.message.removeprefix("value: ")) from None
