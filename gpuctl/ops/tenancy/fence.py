"""The GPU fence of tenant namespaces: a ValidatingAdmissionPolicy and its binding
(templates/fences/gpu-fence.yaml) with which the API server refuses a pod that reaches GPUs without
requesting them. Cluster-scoped and shared by every tenant: applied with the first tenant, deleted
with the last."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.admission import wait_until_refused
from gpuctl.kube.admission_objects import ensure_objects, remove_objects
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.util.resources import data_dir

if TYPE_CHECKING:
    from gpuctl.kube.kube import Kube

NAME = "gpuctl-gpu-fence"  # the policy's and the binding's


def fence_manifests() -> list[dict[str, Any]]:
    """The policy and its binding, labelled as gpuctl's."""
    docs = list(yaml.safe_load_all((data_dir("templates") / "fences" / "gpu-fence.yaml").read_text()))
    for doc in docs:
        doc["metadata"]["labels"] = {L.MANAGED_BY: L.MANAGER}
    return docs


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


def wait_fence_in_force(kube: Kube, namespace: str) -> float:
    """Return once the API server refuses every probe pod in `namespace`; the seconds that took."""
    return wait_until_refused(kube, NAME, namespace, probe_pods())


def ensure_fence(kube: Kube) -> Change:
    """Apply (server-side, field manager gpuctl) the policy and binding where they differ."""
    return ensure_objects(kube, fence_manifests())


def remove_fence(kube: Kube) -> Change:
    """Delete the policy and binding if gpuctl made them (binding first)."""
    return remove_objects(kube, fence_manifests())
