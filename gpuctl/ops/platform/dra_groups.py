"""The move-to-dra/<group> and move-to-device-plugin/<group> steps: a running cluster moves from the GPU Operator's
device plugin to NVIDIA's DRA driver one node group at a time (a group's `dra: true`), and back with the old spec.

Nothing in a pod's manifest changes. The driver's DeviceClass gpu.nvidia.com names `nvidia.com/gpu` as its
extendedResourceName, and the scheduler serves a pod's `nvidia.com/gpu` through DRA on a node whose allocatable
has none of it, through the device plugin where it has (KEP-5004: k8s.io/kubernetes v1.37.2
pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go filterExtendedResources,
"isBackedByDRA && allocatable == 0"). So a node changes sides when its device plugin stops and the driver's
kubelet plugin starts there, which two node labels decide:
- nvidia.com/gpu.deploy.device-plugin=false: the operator's device-plugin DaemonSet selects "true", and the
  operator keeps a value someone set (gpu-operator v26.7.0 controllers/state_manager.go addGPUStateLabels);
- gpuctl.dev/dra=true: the DRA driver's kubelet plugin selects it (stack.dra_driver.dra_values,
  kubeletPlugin.nodeSelector), only while some groups keep the device plugin.

A group moves one node at a time, each as a rolling drain does: the old agent stops (no new pod lands there the
old way), the pods it served are evicted through the Eviction API (PodDisruptionBudgets respected: ops.drain),
the new agent starts, and the node's capacity is back (its devices in the driver's current slices, or its
allocatable GPUs) before the next node; the group's nodes all done before the next group, in spec order. The
evicted pods' controllers recreate them from the same templates; the scheduler places them the new way. The
other groups' nodes and pods are never touched. A node whose labels are right and that runs no pod served the
old way is left alone: a second apply changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuctl.kube.gpu_nodes import gpu_resources
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.ops.devices import DRA_PLUGIN_SELECTOR, plugin_state, pods_by_node, read_node_devices
from gpuctl.ops.drain import daemon_pod, drain_pods, is_gpu_pod
from gpuctl.ops.platform.run import Cluster
from gpuctl.ops.validate import expected_devices, read_configs
from gpuctl.util.output import info
from gpuctl.util.waiting import Count, Look, current_limit, wait_until
from gpuctl.util.words import plural

DRAIN_S = 600.0  # per node, where the command sets no --timeout: PodDisruptionBudgets may hold evictions that long
ON_DRA = {L.DEPLOY_DEVICE_PLUGIN: "false", L.DRA_GROUP: "true"}


def dra_move_steps(cluster: Cluster) -> list[Step]:
    """One step per node group, in spec order, where gpuctl's DRA driver serves some groups and the device plugin
    the others (or did, before this spec: the groups move back). None in cluster-wide DRA mode or without DRA."""
    stack = cluster.spec.stack
    if stack.dra or not (stack.dra_groups or cluster.dra_groups_only):
        return []
    return [move_step(cluster.client, cluster.selectors[g.spec.name], g.spec.name, stack.by_dra(g.spec.name))
            for g in cluster.spec.groups]


def move_step(kube: Kube, selector: str, group: str, dra: bool) -> Step:
    name = f"move-to-dra/{group}" if dra else f"move-to-device-plugin/{group}"
    return Step(name, lambda: observe_move(kube, selector, group, dra), lambda: move_group(kube, selector, group, dra))


def served_by_dra(pod: KubeObject) -> bool:
    """A pod the DRA driver serves: its extended resources allocated through a claim the scheduler made
    (status.extendedResourceClaimStatus, KEP-5004), or claims of its own."""
    return bool(pod.status.get("extendedResourceClaimStatus")) or bool(pod.spec.get("resourceClaims"))


def served_the_old_way(dra: bool) -> Callable[[KubeObject], bool]:
    """The pods a node moving to DRA (`dra`), or back, must lose: those the other side serves."""
    if dra:
        return lambda p: is_gpu_pod(p) and not served_by_dra(p)
    return served_by_dra


def _on_dra(node: KubeObject) -> bool:
    return all(node.labels.get(k) == v for k, v in ON_DRA.items())


def _labels_done(node: KubeObject, dra: bool) -> bool:
    if dra:
        return _on_dra(node)
    return L.DRA_GROUP not in node.labels and node.labels.get(L.DEPLOY_DEVICE_PLUGIN) != "false"


def _to_move(kube: Kube, selector: str, dra: bool) -> tuple[list[KubeObject], list[str], int]:
    """The group's nodes, those that move (labels not done, or pods served the old way), and how many such pods."""
    nodes = kube.list("v1", "Node", labels=selector)
    names = {n.name for n in nodes}
    old_way = served_the_old_way(dra)
    pods = [p for p in kube.list("v1", "Pod", what="listing pods") if p.spec.get("nodeName") in names and old_way(p)
            and not daemon_pod(p) and p.status.get("phase") not in ("Succeeded", "Failed")]
    busy = {p.spec["nodeName"] for p in pods}
    return nodes, [n.name for n in nodes if not _labels_done(n, dra) or n.name in busy], len(pods)


