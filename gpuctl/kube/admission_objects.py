"""gpuctl's cluster-scoped admission objects (a policy and its binding, both of one name): read as JSON, applied
server-side where they differ, deleted only where gpuctl made them. The GPU fence (ValidatingAdmissionPolicy)
and the GPU tolerations (MutatingAdmissionPolicy) are kept this one way."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpuctl.kube.client import get_or_none
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.objects import apply, contains, is_managed
from gpuctl.model.change import Change

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _calls(client: ApiClient, kind: str) -> tuple[Any, Any, Any]:
    """(read, apply, delete) of `kind` in the admissionregistration v1 API."""
    from kubernetes.client import AdmissionregistrationV1Api

    api = AdmissionregistrationV1Api(client)
    snake = {"ValidatingAdmissionPolicy": "validating_admission_policy",
             "ValidatingAdmissionPolicyBinding": "validating_admission_policy_binding",
             "MutatingAdmissionPolicy": "mutating_admission_policy",
             "MutatingAdmissionPolicyBinding": "mutating_admission_policy_binding"}[kind]
    return getattr(api, f"read_{snake}"), getattr(api, f"patch_{snake}"), getattr(api, f"delete_{snake}")


def read_object(client: ApiClient, kind: str, name: str) -> dict[str, Any] | None:
    with requesting(f"reading {kind} {name}"):
        found = get_or_none(_calls(client, kind)[0], name, _preload_content=False)
        return None if found is None else json.loads(found.data)


def observe_objects(client: ApiClient, docs: list[dict[str, Any]]) -> Change:
    """What ensure_objects would do."""
    for doc in docs:
        current = read_object(client, doc["kind"], doc["metadata"]["name"])
        if current is None or not contains(current, doc):
            return Change.CREATED if current is None else Change.UPDATED
    return Change.NO_CHANGE


def ensure_objects(client: ApiClient, docs: list[dict[str, Any]], what: str) -> Change:
    """Apply (server-side, field manager gpuctl) each of `docs`, in order (a policy before the binding that names
    it), where it differs; `what` names them in errors."""
    created = updated = False
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        current = read_object(client, kind, name)
        if current is not None and contains(current, doc):
            continue
        with requesting(f"applying {what} ({kind} {name})"):
            apply(_calls(client, kind)[1], name, doc)
        created, updated = created or current is None, updated or current is not None
    return Change.CREATED if created else Change.UPDATED if updated else Change.NO_CHANGE


def remove_objects(client: ApiClient, docs: list[dict[str, Any]], what: str) -> Change:
    """Delete those of `docs` that gpuctl made, in reverse order (a binding before its policy: no binding names a
    missing policy)."""
    outcome = Change.NO_CHANGE
    for doc in reversed(docs):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if not is_managed(read_object(client, kind, name)):
            continue
        try:
            with requesting(f"deleting {what} ({kind} {name})"):
                _calls(client, kind)[2](name)
        except KubeNotFound:
            pass  # gone already
        outcome = Change.DELETED
    return outcome
