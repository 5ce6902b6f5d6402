"""CRDs of a chart being upgraded: helm installs a chart's crds/ once and never upgrades them
(helm.sh/docs/chart_best_practices/custom_resource_definitions). NVIDIA's upgrade guide has the CRDs
of the new chart applied before `helm upgrade` ("Option 1: Manually Upgrading CRDs",
docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/upgrade.html); the chart's own
pre-upgrade hook does the same from the operator image, so applying them first is safe either way
and makes the new ClusterPolicy fields exist before the upgraded chart writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import apply


def apply_crds(kubeconfig: Path | None, context: str | None, crds: list[dict[str, Any]]) -> None:
    """Server-side apply each CustomResourceDefinition of `crds` (other kinds are ignored)."""
    from kubernetes.client import ApiextensionsV1Api

    api = ApiextensionsV1Api(Kube.connect(kubeconfig, context))
    for crd in crds:
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        name = crd["metadata"]["name"]
        with requesting(f"upgrading CRD {name}"):
            apply(api.patch_custom_resource_definition, name, crd)
