"""Provisioning as a list of named steps, each reporting what it did and how long it took."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuctl.model.change import Change


@dataclass(frozen=True)
class StepResult:
    name: str  # kebab-case verb shown to the user, e.g. "create-nodegroup/gpu"
    outcome: Change
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {"step": self.name, "outcome": self.outcome.value, "seconds": round(self.seconds, 1)}


Reporter = Callable[[StepResult], None]


def run_step(name: str, action: Callable[[], Change], report: Reporter) -> StepResult:
    started = time.monotonic()
    outcome = action()
    result = StepResult(name, outcome, time.monotonic() - started)
    report(result)
    return result