def observe_move(kube: Kube, selector: str, group: str, dra: bool) -> Observed:
    nodes, moving, pods = _to_move(kube, selector, dra)
    if not moving:
        return Observed(Change.NO_CHANGE, f"{plural(len(nodes), 'node')} served by "
                                          f"{'DRA' if dra else 'the device plugin'}")
    drained = f"GPU pods drained respecting PDBs ({pods} now)"
    if dra:
        what = (f"moves group {group} to DRA: device plugin stops on its {plural(len(moving), 'node')}, {drained}, "
                "DRA kubelet plugin starts")
    else:
        what = (f"moves group {group} back to the device plugin: DRA kubelet plugin stops on its "
                f"{plural(len(moving), 'node')}, {drained}, device plugin starts")
    return Observed(Change.UPDATED, f"{what}; one node at a time", "\n".join(sorted(moving)[:5]))


def move_group(kube: Kube, selector: str, group: str, dra: bool) -> Change:
    _, moving, _ = _to_move(kube, selector, dra)
    if not moving:
        return Change.NO_CHANGE
    side = "DRA" if dra else "the device plugin"
    for index, node in enumerate(sorted(moving), 1):
        info(f"  group {group}: node {node} ({index}/{len(moving)}) to {side}")
        _move_node(kube, node, dra)
    return Change.UPDATED


def _move_node(kube: Kube, node: str, dra: bool) -> None:
    old: dict[str, str | None] = {L.DEPLOY_DEVICE_PLUGIN: "false"} if dra else {L.DRA_GROUP: None}
    new: dict[str, str | None] = {L.DRA_GROUP: "true"} if dra else {L.DEPLOY_DEVICE_PLUGIN: "true"}
    _label(kube, node, old)
    stopped = "its device plugin stopped (no GPU allocatable)" if dra else "its DRA devices unpublished"
    _wait_node(kube, node, stopped, lambda n: not gpu_resources(n) if dra else node not in read_node_devices(kube))
    grace = current_limit() or DRAIN_S
    drain_pods(kube, node, grace, served_the_old_way(dra), prefix="  move", flag="--timeout",
               hint="let the PodDisruptionBudget allow it (room for its pods elsewhere) and rerun apply, "
                    "or give a longer --timeout")
    _label(kube, node, new)
    if dra:
        _wait_node(kube, node, "its devices published and its DRA kubelet plugin ready",
                   lambda n: _publishes(kube, n))
    else:
        _wait_node(kube, node, "its device plugin advertising GPUs", lambda n: bool(gpu_resources(n)))


def _label(kube: Kube, node: str, labels: dict[str, str | None]) -> None:
    kube.patch("v1", "Node", node, {"metadata": {"labels": labels}})


def _publishes(kube: Kube, node: KubeObject) -> bool:
    mig = read_configs(kube).mig
    have = read_node_devices(kube).get(node.name)
    try:
        want = expected_devices(node, mig)
    except ValueError:
        return False
    plugin = pods_by_node(kube, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin").get(node.name)
    return have is not None and len(have.devices) == want and plugin_state(plugin) == "ready"


def _wait_node(kube: Kube, node: str, what: str, done: Callable[[KubeObject], bool]) -> None:
    def look() -> Look:
        current = kube.get("v1", "Node", node)
        ok = done(current)
        return Look(ok, (Count(what, int(ok), 1),), "" if ok else f"node {node}: not yet {what}")

    wait_until(f"node {node}: {what}", look, "see the node's plugin pods (gpu-operator, dra-driver-nvidia-gpu)")
