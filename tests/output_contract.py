"""The output contract (docs/reference.md, "Output"), as tests hold every command's output to it."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")
# A key that is a Kubernetes name (a resource, a MIG profile, a node, a tenant) keeps its spelling.
KUBERNETES_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(/[a-zA-Z0-9._-]+)?")
NUMERIC = re.compile(r"-?[0-9]+(\.[0-9]+)?")
TABLE_WIDTH = 80


def faults(data: Any, where: str = "$") -> list[str]:
    """Every breach of the contract in a json or yaml document: keys not camelCase (unless a Kubernetes name
    with a '.', '/' or '-'), numbers in strings (a version excepted), booleans in strings."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            named = isinstance(key, str) and any(c in key for c in "./-") and KUBERNETES_NAME.fullmatch(key)
            if not isinstance(key, str) or not (CAMEL.fullmatch(key) or named):
                found.append(f"{where}: key {key!r} is not camelCase")
            if isinstance(value, str) and NUMERIC.fullmatch(value) and "version" not in str(key).lower():
                found.append(f"{where}.{key}: number in a string {value!r}")
            found += faults(value, f"{where}.{key}")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, str) and NUMERIC.fullmatch(value):
                found.append(f"{where}[{i}]: number in a string {value!r}")
            found += faults(value, f"{where}[{i}]")
    elif isinstance(data, str) and data in ("True", "False", "true", "false", "yes", "no"):
        found.append(f"{where}: boolean in a string {data!r}")
    return found


def parsed(text: str, fmt: str) -> Any:
    """The document a command printed, its text ending with a newline."""
    assert text.endswith("\n"), text[-200:]
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


def table_faults(text: str, width: int | None = TABLE_WIDTH) -> list[str]:
    """A table's breaches: lines past `width` (None: any width, for -o wide), Python reprs, no final newline."""
    found = [] if text.endswith("\n") or not text else ["no newline at the end"]
    for line in text.splitlines():
        if width is not None and len(line) > width:
            found.append(f"{len(line)} columns: {line}")
        if re.search(r"\bTrue\b|\bFalse\b|\{'|\['|': ", line):
            found.append(f"a Python repr: {line}")
    return found
