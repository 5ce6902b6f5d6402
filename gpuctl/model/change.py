"""What a step did or would do: the outcome every layer reports, and the step that reports it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Change(str, Enum):
    """What a step did; shown to the user and in JSON output."""

    CREATED = "created"
    UPDATED = "updated"
    STARTED = "started"
    DELETED = "deleted"
    NO_CHANGE = "no change"
    PASSED = "passed"  # a check, not a change
    CHECK = "check"  # planned: a check will run (it waits or tests, and changes nothing)


@dataclass(frozen=True)
class Observed:
    """What a step would do, read without a write (`gpuctl plan`): the action, why, and a diff."""

    action: Change
    detail: str = ""
    diff: str = ""


@dataclass(frozen=True)
class Step:
    """A named step of `apply`: `observe` reads what it would change (plan), `act` converges (apply).
    A `check` (waiting for capacity, the smoke test) changes nothing of the platform: apply takes its
    lock for the other steps' writes only."""

    name: str
    observe: Callable[[], Observed]
    act: Callable[[], Change]
    check: bool = False
