"""gpuctl's cluster-scoped admission objects (a policy and its binding, both of one name): read as JSON, applied
server-side where they differ, deleted only where gpuctl made them. The GPU fence (ValidatingAdmissionPolicy)
and the GPU tolerations (MutatingAdmissionPolicy) are kept this one way."""

from __future__ import annotations

from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import contains, is_managed
from gpuctl.model.change import Change

API = "admissionregistration.k8s.io/v1"  # the policies and bindings, validating and mutating


def read_object(kube: Kube, kind: str, name: str) -> KubeObject | None:
    """The policy or binding; None where it, or its kind (a server without MutatingAdmissionPolicy), is not."""
    return kube.get_or_none(API, kind, name)


def observe_objects(kube: Kube, docs: list[dict[str, Any]]) -> Change:
    """What ensure_objects would do."""
    for doc in docs:
        current = read_object(kube, doc["kind"], doc["metadata"]["name"])
        if current is None or not contains(current, doc):
            return Change.CREATED if current is None else Change.UPDATED
    return Change.NO_CHANGE


def ensure_objects(kube: Kube, docs: list[dict[str, Any]]) -> Change:
    """Apply (server-side, field manager gpuctl) each of `docs`, in order (a policy before the binding that names
    it), where it differs."""
    created = updated = False
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        current = read_object(kube, kind, name)
        if current is not None and contains(current, doc):
            continue
        kube.apply(doc)
        created, updated = created or current is None, updated or current is not None
    return Change.CREATED if created else Change.UPDATED if updated else Change.NO_CHANGE


def remove_objects(kube: Kube, docs: list[dict[str, Any]]) -> Change:
    """Delete those of `docs` that gpuctl made, in reverse order (a binding before its policy: no binding names a
    missing policy)."""
    outcome = Change.NO_CHANGE
    for doc in reversed(docs):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if not is_managed(read_object(kube, kind, name)):
            continue
        kube.delete(API, kind, name)  # (False: gone already)
        outcome = Change.DELETED
    return outcome
