"""Admission policies in force: the API server compiles a ValidatingAdmissionPolicy and picks up its binding
(and a namespace's labels, for the binding's namespaceSelector) asynchronously, from informers, so a policy
that was just applied may not refuse anything yet (measured: 0.7 s on an idle sim). A command that applied
one returns only once a server-side dry run of a pod the policy must refuse is refused by it.

Kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go: the
policy source recompiles on informer events; the dispatcher matches bindings by namespace labels read from
the namespace lister (policy/matching/matching.go), so both lag behind the write that made them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import KubeApiError
from gpuctl.util.errors import WaitTimeout

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

IN_FORCE_TIMEOUT_S = 30.0
_POLL_S = 0.05


def _refused_by(exc: KubeApiError, policy: str) -> bool | None:
    """True: `policy` refused the request; None: refused for another reason that may pass (the namespace's
    default ServiceAccount not made yet); raise otherwise."""
    body = exc.body or ""
    if exc.status in (403, 422) and f"ValidatingAdmissionPolicy '{policy}'" in body:
        return True
    if exc.status in (403, 404) and "serviceaccount" in body.lower():
        return None
    raise exc.in_context(f"probing admission policy {policy}") from None


def wait_until_refused(client: ApiClient, policy: str, namespace: str, pods: list[dict[str, Any]],
                       timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Dry-run-create each of `pods` in `namespace` until `policy` refuses every one; the seconds waited.
    WaitTimeout (exit 7) naming the policy and namespace when it is not in force by `timeout`."""
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(client)
    started = time.monotonic()
    pending = list(pods)
    while True:
        still: list[dict[str, Any]] = []
        for pod in pending:
            try:
                v1.create_namespaced_pod(namespace, pod, dry_run="All")
            except KubeApiError as exc:  # a refusal is the answer we want
                if _refused_by(exc, policy):
                    continue
            still.append(pod)
        pending = still
        waited = time.monotonic() - started
        if not pending:
            return waited
        if waited >= timeout:
            names = ", ".join(p["metadata"]["name"] for p in pending)
            raise WaitTimeout(f"admission policy {policy} is not in force in namespace {namespace} after "
                              f"{timeout:.0f}s: the API server still admits {names}",
                              f"check 'kubectl get validatingadmissionpolicy {policy} -o yaml' (status.typeChecking) "
                              "and the kube-apiserver's log, then rerun")
        time.sleep(_POLL_S)
