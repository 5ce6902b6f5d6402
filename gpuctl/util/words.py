"""Counts in words: `1 node`, `2 nodes`, never `1 nodes` or a noun with its plural in parentheses."""

from __future__ import annotations

from collections.abc import Mapping


def noun(count: int, word: str, many: str | None = None) -> str:
    """`word` in the number `count` asks for: the word for 1, else `many` (default: the word with an s)."""
    return word if count == 1 else (many or f"{word}s")


def plural(count: int, word: str, many: str | None = None) -> str:
    """`count` and its noun: plural(1, "node") is `1 node`, plural(0, "node") is `0 nodes`."""
    return f"{count} {noun(count, word, many)}"


def pairs(mapping: object) -> str:
    """A mapping as a reader writes it, `nvidia.com/gpu=8,nvidia.com/mig-1g.5gb=7` (never a Python repr); `none`
    for an empty one."""
    if not isinstance(mapping, Mapping):
        return str(mapping)
    return ",".join(f"{k}={v}" for k, v in mapping.items()) or "none"
