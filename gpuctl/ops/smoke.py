"""The CUDA smoke test: a cuda-sample vectoradd pod on a GPU of the cluster, run to completion, and what a
validation check (Check) is: validate.py runs it on every node group, in DRA mode through a ResourceClaim."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.errors import KubeApiError, requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import count, ensure_namespace
from gpuctl.model import labels as L
from gpuctl.model.dra import API_VERSION, device_request
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.progress import waiting

SMOKE_NAMESPACE = "gpuctl-system"
SMOKE_TIMEOUT_S = 120.0
SMOKE_LABELS = {L.MANAGED_BY: L.MANAGER, L.APP_NAME: "gpuctl-smoke-test"}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def smoke_pod(name: str, image: str, resource: str, node_labels: dict[str, str],
              tolerations: list[dict[str, str]], claim: str | None = None, launch: bool = False) -> dict[str, Any]:
    """The CUDA sample pod: one `resource` in its limits, or with `claim` its GPU from that ResourceClaim
    (DRA mode; `resource` then only names the device class in messages). `launch`: for Karpenter to launch a
    node for, so it selects only on what a NodePool promises (the group's labels), not on what the GPU stack
    labels a node with once it runs."""
    resources: dict[str, Any]
    if claim is None:
        present = {} if launch else {"nvidia.com/gpu.present": "true"}
        resources, claims = {"limits": {resource: "1"}}, {}
    else:  # the GPU Operator's gpu.present label may be absent: the DRA driver installs without it
        present = {L.NFD_NVIDIA_PCI: "true"}
        resources = {"claims": [{"name": "gpu"}]}
        claims = {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": SMOKE_NAMESPACE, "labels": SMOKE_LABELS},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {**present, **node_labels},
            "tolerations": tolerations,
            **claims,
            "containers": [{"name": "cuda-vectoradd", "image": image, "resources": resources}],
        },
    }


def smoke_claim(name: str, device_class: str) -> dict[str, Any]:
    """The smoke test's ResourceClaim: one device of `device_class` (gpu.nvidia.com or mig.nvidia.com)."""
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": SMOKE_NAMESPACE, "labels": SMOKE_LABELS},
            "spec": {"devices": {"requests": [device_request("gpu", device_class)]}}}


def run_smoke_test(kube: Kube, image: str, resource: str, node_labels: dict[str, str],
                   tolerations: list[dict[str, str]], timeout: float = SMOKE_TIMEOUT_S, launch: bool = False) -> Check:
    """Run the CUDA sample pod to completion; it passes on phase Succeeded with 'Test PASSED' logged."""
    ensure_namespace(kube, SMOKE_NAMESPACE)
    await_default_service_account(kube)
    name = f"gpuctl-smoke-{uuid.uuid4().hex[:6]}"
    with requesting("creating the smoke-test pod"):
        kube.create(smoke_pod(name, image, resource, node_labels, tolerations, launch=launch))
    try:
        check, _ = await_smoke_test(kube, name, f"1 x {resource}", timeout,
                                    pending=lambda pod: _no_room(kube, pod, resource, node_labels))
        return check
    finally:
        delete_smoke_pod(kube, name)


def delete_smoke_pod(kube: Kube, name: str) -> None:
    """Delete the smoke-test pod now (no grace period); gone already is done too."""
    kube.delete("v1", "Pod", name, SMOKE_NAMESPACE, grace_seconds=0)


def await_default_service_account(kube: Kube, timeout: float = 30.0) -> None:
    """A new namespace's `default` ServiceAccount comes from kube-controller-manager a moment later;
    until then the ServiceAccount admission plugin refuses every pod in it."""
    deadline = time.monotonic() + timeout
    while True:
        if kube.get_or_none("v1", "ServiceAccount", "default", SMOKE_NAMESPACE) is not None:
            return
        if time.monotonic() > deadline:
            raise WaitTimeout(f"namespace {SMOKE_NAMESPACE} got no default ServiceAccount in {timeout:g}s",
                              "check that kube-controller-manager runs")
        time.sleep(0.2)


