"""doctor --fix for a failed GPU in DRA mode (dra_findings.py): gpuctl's DeviceTaintRule for its device (named for
the node and the device, labelled as gpuctl's; gpuctl.model.device_taints), waited for until kube-controller-
manager's device-taint-eviction controller has taken it (the rule's EvictionInProgress condition at its generation
and False: k8s.io/kubernetes v1.37.2 pkg/controller/devicetainteviction/device_taint_eviction.go:586-640; for
NoExecute that is once the pods using the device are gone). With NoSchedule (the default) the pods using the
device are then evicted through the Eviction API, PodDisruptionBudgets respected for up to --grace, as --fix drains
a node in device-plugin mode (ops/drain.py); NoExecute leaves them to the controller, which deletes them without
consulting a PodDisruptionBudget (addConditionAndDeletePod).

A device gpuctl tainted before this run gets its node's kubelet plugin restarted: the driver never removes its own
taint, a new plugin publishes its devices afresh (dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/driver.go
455-492, 496-568); once the device is published untainted, gpuctl's rule is deleted. Only gpuctl's rules are."""

from __future__ import annotations

from collections.abc import Callable

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.device_taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    RULE_KIND,
    failing_taint,
    render_rule,
    rule_condition,
)
from gpuctl.model.dra import API_VERSION, DRIVER, GPU_CLASS, slice_devices
from gpuctl.ops.devices import DRA_PLUGIN_SELECTOR
from gpuctl.ops.doctor.agent_restart import restart_agent
from gpuctl.ops.drain import drain_pods
from gpuctl.util.errors import ClusterError, UsageError
from gpuctl.util.output import info
from gpuctl.util.waiting import Count, Look, wait_until

OWN = f"{L.MANAGED_BY}={L.MANAGER}"


def read_own_rules(kube: Kube) -> list[KubeObject]:
    """gpuctl's DeviceTaintRules; none where the server does not serve them (before Kubernetes 1.37, or 1.36 with
    the beta API off)."""
    try:
        return kube.list(API_VERSION, RULE_KIND, labels=OWN, what="listing gpuctl's DeviceTaintRules")
    except KubeNotFound:
        return []


def check_effect_applies(kube: Kube, effect: str) -> None:
    """Before any write: --taint-effect other than the default says something only in DRA mode."""
    if effect != NO_SCHEDULE and not dra_mode(kube):
        raise UsageError("--taint-effect", f"the cluster is not in DRA mode (no DeviceClass {GPU_CLASS}): --fix "
                         "cordons a failed GPU's node and evicts its GPU pods instead", "leave --taint-effect out")


