"""Validation of the names and counts a user gives on the command line or in a spec."""

from __future__ import annotations

import re

from gpuctl.errors import UsageError

# A DNS-1123 label, short enough that "<nodegroup>-<index>" node names stay valid.
MAX_NAME_LENGTH = 40
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

MAX_NODES = 5000


def check_name(value: str, field: str) -> str:
    """Return `value` if it is a valid cluster or node-group name, else raise a UsageError."""
    if not value or len(value) > MAX_NAME_LENGTH or not _NAME.match(value):
        raise UsageError(
            field,
            f"{value!r} is not a valid name",
            f"use 1-{MAX_NAME_LENGTH} lowercase letters, digits or '-', "
            "starting and ending with a letter or digit (e.g. 'demo-gpu')",
        )
    return value


def check_count(value: int, field: str, minimum: int = 1, maximum: int = MAX_NODES) -> int:
    """Return `value` if minimum <= value <= maximum, else raise a UsageError naming `field`."""
    if value < minimum:
        raise UsageError(field, f"must be at least {minimum}, got {value}", f"pass {field} {minimum} or more")
    if value > maximum:
        raise UsageError(field, f"must be at most {maximum}, got {value}", f"pass {field} {maximum} or less")
    return value
