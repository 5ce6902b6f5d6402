"""Kueue's admission webhooks on a sim cluster, served by its manager out of cluster (kueue.py).

What gpuctl registers comes from Kueue's own source: controller-gen's webhook generator run over its
+kubebuilder:webhook markers at tool build time (gobuild.py _build_kueue, as upstream's `make manifests`
writes config/components/webhook/manifests.yaml), left as kueue-webhooks/manifests.yaml beside the binary:
one MutatingWebhookConfiguration and one ValidatingWebhookConfiguration whose entries call a Service. Of
their entries the sim keeps (Kueue v0.19.2):
- those on Kueue's own API (rules on kueue.x-k8s.io: ClusterQueue, ResourceFlavor, Cohort, Workload;
  pkg/webhooks/), so that the manager defaults and checks what gpuctl writes, as in a cluster;
- those of the integrations its Configuration enables (integrations.frameworks): for batch/job mjob.kb.io,
  which puts a Job without a queue in its namespace's `default` LocalQueue and suspends a queued Job at
  creation, and vjob.kb.io (pkg/controller/jobs/job/job_webhook.go L97, L121). A disabled integration's
  webhook is a no-op (pkg/controller/jobframework/setup.go L108-111), so registering it would only cost calls.
Each kept entry calls the manager at clientConfig.url https://127.0.0.1:<webhook.port><path> instead of the
Service (an https URL with a host, no user info, query or fragment: apiserver pkg/util/webhook/validation.go
L41-58) and trusts the manager's self-signed serving certificate (caBundle: its own PEM; issuer = subject).
The job integrations' entries get the namespaceSelector kustomize adds to them
(config/components/webhook/kustomization.yaml: not kube-system, not kueue-system, as the default
managedJobsNamespaceSelector, apis/config/v1beta2/defaults.go L124-132); upstream's failurePolicy (Fail),
sideEffects (None), rules and admissionReviewVersions stay. Names are the Helm chart's for release `kueue`
(charts/kueue/templates/webhook/manifests.yaml L26, L672: <fullname>-mutating-webhook-configuration).

As with Kueue in a cluster, failurePolicy Fail means that while the manager is down the API server refuses
Jobs outside kube-system and writes of Kueue's objects; the next start_kueue points the configurations at the
new manager (a fresh port and certificate each start).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuctl.kube.admission import wait_until_mutated
from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import contains
from gpuctl.model import labels as L
from gpuctl.util.errors import ToolError

WEBHOOKS_FILE = Path("kueue-webhooks") / "manifests.yaml"  # beside the binary in the tool cache (pins.py extras)
KUEUE_GROUP = "kueue.x-k8s.io"
NAMES = {"MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
         "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration"}
# The webhooks of each integration the sim may enable (their markers: pkg/controller/jobs/job/job_webhook.go).
FRAMEWORK_WEBHOOKS: dict[str, tuple[str, ...]] = {"batch/job": ("mjob.kb.io", "vjob.kb.io")}
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system")
JOB_NAMESPACE_SELECTOR = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                "values": list(UNMANAGED_NAMESPACES)}]}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # pkg/controller/constants/constants.go L23
DEFAULT_QUEUE = "default"  # constants.go L27, DefaultLocalQueueName
PROBE_NAMESPACE = "default"  # not excluded by JOB_NAMESPACE_SELECTOR; every API server makes it
IN_FORCE_TIMEOUT_S = 30.0


def _kept(hook: dict[str, Any], jobs: set[str]) -> bool:
    groups = {group for rule in hook.get("rules") or [] for group in rule.get("apiGroups") or []}
    return hook["name"] in jobs or groups == {KUEUE_GROUP}


def render_webhook_configurations(generated: str, frameworks: Sequence[str], port: int,
                                  ca_pem: str) -> list[dict[str, Any]]:
    """The two webhook configurations for a manager serving its webhooks on 127.0.0.1:`port` with the self-signed
    certificate `ca_pem`, from controller-gen's `generated` manifests (see the module's docstring)."""
    unknown = sorted(set(frameworks) - FRAMEWORK_WEBHOOKS.keys())
    if unknown:
        raise ValueError(f"no webhooks known for Kueue integrations {unknown}")
    jobs = {name for framework in frameworks for name in FRAMEWORK_WEBHOOKS[framework]}
    ca_bundle = base64.b64encode(ca_pem.encode()).decode()
    docs, found = [], set()
    for doc in yaml.safe_load_all(generated):
        if not doc or doc.get("kind") not in NAMES:
            continue
        webhooks = []
        for hook in doc.get("webhooks") or []:
            if not _kept(hook, jobs):
                continue
            found.add(hook["name"])
            entry = {**hook, "clientConfig": {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                                              "caBundle": ca_bundle}}
            if hook["name"] in jobs:
                entry["namespaceSelector"] = JOB_NAMESPACE_SELECTOR
            webhooks.append(entry)
        docs.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                     "metadata": {"name": NAMES[doc["kind"]], "labels": {L.MANAGED_BY: L.MANAGER}},
                     "webhooks": webhooks})
    missing = sorted(jobs - found) + sorted(set(NAMES) - {d["kind"] for d in docs})
    if missing:
        raise ToolError(f"Kueue's generated webhook manifests lack {', '.join(missing)}",
                        "remove the kueue tool from gpuctl's tool cache (~/.cache/gpuctl/tools/kueue) and rerun")
    return docs


def ensure_webhook_configurations(kube: Kube, docs: list[dict[str, Any]]) -> bool:
    """Server-side apply (field manager gpuctl) each configuration where the cluster's differs; True if any was
    written."""
    written = False
    for doc in docs:
        found = kube.get_or_none(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        if found is not None and contains(found, doc):
            continue
        kube.apply(doc)
        written = True
    return written


def probe_job(queue: str | None) -> dict[str, Any]:
    """A Job that needs nothing (no resources; only ever dry-run), in LocalQueue `queue` or in none."""
    labels = {L.MANAGED_BY: L.MANAGER, **({QUEUE_LABEL: queue} if queue else {})}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "gpuctl-kueue-webhook-probe-", "labels": labels},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                                           "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}}}


def _suspended(job: dict[str, Any]) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


def wait_for_webhooks(kube: Kube, timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Return once the API server calls Kueue's Job webhook, and the webhook puts a Job without a queue in the
    `default` LocalQueue of each namespace that has one; the seconds that took.

    First a server-side dry run of a queued probe_job in namespace `default` must come back suspended:
    mjob.kb.io suspends a Job with a queue name at creation whether or not its LocalQueue exists
    (jobframework.ApplyDefaultForSuspend, pkg/controller/jobframework/defaults.go L36-46, utils.go L147-150),
    and its sideEffects None lets a dry run call it. Then the default queues: the webhook applies one only once
    the manager's queue cache holds it (defaults.go defaultLocalQueueApplies, pkg/cache/queue/manager.go
    DefaultLocalQueueExist), filled by its LocalQueue controller after the manager is ready: a restarted
    manager would otherwise let a Job through unqueued for a moment."""
    started = time.monotonic()
    hint = f"check '{NAMES['MutatingWebhookConfiguration']}' and the manager's log (kueue.log in the cluster's dir)"
    wait_until_mutated(kube, PROBE_NAMESPACE, probe_job("gpuctl-webhook-probe"), _suspended,
                       "Kueue's Job webhook (mjob.kb.io)", hint, timeout)
    for namespace in _default_queue_namespaces(kube):
        wait_until_mutated(kube, namespace, probe_job(None), lambda job: _suspended(job) and (
            (job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) == DEFAULT_QUEUE,
            f"Kueue's LocalQueue {DEFAULT_QUEUE!r}", hint, max(0.0, timeout - (time.monotonic() - started)))
    return time.monotonic() - started


def _default_queue_namespaces(kube: Kube) -> list[str]:
    """Namespaces with a LocalQueue named `default` whose Jobs Kueue's webhook sees (JOB_NAMESPACE_SELECTOR)."""
    found = kube.list(f"{KUEUE_GROUP}/v1beta2", "LocalQueue", fields=f"metadata.name={DEFAULT_QUEUE}",
                      what="listing Kueue LocalQueues")
    return sorted({str(q.namespace) for q in found} - set(UNMANAGED_NAMESPACES))
