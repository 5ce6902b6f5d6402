"""What a step would change, as `gpuctl plan` shows it: a unified diff of the cluster's part against the
spec's, and `unknown` where what the step depends on could not be read."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from gpuctl.model.change import Change, Observed
from gpuctl.util.errors import GpuctlError


def diff_text(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"{name} (cluster)", f"{name} (spec)",
                                 lineterm="", n=1)
    return "\n".join(lines)


def subset(current: Any, wanted: Any) -> Any:
    """The part of `current` that `wanted` speaks about, for a readable diff: a key `current` lacks is left out,
    so that the diff shows it added (`+ key: value`, as kubectl diff does), not changed from null."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        return {k: subset(current.get(k), v) for k, v in wanted.items() if k in current or v is None}
    return current


def unknown(error: GpuctlError) -> Observed:
    """What a step would do where reading what it depends on failed: it may well change something."""
    return Observed(Change.UPDATED, f"unknown: {error.message}")


def or_unknown(observe: Callable[[], Observed]) -> Observed:
    """`observe()`, or `unknown` where it fails (a release Helm cannot read, a cluster not reached)."""
    try:
        return observe()
    except GpuctlError as exc:
        return unknown(exc)
