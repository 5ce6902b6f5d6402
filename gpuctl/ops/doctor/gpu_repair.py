"""doctor's failed-GPU halves that talk to the cluster: the GPUs' last XIDs read from the DCGM exporter's series
(through Prometheus, where reachable), and --fix's repairs: cordon a node with a failed GPU and evict its GPU pods
through the Eviction API (PodDisruptionBudgets respected, up to --grace seconds, as `kubectl drain` does), restart
the device plugin of a node gpuctl cordoned (the plugin never marks a device healthy again on its own:
k8s-device-plugin v0.20.0 internal/plugin/server.go ListAndWatch), and uncordon a node gpuctl cordoned once its GPUs
are all healthy. Only a cordon gpuctl made (its CORDONED annotation) is undone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuctl.kube.gpu_nodes import gpu_resources, unhealthy_gpus
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.prometheus import URL_ENV
from gpuctl.ops.devices import PLUGIN_SELECTOR
from gpuctl.ops.doctor.agent_restart import restart_agent
from gpuctl.ops.doctor.findings import CORDONED, GpuXid
from gpuctl.ops.drain import drain_pods, is_gpu_pod, pods_on
from gpuctl.ops.metrics.gpu_metrics import prometheus_for
from gpuctl.util.errors import GpuctlError, UsageError
from gpuctl.util.output import info
from gpuctl.util.waiting import Count, Look

XID_QUERY = "max by (Hostname, hostname, gpu, UUID, GPU_I_ID) (DCGM_FI_DEV_XID_ERRORS) > 0"


def read_xids(kube: Kube) -> tuple[dict[str, list[GpuXid]], bool]:
    """node -> the last XID of each of its GPUs (or MIG instances) with one, from dcgm-exporter's
    DCGM_FI_DEV_XID_ERRORS ("Value of the last XID error encountered", one of its default counters), and whether
    the series could be read (no Prometheus, or none answering: doctor goes on without them)."""
    try:
        samples = prometheus_for(kube, None).query(XID_QUERY)
    except UsageError:  # no Prometheus known for this cluster
        info(f"doctor: the failed GPUs' XIDs are not named: no Prometheus with dcgm-exporter's series (set {URL_ENV})")
        return {}, False
    except GpuctlError as exc:  # one that does not answer
        info(f"doctor: the failed GPUs' XIDs are not named: {exc.message}")
        return {}, False
    found: dict[str, list[GpuXid]] = {}
    for sample in samples:
        labels = sample.labels
        node = labels.get("Hostname") or labels.get("hostname") or ""
        if not node or not str(labels.get("gpu", "")).isdigit():
            continue
        found.setdefault(node, []).append(GpuXid(int(labels["gpu"]), labels.get("UUID", ""), int(sample.value),
                                                 labels.get("GPU_I_ID")))
    return found, True


def gpu_pods_on(kube: Kube, node: str) -> list[KubeObject]:
    """The GPU pods on `node` that a drain evicts: running or pending, not a DaemonSet's (kubectl drain leaves
    those: their DaemonSet would put them back)."""
    return pods_on(kube, node, is_gpu_pod)


def cordon(kube: Kube, node: KubeObject, why: str) -> None:
    """Mark `node` unschedulable; record that gpuctl did it (and why) only where it was schedulable, so that
    only gpuctl's own cordon is undone later."""
    if node.spec.get("unschedulable"):
        info(f"fix: node {node.name}: already cordoned (not by gpuctl: it stays so after repair)"
             if CORDONED not in node.annotations else f"fix: node {node.name}: already cordoned by gpuctl")
        return
    info(f"fix: node {node.name}: cordoning it ({why}); annotation {CORDONED} records that gpuctl did")
    kube.patch("v1", "Node", node.name, {"metadata": {"annotations": {CORDONED: why}},
                                         "spec": {"unschedulable": True}})


def uncordon(kube: Kube, name: str) -> None:
    info(f"fix: node {name}: its GPUs are healthy again: uncordoning it and removing {CORDONED}")
    kube.patch("v1", "Node", name, {"metadata": {"annotations": {CORDONED: None}}, "spec": {"unschedulable": None}})


def drain_gpu_pods(kube: Kube, node: str, grace: float, clock: Callable[[], float] | None = None,
                   sleep: Callable[[float], None] | None = None) -> None:
    """Evict the GPU pods of `node` through the Eviction API, retrying those a PodDisruptionBudget refuses, and
    wait until they are gone, for up to `grace` seconds; WaitTimeout naming the pods left after that (ops.drain).
    `clock` and `sleep` (time.monotonic and time.sleep, looked up at each call) are for tests."""
    drain_pods(kube, node, grace, is_gpu_pod, prefix="fix", flag="--grace", say=info, clock=clock,
               sleep=sleep or time.sleep,
               hint="the node stays cordoned; let the PodDisruptionBudget allow it (more replicas elsewhere) and "
                    "run 'gpuctl doctor --fix' again, or give a longer --grace")


def restart_plugin(kube: Kube, node: str, timeout: float) -> bool:
    """Restart the device-plugin pod of `node` (a cordoned node gpuctl drained) so that it checks its GPUs afresh,
    and wait for the kubelet to list them all healthy; False where one is still unhealthy (still failed)."""

    def look(_old: KubeObject) -> Look:
        current = kube.get_or_none("v1", "Node", node)
        bad: dict[str, Any] = unhealthy_gpus(current) if current is not None else {}
        serving = current is not None and bool(gpu_resources(current))  # the new plugin has registered its GPUs
        done = serving and not bad
        return Look(done, (Count(f"{node} healthy", int(done), 1),),
                    f"unhealthy: {bad}" if bad else "" if serving else "its device plugin has not registered yet")

    return restart_agent(kube, node, agent="device-plugin", selector=PLUGIN_SELECTOR, healthy="GPUs healthy",
                         why="the plugin never marks a device healthy again until it restarts, then checks every "
                             "GPU afresh", look=look, timeout=timeout)
