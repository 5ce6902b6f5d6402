"""What a step did or would do: the outcome every layer reports."""

from __future__ import annotations

from enum import Enum


class Change(str, Enum):
    """What a step did; shown to the user and in JSON output."""

    CREATED = "created"
    UPDATED = "updated"
    STARTED = "started"
    DELETED = "deleted"
    NO_CHANGE = "no change"
    PASSED = "passed"  # a check, not a change
