"""GPU node taints (`key=value:Effect`) and the tolerations everything gpuctl runs must carry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.model.naming import check_label_key, check_label_value
from gpuctl.util.errors import UsageError, shown

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, order=True)  # ordered by key, value, effect
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
        """The toleration of exactly this taint (gpuctl's one rule: Equal with a value, Exists without)."""
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


DEFAULT_GPU_TAINTS = (Taint("nvidia.com/gpu", "true", "NoSchedule"),)


def parse_taint(text: str, field: str = "--taint") -> Taint:
    """Parse `key=value:Effect` or `key:Effect` (kubectl taint syntax)."""
    body, sep, effect = text.rpartition(":")
    if not sep or effect not in EFFECTS:
        raise UsageError(field, f"{shown(text)} has no valid effect",
                         f"write key=value:Effect with Effect one of {', '.join(EFFECTS)}")
    key, _, value = body.partition("=")
    return Taint(check_label_key(key, field), check_label_value(value, field), effect)


def parse_taints(texts: Iterable[str], field: str) -> tuple[Taint, ...]:
    """Parse a list of taints; one key may carry each effect once, as the API server requires.
    `field` is a flag (`--taint`) or a list's field path (each item then gets its index)."""
    taints: list[Taint] = []
    flag = field.startswith("-")
    for i, text in enumerate(texts):
        where = field if flag else f"{field}[{i}]"
        taint = parse_taint(text, where)
        if any((t.key, t.effect) == (taint.key, taint.effect) for t in taints):
            raise UsageError(where, f"duplicate taint {taint.key}:{taint.effect}",
                             "give each key one value per effect")
        taints.append(taint)
    return tuple(taints)


# Taints Kubernetes, autoscalers and the sim put on nodes for a while: no node group's, never tolerated for it.
TRANSIENT_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "karpenter.sh/", "sim.gpuctl.dev/",
                    "ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler")


def tolerations(taints: Iterable[Taint]) -> list[dict[str, Any]]:
    return [t.toleration() for t in taints]


def node_taint(taint: Mapping[str, Any]) -> Taint:
    """A node's taint as JSON (`spec.taints[i]` of a Node: its value may be absent) as a Taint."""
    return Taint(taint["key"], taint.get("value") or "", taint["effect"])
