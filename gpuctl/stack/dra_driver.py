"""NVIDIA's DRA driver as a Helm release (kubernetes-sigs/dra-driver-nvidia-gpu chart 0.4.1), for clusters in
DRA mode (`--dra`, spec `dra.enabled`): GPUs and pre-made MIG devices by ResourceClaim, DeviceClasses
gpu.nvidia.com and mig.nvidia.com from the chart. Release and namespace as the driver's docs/install.md names
them; values keys as its values.yaml at v0.4.1 has them.
"""

from __future__ import annotations

from typing import Any

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.model.charts import DRA_DRIVER, chart_ref
from gpuctl.model.device_taints import HEALTH_GATE
from gpuctl.model.dra import ALPHA_SHARING_GATES, API_VERSION, GPU_CLASS
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import tolerations
from gpuctl.stack.helm import HelmTarget, Release, ensure_release
from gpuctl.stack.owners import ExistingStackError
from gpuctl.util.errors import UsageError

NAMESPACE = "dra-driver-nvidia-gpu"
RELEASE = "dra-driver-nvidia-gpu"
# The chart's own kubelet-plugin toleration (values.yaml kubeletPlugin.tolerations); gpuctl's list replaces it.
CHART_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
# Where the GPU Operator's driver container puts the driver (its docs for the DRA driver: nvidiaDriverRoot).
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
# Alpha in v0.4.1 (pkg/featuregates/featuregates.go: Default false, PreRelease Alpha): sharing through DRA.


def dra_values(spec: StackSpec) -> dict[str, Any]:
    """The chart's values for gpuctl's DRA mode."""
    values: dict[str, Any] = {
        # The chart refuses GPUs without it (templates/validation.yaml): it cannot know that the operator's
        # device plugin is off. gpuctl turns it off in DRA mode (operator_values), so it may say so.
        "gpuResourcesEnabledOverride": True,
        # ComputeDomains are multi-node NVLink (IMEX) domains: no part of gpuctl's GPU sharing.
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "nvidiaDriverRoot": OPERATOR_DRIVER_ROOT if spec.driver else "/",
        "kubeletPlugin": {"tolerations": [*CHART_TOLERATIONS, *(t for t in tolerations(spec.taints)
                                                                 if t not in CHART_TOLERATIONS)]},
    }
    if not spec.dra and spec.dra_groups:  # only the nodes of the groups DRA serves (values.yaml at v0.4.1:
        # kubeletPlugin.nodeSelector, templates/kubeletplugin.yaml); apply labels them one group at a time
        values["kubeletPlugin"]["nodeSelector"] = {L.DRA_GROUP: "true"}
    # The driver's NVML health check (alpha, off by default in v0.4.1: pkg/featuregates/featuregates.go:123-129):
    # on an XID it taints the failing device in its ResourceSlice (cmd/gpu-kubelet-plugin/device_health.go), the
    # signal `gpuctl doctor` reads in DRA mode (gpuctl.model.device_taints). Exclusive with DynamicMIG and
    # PassthroughSupport (featuregates.go:205-215), which gpuctl never turns on.
    values["featureGates"] = {HEALTH_GATE: True}
    if spec.dra_alpha_sharing:
        values["featureGates"].update({gate: True for gate in ALPHA_SHARING_GATES.values()})
    return values


def dra_release(spec: StackSpec, field: str = "--charts") -> Release:
    return Release(RELEASE, NAMESPACE, chart_ref(DRA_DRIVER, spec.charts, field), dra_values(spec))


def dra_driver_owner(kube: Kube) -> str | None:
    """Who serves GPUs by claim here: "release R in namespace N" (from the Helm annotations of DeviceClass
    gpu.nvidia.com), "someone" for a DeviceClass without them, None without one."""
    device_class = kube.get_or_none(API_VERSION, "DeviceClass", GPU_CLASS)
    if device_class is None:
        return None
    annotations = device_class.annotations
    release = annotations.get("meta.helm.sh/release-name")
    if not release:
        return "someone"
    return f"release {release} in namespace {annotations.get('meta.helm.sh/release-namespace')}"


def ours(owner: str | None) -> bool:
    return owner == f"release {RELEASE} in namespace {NAMESPACE}"


def check_dra_mode(kube: Kube, stack: StackSpec) -> str | None:
    """Before any write: DRA mode needs resource.k8s.io/v1 (UsageError, exit 2), and a cluster where a DRA
    driver serves GPUs needs DRA mode (ExistingStackError, exit 2: a device plugin beside it would count every
    GPU twice). Returns the owner of a DRA driver that is not gpuctl's, which DRA mode then uses."""
    owner = dra_driver_owner(kube)
    if not stack.dra:
        if owner is None:
            if stack.dra_groups and not _serves_resource_v1(kube):
                raise UsageError("spec.nodeGroups[].dra", f"the cluster serves no {API_VERSION}: DRA is GA from "
                                 "Kubernetes 1.34", "upgrade the cluster to 1.34 or later, or drop the groups' dra")
            return None
        if ours(owner) and serves_groups_only(kube):  # groups move to DRA, or back, with apply: one at a time
            return None
        remove = f"'helm uninstall {RELEASE} -n {NAMESPACE}'" if ours(owner) else "uninstall that DRA driver"
        raise ExistingStackError(f"a DRA driver serves GPUs on this cluster (DeviceClass {GPU_CLASS}, {owner}); "
                                 "the GPU Operator's device plugin would count every GPU twice",
                                 f"keep DRA mode (--dra, spec.dra.enabled: true), or {remove}, then rerun")
    if owner is None and not _serves_resource_v1(kube):
        raise UsageError("spec.dra.enabled (--dra)", f"the cluster serves no {API_VERSION}: DRA is GA from "
                         "Kubernetes 1.34", "upgrade the cluster to 1.34 or later, or leave DRA mode off")
    return None if owner is None or ours(owner) else owner


def serves_groups_only(kube: Kube) -> bool:
    """Whether gpuctl's DRA driver serves only the nodes of the node groups marked `dra: true` (its kubelet plugin
    selects the DRA_GROUP label: dra_values), the device plugin the others."""
    daemon_sets = kube.list("apps/v1", "DaemonSet", namespace=NAMESPACE, what=f"listing DaemonSets in {NAMESPACE}")
    return any(L.DRA_GROUP in (d.at("spec", "template", "spec", "nodeSelector", default=None) or {})
               for d in daemon_sets)


def _serves_resource_v1(kube: Kube) -> bool:
    try:
        kube.request("GET", f"/apis/{API_VERSION}", what=f"discovering {API_VERSION}")
    except KubeNotFound:
        return False
    return True


def install_dra_driver(helm: HelmTarget, stack: StackSpec, foreign: str | None) -> Change:
    """gpuctl's release of the DRA driver; a driver someone else installed is used as it is."""
    if foreign is not None:
        return Change.NO_CHANGE
    return ensure_release(helm, dra_release(stack))
