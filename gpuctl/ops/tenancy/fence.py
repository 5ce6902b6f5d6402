"""The GPU fence of tenant namespaces: a ValidatingAdmissionPolicy and its binding
(templates/fences/gpu-fence.yaml) with which the API server refuses a pod that reaches GPUs without
requesting them. Cluster-scoped and shared by every tenant: applied with the first tenant, deleted
with the last."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.client import get_or_none
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.objects import apply, contains, is_managed
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.util.resources import data_dir

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

NAME = "gpuctl-gpu-fence"  # the policy's and the binding's


def fence_manifests() -> list[dict[str, Any]]:
    """The policy and its binding, labelled as gpuctl's."""
    docs = list(yaml.safe_load_all((data_dir("templates") / "fences" / "gpu-fence.yaml").read_text()))
    for doc in docs:
        doc["metadata"]["labels"] = {L.MANAGED_BY: L.MANAGER}
    return docs


def _calls(client: ApiClient) -> dict[str, tuple[Any, Any, Any]]:
    """kind -> (read, apply, delete) of the admissionregistration API, reads as plain JSON."""
    from kubernetes.client import AdmissionregistrationV1Api

    api = AdmissionregistrationV1Api(client)
    return {
        "ValidatingAdmissionPolicy": (api.read_validating_admission_policy, api.patch_validating_admission_policy,
                                      api.delete_validating_admission_policy),
        "ValidatingAdmissionPolicyBinding": (api.read_validating_admission_policy_binding,
                                             api.patch_validating_admission_policy_binding,
                                             api.delete_validating_admission_policy_binding),
    }


def _read(read: Any, name: str) -> dict[str, Any] | None:
    with requesting(f"reading {name}"):
        found = get_or_none(read, name, _preload_content=False)
        return None if found is None else json.loads(found.data)


def probe_pods() -> list[dict[str, Any]]:
    """One pod per way in the fence refuses, none requesting a GPU: the fence is in force in a namespace once
    the API server refuses each. (Not the runtime-class rule: the RuntimeClass admission plugin refuses a
    pod naming an absent RuntimeClass before any policy sees it.)"""
    def pod(rule: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        container = {"name": "probe", "image": "registry.k8s.io/pause:3.10", **spec.pop("container", {})}
        metadata: dict[str, Any] = {"name": f"gpuctl-fence-probe-{rule}", "labels": {L.MANAGED_BY: L.MANAGER}}
        if annotations:
            metadata["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": {"automountServiceAccountToken": False, "containers": [container], **spec}}

    return [
        pod("device-env", {"container": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}}),
        pod("cdi-annotation", {}, {"cdi.k8s.io/gpuctl-probe": "nvidia.com/gpu=all"}),
        pod("privileged", {"container": {"securityContext": {"privileged": True}}}),
        pod("host-devices", {"volumes": [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}]}),
    ]


def wait_fence_in_force(client: ApiClient, namespace: str) -> float:
    """Return once the API server refuses every probe pod in `namespace`; the seconds that took."""
    from gpuctl.kube.admission import wait_until_refused

    return wait_until_refused(client, NAME, namespace, probe_pods())


def ensure_fence(client: ApiClient) -> Change:
    """Apply (server-side, field manager gpuctl) the policy and binding where they differ."""
    calls = _calls(client)
    created = updated = False
    for doc in fence_manifests():  # the policy before the binding that names it
        read, patch, _ = calls[doc["kind"]]
        current = _read(read, NAME)
        if current is not None and contains(current, doc):
            continue
        with requesting(f"applying the GPU fence ({doc['kind']} {NAME})"):
            apply(patch, NAME, doc)
        created, updated = created or current is None, updated or current is not None
    return Change.CREATED if created else Change.UPDATED if updated else Change.NO_CHANGE


def remove_fence(client: ApiClient) -> Change:
    """Delete the policy and binding if gpuctl made them (binding first: no binding names a missing policy)."""
    calls = _calls(client)
    outcome = Change.NO_CHANGE
    for doc in reversed(fence_manifests()):
        read, _, delete = calls[doc["kind"]]
        current = _read(read, NAME)
        if not is_managed(current):
            continue
        try:
            with requesting(f"deleting the GPU fence ({doc['kind']} {NAME})"):
                delete(NAME)
        except KubeNotFound:
            pass  # gone already
        outcome = Change.DELETED
    return outcome