def await_smoke_test(kube: Kube, name: str, gpu: str, timeout: float, pause: Callable[[], None] | None = None,
                     pending: Callable[[KubeObject], str] | None = None) -> tuple[Check, KubeObject]:
    """Until the pod is done or `timeout`; `pause` between reads (0.5 s), `pending` says why a pod that is
    still pending at the deadline is (default: its events). The check, and the pod as last read."""
    deadline = time.monotonic() + timeout
    pod = kube.get("v1", "Pod", name, SMOKE_NAMESPACE)
    with waiting(f"smoke-test pod {SMOKE_NAMESPACE}/{name} to finish", timeout) as wait:
        while pod.status.get("phase") not in ("Succeeded", "Failed") and time.monotonic() < deadline:
            node = pod.spec.get("nodeName")
            wait.update(f"{pod.status.get('phase')}" + (f" on {node}" if node else ""))
            (pause or (lambda: time.sleep(0.5)))()
            pod = kube.get("v1", "Pod", name, SMOKE_NAMESPACE)
    phase, node = pod.status.get("phase"), pod.spec.get("nodeName")
    where = f"on {node}" if node else "unscheduled"
    if phase not in ("Succeeded", "Failed"):
        why = pending(pod) if pending is not None and not node else diagnostics(kube, pod)
        return Check("smoke-test", False, f"pod {name} still {phase} {where} after {timeout:.0f}s; {why}"), pod
    try:
        logs = kube.log(name, SMOKE_NAMESPACE)
    except KubeApiError as exc:  # no "Test PASSED" then: the check fails, saying why there is no log
        logs = f"(no log: {exc.detail})"
    if phase == "Succeeded" and "Test PASSED" in logs:
        return Check("smoke-test", True, f"CUDA vectoradd passed {where} with {gpu}"), pod
    last = (logs.strip().splitlines() or ["(empty log)"])[-1]
    return Check("smoke-test", False, f"pod {name} {phase} {where}: {last}; {diagnostics(kube, pod)}"), pod


def unschedulable(pod: KubeObject) -> str | None:
    """What the scheduler said when it found no node for `pod` (its PodScheduled condition, on one line); None
    where it has not said that."""
    scheduled = pod.condition("PodScheduled")
    if scheduled is None or scheduled.get("reason") != "Unschedulable":
        return None
    return " ".join((scheduled.get("message") or "").split())


def _no_room(kube: Kube, pod: KubeObject, resource: str, node_labels: dict[str, str]) -> str:
    """Why the smoke-test pod stayed unscheduled, and the fix, in one line: where the scheduler found no room
    and running pods request all of the nodes' `resource`, how much (the device plugin's side of validate.py's
    _unallocatable)."""
    if (said := unschedulable(pod)) is None:
        return diagnostics(kube, pod)
    selector = ",".join(f"{k}={v}" for k, v in sorted(node_labels.items()))
    offered = {n.name: count((n.status.get("allocatable") or {}).get(resource, 0))
               for n in kube.list("v1", "Node", labels=selector, what="listing the smoke test's nodes")}
    running = kube.list("v1", "Pod", fields="status.phase!=Succeeded,status.phase!=Failed",
                        what="listing the pods on the smoke test's nodes")
    used = sum(count(((c.get("resources") or {}).get("requests") or {}).get(resource, 0))
               for p in running if p.spec.get("nodeName") in offered for c in p.spec.get("containers") or [])
    total = sum(offered.values())
    if not total or used < total:
        return diagnostics(kube, pod)
    return (f"no free {resource} on the node group ({used} of {total} requested by running pods; scheduler: "
            f"{said}); free one (delete a pod that uses one, see 'gpuctl tenant list') or add nodes "
            "('gpuctl nodegroup scale')")


def diagnostics(kube: Kube, pod: KubeObject) -> str:
    parts = []
    for status in pod.status.get("containerStatuses") or []:
        states = status.get("state") or {}
        state = states.get("terminated") or states.get("waiting")
        if state is not None:
            parts.append(f"container {status.get('name')}: {state.get('reason') or ''} "
                         f"exit {state.get('exitCode', '-')}")
    events = kube.list("v1", "Event", SMOKE_NAMESPACE, fields=f"involvedObject.name={pod.name}")
    parts += [f"event {e.get('reason')}: {e.get('message')}" for e in events[-3:]]
    if node_name := pod.spec.get("nodeName"):
        node = kube.get("v1", "Node", node_name)
        bad = [f"{c.get('type')}={c.get('status')}" for c in node.status.get("conditions") or []
               if (c.get("type") == "Ready") != (c.get("status") == "True")]
        parts.append(f"node {node_name} conditions: {', '.join(bad) or 'healthy'}")
    return "; ".join(parts) or "no events"
