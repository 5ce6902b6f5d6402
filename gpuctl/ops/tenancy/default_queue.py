"""The `default` LocalQueue of a tenant in force: Kueue's Job webhook puts a Job created without a queue label in
the LocalQueue named `default` of its namespace only once Kueue's in-memory queue manager holds that LocalQueue
(Kueue v0.19.2 pkg/controller/jobframework/defaults.go defaultLocalQueueApplies, pkg/cache/queue/manager.go
DefaultLocalQueueExist), i.e. after its LocalQueue controller has seen the object, a moment after gpuctl wrote
it. `tenant add` returns only once a server-side dry run of a label-less Job in the namespace comes back with
the label and suspended, as a user's Job would then be.

Kueue serves the webhook wherever it runs (in a cluster, its Helm chart's webhook configurations; on the sim,
gpuctl.simulator.kueue_webhooks); a cluster that serves Kueue's API without the webhook registered (CRDs only)
has no default queue to wait for: job_defaulting_registered tells."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.kube.admission import wait_until_mutated
from gpuctl.model import labels as L
from gpuctl.ops.tenancy.queues import DEFAULT_QUEUE, QUEUE_LABEL

if TYPE_CHECKING:
    from gpuctl.kube.kube import Kube

JOB_WEBHOOK = "mjob.kb.io"  # Kueue v0.19.2 pkg/controller/jobs/job/job_webhook.go L97
IN_FORCE_TIMEOUT_S = 30.0


def probe_job() -> dict[str, Any]:
    """A Job as a user writes it, without a queue; one that needs nothing (no resources, a dry run only)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "gpuctl-default-queue-probe-", "labels": {L.MANAGED_BY: L.MANAGER}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                                           "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}}}


def queued_by_default(job: dict[str, Any]) -> bool:
    """The Job as the API server answered it: in the `default` LocalQueue and suspended (waiting for admission)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return labels.get(QUEUE_LABEL) == DEFAULT_QUEUE and (job.get("spec") or {}).get("suspend") is True


def wait_default_queue_in_force(kube: Kube, namespace: str, timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Return once a Job created in `namespace` without a queue label is put in its `default` LocalQueue and
    suspended by Kueue's webhook (a server-side dry run: nothing is created); the seconds that took.
    WaitTimeout (exit 7) after `timeout`."""
    return wait_until_mutated(
        kube, namespace, probe_job(), queued_by_default, f"Kueue's LocalQueue {DEFAULT_QUEUE!r}",
        f"check that Kueue's manager runs and lists the queue ('kubectl get localqueue -n {namespace} "
        f"{DEFAULT_QUEUE}'), and its log, then rerun", timeout)


def job_defaulting_registered(kube: Kube) -> bool:
    """Whether the API server has Kueue's Job defaulting webhook (mjob.kb.io) registered, in any
    MutatingWebhookConfiguration."""
    configs = kube.list("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                        what="listing mutating webhook configurations")
    return any(hook.get("name") == JOB_WEBHOOK for config in configs for hook in config.get("webhooks") or [])
