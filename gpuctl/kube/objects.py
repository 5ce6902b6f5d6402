"""Namespaced objects gpuctl owns, observed first and written with server-side apply only on a difference."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import APPLY_PATCH, MERGE_PATCH, Kube
from gpuctl.model import labels as L
from gpuctl.model.change import Change

__all__ = ["APPLY_PATCH", "MANAGED", "MERGE_PATCH", "config_map_manifest", "contains", "count",
           "ensure_config_map_keys", "ensure_namespace", "is_managed", "namespace_manifest", "read_config_map_data",
           "remove_config_map_key"]

MANAGED = {L.MANAGED_BY: L.MANAGER}


def is_managed(obj: Mapping[str, Any] | None) -> bool:
    """Whether `obj` (an object as JSON, None: absent) is gpuctl's: it carries the managed-by gpuctl label."""
    return obj is not None and L.managed_by_gpuctl((obj.get("metadata") or {}).get("labels"))


def contains(current: Any, wanted: Any) -> bool:
    """True if every field of `wanted` is in `current` with the same value (others may add fields)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(contains(current.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(current, list) and len(current) == len(wanted) and all(
            contains(c, w) for c, w in zip(current, wanted, strict=True))
    return current == wanted


def namespace_manifest(name: str) -> dict[str, Any]:
    """A namespace gpuctl makes (ensure_namespace writes it; `gpuctl render` prints it)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(MANAGED)}}


def config_map_manifest(namespace: str, name: str, data: Mapping[str, str]) -> dict[str, Any]:
    """A ConfigMap gpuctl writes, its keys sorted (ensure_config_map_keys writes it; `gpuctl render` prints it)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": dict(MANAGED)},
            "data": dict(sorted(data.items()))}


def ensure_namespace(kube: Kube, name: str) -> Change:
    with requesting(f"reading namespace {name}"):
        if kube.get_or_none("v1", "Namespace", name) is not None:
            return Change.NO_CHANGE
    with requesting(f"creating namespace {name}"):
        kube.apply(namespace_manifest(name))
    return Change.CREATED


def read_config_map_data(kube: Kube, namespace: str, name: str) -> dict[str, str] | None:
    with requesting(f"reading ConfigMap {namespace}/{name}"):
        found = kube.get_or_none("v1", "ConfigMap", name, namespace)
    return None if found is None else found.get("data") or {}


def ensure_config_map_keys(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> tuple[Change, set[str]]:
    """Make these keys hold these values, leaving other keys alone (other configs may be in use).

    Returns the change and the keys whose existing content changed (their consumers must reload).
    """
    current = read_config_map_data(kube, namespace, name)
    differing = {k for k, v in data.items() if (current or {}).get(k) != v}
    if current is not None and not differing:
        return Change.NO_CHANGE, set()
    _apply_config_map(kube, namespace, name, {**(current or {}), **data})
    changed_existing = {k for k in differing if current and k in current}
    return (Change.CREATED if current is None else Change.UPDATED), changed_existing


def remove_config_map_key(kube: Kube, namespace: str, name: str, key: str) -> Change:
    """Drop one key of a ConfigMap gpuctl writes, keeping the others."""
    current = read_config_map_data(kube, namespace, name)
    if current is None or key not in current:
        return Change.NO_CHANGE
    _apply_config_map(kube, namespace, name, {k: v for k, v in current.items() if k != key})
    return Change.DELETED


def _apply_config_map(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> None:
    """Server-side apply of the ConfigMap with exactly these keys. Apply removes the fields this manager
    applied before and leaves out now, so callers pass every key the ConfigMap keeps, not only the
    differing ones, or the configs in use would be dropped."""
    with requesting(f"writing ConfigMap {namespace}/{name}"):
        kube.apply(config_map_manifest(namespace, name, data))


# The suffixes of a quantity (k8s.io/apimachinery pkg/api/resource/suffix.go): the power of 1000 ("2k"), or
# with an "i" of 1024 ("2Gi").
_EXPONENTS = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def count(quantity: str | int) -> int:
    """A whole-number resource quantity as the API server writes it: it shortens 1000 to "1k" (canonical
    form, k8s.io/apimachinery resource.Quantity), so int() is not enough for quotas or allocatable ("2Gi":
    2147483648; a fraction is cut: "1500m" is 1). ValueError for what is no quantity."""
    if isinstance(quantity, int | float | Decimal):
        return int(quantity)
    text = str(quantity)
    number, suffix = text, ""
    if len(text) >= 2 and text[-1] == "i" and text[-2] in _EXPONENTS and text[-2] != "k":
        number, suffix = text[:-2], text[-2:]
    elif len(text) >= 2 and text[-1] == "i":
        raise ValueError(f"{text} has unknown suffix")
    elif text[-1:] in _EXPONENTS:
        number, suffix = text[:-1], text[-1]
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None
    if suffix:
        value *= Decimal(1024 if suffix.endswith("i") else 1000) ** _EXPONENTS[suffix[0]]
    return int(value)
