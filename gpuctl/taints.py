"""GPU node taints (`key=value:Effect`) and the tolerations everything gpuctl runs must carry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import UsageError

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect} if self.value else \
            {"key": self.key, "effect": self.effect}

    def toleration(self) -> dict[str, str]:
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


DEFAULT_GPU_TAINTS = (Taint("nvidia.com/gpu", "true", "NoSchedule"),)


def parse_taint(text: str, field: str = "--taint") -> Taint:
    """Parse `key=value:Effect` or `key:Effect` (kubectl taint syntax)."""
    body, sep, effect = text.rpartition(":")
    if not sep or effect not in EFFECTS:
        raise UsageError(field, f"{text!r} has no valid effect", f"write key=value:Effect with Effect one of {', '.join(EFFECTS)}")
    key, _, value = body.partition("=")
    if len(key) > 316 or not _KEY.match(key):
        raise UsageError(field, f"invalid taint key {key!r}", "use a label-style key such as nvidia.com/gpu")
    if len(value) > 63 or not _VALUE.match(value):
        raise UsageError(field, f"invalid taint value {value!r}", "use up to 63 letters, digits, '-', '_' or '.'")
    return Taint(key, value, effect)


def tolerations(taints: tuple[Taint, ...]) -> list[dict[str, Any]]:
    return [t.toleration() for t in taints]
