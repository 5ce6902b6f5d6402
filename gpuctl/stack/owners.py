"""One owner per component: never a second device plugin, never two NFDs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.errors import ClusterError
from gpuctl.kube.client import api_error
from gpuctl.stack.values import NAMESPACE, StackSpec

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

# Helm labels every object of a release with its name (meta.helm.sh/release-name annotation).
RELEASE_ANNOTATION = "meta.helm.sh/release-name"
OURS = {"gpu-operator", "node-feature-discovery"}


def check_single_owners(client: ApiClient, stack: StackSpec) -> None:
    """Refuse (exit 5, before any Helm call) when a device plugin or NFD is deployed by someone else."""
    from kubernetes.client import AppsV1Api

    try:
        sets = AppsV1Api(client).list_daemon_set_for_all_namespaces().items
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "listing DaemonSets") from None
    for ds in sets:
        release = (ds.metadata.annotations or {}).get(RELEASE_ANNOTATION)
        ours = ds.metadata.namespace == NAMESPACE and release in OURS
        where = f"{ds.metadata.namespace}/{ds.metadata.name}"
        if "nvidia-device-plugin" in ds.metadata.name and not ours:
            raise ClusterError(f"a device plugin is already deployed ({where}); the GPU Operator would add a second one",
                               "remove it, then rerun: the GPU Operator owns the device plugin")
        if "node-feature-discovery" in ds.metadata.name and not ours:
            raise ClusterError(f"Node Feature Discovery is already deployed ({where})",
                               "remove it, or keep one NFD: gpuctl deploys its own (--nfd standalone|operator)")
        if stack.nfd == "operator" and ours and release == "node-feature-discovery":
            raise ClusterError(f"NFD is deployed standalone ({where}) and --nfd operator asks the GPU Operator for a second",
                               "uninstall the node-feature-discovery release first, or keep --nfd standalone")
