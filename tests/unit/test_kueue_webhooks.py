"""The sim's Kueue webhook configurations, made from controller-gen's manifests (a few entries of the shape
Kueue v0.19.2's config/components/webhook/manifests.yaml has; the whole generated file is used on a real API
server in tests/integration/test_tenant_kueue.py), and the installer rebuilding a cached tool missing an extra."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.ops.tenancy.default_queue import queued_by_default
from gpuctl.simulator.kueue_webhooks import JOB_NAMESPACE_SELECTOR, render_webhook_configurations
from gpuctl.tools.installer import cached_path, ensure_tools, find_tool, is_cached
from gpuctl.tools.pins import TOOLS
from gpuctl.util.errors import ToolError


def entry(name: str, path: str, group: str, resources: list[str], operations: list[str]) -> dict[str, Any]:
    return {"admissionReviewVersions": ["v1"], "clientConfig": {"service": {
        "name": "webhook-service", "namespace": "system", "path": path}}, "failurePolicy": "Fail", "name": name,
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": operations, "resources": resources}],
        "sideEffects": "None"}


GENERATED = yaml.safe_dump_all([
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"}, "webhooks": [
         entry("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io",
               ["clusterqueues"], ["CREATE"]),
         entry("mjob.kb.io", "/mutate-batch-v1-job", "batch", ["jobs"], ["CREATE"]),
         entry("mpod.kb.io", "/mutate--v1-pod", "", ["pods"], ["CREATE"])]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"}, "webhooks": [
         entry("vjob.kb.io", "/validate-batch-v1-job", "batch", ["jobs"], ["CREATE", "UPDATE"]),
         entry("vworkload.kb.io", "/validate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io",
               ["workloads", "workloads/status"], ["CREATE", "UPDATE"]),
         entry("vrayjob.kb.io", "/validate-ray-io-v1-rayjob", "ray.io", ["rayjobs"], ["CREATE", "UPDATE"])]},
])
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_kueues_own_and_the_job_webhooks_call_the_manager_on_loopback() -> None:
    mutating, validating = render_webhook_configurations(GENERATED, ["batch/job"], 40123, PEM)
    assert (mutating["kind"], mutating["metadata"]) == ("MutatingWebhookConfiguration", {
        "name": "kueue-mutating-webhook-configuration", "labels": {"app.kubernetes.io/managed-by": "gpuctl"}})
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    hooks = {h["name"]: h for doc in (mutating, validating) for h in doc["webhooks"]}
    assert sorted(hooks) == ["mclusterqueue.kb.io", "mjob.kb.io", "vjob.kb.io", "vworkload.kb.io"]  # no pod, no ray
    assert hooks["mjob.kb.io"]["clientConfig"] == {"url": "https://127.0.0.1:40123/mutate-batch-v1-job",
                                                   "caBundle": base64.b64encode(PEM.encode()).decode()}
    assert all("service" not in h["clientConfig"] for h in hooks.values())
    # kustomize's selector on the job integrations only; upstream's fields otherwise as generated
    assert hooks["mjob.kb.io"]["namespaceSelector"] == hooks["vjob.kb.io"]["namespaceSelector"] == \
        JOB_NAMESPACE_SELECTOR
    assert "namespaceSelector" not in hooks["vworkload.kb.io"]
    assert hooks["vjob.kb.io"]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert {(h["failurePolicy"], h["sideEffects"], tuple(h["admissionReviewVersions"])) for h in hooks.values()} == {
        ("Fail", "None", ("v1",))}


def test_manifests_without_the_job_webhook_stop_with_a_fix() -> None:
    without = GENERATED.replace("name: mjob.kb.io", "name: mjob2.kb.io")
    with pytest.raises(ToolError, match="Kueue's generated webhook manifests lack mjob.kb.io"):
        render_webhook_configurations(without, ["batch/job"], 40123, PEM)
    with pytest.raises(ValueError, match="pod"):
        render_webhook_configurations(GENERATED, ["batch/job", "pod"], 40123, PEM)


def test_the_default_queue_is_in_force_once_the_answer_is_labelled_and_suspended() -> None:
    labelled = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "default"}}, "spec": {"suspend": True}}
    assert queued_by_default(labelled)
    assert not queued_by_default({**labelled, "spec": {"suspend": False}})
    assert not queued_by_default({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
                                  "spec": {"suspend": True}})
    assert not queued_by_default({"metadata": {}, "spec": {"suspend": False}})


def test_a_cached_tool_missing_an_extra_is_built_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache filled before kueue-webhooks existed (binary and kueue-crds only) does not count as installed."""
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no Go: the build is refused, naming what is missing
    kueue = TOOLS["kueue"]
    binary = cached_path(kueue)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho kueue v0.19.2\n")
    binary.chmod(0o755)
    (binary.parent / "kueue-crds").mkdir()
    assert "kueue-webhooks" in kueue.extras
    assert not is_cached(kueue) and find_tool("kueue") is None
    with pytest.raises(ToolError, match=r"cannot install kueue v0\.19\.2 .*no Go toolchain on PATH"):
        ensure_tools(["kueue"])
    (binary.parent / "kueue-webhooks").mkdir()
    assert is_cached(kueue) and find_tool("kueue") == binary
    [tool] = ensure_tools(["kueue"])
    assert tool.source == "cached"