def _pods_using(kube: Kube, node: str, devices: set[str]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> uid of the pods whose ResourceClaims are allocated one of `devices` of `node`'s pool
    (the claim's status.allocation.devices.results and status.reservedFor)."""
    using: dict[tuple[str, str], str] = {}
    for claim in kube.list(API_VERSION, "ResourceClaim", what="listing ResourceClaims"):
        results = claim.at("status", "allocation", "devices", "results", default=[]) or []
        if not any(r.get("driver") == DRIVER and r.get("pool") == node and r.get("device") in devices
                   for r in results):
            continue
        for ref in claim.status.get("reservedFor") or []:
            if ref.get("resource") == "pods" and ref.get("name"):
                using[(claim.namespace or "", str(ref["name"]))] = str(ref.get("uid") or "")
    return using


def _create_rule(kube: Kube, node: str, device: str, effect: str, xid: str) -> str:
    why = f"gpu-failed: device {device}" + (f" XID {xid}" if xid else "")
    body = render_rule(node, device, effect, xid or None, why)
    name = body["metadata"]["name"]
    info(f"fix: node {node}: tainting device {device} with DeviceTaintRule {name} (effect {effect}, "
         f"{body['spec']['taint']['key']}); label {OWN} says it is gpuctl's")
    try:
        with requesting(f"creating DeviceTaintRule {name}"):
            kube.apply(body)
    except KubeNotFound:
        raise ClusterError(f"the API server serves no {RULE_KIND} ({API_VERSION}: GA in Kubernetes 1.37)",
                           "upgrade the cluster to Kubernetes 1.37, or take the GPU out by hand (its device stays "
                           "tainted by the DRA driver until its kubelet plugin restarts)") from None
    return str(name)


def _wait_in_force(kube: Kube, names: list[str], timeout: float) -> None:
    """Until kube-controller-manager has taken each rule: its EvictionInProgress condition at the rule's
    generation, False (NoExecute: no pod left to delete)."""
    said: dict[str, str] = {}

    def look() -> Look:
        done = 0
        waiting = []
        for name in names:
            rule = kube.get_or_none(API_VERSION, RULE_KIND, name)
            condition = rule_condition(rule) if rule is not None else None
            if condition is not None and condition.get("status") == "False":
                done += 1
                said.setdefault(name, f"{condition.get('reason')}: {condition.get('message')}")
            else:
                waiting.append(f"{name}" + (f" ({condition.get('message')})" if condition else ""))
        return Look(not waiting, (Count("DeviceTaintRules in force", done, len(names)),), ", ".join(waiting))

    wait_until("kube-controller-manager to take gpuctl's DeviceTaintRules", look,
               "see 'kubectl get devicetaintrule -o yaml' (status.conditions) and kube-controller-manager's "
               "device-taint-eviction controller", timeout=timeout)
    for name, text in sorted(said.items()):
        info(f"fix: DeviceTaintRule {name}: in force ({text})")


def _wait_deleted(kube: Kube, node: str, using: dict[tuple[str, str], str], timeout: float) -> None:
    """Until kube-controller-manager has deleted the pods that used the devices (NoExecute)."""
    if not using:
        info(f"fix: node {node}: no pod used the tainted devices")
        return

    def look() -> Look:
        left = sorted(f"{ns}/{name}" for (ns, name), uid in using.items()
                      if (p := kube.get_or_none("v1", "Pod", name, ns)) is not None and p.uid == uid)
        return Look(not left, (Count("pods deleted", len(using) - len(left), len(using)),), ", ".join(left))

    wait_until(f"kube-controller-manager to delete the pods using node {node}'s tainted devices ({NO_EXECUTE})",
               look, "see kube-controller-manager's device-taint-eviction controller", timeout=timeout)
    info(f"fix: node {node}: kube-controller-manager deleted the pods that used the tainted devices ({NO_EXECUTE}): "
         + ", ".join(sorted(f"{ns}/{name}" for ns, name in using)))


def restart_kubelet_plugin(kube: Kube, node: str, devices: list[str], timeout: float) -> bool:
    """Restart `node`'s DRA kubelet plugin so that it publishes its devices afresh, and wait for `devices` to be
    published untainted; False where one is still tainted (or unpublished) after RECOVERY_WAIT_S."""

    def look(old: KubeObject) -> Look:
        published = {str(d.get("name")): d for d in slice_devices(
            kube.list(API_VERSION, "ResourceSlice", fields=f"spec.nodeName={node},spec.driver={DRIVER}",
                      what=f"listing {node}'s ResourceSlices")).get(node, [])}
        healthy = [d for d in devices if d in published and failing_taint(published[d]) is None]
        current = [p for p in kube.list("v1", "Pod", labels=DRA_PLUGIN_SELECTOR, fields=f"spec.nodeName={node}",
                                        what=f"listing the DRA kubelet-plugin pod on {node}")
                   if p.uid != old.uid and p.status.get("phase") == "Running"]
        done = bool(current) and len(healthy) == len(devices)
        return Look(done, (Count("devices published healthy", len(healthy) if current else 0, len(devices)),),
                    "" if done else "its new kubelet plugin has not started" if not current
                    else f"still tainted or unpublished: {', '.join(sorted(set(devices) - set(healthy)))}")

    return restart_agent(kube, node, agent="DRA kubelet-plugin", selector=DRA_PLUGIN_SELECTOR,
                         healthy="devices published healthy",
                         why="the driver never removes its taint from a device until it restarts, then publishes "
                             "every device afresh", look=look, timeout=timeout)


def _using(pods: dict[tuple[str, str], str]) -> Callable[[KubeObject], bool]:
    return lambda pod: pods.get((pod.namespace or "", pod.name)) == pod.uid


def repair_failed_devices(kube: Kube, failed: dict[str, list[tuple[str, str]]], effect: str, grace: float,
                          timeout: float) -> set[tuple[str, str]]:
    """Per node, its failed devices (device, XID): those without gpuctl's rule get one (in force before anything
    else), then with NoSchedule the pods using them are evicted; a node whose every failed device had gpuctl's rule
    before gets its kubelet plugin restarted. The (node, device) whose devices came back healthy."""
    recovered: set[tuple[str, str]] = set()
    if not failed:
        return recovered
    existing = {(r.at("spec", "deviceSelector", "pool", default=""), r.at("spec", "deviceSelector", "device",
                                                                          default="")): r
                for r in read_own_rules(kube)}
    for node, devices in sorted(failed.items()):
        new = [(d, x) for d, x in devices if (node, d) not in existing]
        if not new:
            names = sorted(d for d, _ in devices)
            if restart_kubelet_plugin(kube, node, names, timeout):
                recovered.update((node, d) for d in names)
            continue
        using = _pods_using(kube, node, {d for d, _ in new})
        names = [_create_rule(kube, node, d, effect, x) for d, x in new]
        _wait_in_force(kube, names, timeout)
        if effect == NO_EXECUTE:
            _wait_deleted(kube, node, using, timeout)
            continue
        drain_pods(kube, node, grace, _using(using), prefix="fix",
                   flag="--grace",
                   hint="gpuctl's DeviceTaintRule stays; let the PodDisruptionBudget allow it (more replicas "
                        "elsewhere) and run 'gpuctl doctor --fix' again, or give a longer --grace")
    return recovered


def remove_rule(kube: Kube, name: str, node: str, device: str) -> None:
    info(f"fix: node {node}: device {device} is published healthy again: deleting gpuctl's DeviceTaintRule {name}")
    with requesting(f"deleting DeviceTaintRule {name}"):
        kube.delete(API_VERSION, RULE_KIND, name)

