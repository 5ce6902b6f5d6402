"""Admission in force: the API server compiles a ValidatingAdmissionPolicy and picks up its binding
(and a namespace's labels, for the binding's namespaceSelector) asynchronously, from informers, so a policy
that was just applied may not refuse anything yet (measured: 0.7 s on an idle sim). A command that applied
one returns only once a server-side dry run of a pod the policy must refuse is refused by it.

Kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go: the
policy source recompiles on informer events; the dispatcher matches bindings by namespace labels read from
the namespace lister (policy/matching/matching.go), so both lag behind the write that made them.

Mutating webhooks likewise (a webhook configuration is read from an informer, and the webhook's own state
decides what it does): wait_until_mutated dry-runs a Job until the answer shows the mutation. A dry run calls
a webhook whose sideEffects are None or NoneOnDryRun, and refuses the request otherwise
(apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go L248-254)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuctl.kube.errors import KubeApiError
from gpuctl.kube.kube import Kube
from gpuctl.util.errors import WaitTimeout

IN_FORCE_TIMEOUT_S = 30.0
_POLL_S = 0.05
_WEBHOOK_POLL_S = 0.1  # a webhook call costs the API server more than a policy's CEL


def _refused_by(exc: KubeApiError, policy: str) -> bool | None:
    """True: `policy` refused the request; None: refused for another reason that may pass (the namespace's
    default ServiceAccount not made yet); raise otherwise."""
    body = exc.body or ""
    if exc.status in (403, 422) and f"ValidatingAdmissionPolicy '{policy}'" in body:
        return True
    if exc.status in (403, 404) and "serviceaccount" in body.lower():
        return None
    raise exc.in_context(f"probing admission policy {policy}") from None


def _dry_run_create(kube: Kube, api_version: str, kind: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server would store for `obj` (admission included), writing nothing. A plain request, not
    Kube.create: a refusal is the answer a probe waits for, its error in the probe's own words."""
    path = kube.resource(api_version, kind).path(namespace)
    return kube.request("POST", path, body=obj, query={"dryRun": "All"})


def wait_until_refused(kube: Kube, policy: str, namespace: str, pods: list[dict[str, Any]],
                       timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Dry-run-create each of `pods` in `namespace` until `policy` refuses every one; the seconds waited.
    WaitTimeout (exit 7) naming the policy and namespace when it is not in force by `timeout`."""
    started = time.monotonic()
    pending = list(pods)
    while True:
        still: list[dict[str, Any]] = []
        for pod in pending:
            try:
                _dry_run_create(kube, "v1", "Pod", namespace, pod)
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


def _webhook_unreachable(exc: KubeApiError) -> bool:
    """The API server could not call a webhook (not listening yet, or an old configuration still cached):
    "failed calling webhook" (apiserver pkg/util/webhook/error.go L33-38, ErrCallingWebhook)."""
    return "failed calling webhook" in (exc.body or exc.detail)


def wait_until_mutated(kube: Kube, namespace: str, job: dict[str, Any], done: Callable[[dict[str, Any]], bool],
                       what: str, hint: str, timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Dry-run-create the batch/v1 `job` in `namespace` until `done` holds for the Job the API server answers
    (as it would store it, mutating admission included); the seconds waited. A webhook the API server cannot
    call yet is waited for; another refusal is raised. WaitTimeout (exit 7) saying `what` is not in force in
    the namespace, with `hint`, after `timeout`."""
    started = time.monotonic()
    seen = ""
    while True:
        try:
            answer = _dry_run_create(kube, "batch/v1", "Job", namespace, job)
        except KubeApiError as exc:
            if not _webhook_unreachable(exc):
                raise exc.in_context(f"probing {what} in namespace {namespace}") from None
            seen = f": {exc.detail}"
        else:
            if done(answer):
                return time.monotonic() - started
            labels = (answer.get("metadata") or {}).get("labels") or {}
            seen = f": the API server answers labels {labels}, suspend {(answer.get('spec') or {}).get('suspend')}"
        waited = time.monotonic() - started
        if waited >= timeout:
            raise WaitTimeout(f"{what} is not in force in namespace {namespace} after {timeout:.0f}s{seen}", hint)
        time.sleep(_WEBHOOK_POLL_S)
