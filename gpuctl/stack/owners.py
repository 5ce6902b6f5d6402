"""One owner per component: never a second device plugin, never two NFDs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.errors import ClusterError
from gpuctl.kube.client import api_error
from gpuctl.stack.values import NAMESPACE, StackSpec

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

# Helm annotates every object of a release with its name; the GPU Operator's own DaemonSets carry no
# such annotation, only an owner reference to the ClusterPolicy they were made from.
RELEASE_ANNOTATION = "meta.helm.sh/release-name"
OURS = {"gpu-operator", "node-feature-discovery"}
# DaemonSets named like a device plugin that are not one: the operator always creates the MPS control
# daemon beside the plugin, and the sandbox plugin serves VMs (gpu-operator assets/state-*).
NOT_DEVICE_PLUGINS = ("nvidia-device-plugin-mps-control-daemon", "nvidia-sandbox-device-plugin-daemonset")


def is_device_plugin(name: str) -> bool:
    """Whether a DaemonSet of this name runs an NVIDIA device plugin that advertises GPUs."""
    return "nvidia-device-plugin" in name and name not in NOT_DEVICE_PLUGINS


def list_daemon_sets(client: ApiClient) -> list[Any]:
    from kubernetes.client import AppsV1Api

    try:
        return AppsV1Api(client).list_daemon_set_for_all_namespaces().items
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "listing DaemonSets") from None


def _owned_by_our_stack(ds: Any) -> str | None:
    """The release (or the operator's ClusterPolicy) behind a DaemonSet in gpuctl's namespace, if any."""
    if ds.metadata.namespace != NAMESPACE:
        return None
    release = (ds.metadata.annotations or {}).get(RELEASE_ANNOTATION)
    if release in OURS:
        return release
    if any(ref.kind == "ClusterPolicy" for ref in ds.metadata.owner_references or []):
        return "gpu-operator"
    return None


def check_single_owners(client: ApiClient, stack: StackSpec) -> None:
    """Refuse (exit 5, before any Helm call) when a device plugin or NFD is deployed by someone else."""
    for ds in list_daemon_sets(client):
        owner = _owned_by_our_stack(ds)
        where = f"{ds.metadata.namespace}/{ds.metadata.name}"
        if is_device_plugin(ds.metadata.name) and owner is None:
            raise ClusterError(f"a device plugin is already deployed ({where}); the GPU Operator would add a second one",
                               "remove it, then rerun: the GPU Operator owns the device plugin")
        if "node-feature-discovery" in ds.metadata.name and owner is None:
            raise ClusterError(f"Node Feature Discovery is already deployed ({where})",
                               "remove it, or keep one NFD: gpuctl deploys its own (--nfd standalone|operator)")
        if stack.nfd == "operator" and owner == "node-feature-discovery":
            raise ClusterError(f"NFD is deployed standalone ({where}) and --nfd operator asks the GPU Operator for a second",
                               "uninstall the node-feature-discovery release first, or keep --nfd standalone")
