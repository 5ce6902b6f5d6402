"""Namespaced objects gpuctl owns, observed first and written with server-side apply only on a difference."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from gpuctl.kube.client import get_or_none
from gpuctl.kube.errors import requesting
from gpuctl.model import labels as L
from gpuctl.model.change import Change

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
MANAGED = {L.MANAGED_BY: L.MANAGER}
T = TypeVar("T")


def apply(patch: Callable[..., T], *args: Any, field_manager: str = L.MANAGER, **kwargs: Any) -> T:
    """Server-side apply of a body with a `patch_*` call, as field manager gpuctl, forcing (gpuctl owns the
    fields it applies): `apply(v1.patch_namespace, name, body)`; other keyword arguments pass through."""
    kwargs.setdefault("force", True)
    return patch(*args, field_manager=field_manager, _content_type=APPLY_PATCH, **kwargs)


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


def ensure_namespace(v1: CoreV1Api, name: str) -> Change:
    with requesting(f"reading namespace {name}"):
        if get_or_none(v1.read_namespace, name) is not None:
            return Change.NO_CHANGE
    body = namespace_manifest(name)
    with requesting(f"creating namespace {name}"):
        apply(v1.patch_namespace, name, body)
    return Change.CREATED


def read_config_map_data(v1: CoreV1Api, namespace: str, name: str) -> dict[str, str] | None:
    with requesting(f"reading ConfigMap {namespace}/{name}"):
        found = get_or_none(v1.read_namespaced_config_map, name, namespace)
    return None if found is None else found.data or {}


def ensure_config_map_keys(v1: CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> tuple[Change, set[str]]:
    """Make these keys hold these values, leaving other keys alone (other configs may be in use).

    Returns the change and the keys whose existing content changed (their consumers must reload).
    """
    current = read_config_map_data(v1, namespace, name)
    differing = {k for k, v in data.items() if (current or {}).get(k) != v}
    if current is not None and not differing:
        return Change.NO_CHANGE, set()
    _apply_config_map(v1, namespace, name, {**(current or {}), **data})
    changed_existing = {k for k in differing if current and k in current}
    return (Change.CREATED if current is None else Change.UPDATED), changed_existing


def remove_config_map_key(v1: CoreV1Api, namespace: str, name: str, key: str) -> Change:
    """Drop one key of a ConfigMap gpuctl writes, keeping the others."""
    current = read_config_map_data(v1, namespace, name)
    if current is None or key not in current:
        return Change.NO_CHANGE
    _apply_config_map(v1, namespace, name, {k: v for k, v in current.items() if k != key})
    return Change.DELETED


def _apply_config_map(v1: CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    """Server-side apply of the ConfigMap with exactly these keys. Apply removes the fields this manager
    applied before and leaves out now, so callers pass every key the ConfigMap keeps, not only the
    differing ones, or the configs in use would be dropped."""
    body = config_map_manifest(namespace, name, data)
    with requesting(f"writing ConfigMap {namespace}/{name}"):
        apply(v1.patch_namespaced_config_map, name, namespace, body)


def count(quantity: str | int) -> int:
    """A whole-number resource quantity as the API server writes it: it shortens 1000 to "1k" (canonical
    form, k8s.io/apimachinery resource.Quantity), so int() is not enough for quotas or allocatable."""
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(quantity))
