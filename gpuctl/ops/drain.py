"""Evicting a node's GPU pods through the Eviction API, as `kubectl drain` does: a PodDisruptionBudget's refusal
(429, pkg/registry/core/pod/storage/eviction.go) is retried until a deadline, DaemonSet pods are left (their
DaemonSet would put them back), finished pods too. Shared by `doctor --fix` (a node with a failed GPU:
ops.doctor.gpu_repair) and `apply` moving a node group between the device plugin and DRA
(ops.platform.dra_groups), each choosing which of the node's pods go."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuctl.kube.errors import KubeNotFound, KubeUnavailable, requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.output import info

EVICT_RETRY_S = 2.0  # between evictions a PodDisruptionBudget refused (kubectl drain waits 5 s)


def is_gpu_pod(pod: KubeObject) -> bool:
    """A pod whose containers ask for nvidia.com/gpu or a MIG device (nvidia.com/mig-*)."""
    containers = (pod.spec.get("containers") or []) + (pod.spec.get("initContainers") or [])
    for container in containers:
        resources = container.get("resources") or {}
        for quantities in (resources.get("limits") or {}, resources.get("requests") or {}):
            if any(k == L.GPU_RESOURCE or k.startswith("nvidia.com/mig-") for k in quantities):
                return True
    return False


def daemon_pod(pod: KubeObject) -> bool:
    return any(r.get("kind") == "DaemonSet" for r in pod.at("metadata", "ownerReferences", default=[]))


def pods_on(kube: Kube, node: str, select: Callable[[KubeObject], bool]) -> list[KubeObject]:
    """The pods on `node` that `select` picks and a drain evicts: running or pending, not a DaemonSet's."""
    pods = kube.list("v1", "Pod", fields=f"spec.nodeName={node}", what=f"listing the pods on {node}")
    return [p for p in pods if select(p) and not daemon_pod(p) and p.status.get("phase") not in ("Succeeded", "Failed")]


def evict(kube: Kube, pod: KubeObject) -> str | None:
    """POST the pod's eviction; None when accepted (or the pod is gone), else why not (a PDB's 429)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace}}
    try:
        kube.create(body, subresource="eviction", name=pod.name)
    except KubeNotFound:
        return None
    except KubeUnavailable as exc:
        if exc.status == 429:  # pkg/registry/core/pod/storage/eviction.go: it would violate the pod's PDB
            return exc.detail
        raise
    return None


def drain_pods(kube: Kube, node: str, grace: float, select: Callable[[KubeObject], bool], *, prefix: str,
               flag: str, hint: str, say: Callable[[str], None] | None = None,
               clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None) -> int:
    """Evict the pods of `node` that `select` picks through the Eviction API, retrying those a PodDisruptionBudget
    refuses, and wait until they are gone, for up to `grace` seconds; WaitTimeout naming the pods left after that
    (`flag`: what sets the grace, `hint`: the fix). Lines start with `prefix`. Returns how many were evicted.
    `say`, `clock` and `sleep` (info, time.monotonic and time.sleep, looked up at each call) are for tests."""
    say, clock, sleep = say or info, clock or time.monotonic, sleep or time.sleep
    deadline = clock() + grace
    asked: set[str] = set()
    refused: dict[str, str] = {}
    while True:
        left = pods_on(kube, node, select)
        if not left:
            say(f"{prefix}: node {node}: its GPU pods are evicted ({len(asked)})" if asked
                else f"{prefix}: node {node}: no GPU pods to evict")
            return len(asked)
        for pod in left:
            key = f"{pod.namespace}/{pod.name}"
            if pod.deleting:
                continue
            if key not in asked:
                say(f"{prefix}: node {node}: evicting GPU pod {key} (Eviction API: PodDisruptionBudgets apply)")
                asked.add(key)
            with requesting(f"evicting pod {key}"):
                why = evict(kube, pod)
            if why is None:
                refused.pop(key, None)
            elif key not in refused:
                say(f"{prefix}: node {node}: eviction of {key} refused ({why}); retrying for up to {grace:.0f}s "
                    f"({flag})")
                refused[key] = why
            else:
                refused[key] = why
        if clock() >= deadline:
            names = ", ".join(f"{p.namespace}/{p.name}" + (f" ({refused[k]})" if (k := f"{p.namespace}/{p.name}")
                                                            in refused else "") for p in left)
            raise WaitTimeout(f"node {node}: {len(left)} GPU pods left after {flag} {grace:.0f}s: {names}", hint)
        sleep(EVICT_RETRY_S)
