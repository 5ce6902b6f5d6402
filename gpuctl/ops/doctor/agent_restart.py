"""Restarting a node's GPU agent (the device plugin, or the DRA driver's kubelet plugin) so that it looks at its
GPUs afresh: neither agent ever marks a failed device healthy again while it runs (k8s-device-plugin v0.20.0
internal/rm/health.go; dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/device_health.go), so after a GPU is
reset, only a restart shows it healthy."""

from __future__ import annotations

from collections.abc import Callable

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.output import info
from gpuctl.util.waiting import Look, wait_until

RECOVERY_WAIT_S = 30.0  # for a restarted agent to list (or publish) a reset GPU healthy


def restart_agent(kube: Kube, node: str, *, agent: str, selector: str, why: str, healthy: str,
                  look: Callable[[KubeObject], Look], timeout: float) -> bool:
    """Delete `node`'s `agent` pod (found by its label `selector`), then wait at most RECOVERY_WAIT_S for
    `look(old_pod)` to say its GPUs are `healthy`; False where there was no pod to restart or a GPU stayed failed."""
    pods = [p for p in kube.list("v1", "Pod", labels=selector, fields=f"spec.nodeName={node}",
                                 what=f"listing the {agent} pod on {node}") if not p.deleting]
    if not pods:
        info(f"fix: node {node}: no {agent} pod to restart")
        return False
    pod = pods[0]
    info(f"fix: node {node}: restarting {agent} pod {pod.namespace}/{pod.name}: {why}")
    with requesting(f"deleting {agent} pod {pod.namespace}/{pod.name}"):
        kube.delete("v1", "Pod", pod.name, pod.namespace)
    wait = min(timeout, RECOVERY_WAIT_S)
    try:
        wait_until(f"node {node}'s {healthy} after its {agent} restarted", lambda: look(pod),
                   "a GPU still failing needs a reset or a replacement", timeout=wait, stall=wait)
    except WaitTimeout:
        info(f"fix: node {node}: not all {healthy} after its {agent} restarted: the GPU is still failed")
        return False
    return True
