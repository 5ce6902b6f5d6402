"""CRDs of a chart being upgraded: helm installs a chart's crds/ once and never upgrades them
(helm.sh/docs/chart_best_practices/custom_resource_definitions). NVIDIA's upgrade guide has the CRDs
of the new chart applied before `helm upgrade` ("Option 1: Manually Upgrading CRDs",
docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/upgrade.html); the chart's own
pre-upgrade hook does the same from the operator image, so applying them first is safe either way
and makes the new ClusterPolicy fields exist before the upgraded chart writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuctl.kube.kube import Kube


def apply_crds(kubeconfig: Path | None, context: str | None, crds: list[dict[str, Any]]) -> None:
    """Server-side apply each CustomResourceDefinition of `crds` (other kinds are ignored)."""
    kube = Kube.connect(kubeconfig, context)
    for crd in crds:
        if crd and crd.get("kind") == "CustomResourceDefinition":
            kube.apply(crd)
